"""The config layer: one registry of config groups, the run's top-level schema, and the checks
that Hydra's composition lets through.

Each component's module owns its schema: a dataclass beside the code that uses it, registered
in its group with :func:`register` (``@register("schedule")``). The registry puts it in Hydra's
ConfigStore as ``<group>/<name>``, so ``schedule=constant`` selects it, a misspelt key or a
value of the wrong type fails when Hydra composes, and ``configs/`` holds only presets that
differ from a schema (``schedule/decreasing_0.7.yaml``) and experiment data.
``python -m scheda.config`` prints every group, option, module and default. :func:`typed`
turns a group's composed (or saved) config into its schema object, after the schema's own
``check()``; builders receive that object. An unknown name's error lists the group's names.
"""

from __future__ import annotations

import dataclasses
import importlib
import typing
import importlib.util
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Dict, List, Mapping, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from scheda.utils.errors import ConfigError

# Where each config group's schemas live: importing a module registers them (``@register``), and
# load_components imports exactly these. ``package.*`` names every module of a package: a new
# data set or logger is one module dropped into scheda/data/ or scheda/loggers/; a new noise,
# schedule or classifier is a class in its group's module (tests/test_config.py checks that each
# module fills its group).
COMPONENT_MODULES: dict[str, tuple[str, ...]] = {
    "dataset": ("scheda.data.*",),
    "model": ("scheda.model.autoencoder",),
    "noise": ("scheda.model.noise",),
    "schedule": ("scheda.model.schedule",),
    "optim": ("scheda.model.optim",),
    "trainer": ("scheda.training.trainer",),
    "logger": ("scheda.loggers.*",),
    "evaluate": ("scheda.evaluation.evaluate",),
    "classifier": ("scheda.evaluation.classifiers",),
    "finetune": ("scheda.training.finetune",),
}
GROUPS: dict[str, dict[str, type]] = {}
# scheda-reproduce's own groups (scheda/protocol/config.py); every other group is a training run's.
PROTOCOL_GROUPS = ("table", "scale", "table_scale")
# Groups that select several options at once (``logger=[tensorboard,csv]``): each option's
# values live under its own name (``logger.csv.file``); the option ``none`` selects nothing.
MANY = ("logger",)
NONE = "none"


def configs_path() -> str:
    """Hydra's search path for configs/: the package ``scheda.configs`` when scheda is installed
    (pyproject maps it to the checkout's configs/, so editable and regular installs read the same
    files); in a checkout imported without installing (``PYTHONPATH=.``), the folder itself."""
    try:
        if importlib.util.find_spec("scheda.configs") is not None:
            return "pkg://scheda.configs"
    except ModuleNotFoundError:
        pass
    return str(Path(__file__).resolve().parents[1] / "configs")


CONFIGS = configs_path()
DEFAULT = "default"  # the option name of a group with one schema and no ``name`` key (trainer, evaluate)


class Component:
    """Base of every registered schema: where its values live (``group``), one idiom for its
    checks (``check`` raising :meth:`invalid`), and mapping-style reads for code that takes
    a config or a plain dict."""

    group: ClassVar[str] = ""

    def check(self) -> None:
        """Refuse values the types let through (ranges, combinations); raise ``self.invalid``."""

    def invalid(self, key: str, rule: str) -> ConfigError:
        """``<group>.<key>=<value> <rule>``: the one shape of a config error."""
        return ConfigError(f"{self.group}.{key}={getattr(self, key)!r} {rule}")

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)


def register(group: str):
    """Class decorator: the schema joins ``group`` under its ``name`` default (or ``default``)."""

    def add(cls: type) -> type:
        cls.group = group
        name = getattr(cls, "name", DEFAULT)
        known = GROUPS.setdefault(group, {}).get(name)
        if known is not None and (known.__module__, known.__qualname__) != (cls.__module__, cls.__qualname__):
            raise ConfigError(f"{cls.__module__}.{cls.__qualname__} registers {group}={name}, which "
                              f"{known.__module__}.{known.__qualname__} already is: give it another name")
        GROUPS[group][name] = cls
        return cls

    return add


def options(group: str) -> list[str]:
    load_components()
    return list(GROUPS.get(group, {}))


def schema_of(group: str, node: Any) -> type:
    """The registered schema a group's config names (``name``), or a one-line error listing the known names."""
    load_components()
    schemas = GROUPS[group]
    name = node.get("name", DEFAULT) if node is not None else None
    if name not in schemas:
        raise ConfigError(f"{group}.name={name!r} is unknown: use one of {', '.join(schemas)}")
    return schemas[name]


def typed(group: str, node: Any) -> Any:
    """A group's config (composed, loaded from a run's config.yaml, or a plain dict) as its
    checked schema object. An object already typed is returned as it is: it was checked when it
    was typed (a run's plan types every group once: scheda.planning.plan), so the functions that
    build from a group (``build_noise``, ``build_schedule``, ...) take either without typing or
    checking it again."""
    if isinstance(node, Component):
        return node
    cls = schema_of(group, node)
    data = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)
    try:
        obj = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls), data))
    except Exception as exc:  # noqa: BLE001 - OmegaConf's validation errors, as the user's error
        raise ConfigError(f"{group}: {str(exc).splitlines()[0]}") from None
    obj.check()
    return obj


def typed_many(group: str, node: Any) -> list[Any]:
    """A group of :data:`MANY` (``{tensorboard: {...}, csv: {...}}``) as its checked schema
    objects, in order; ``none`` selects nothing. A run saved before the group took several
    options holds one option's keys at the top (``{name: ...}``)."""
    if node is None:
        return []
    if isinstance(node, DictConfig):
        node = OmegaConf.to_container(node, resolve=True)
    if isinstance(node.get("name"), str):
        node = {node["name"]: node}
    out = []
    load_components()
    for key, sub in node.items():
        if key not in GROUPS[group] or (sub is not None and not isinstance(sub, Mapping)):  # +logger.foo=...
            raise ConfigError(not_one_of_many(f"{group}.{key}", f"{group}.{key}"))
        sub = {"name": key, **(sub or {})}
        if sub["name"] == NONE:
            continue
        try:
            out.append(typed(group, sub))
        except ConfigError as exc:  # named by the key the user writes: logger.csv.file=...
            raise ConfigError(str(exc).replace(f"{group}.", f"{group}.{key}.", 1)) from None
    return out


_loaded = False


ENTRY_POINTS = "scheda.components"  # the entry point group of components in other packages


def component_modules(group: str) -> list[str]:
    """The modules of ``group`` in COMPONENT_MODULES, each ``package.*`` as its package's modules."""
    out = []
    for name in COMPONENT_MODULES[group]:
        if name.endswith(".*"):
            package = importlib.import_module(name[:-2])
            out += sorted(f"{package.__name__}.{m.name}" for m in pkgutil.iter_modules(package.__path__))
        else:
            out.append(name)
    return out


def load_components() -> None:
    """Import every component module once, so that each registers its schemas: scheda's own
    (COMPONENT_MODULES), then each module another installed package names in the entry point
    group ``scheda.components`` (a data set, noise, schedule, ... registered with ``@register``)."""
    global _loaded
    if not _loaded:
        _loaded = True
        for group in COMPONENT_MODULES:
            for module in component_modules(group):
                importlib.import_module(module)
        from importlib.metadata import entry_points

        for ep in entry_points(group=ENTRY_POINTS):
            try:
                ep.load()
            except Exception as exc:  # noqa: BLE001 - the user's package, in one line
                dist = f" of {ep.dist.name}" if ep.dist is not None else ""
                raise ConfigError(f"the {ENTRY_POINTS} entry point {ep.name!r}{dist} ({ep.value}) failed to load "
                                  f"({type(exc).__name__}: {exc}): fix that package or uninstall it") from None


# --- the run's top level ------------------------------------------------------------------
@dataclass
class TopLevel:
    """train.yaml's keys beside its groups."""

    seed: int = 0
    train_seed: Optional[int] = None
    resume: Optional[str] = None
    force_resume: bool = False
    # A run directory that already holds a run (a sweep run again into its folder): false skips
    # a completed job, resumes a stopped one and reruns a failed one; true reruns every job.
    rerun: bool = False
    init_from: Optional[str] = None
    # A stacked DA, one layer a run: train this one on the clean codes of another run's model (and of
    # the runs that one was stacked on), read at its reported model (scheda.training.stack).
    stack_on: Optional[str] = None
    # Keys that must be set (not null) for this composition: a preset that continues a
    # checkpoint lists init_from. (A preset's ``???`` cannot do it: merged over a default, it is dropped.)
    requires: List[str] = field(default_factory=list)


# train.yaml's schema: a node per group of COMPONENT_MODULES (the one list of them; MANY groups a
# dict of the options selected), then the top-level keys.
TrainConfig = dataclasses.make_dataclass("TrainConfig", [
    *((group, Dict[str, Any], field(default_factory=dict)) if group in MANY else (group, Any, MISSING)
      for group in COMPONENT_MODULES),
    *((f.name, typing.get_type_hints(TopLevel)[f.name], field(default=f.default, default_factory=f.default_factory))
      for f in dataclasses.fields(TopLevel))])
TrainConfig.__module__ = __name__


def register_configs() -> None:
    """Put every schema in the ConfigStore (``<group>/<name>``) and the run's top level
    (``train_schema``), and register the sweeper (``hydra/sweeper=compose_once``) with Hydra
    itself: its scan of ``hydra_plugins`` misses it in an editable install. The protocol
    registers its own configs (scheda.protocol.config)."""
    from hydra.core.plugins import Plugins

    from hydra_plugins.scheda_sweeper import ComposeOnceSweeper
    from hydra_plugins.scheda_sweeper.optuna_sweeper import OptunaSweeper

    Plugins.instance().register(ComposeOnceSweeper)
    Plugins.instance().register(OptunaSweeper)
    load_components()
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    for group, schemas in GROUPS.items():
        for name, cls in schemas.items():
            if group not in MANY:
                cs.store(group=group, name=name, node=cls)
            elif name == NONE:
                cs.store(group=group, name=name, node={}, package=group)
            else:
                cs.store(group=group, name=name, node=cls, package=f"{group}.{name}")


# --- checks that Hydra's composition lets through --------------------------------------
MISSING_HINTS = {"init_from": "init_from=<the DA's run directory or checkpoint to continue>"}


def not_a_setting(path: str, schema: type) -> str:
    """The line for a key ``path`` that the dataclass ``schema`` (its parent's) has no field for,
    naming the nearest one."""
    import difflib

    parent, _, key = path.rpartition(".")
    known = [f.name for f in dataclasses.fields(schema)]
    near = difflib.get_close_matches(key, known, n=1)
    hint = f"did you mean {parent + '.' if parent else ''}{near[0]}?" if near else f"known keys: {', '.join(known)}"
    return f"{path} is not a setting of {parent or 'the run'} ({schema.__name__}): {hint}"


def not_one_of_many(path: str, given: str) -> str:
    """The line for ``logger.X`` (``path``; the key the command line ``given``) where X is none of
    the chosen loggers: a logger not chosen (``logger.csv.file`` under ``logger=mlflow``), or a
    setting without its logger's name (``logger.tracking_uri``)."""
    load_components()
    group, _, name = path.partition(".")
    options = [option for option in GROUPS[group] if option != NONE]
    if name in options:
        return f"{given}: the {name} {group} is not chosen: add it to the others, e.g. {group}=[tensorboard,{name}]"
    owners = [o for o in options if name in {f.name for f in dataclasses.fields(GROUPS[group][o])}]
    if owners:
        return f"{given}: each chosen {group} has its own settings: {' or '.join(f'{group}.{o}.{name}' for o in owners)}"
    return (f"{given}: {name} is not a {group}: choose {group}s with {group}=[...] ({', '.join(options)}), and set "
            f"one's settings as {group}.<name>.<key>")


def check_composed(cfg: Any) -> None:
    """Refuse keys no schema knows (Hydra's ``+key=value`` adds them even to typed nodes, and
    the run would silently ignore them), naming the nearest known key; and values a preset
    marks as required (``???``) but nobody gave."""
    from omegaconf import DictConfig, OmegaConf

    from scheda.utils.errors import ConfigError

    def walk(node: DictConfig, prefix: str) -> None:
        schema = OmegaConf.get_type(node)
        known = [f.name for f in dataclasses.fields(schema)] if dataclasses.is_dataclass(schema) else None
        for key in node.keys():
            path = f"{prefix}{key}"
            if known is not None and key not in known:
                raise ConfigError(not_a_setting(path, schema))
            if OmegaConf.is_missing(node, key):
                raise ConfigError(f"{path} is required here and was not given: add "
                                  f"{MISSING_HINTS.get(path, path + '=...')}")
            child = node._get_node(key)
            if isinstance(child, DictConfig) and not child._is_none():
                walk(child, f"{path}.")

    walk(cfg, "")
    for key in cfg.get("requires") or []:
        if OmegaConf.select(cfg, key, default=None) is None:
            raise ConfigError(f"{key} is required by this preset and was not given: add "
                              f"{MISSING_HINTS.get(key, key + '=...')}")


def groups_text() -> str:
    """Every group, its options, the module and schema of each, and every setting with its
    default: ``python -m scheda.config`` prints it (configs/README.md says where to look)."""
    load_components()
    lines = []
    for group, schemas in GROUPS.items():
        lines.append(f"{group}:")
        for name, cls in schemas.items():
            lines.append(f"  {group}={name}  ({cls.__module__.replace('.', '/')}.py, {cls.__name__})")
            for f in dataclasses.fields(cls):
                if f.name != "name":
                    default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
                    if dataclasses.is_dataclass(default):
                        default = dataclasses.asdict(default)
                    key = f"{group}.{name}" if group in MANY else group
                    lines.append(f"    {key}.{f.name} = {default}")
    return "\n".join(lines)


if __name__ == "__main__":  # run as a script, this file is not the module the components register in
    from scheda import config
    from scheda.utils.interrupt import quiet_on_a_closed_pipe

    quiet_on_a_closed_pipe(lambda: print(config.groups_text()))()


