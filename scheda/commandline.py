"""The command lines' plumbing around Hydra, shared by ``scheda-train`` (scheda.cli),
``scheda-reproduce`` (scheda.protocol.reproduce) and the compose API (scheda.api, the protocol's
jobs): Hydra's composition errors said in one line (:func:`composition_error`, installed by
:func:`one_line_composition_errors`), the flags and group choices Hydra would answer in a
traceback or 15 lines (:func:`conflicting_flags`, :func:`unknown_choice`), ``--help``'s group
listing from one copy of the config repository (:func:`list_groups_from_one_copy`), and
:func:`compose_train`. What a config is and how it is checked stays in scheda.config; this is
how a command line meets Hydra, patched where Hydra 1.3 has no hook (tests/test_entrypoint.py
fails when Hydra changes underneath).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from scheda.config import (COMPONENT_MODULES, CONFIGS, MANY, NONE, PROTOCOL_GROUPS, not_a_setting, not_one_of_many, options)
from scheda.utils.errors import ConfigError, SchedaError




def other_commands_group(key: str, value: str | None, command: str, argv: list[str] = ()) -> str | None:
    """The line for a group of the other command (``scheda-train scale=cpu``, ``scheda-reproduce
    dataset=amazon``), naming the command or the override that takes it; None for the command's own.
    ``value``: the option chosen, None for one to find in ``argv`` (``model.hidden=3``)."""
    given = [a.lstrip("+~") for a in argv if a.lstrip("+~").split("=")[0].split(".")[0] == key]
    arg = f"{key}={value}" if value else (given[0] if given else f"{key}.<setting>=<value>")
    if command == "train" and key in PROTOCOL_GROUPS:
        return (f"{arg} is an option of scheda-reproduce (the paper's protocol), not of a training run: "
                f"scheda-reproduce {arg} (docs/protocol.md)")
    if command == "reproduce" and key in (*COMPONENT_MODULES, "experiment"):
        arg = f"+{arg}" if key == "experiment" else arg
        return (f"{arg} is a training run's setting, not the protocol's: give it to every job as "
                f"\"overrides=['{arg}']\"" + (" (or choose the table of that data: table=amazon)"
                                               if key == "dataset" else ""))
    return None


def composition_error(exc: BaseException, command: str = "train", argv: list[str] = ()) -> str | None:
    """One line for a command line Hydra could not compose or start (a key no schema has, a value of
    the wrong type, a group of the other command, an override that does not parse, a run directory
    it cannot write) and for a sweep's failed job (scheda's own line); None for anything else.
    ``command``: the config the command composes, ``train`` or ``reproduce``; ``argv``: its overrides."""
    from hydra.errors import ConfigCompositionException, OverrideParseException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

    cause = exc.__cause__ or exc.__context__  # a key set by a config file: Hydra raises without ``from``
    if isinstance(exc, SchedaError):  # a sweep's failed job, which Hydra raises at the sweep's end
        return str(exc)
    if isinstance(exc, OSError) and exc.filename and not _ran_scheda(exc):  # Hydra's own run directory and files
        return (f"cannot write {exc.filename}: {exc.strerror or exc}: choose a folder you can write to "
                f"(hydra.run.dir, hydra.sweep.dir, or the protocol's out_dir)")
    if isinstance(exc, OverrideParseException):
        return (f"an override does not parse ({str(exc).splitlines()[0]}): quote a value with brackets, commas or "
                f"spaces, e.g. 'schedule.stages=[...]' (https://hydra.cc/docs/advanced/override_grammar/basic/)")
    if not isinstance(exc, ConfigCompositionException):
        return None
    source = re.match(r"In '([^']+)':", str(exc))  # a config file (a preset) set the key, not the command line
    if source and "/" in source.group(1):  # +scale=cpu, +experiment=quick: a preset of the other command's group
        group, _, option = source.group(1).partition("/")
        line = other_commands_group(group, option, command, argv)
        if line:
            return line
    absent = re.search(r"Could not override '([^']+)'\. No match in the defaults list", str(exc))
    if absent:  # a group the command's defaults do not choose: the other command's, or one to add with +
        value = re.search(r"use \+[^=\s]+=(\S+)", str(exc))
        value = value.group(1) if value else "..."
        return other_commands_group(absent.group(1), value, command, argv) or \
            f"{absent.group(1)}={value} is not chosen by default: add it with +{absent.group(1)}={value}"
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and cause.full_key \
            and cause.full_key.count(".") == 1 and cause.full_key.partition(".")[0] in MANY:
        given = re.search(r"Could not override '([^']+)'", str(exc))
        return not_one_of_many(cause.full_key, given.group(1) if given else cause.full_key)
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and dataclasses.is_dataclass(cause.object_type) \
            and cause.full_key:
        group = cause.full_key.partition(".")[0]
        line = other_commands_group(group, None, command, argv)  # model.hidden=3 to the protocol
        if line:
            return line
        if source:
            return (f"{source.group(1)}.yaml sets {cause.full_key}, which is not a setting of {group} "
                    f"({cause.object_type.__name__}): the preset is written for another choice of {group}; keep "
                    f"its choice, or give its values without the preset")
        return not_a_setting(cause.full_key, cause.object_type)
    if isinstance(cause, ValidationError) and cause.full_key:
        return f"{cause.full_key}: {str(cause).splitlines()[0]}" + (f" (set by {source.group(1)}.yaml)" if source else "")
    append = re.search(r"Could not override '([^']+)'\.\nTo append to your config use (\+\S+)", str(exc))
    if append:  # a new key of a free-form mapping (hydra.job.env_set.FOO=1)
        return f"{append.group(1)} is not in the config yet: add it with {append.group(2)}"
    return None


def _ran_scheda(exc: BaseException) -> bool:
    """Whether ``exc`` came from scheda's own code (a run, the protocol), not from Hydra before it."""
    package = Path(__file__).parent
    tb = exc.__traceback__
    while tb is not None:
        path = Path(tb.tb_frame.f_code.co_filename)
        if package in path.parents and path != Path(__file__):
            return True
        tb = tb.tb_next
    return False


def one_line_composition_errors(command: str) -> None:
    """Hydra prints a command line it cannot compose in five to seven lines ending in "Set the
    environment variable HYDRA_FULL_ERROR=1": the commands print :func:`composition_error`'s one
    line instead and exit 1 (HYDRA_FULL_ERROR=1 still gives Hydra's own report). Hydra 1.3 reports
    through ``hydra._internal.utils.run_and_report``, which this wraps (tests/test_entrypoint.py fails
    when that changes)."""
    import os
    import sys

    from hydra._internal import utils

    report = getattr(utils, "run_and_report", None)
    if report is None:
        return
    if getattr(report, "one_line", False):  # wrapped already: this command's lines now
        report.command = command
        return

    def run_and_report(func):
        def composed():
            try:
                return func()
            except Exception as exc:  # noqa: BLE001 - only a composition error is reworded
                full = os.environ.get("HYDRA_FULL_ERROR") == "1"
                line = None if full else composition_error(exc, run_and_report.command, sys.argv[1:])
                if line is None:
                    raise
                raise SystemExit(f"error: {line}") from None

        return report(composed)

    run_and_report.one_line, run_and_report.command = True, command
    utils.run_and_report = run_and_report


def compose_train(overrides: list[str]) -> Any:
    """train.yaml with ``overrides``, as ``scheda-train OVERRIDES`` composes it: inside a Hydra app
    (scheda-reproduce) in its context, else in one of its own, left as it was found. A command line
    Hydra cannot compose is a ConfigError with the command's one line."""
    from hydra import compose, initialize_config_dir, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra


    wrong = unknown_choice(["scheda-train", *overrides], [*COMPONENT_MODULES, "experiment"])
    if wrong:
        raise ConfigError(wrong)

    def composed() -> Any:
        try:
            return compose("train", overrides)
        except Exception as exc:  # noqa: BLE001 - composing raises nothing but a config the overrides do not make
            raise ConfigError(composition_error(exc, "train", overrides) or str(exc).splitlines()[0]) from None

    if GlobalHydra.instance().is_initialized():
        return composed()
    with (initialize_config_module(CONFIGS.removeprefix("pkg://"), version_base="1.3") if CONFIGS.startswith("pkg://")
          else initialize_config_dir(CONFIGS, version_base="1.3")):
        return composed()


LISTS_GROUPS = {"--help", "-h", "--hydra-help", "--shell-completion", "-sc"}


def searched_folders(argv: list[str]) -> list[Path] | None:
    """The config folders a command line adds to Hydra's search path (``hydra.searchpath=[file://...]``,
    ``--config-dir``), whose YAML files are options too; None when one of them is not a folder
    this process can list (a ``pkg://`` entry)."""
    folders: list[Path] = []
    for i, arg in enumerate(argv):
        key, sep, value = arg.lstrip("+").partition("=")
        if key == "hydra.searchpath" and sep:
            for entry in (e.strip().strip("'\"") for e in value.strip("[]").split(",") if e.strip()):
                if not entry.startswith("file://"):
                    return None
                folders.append(Path(entry.removeprefix("file://")))
        elif arg in ("--config-dir", "-cd") and i + 1 < len(argv):
            folders.append(Path(argv[i + 1]))
        elif arg.startswith("--config-dir="):
            folders.append(Path(arg.partition("=")[2]))
    return folders


def group_choices(group: str, folders: list[Path] = ()) -> list[str]:
    """A group's options as a command line picks them: its YAML files in configs/<group>/ (and in
    ``folders``, those a command line adds to the search path) and the schemas registered under it."""
    if CONFIGS.startswith("pkg://"):
        import importlib.resources

        folder = importlib.resources.files(CONFIGS.removeprefix("pkg://")) / group
        found = {p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml")} if folder.is_dir() else set()
    else:
        folder = Path(CONFIGS) / group
        found = {p.stem for p in folder.glob("*.yaml")} if folder.is_dir() else set()
    for extra in folders:
        found |= {p.stem for p in (extra / group).glob("*.yaml")}
    if group in COMPONENT_MODULES:
        found |= set(options(group)) | ({NONE} if group in MANY else set())
    return sorted(found)


def conflicting_flags(argv: list[str]) -> str | None:
    """The one-line error for Hydra flags that cannot go together (``-m ... --cfg job``: Hydra
    raises a ValueError with its traceback), read with Hydra's own parser; None when they can.
    ``--help`` goes before any of them, as in Hydra."""
    from hydra._internal.utils import get_args_parser

    args, _ = get_args_parser().parse_known_args(argv[1:])
    if args.help or args.hydra_help:
        return None
    given = [flag for flag, on in (("--run", args.run), ("--multirun (-m)", args.multirun),
                                   ("--cfg", args.cfg is not None), ("--info", args.info is not None),
                                   ("--shell-completion", args.shell_completion)) if on]
    if len(given) > 1:
        hint = " (--cfg shows one job's config: drop -m and the sweep's commas)" if args.multirun and args.cfg else ""
        return f"{' and '.join(given)} cannot go together: give one of them{hint}"
    if args.resolve and args.cfg is None:
        return "--resolve goes with --cfg (or --help): add --cfg job"
    return None


def unknown_choice(argv: list[str], groups: list[str]) -> str | None:
    """The one-line error for a command line that picks an option a group does not have
    (``dataset=nope``, ``table=nope``; a sweep's values and ``logger=[a,b]`` each checked), naming the
    options; None when every choice exists. Hydra's own answer is 15 lines with its search path.
    Options in the folders the command line adds to the search path count; where one cannot be
    listed, Hydra answers."""
    folders = searched_folders(argv)
    if folders is None:
        return None
    for arg in argv[1:]:
        key, sep, value = arg.lstrip("+~").partition("=")
        if not sep or key not in groups or any(c in value for c in "()$"):
            continue
        picked = [v.strip() for v in value.strip("[]").split(",") if v.strip()]
        known = group_choices(key, folders)
        wrong = [v for v in picked if v not in known]
        if wrong:
            return (f"{key}={wrong[0]} is not an option of {key}: use {', '.join(known[:-1])} or {known[-1]}"
                    if len(known) > 1 else f"{key}={wrong[0]} is not an option of {key}: use {''.join(known)}")
    return None


def list_groups_from_one_copy(argv: list[str] | None = None) -> None:
    """Hydra (1.3) answers each group's "which options?" from a fresh deep copy of the config
    repository, whose schemas are many (4 s for ``--help``'s 120 questions): one copy per set of
    overrides serves every question of this process, where a command lists groups (``argv`` has
    ``--help`` or asks for shell completion; None: now)."""
    if argv is not None and not LISTS_GROUPS & set(argv[1:]):
        return
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    create = getattr(ConfigLoaderImpl, "_parse_overrides_and_create_caching_repo", None)
    if create is None or getattr(create, "shared", False):  # another Hydra, or done already
        return
    made: dict = {}

    def shared(self, config_name, overrides):
        key = (id(self), config_name, tuple(overrides))
        if key not in made:
            made[key] = create(self, config_name, overrides)
        return made[key]

    shared.shared = True
    ConfigLoaderImpl._parse_overrides_and_create_caching_repo = shared
