"""``python train.py resume=RUN``: continue a run as itself; and what a job does with a run
directory that already holds a run (a sweep run again into its folder: :func:`previous_attempt`).

The run's own overrides (``RUN/.hydra/overrides.yaml``) are composed again with the ones on
the command line on top, and the run writes into its own directory, so its checkpoints,
results.json and TensorBoard curves stay one run. A change that would alter training (the
schedule, the model, lr, seed, ...) is refused with one line unless ``force_resume=true``;
devices, threads, logging, evaluation and a longer ``trainer.max_epochs`` may change.
This module imports no torch: it runs before Hydra parses the command line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Keys a resumed run may change: where and how it runs and is measured, not what it trains.
MAY_CHANGE = ("resume", "init_from", "force_resume", "rerun", "requires", "trainer.device", "trainer.num_threads",
              "trainer.progress_bar", "trainer.max_epochs", "trainer.checkpoint_every", "logger.", "evaluate.",
              "classifier.", "finetune.", "dataset.root", "dataset.download")
DROPPED = ("resume", "init_from", "hydra.run.dir", "hydra.output_subdir")  # of the run's own overrides


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
    saved = [str(o) for o in OmegaConf.load(run_dir / ".hydra" / "overrides.yaml")
             if _key(str(o)) not in given and not _key(str(o)).startswith(DROPPED)]
    extra = [] if "hydra.run.dir" in given else [f"hydra.run.dir={run_dir}", "hydra.output_subdir=null"]
    return [argv[0], *saved, *args, *extra]


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


def check_resume_config(cfg: Any, resume: str | Path) -> list[str]:
    """The differences between ``cfg`` and the config the resumed run was started with; a
    ConfigError when one of them alters training and ``force_resume`` is not set."""
    from omegaconf import OmegaConf

    from scheda.errors import ConfigError

    path = Path(resume).expanduser()
    found = [c / name for c in (path, path.parent, path.parent.parent)
             for name in (".hydra/config.yaml", "config.yaml") if (c / name).is_file()]
    if not found:
        return []
    changed, altering, shown = config_changes(OmegaConf.to_container(OmegaConf.load(found[0]), resolve=True), cfg)
    if altering and not cfg.get("force_resume"):
        raise ConfigError(f"resume would change what the run trains ({shown}): "
                          f"drop those overrides, or add force_resume=true")
    return changed


# What a job did with its directory, as results.json's ``attempts`` and a sweep's summary count it.
ACTIONS = ("ran", "skipped", "resumed", "reran")
# A run that ended with one of these is a result: run again with the same config and seed it
# would end the same way (a diverged run diverges again), so it is kept, not rerun.
FINAL_STATUSES = ("completed", "diverged")
KEPT = {".hydra", "train.log", ".lock", "attempts"}  # left in place when an attempt is set aside


def has_checkpoint(run_dir: Path) -> bool:
    from scheda.checkpoint import CHECKPOINT_RE

    folders = [run_dir / "checkpoints", *sorted((run_dir / "models").glob("*/checkpoints"))]
    return any(CHECKPOINT_RE.match(p.name) for folder in folders if folder.is_dir() for p in folder.iterdir())


def reentry(status: str | None, checkpointed: bool, error: str | None = None) -> tuple[str, str]:
    """The one policy for a run directory that already holds a run, used by a sweep run again
    (:func:`previous_attempt`) and by the protocol (scheda.protocol.launch.job_state): from the
    earlier attempt's status (None: no results.json), whether it left a checkpoint and the error
    it recorded, the action (``ACTIONS``) and a line saying why. A final status (completed, diverged) is kept;
    a failure reruns from the start (what failed may be in its checkpoints); a run that stopped
    (interrupted, killed, out of time) resumes from its newest checkpoint."""
    if status is None:
        if checkpointed:  # written before results.json was (an older scheda)
            return "resumed", "checkpoints and no results.json: resuming from its newest checkpoint"
        return "ran", ""
    if status in FINAL_STATUSES:
        return "skipped", f"{status} before with the same config: skipped (rerun=true runs it again)"
    if status == "failed":
        return "reran", f"failed before ({error or 'no error recorded'}): running it again (its files under attempts/)"
    if checkpointed:
        return "resumed", f"{status} before: resuming from its newest checkpoint"
    return "reran", f"{status} before, with no checkpoint: running it again"


def previous_attempt(cfg: Any, run_dir: Path) -> tuple[str, str, dict[str, Any] | None]:
    """What this job does with what an earlier attempt left in ``run_dir`` (read before the new
    results.json replaces it), by :func:`reentry`, or ``reran`` for ``rerun=true`` and an
    unreadable results.json. A config that alters what the earlier attempt trained is refused
    with one line naming the difference. Returns the action, a line saying why, and the earlier
    results (those of a skipped run are its result)."""
    import json

    from scheda.errors import ConfigError

    path = run_dir / "results.json"
    if not path.is_file():
        return (*reentry(None, has_checkpoint(run_dir)), None)
    try:
        before = json.loads(path.read_text())
        status, saved = before["status"], before["config"]
    except (ValueError, KeyError, TypeError):
        return "reran", "its results.json is unreadable: running it again (the old files under attempts/)", None
    if cfg.get("rerun"):
        return "reran", f"rerun=true: running it again ({status} before; its files under attempts/)", before
    _, altering, shown = config_changes(saved, cfg)
    if altering:
        raise ConfigError(f"{run_dir.name} holds a run of another config ({shown}): give the sweep a new "
                          f"hydra.sweep.dir, or add rerun=true to run it again")
    return (*reentry(status, has_checkpoint(run_dir), before.get("error")), before)


def set_aside(run_dir: Path) -> Path:
    """Move an earlier attempt's files (results, checkpoints, curves, models) into
    ``attempts/<n>/``: a rerun never deletes what a run wrote."""
    import os

    attempts = run_dir / "attempts"
    n = 1 + max((int(p.name) for p in attempts.glob("*") if p.name.isdigit()), default=0)
    target = attempts / str(n)
    target.mkdir(parents=True)
    for item in sorted(run_dir.iterdir()):
        if item.name not in KEPT:
            os.replace(item, target / item.name)
    return target
