"""``python train.py resume=RUN``: continue a run as itself (what a job does with a run
directory that already holds a run is scheda.runs.reentry).

The run's own overrides (``RUN/.hydra/overrides.yaml``) are composed again with the ones on
the command line on top, and the run writes into its own directory, so its checkpoints,
results.json and TensorBoard curves stay one run. A change that would alter training (the
schedule, the model, lr, seed, ...) is refused with one line unless ``force_resume=true``;
devices, threads, logging, evaluation, a longer ``trainer.max_epochs`` and when training stops
(``trainer.patience``, ``trainer.min_epochs``) may change.
This module imports no torch: it runs before Hydra parses the command line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Keys a resumed run may change: where and how it runs and is measured, and when it stops, not what it trains.
MAY_CHANGE = ("resume", "init_from", "force_resume", "rerun", "requires", "trainer.device", "trainer.num_threads",
              "trainer.progress_bar", "trainer.max_epochs", "trainer.patience", "trainer.min_epochs",
              "trainer.checkpoint_every", "logger.", "evaluate.",
              "classifier.", "finetune.", "dataset.root", "dataset.download")
DROPPED = ("resume", "init_from", "hydra.run.dir", "hydra.output_subdir")  # of the run's own overrides
RESUMING = ("resume", "init_from", "force_resume", "rerun")  # how this attempt runs, not a setting that changed


def keeps_init_from(finetune: Any) -> bool:
    """Whether resuming a run keeps its ``init_from``: a stand-alone fine-tuning's encoder comes
    from there (``finetune``: the run's finetune settings, a mapping, or None); any other run
    continues from its own checkpoint, and init_from would start a new one."""
    return bool(finetune and finetune.get("enabled") and finetune.get("standalone"))


def run_dir_of(value: str | Path) -> Path | None:
    """The run directory that a ``resume=`` value (run directory, checkpoints/ or a checkpoint
    file) points into, if it is one that Hydra wrote (it has ``.hydra/``)."""
    path = Path(value).expanduser()
    for candidate in (path, path.parent, path.parent.parent):
        if (candidate / ".hydra" / "overrides.yaml").is_file():
            return candidate
    return None


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def resume_argv(argv: list[str]) -> list[str]:
    """``argv`` for a single run with ``resume=RUN``: RUN's own overrides, then these (which win),
    then RUN as the output directory. Anything else (a sweep, no resume, a checkpoint outside a
    Hydra run directory) is returned unchanged."""
    from omegaconf import OmegaConf

    args = argv[1:]
    if any(a in ("-m", "--multirun") or a.startswith("-") for a in args):
        return argv
    values = [a.split("=", 1)[1] for a in args if _key(a) == "resume" and "=" in a]
    if not values or values[-1] in ("", "null"):
        return argv
    run_dir = run_dir_of(values[-1])
    if run_dir is None:
        return argv
    given = {_key(a) for a in args}
    dropped = DROPPED
    if keeps_init_from((saved_config(run_dir) or {}).get("finetune")):
        dropped = tuple(key for key in DROPPED if key != "init_from")
    saved = [str(o) for o in OmegaConf.load(run_dir / ".hydra" / "overrides.yaml")
             if _key(str(o)) not in given and not _key(str(o)).startswith(dropped)]
    extra = [] if "hydra.run.dir" in given else [f"hydra.run.dir={run_dir}", "hydra.output_subdir=null"]
    return [argv[0], *saved, *args, *extra, *_searchpath(run_dir, given)]


def _searchpath(run_dir: Path, given: set[str]) -> list[str]:
    """The run's ``hydra.searchpath`` override, where it had one and none is given now: a protocol
    job's config (``+protocol_job=...``) lives in the protocol's ``jobs/`` folder, which only that
    path names."""
    from omegaconf import OmegaConf

    path = run_dir / ".hydra" / "hydra.yaml"
    if "hydra.searchpath" in given or not path.is_file():
        return []
    try:  # as written: its other overrides hold interpolations only Hydra resolves
        overrides = OmegaConf.to_container(OmegaConf.load(path), resolve=False)["hydra"]["overrides"]["hydra"]
        return [str(o) for o in overrides if _key(str(o)) == "hydra.searchpath"]
    except Exception:  # noqa: BLE001 - an unreadable hydra.yaml: compose without it, as before
        return []


def config_changes(saved: dict[str, Any], cfg: Any) -> tuple[list[str], list[str], str]:
    """The keys that differ between a run's saved config and ``cfg``, those of them that alter
    what it trains, and the first few of those as ``key: old -> new`` text."""
    from omegaconf import OmegaConf

    from scheda.config import flatten

    saved = flatten(saved)
    now = flatten(OmegaConf.to_container(cfg, resolve=True))
    changed = [k for k in sorted(set(saved) | set(now)) if saved.get(k) != now.get(k)]
    altering = [k for k in changed if not k.startswith(MAY_CHANGE)]
    shown = ", ".join(f"{k}: {saved.get(k)!r} -> {now.get(k)!r}" for k in altering[:3])
    return changed, altering, shown + (", ..." if len(altering) > 3 else "")


def saved_config(resume: str | Path) -> dict[str, Any] | None:
    """The config the run that ``resume`` points into last ran with: its results.json's (what the
    run used, a sweep job's loggers named by its swept values, a forced change included), else
    the config Hydra saved when it started (``.hydra/config.yaml``; a fused sweep's model:
    ``config.yaml``); None when there is neither."""
    import json

    from omegaconf import OmegaConf

    path = Path(resume).expanduser()
    for run_dir in (path, path.parent, path.parent.parent):
        try:
            config = json.loads((run_dir / "results.json").read_text()).get("config")
        except (OSError, ValueError, AttributeError):
            config = None
        if isinstance(config, dict) and config:
            return config
        for name in (".hydra/config.yaml", "config.yaml"):
            if (run_dir / name).is_file():
                return OmegaConf.to_container(OmegaConf.load(run_dir / name), resolve=True)
    return None


def check_resume_config(cfg: Any, resume: str | Path) -> list[str]:
    """The differences between ``cfg`` and the config the resumed run last ran with
    (:func:`saved_config`); a ConfigError when one of them alters training and ``force_resume``
    is not set."""
    from scheda.utils.errors import ConfigError

    saved = saved_config(resume)
    if saved is None:
        return []
    changed, altering, shown = config_changes(saved, cfg)
    if altering and not cfg.get("force_resume"):
        raise ConfigError(f"resume would change what the run trains ({shown}): "
                          f"drop those overrides, or add force_resume=true")
    return [k for k in changed if k not in RESUMING]
