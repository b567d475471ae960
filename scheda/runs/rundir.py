"""The run directory, as one contract (no torch: ``scheda-results``, the protocol and the
command line read runs without it). What a run writes there and how a later process reads it:

* ``results.json``: status, history and every evaluation, rewritten atomically whenever
  something is added (:class:`RunResults`; :func:`read_results`), so a finished evaluation is
  never lost; an evaluation's chosen classifier setting (:func:`params_of`) and which test images
  it got right (:func:`pack_correct`); the evaluation a run is read at (:func:`pick`);
* ``checkpoints/epoch_NNNNN.pt`` (:func:`checkpoint_name`), and ``models/<k>/`` for a fused sweep;
* ``metrics.csv`` of ``logger=csv`` (:func:`read_metrics`);
* what a job does with a directory that already holds a run: scheda.runs.reentry;
* what a finished run tells its user (:func:`summary_lines`);
* ``.lock``: one writer at a time (scheda.utils.lock, which the protocol's folder uses too); a run
  whose results.json says running while its lock's holder is gone was killed (:func:`run_status`).
"""

from __future__ import annotations

import base64
import json
import logging
import re
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from scheda.utils.io import atomic_write, atomic_write_json, shown_path
from scheda.utils.lock import holder_gone

log = logging.getLogger(__name__)


OLD_STEP_FLAGS = ("fused", "triton", "two_pass")  # 0.2's trainer.* flags for what trainer.step says
# Keys a run's config gained after runs were recorded, with the value that kept what those runs did:
# a record without one reads as that, so it resumes and a sweep or table run again keeps it.
ADDED_KEYS = {"evaluate.layers": "top"}


def step_of_flags(fused: bool | None, triton: bool | None, two_pass: bool | None) -> str:
    """The trainer.step that 0.2's flags asked for: fused=true was the default (auto: the Triton step
    on CUDA where it applies), fused=false autograd, triton=false the torch step, true the Triton one."""
    if two_pass:
        return "two_pass"
    if triton:
        return "triton"
    if fused is False:
        return "autograd"
    return "fused" if triton is False else "auto"


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """A recorded config (results.json's, a saved config.yaml's) as {"a.b.c": value}: compared key
    by key with another (a resume, a sweep run again, a protocol's scale) or read as columns. A
    record of 0.2's step flags (trainer.fused, triton, two_pass) reads as the one trainer.step they
    chose, and a key added since (``ADDED_KEYS``) reads as the value it kept, so a run recorded
    before resumes, and a sweep or table run again keeps it."""
    if not isinstance(node, dict):
        return {prefix.rstrip("."): node}
    flat = {k: v for key, value in node.items() for k, v in flatten(value, f"{prefix}{key}.").items()}
    if not prefix and "trainer.device" in flat:  # a run's config
        old = [flat.pop(f"trainer.{k}", None) for k in OLD_STEP_FLAGS]
        if flat.get("trainer.step", "auto") == "auto":
            flat["trainer.step"] = step_of_flags(*old)
        for key, value in ADDED_KEYS.items():
            flat.setdefault(key, value)
    return flat


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


METRICS_HEADER = ["name", "epoch", "value", "time"]  # logger=csv's metrics.csv, one row per scalar


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
                    epoch = row["epoch"] if "epoch" in row else row["step"]  # 0.2's column, read for one release
                    out.setdefault(row["name"], {})[int(epoch)] = float(row["value"])
                except (KeyError, TypeError, ValueError):
                    continue
    except FileNotFoundError:
        return {}
    return out


class RunResults:
    def __init__(self, path: str | Path, finished_copy: Path | None = None, **fields: Any):
        """``finished_copy``: where a resume to train on copied the finished record (completed, diverged) it
        started from (``attempts/<n>/``, scheda.runs.reentry.keep_record), which a failure before
        the attempt has built its models and data gives back (:meth:`record_failure`); the run
        sets it to None once they are built."""
        self.path = Path(path)
        self.finished_copy = finished_copy
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
        the original error (a full disk, say) is the one the user sees. A finished run resumed to
        train on whose resume fails before it has built its models and data (its data missing,
        say) gets its finished record back, its fused models' too, this attempt's end noted in
        its ``attempts``: a sweep run again then skips it rather than rerunning a failed job from
        the start."""
        status, error = status_of(exc), f"{type(exc).__name__}: {exc}"
        try:
            if self.finished_copy is not None:
                self._give_back(status, error)
                return
            self.data.update(status=status, error=error)
            self.save()
        except Exception as write_error:  # noqa: BLE001 - the first error matters more
            log.warning("could not record the failure in %s: %s", self.path, write_error)

    def _give_back(self, status: str, error: str) -> None:
        """The finished record copied to ``self.finished_copy`` back in place, the attempt's end noted."""
        attempts = list(self.data.get("attempts") or [])
        if attempts:
            attempts[-1] = {**attempts[-1], "status": status, "error": error}
        run_dir = self.path.parent
        for copy in sorted(self.finished_copy.glob("models/*/results.json")):
            data = copy.read_bytes()
            atomic_write(run_dir / copy.relative_to(self.finished_copy), lambda f, data=data: f.write(data))
        self.data = {**json.loads((self.finished_copy / "results.json").read_text()), "attempts": attempts}
        self.save()

    def save(self) -> None:
        atomic_write_json(self.path, self.data)


# --- names in the directory --------------------------------------------------------------
CHECKPOINT_RE = re.compile(r"^epoch_(\d+)(?:_batch_(\d+))?\.pt$")
# Fine-tuning's own checkpoints: its resumable state, and the frozen-feature classifier it starts
# from (so a resume does not evaluate again). A stand-alone fine-tuning has only these.
FINETUNE_LAST, FINETUNE_INIT = "finetune_last.pt", "finetune_init.pt"


def checkpoint_name(epoch: int, batch: int | None = None) -> str:
    """File name of the checkpoint taken after ``epoch`` completed epochs (and ``batch``
    minibatches of the next one, when an interrupt stopped it there)."""
    return f"epoch_{epoch:05d}.pt" if batch is None else f"epoch_{epoch:05d}_batch_{batch:06d}.pt"


# Why a model stopped training, as results.json's ``stopped_by`` records it.
PATIENCE = "patience"  # the rule: no new best validation error in ``patience`` evaluations
CAP = "cap"  # the rule was on, and had not stopped the model (its last evaluations within patience) by trainer.max_epochs
SCHEDULE = "schedule"  # no rule: it trained its schedule's length


def kept(results: dict[str, Any]) -> dict[str, Any] | None:
    """The evaluation a finished model is reported at: under the rule of training to convergence
    (``stopped_by`` patience or cap) its best on validation, the model the rule keeps (its last
    evaluation is the patience past it); otherwise its last."""
    at = "best" if results.get("stopped_by") in (PATIENCE, CAP) else "last"
    return pick(results.get("evaluations") or [], at)


_REMEMBERED: dict[Path, dict[str, Any]] = {}  # run folder -> its results, as a block's record kept them


def remember_results(runs: Mapping[Path, dict[str, Any]]) -> None:
    """Runs that :func:`read_results` answers for from now on without their folder: those a block's
    record keeps (scheda.protocol.recorded_runs), for a report built from the records alone."""
    _REMEMBERED.update({Path(run).absolute(): results for run, results in runs.items()})


def read_results(run_dir: Path) -> dict[str, Any] | None:
    remembered = _REMEMBERED.get(Path(run_dir).absolute())
    if remembered is not None:
        return remembered
    path = run_dir / "results.json"
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError:  # not JSON, or not even UTF-8 text: cut short or damaged
        log.warning("%s is not valid JSON (cut short or damaged): its run is read as one without results", path)
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
KILLED = "killed"  # read, never written: a run recorded as running whose process is gone


def status_counts(statuses: Iterable[str]) -> str:
    """How many runs stand at each status, as the reports and tables say it ("killed 2, not run 1");
    "" for none."""
    return ", ".join(f"{status} {n}" for status, n in sorted(Counter(statuses).items()))


def run_status(results: Mapping[str, Any], run_dir: Path) -> str:
    """A run's status as its results.json says, but "killed" for one that says "running" while the
    process that held the run (its directory's lock; a fused sweep's model: its run's) has ended on
    this host without recording why (SIGKILL, the OOM killer). Its command resumes it as any stopped run."""
    status = results.get("status", "?")
    holder = run_dir.parent.parent if run_dir.parent.name == "models" else run_dir
    return KILLED if status == "running" and holder_gone(holder) else status


def summarise_sweep(results: RunResults, summaries: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    """A fused sweep's own results.json once its models finished: each model's status, errors
    (:func:`kept`; under the rule, why it stopped and the epoch read) and final loss beside its
    folder (``results.data["models"]``), the best validation error, no evaluations of its own."""
    for entry, summary in zip(results.data["models"], summaries):
        read = kept(summary) or {}
        entry.update(status=summary["status"], val_error=read.get("val_error"), test_error=read.get("test_error"),
                     final_train_loss=summary.get("final_train_loss"), epochs=summary.get("epochs"))
        if summary.get("stopped_by"):
            entry.update(stopped_by=summary["stopped_by"], read_at=read.get("epoch"))
    results.data.update(evaluations=[])
    vals = [e["val_error"] for e in results.data["models"] if e["val_error"] is not None]
    results.update(status="completed", best_val_error=min(vals) if vals else None, seconds=seconds)
    return results.data


def stop_text(results: dict[str, Any]) -> str:
    """Why a model under the rule of training to convergence stopped, for the run's last lines."""
    if results.get("stopped_by") == PATIENCE:
        return ", stopped by patience"
    if results.get("stopped_by") == CAP:
        return ", at its cap: the rule had not stopped it, not converged"
    return ""


def read_at_text(stopped_by: str | None, epoch: int | None) -> str:
    """Which evaluation a line of errors is, under the rule (its best; :func:`kept`); "" without it."""
    return f"best on validation at epoch {epoch}" if stopped_by in (PATIENCE, CAP) else ""


def summary_lines(summary: dict[str, Any], output_dir: Path, loggers: Iterable[Any] = ()) -> list[str]:
    """What a finished run gives and where everything is, on one screen: each model's chosen
    setting and errors, the fine-tuned result, and where its results, checkpoints and each
    logger's records (``logger.where``) are."""
    shown = shown_path(output_dir)
    models = summary.get("models")
    epochs = summary.get("epochs", 0)
    if models:  # a fused sweep: each model's own (they stop apart under the rule)
        each = sorted({m["epochs"] for m in models if m.get("epochs") is not None})
        epochs = (f"{each[0]}" if len(each) == 1 else f"{each[0]}-{each[-1]}") if each else "?"
    trained = (summary.get("plan") or {}).get("trains", True)  # model=raw: the inputs evaluated, no epoch
    lines = [f"done in {summary.get('seconds', 0) / 60:.1f} min ({epochs} epoch{'' if epochs in (1, '1') else 's'}"
             f"{'' if models else stop_text(summary)})" if trained else
             f"done in {summary.get('seconds', 0) / 60:.1f} min (the raw inputs evaluated: nothing trained)"]
    for entry in models or [summary]:
        read = entry if models else kept(summary)
        where = f"  {entry['dir']} {entry['overrides']}: " if models else "  "
        if read and read.get("val_error") is not None:
            chosen = f"{params_text(params_of(read))}, " if params_of(read) else ""
            at = read_at_text(entry.get("stopped_by"), entry.get("read_at")) if models else \
                read_at_text(summary.get("stopped_by"), read["epoch"])
            lines.append(f"{where}{at + ': ' if at else ''}{chosen}val error {100 * read['val_error']:.2f} %, "
                         f"test error {100 * read['test_error']:.2f} %")
        elif models:
            lines.append(f"{where}{entry.get('status')}")
    ft = summary.get("finetune", {}).get("chosen")
    if ft:
        lines.append(f"  fine-tuned: lr {ft['lr']:g}, epoch {ft['best_epoch']}: val error {100 * ft['val_error']:.2f} %, "
                     f"test error {100 * ft['test_error']:.2f} %")
    lines.append(f"  results: {shown}/results.json")
    if (output_dir / "checkpoints").is_dir() or models:
        lines.append(f"  checkpoints: {shown}/{'models/*/' if models else ''}checkpoints/")
    return lines + [f"  {line}" for line in (logger.where(output_dir) for logger in loggers) if line]
