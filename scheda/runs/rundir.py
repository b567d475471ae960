"""The run directory, as one contract (no torch: ``scheda-results``, the protocol and the
command line read runs without it). What a run writes there and how a later process reads it:

* ``results.json``: status, history and every evaluation, rewritten atomically whenever
  something is added (:class:`RunResults`; :func:`read_results`), so a finished evaluation is
  never lost; an evaluation's chosen classifier setting (:func:`params_of`) and which test images
  it got right (:func:`pack_correct`); the evaluation a run is read at (:func:`pick`);
* ``checkpoints/epoch_NNNNN.pt`` (:func:`checkpoint_name`), and ``models/<k>/`` for a fused sweep;
* ``metrics.csv`` of ``logger=csv`` (:func:`read_metrics`);
* what a job does with a directory that already holds a run (:func:`reentry`, the one policy of a
  sweep run again and of the protocol), and ``attempts/<n>/`` for what it sets aside;
* ``.lock``: one writer at a time (scheda.utils.lock, which the protocol's folder uses too).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from scheda.utils.errors import ConfigError
from scheda.utils.io import atomic_write_json

log = logging.getLogger(__name__)


def params_of(evaluation: Mapping[str, Any]) -> dict[str, float]:
    """The classifier setting an evaluation chose (results written before classifiers owned
    their grids hold only ``C``)."""
    if "params" in evaluation:
        return dict(evaluation["params"])
    return {"C": evaluation["C"]} if "C" in evaluation else {}


def params_text(params: Mapping[str, float]) -> str:
    """A chosen setting as the report and the logs print it: ``C=0.125``, ``k=20``."""
    return ", ".join(f"{k}={v:g}" for k, v in params.items())


def status_of(exc: BaseException) -> str:
    """A run's status after ``exc``: diverged, interrupted or failed (results.json and the loggers)."""
    from scheda.utils.errors import DivergenceError

    if isinstance(exc, DivergenceError):
        return "diverged"
    if isinstance(exc, (KeyboardInterrupt, SystemExit)):
        return "interrupted"
    return "failed"


METRICS_HEADER = ["name", "step", "value", "time"]  # logger=csv's metrics.csv, one row per scalar


def read_metrics(path: str | Path) -> dict[str, dict[int, float]]:
    """``{name: {step: value}}`` from a run's metrics.csv (logger=csv); a step logged twice (a
    resumed run) reads as its last value. A missing file reads as {}; a torn last line (a killed
    run) is skipped."""
    import csv

    out: dict[str, dict[int, float]] = {}
    try:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                try:
                    out.setdefault(row["name"], {})[int(row["step"])] = float(row["value"])
                except (KeyError, TypeError, ValueError):
                    continue
    except FileNotFoundError:
        return {}
    return out


class RunResults:
    def __init__(self, path: str | Path, **fields: Any):
        self.path = Path(path)
        self.data: dict[str, Any] = {"status": "running", **fields, "evaluations": []}

    @property
    def evaluations(self) -> list[dict[str, Any]]:
        return self.data["evaluations"]

    def add_evaluation(self, entry: dict[str, Any]) -> None:
        self.evaluations.append(entry)
        self.save()

    def update(self, **fields: Any) -> None:
        self.data.update(fields)
        self.save()

    def record_failure(self, exc: BaseException) -> None:
        """Mark the run failed (or diverged / interrupted) with its error; never raises, so
        the original error (a full disk, say) is the one the user sees."""
        self.data.update(status=status_of(exc), error=f"{type(exc).__name__}: {exc}")
        try:
            self.save()
        except Exception as write_error:  # noqa: BLE001 - the first error matters more
            log.warning("could not record the failure in %s: %s", self.path, write_error)

    def save(self) -> None:
        atomic_write_json(self.path, self.data)


# --- names in the directory --------------------------------------------------------------
CHECKPOINT_RE = re.compile(r"^epoch_(\d+)(?:_batch_(\d+))?\.pt$")


def checkpoint_name(epoch: int, batch: int | None = None) -> str:
    """File name of the checkpoint taken after ``epoch`` completed epochs (and ``batch``
    minibatches of the next one, when an interrupt stopped it there)."""
    return f"epoch_{epoch:05d}.pt" if batch is None else f"epoch_{epoch:05d}_batch_{batch:06d}.pt"


def read_results(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / "results.json"
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        log.warning("%s is not valid JSON: the job counts as not run", path)
        return None


def best_evaluation(results: dict[str, Any], reasons: Iterable[str] | None = None) -> dict[str, Any] | None:
    """The evaluation with the lowest validation error (the earliest on ties)."""
    evals = [e for e in results.get("evaluations", []) if reasons is None or e.get("reason") in reasons]
    return min(evals, key=lambda e: (e["val_error"], e["epoch"])) if evals else None


def pick(evaluations: list[dict[str, Any]], at: str) -> dict[str, Any] | None:
    """The evaluation a run is read at: ``last``, ``best`` (lowest validation error, the earliest
    on ties) or ``epoch=N`` (None where the run has no evaluation there)."""
    if not evaluations:
        return None
    if at == "best":
        return min(evaluations, key=lambda e: (e["val_error"], e["epoch"]))
    if at.startswith("epoch="):
        return next((e for e in reversed(evaluations) if e["epoch"] == int(at.split("=", 1)[1])), None)
    return evaluations[-1]


def pack_correct(correct: Any) -> str:
    """Which test images a model got right, as base64 of the packed bits (1250 bytes for
    10000 images): kept with every evaluation so that two models of one seed can be compared
    image by image (McNemar's test, scheda.utils.stats) long after the run."""
    bits = np.asarray(correct.cpu() if hasattr(correct, "cpu") else correct, dtype=bool)  # a tensor, without torch
    return base64.b64encode(np.packbits(bits).tobytes()).decode("ascii")


def unpack_correct(packed: str, n: int) -> np.ndarray:
    """The boolean vector ``pack_correct`` stored (``n``: the number of test images)."""
    bits = np.unpackbits(np.frombuffer(base64.b64decode(packed), dtype=np.uint8))
    if bits.size < n or bits.size - n >= 8:
        raise ValueError(f"packed correctness holds {bits.size} bits, not {n} images")
    return bits[:n].astype(bool)


# --- a directory that already holds a run ----------------------------------------------
# What a job did with its directory, as results.json's ``attempts`` and a sweep's summary count it.
ACTIONS = ("ran", "skipped", "resumed", "reran")
# A run that ended with one of these is a result: run again with the same config and seed it
# would end the same way (a diverged run diverges again), so it is kept, not rerun.
FINAL_STATUSES = ("completed", "diverged")
KEPT = {".hydra", "train.log", ".lock", "attempts"}  # left in place when an attempt is set aside


def has_checkpoint(run_dir: Path) -> bool:
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
    from scheda.runs.resume import config_changes

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
    attempts = run_dir / "attempts"
    n = 1 + max((int(p.name) for p in attempts.glob("*") if p.name.isdigit()), default=0)
    target = attempts / str(n)
    target.mkdir(parents=True)
    for item in sorted(run_dir.iterdir()):
        if item.name not in KEPT:
            os.replace(item, target / item.name)
    return target
