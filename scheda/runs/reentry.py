"""A run that meets an earlier one. ``scheda-train resume=RUN`` continues RUN as itself:
RUN's own overrides (``RUN/.hydra/overrides.yaml``) are composed again with the command line's on
top (:func:`resume_argv`, before Hydra parses it), and the run writes into its own directory, so
its checkpoints, results.json and curves stay one run; a change that would alter training (the
schedule, the model, lr, seed, ...) is refused with one line unless ``force_resume=true``, while
devices, threads, logging, evaluation, a longer ``trainer.max_epochs`` and when training stops
(``trainer.patience``, ``trainer.min_epochs``) may change (:data:`MAY_CHANGE`). A finished run
resumed to train on keeps its finished results.json under ``attempts/<n>/`` (:func:`keep_record`).

A directory that already holds a run (a sweep run again into its folder, a job Slurm requeued,
the same ``hydra.run.dir`` twice) gets one policy (:func:`reentry`), which the protocol follows
too (scheda.protocol.launch.job_action): a finished run is kept, a failed one runs again with its
files set aside under ``attempts/<n>/``, a stopped one resumes from its newest checkpoint.
No torch: the command line reads this before Hydra starts.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from scheda.runs.rundir import (CHECKPOINT_RE, FINAL_STATUSES, FINETUNE_INIT, FINETUNE_LAST, KILLED, RunResults,
                                flatten, read_results)
from scheda.utils import environment
from scheda.utils.errors import ConfigError
from scheda.utils.io import atomic_write, shown_path

log = logging.getLogger(__name__)
# Set by a -m invocation (scheda.runs.sweep_summary) for the jobs it launches, in-process or not: an
# attempt records it, so the sweep's summary tells its own jobs from earlier ones by id, not by time.
INVOCATION = "SCHEDA_INVOCATION"
IN_PLACE = {".hydra", "train.log", ".lock", "attempts"}  # left in place when an attempt is set aside

# Keys a resumed run may change: where and how it runs and is measured, and when it stops, not what it trains.
MAY_CHANGE = ("resume", "init_from", "force_resume", "rerun", "requires", "trainer.device", "trainer.num_threads",
              "trainer.progress_bar", "trainer.max_epochs", "trainer.patience", "trainer.min_epochs",
              "trainer.checkpoint_every", "trainer.keep_checkpoints", "logger.", "evaluate.",
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


PROTOCOL_MARKS = ("scale.yaml", "invocations.json", "protocol_id")  # what scheda-reproduce writes in its out_dir


def not_one_run(argv: list[str]) -> str | None:
    """The one-line error for ``resume=`` naming a folder of many runs: a ``-m`` sweep's (its
    ``multirun.yaml``) or a scheda-reproduce out_dir, each continued by its own command; None
    for anything else."""
    value = _resume_value(argv[1:])
    if value is None:
        return None
    path = Path(value).expanduser()
    if (path / "multirun.yaml").is_file():
        return (f"resume={value} is a -m sweep's folder: run the sweep's command again to continue all its "
                f"jobs (finished ones are skipped), or resume one of them: resume={path / '<job>'}")
    if any((path / mark).is_file() for mark in PROTOCOL_MARKS):
        return (f"resume={value} is a scheda-reproduce folder: run the same scheda-reproduce command again to "
                f"continue it (finished jobs are kept)")
    return None


def _resume_value(args: list[str]) -> str | None:
    """The last ``resume=`` value of a command line's overrides; None where there is none (or null)."""
    values = [a.split("=", 1)[1] for a in args if _key(a) == "resume" and "=" in a]
    return None if not values or values[-1] in ("", "null") else values[-1]


def resume_argv(argv: list[str]) -> list[str]:
    """``argv`` for a single run with ``resume=RUN``: RUN's own overrides, then these (which win),
    then RUN as the output directory. Anything else (a sweep, no resume, a checkpoint outside a
    Hydra run directory) is returned unchanged."""
    args = argv[1:]
    if any(a in ("-m", "--multirun") or a.startswith("-") for a in args):
        return argv
    value = _resume_value(args)
    if value is None:
        return argv
    run_dir = run_dir_of(value)
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
    path = run_dir / ".hydra" / "hydra.yaml"
    if "hydra.searchpath" in given or not path.is_file():
        return []
    try:  # as written: its other overrides hold interpolations only Hydra resolves
        overrides = OmegaConf.to_container(OmegaConf.load(path), resolve=False)["hydra"]["overrides"]["hydra"]
        return [str(o) for o in overrides if _key(str(o)) == "hydra.searchpath"]
    except Exception:  # noqa: BLE001 - an unreadable hydra.yaml: compose without it, as before
        return []


def config_changes(saved: dict[str, Any], cfg: Any) -> tuple[list[str], list[str], str]:
    """The keys that differ between a run's saved config and ``cfg`` (composed, or plain data), those of them that alter
    what it trains, and the first few of those as ``key: old -> new`` text."""
    saved = flatten(saved)
    now = flatten(cfg if isinstance(cfg, dict) else OmegaConf.to_container(cfg, resolve=True))
    changed = [k for k in sorted(set(saved) | set(now)) if saved.get(k) != now.get(k)]
    altering = [k for k in changed if not k.startswith(MAY_CHANGE)]
    shown = ", ".join(f"{k}: {saved.get(k)!r} -> {now.get(k)!r}" for k in altering[:3])
    return changed, altering, shown + (", ..." if len(altering) > 3 else "")


def saved_config(resume: str | Path) -> dict[str, Any] | None:
    """The config the run that ``resume`` points into last ran with: its results.json's (what the
    run used, a sweep job's loggers named by its swept values, a forced change included), else
    the config Hydra saved when it started (``.hydra/config.yaml``; a fused sweep's model:
    ``config.yaml``); None when there is neither."""
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


def check_resume_config(cfg: Any, resume: str | Path) -> dict[str, Any] | None:
    """The config the resumed run last ran with (:func:`saved_config`; None: none saved), after a
    ConfigError where ``cfg`` alters what it trains and ``force_resume`` is not set."""
    saved = saved_config(resume)
    if saved is not None:
        _, altering, shown = config_changes(saved, cfg)
        if altering and not cfg.get("force_resume"):
            raise ConfigError(f"resume would change what the run trains ({shown}): "
                              f"drop those overrides, or add force_resume=true")
    return saved


def checkpoint_files(run_dir: Path) -> list[Path]:
    """Every file in a run's checkpoint folders: its own, and each model's of a fused sweep."""
    folders = [run_dir / "checkpoints", *sorted((run_dir / "models").glob("*/checkpoints"))]
    return [p for folder in folders if folder.is_dir() for p in folder.iterdir()]


def has_checkpoint(run_dir: Path) -> bool:
    """Whether a stopped run left something to resume from: a training checkpoint, or fine-tuning's
    (a stand-alone fine-tuning writes no epoch_*.pt)."""
    return any(CHECKPOINT_RE.match(p.name) or p.name in (FINETUNE_LAST, FINETUNE_INIT)
               for p in checkpoint_files(run_dir))


def reentry(status: str | None, checkpointed: bool, error: str | None = None) -> tuple[str, str]:
    """The one policy for a run directory that already holds a run, used by a sweep run again
    (:func:`previous_attempt`) and by the protocol (scheda.protocol.launch.job_action): from the
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
    if status == "running":  # asked by the one process that may run it now: the last one was killed
        status = KILLED
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
        raise ConfigError(f"{shown_path(run_dir)} holds a run of another config ({shown}): write this one elsewhere "
                          f"(hydra.run.dir; a sweep: hydra.sweep.dir), or add rerun=true to run it again (the old "
                          f"files under attempts/)")
    return (*reentry(status, has_checkpoint(run_dir), before.get("error")), before)


def next_attempt(run_dir: Path) -> Path:
    """The folder ``attempts/<n>/`` that the next earlier attempt set aside goes to (made)."""
    attempts = run_dir / "attempts"
    n = 1 + max((int(p.name) for p in attempts.glob("*") if p.name.isdigit()), default=0)
    target = attempts / str(n)
    target.mkdir(parents=True)
    return target


def set_aside(run_dir: Path) -> Path:
    """Move an earlier attempt's files (results, checkpoints, curves, models) into
    ``attempts/<n>/``: a rerun never deletes what a run wrote."""
    target = next_attempt(run_dir)
    for item in sorted(run_dir.iterdir()):
        if item.name not in IN_PLACE:
            os.replace(item, target / item.name)
    return target


def keep_record(run_dir: Path) -> Path:
    """Copy a finished run's results.json (and its fused models') into ``attempts/<n>/`` before a
    resume rewrites them: a resume that fails (data missing, a signal before its checkpoint
    is read) does not take the finished record with it. Its checkpoints stay where they are."""
    target = next_attempt(run_dir)
    for path in [run_dir / "results.json", *sorted(run_dir.glob("models/*/results.json"))]:
        data = path.read_bytes()
        atomic_write(target / path.relative_to(run_dir), lambda f, data=data: f.write(data))
    return target


def earlier_seconds(before: dict[str, Any] | None) -> float:
    """The time the earlier attempts of a run being resumed spent (what they recorded when
    stopped; a SIGKILL records none), so that results.json's seconds is the run's, not its last
    attempt's; ``before``: their results, None for a fresh run."""
    return float((before or {}).get("seconds") or 0.0)


@dataclass(frozen=True)
class Entry:
    """What :func:`enter` decided for a run directory: the action (``ACTIONS`` of :func:`reentry`),
    the run's results.json (taken, status running), the checkpoint run to resume (its own
    directory: where it stands is in its checkpoint) and the run to initialise from (None for a
    resumed run, which continues its own checkpoint; kept on record as where it started). The
    plan (scheda.planning.plan.make_plan) takes these instead of the composed config's."""

    action: str
    results: RunResults
    resume: str | None
    init_from: str | None
    started_from: str | None = None  # a resumed run's init_from when it began: on record
    saved: dict[str, Any] | None = None  # the config a resumed run last ran with

    def record(self, composed: dict[str, Any]) -> dict[str, Any]:
        """results.json's config: the composed config (plain data) with what was decided here."""
        init_from = self.init_from if self.init_from is not None else self.started_from
        return {**composed, "resume": self.resume, "init_from": init_from}

    def say_changes(self, composed: dict[str, Any]) -> list[str]:
        """The settings a resumed run changes (those that may: the others were refused), against
        the plan's config ``composed`` (its loggers named as the run names them), said in one line."""
        if self.saved is None:
            return []
        changed, _, _ = config_changes(self.saved, self.record(composed))
        changed = [k for k in changed if k not in RESUMING]
        if changed:
            log.warning("resuming with changed settings: %s", ", ".join(changed))
        return changed

    @property
    def done(self) -> bool:
        """Finished before with the same config: its earlier results are the result."""
        return self.action == "skipped"


def enter(cfg: Any, output_dir: Path) -> Entry:
    """Take ``output_dir`` for the run ``cfg`` composes, by :func:`reentry`, and say what was decided
    (:class:`Entry`); ``cfg`` is read, never written. The run's results.json is written now with
    status running (a rerun tells a killed run from a fresh directory); a skipped run's keeps its
    earlier results with this attempt added; a rerun's earlier files go under ``attempts/``; a resume
    with changed settings says which. A resumed run's record keeps the ``init_from`` it started from."""
    resume, init_from = cfg.get("resume"), cfg.get("init_from")
    compared = False  # whether the earlier attempt's config was compared with cfg already
    if not resume:
        action, why, before = previous_attempt(cfg, output_dir)
        compared = isinstance((before or {}).get("config"), dict)
    elif Path(resume).resolve() == output_dir.resolve():  # resume=RUN_DIR continues into RUN_DIR
        action, why, before = "resumed", "", read_results(output_dir)
    else:
        action, why, before = "ran", "", None
    attempt = {"action": action, "at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if os.environ.get(INVOCATION):  # the -m invocation that ran it (its summary counts it by this)
        attempt["invocation"] = os.environ[INVOCATION]
    attempts = [*(before or {}).get("attempts", []), attempt]
    if why:
        restart = os.environ.get("SLURM_RESTART_COUNT", "0")
        requeued = f"requeued by Slurm (restart {restart}): " if restart not in ("", "0") else ""
        log.info("%s%s: %s", requeued, shown_path(output_dir), why)
    if action == "skipped":
        results = RunResults(output_dir / "results.json")
        results.data = {**before, "attempts": attempts}
        results.save()
        return Entry(action, results, resume, init_from)
    copied = None
    if action == "resumed":
        if (before or {}).get("status") in FINAL_STATUSES:  # resumed to train on: its finished record stays
            copied = keep_record(output_dir)
            log.info("%s was %s: its results are copied to %s", shown_path(output_dir), before["status"],
                     shown_path(copied))
        resume = str(output_dir)
        if not keeps_init_from(cfg.get("finetune")):
            init_from = None
    elif action == "reran" and (output_dir / "results.json").exists():
        set_aside(output_dir)
    saved = None  # read before results.json is written again
    if resume:
        saved = before["config"] if compared else check_resume_config(cfg, resume)
    started_from = ((before or {}).get("config") or {}).get("init_from") if action == "resumed" else None
    results = RunResults(output_dir / "results.json", finished_copy=copied, attempts=attempts,
                         seconds=earlier_seconds(before if action == "resumed" else None))
    entry = Entry(action, results, resume, init_from, started_from, saved)
    results.data["config"] = entry.record(OmegaConf.to_container(cfg, resolve=True))
    results.save()
    return entry


def interrupted_line(signal: str, output_dir: Path, checkpointed: bool) -> str:
    """The line an interrupted run ends with: what stopped it, what it wrote, and the command
    that continues it."""
    written = "checkpoint and results.json" if checkpointed else "results.json"
    return (f"interrupted by {signal}; {written} written: continue with "
            f"{environment.invoked_as('scheda-train', 'scheda.cli', 'train.py')} resume={shown_path(output_dir)}")


def enter_model(model_dir: Path, overrides: dict[str, Any], composed: dict[str, Any], resumed: bool) -> RunResults:
    """A fused sweep's model's results.json (status running, its values in the sweep, its config,
    the time its earlier attempts spent when the sweep resumes) and the config.yaml that composing
    it alone would give, both written before it trains (as a run's own: a killed model reads as one)."""
    results = RunResults(model_dir / "results.json", overrides=overrides, config=composed,
                         seconds=earlier_seconds(read_results(model_dir) if resumed else None))
    atomic_write(model_dir / "config.yaml", lambda f: f.write(OmegaConf.to_yaml(composed).encode()))
    results.save()
    return results
