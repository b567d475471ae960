"""One model's result as a table keeps it: a typed row, read from its run folder by one function
(``from_run``) and kept in a block's record as small JSON (``to_json``/``from_json``), so that a
report reads the same row whether the run folder is here or only the record is.

A row holds every evaluation (its epoch, nu, why it was made, its errors) and each epoch's loss,
so that a report can read the run under any rule fixed before it ran (``Row.read``):

* ``best``: the evaluation of lowest validation error (the earliest on ties);
* ``paper``: ScheDA as the paper reads it: the last epoch of each level (``stage_end``), the level
  chosen on validation;
* ``last``: its last evaluation.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Iterable

from scheda.runs.rundir import FINAL_STATUSES, checkpoint_name, params_of, read_results

STAGE_END = "stage_end"  # the reason of a level's last evaluation
RULES = ("best", "paper", "last")


@dataclass(frozen=True)
class Evaluation:
    """One evaluation of a run: its epoch, the nu it trained at, why it was made (every, stage, stage_end),
    the classifier's setting it chose on validation and whether that is the edge of its grid (None: not
    recorded, a record written before rows kept it)."""

    epoch: int
    nu: float | None
    reason: str | None
    val_error: float
    test_error: float
    params: dict[str, float] | None = None
    at_edge: bool | None = None

    def to_json(self) -> dict[str, Any]:
        """As a record keeps it: the classifier's choice only where it was recorded."""
        return {k: v for k, v in asdict(self).items() if v is not None or k not in ("params", "at_edge")}

    @classmethod
    def from_results(cls, e: dict[str, Any]) -> Evaluation:
        """From an evaluation of a run's results.json (or a grid table's record of one)."""
        return cls(e["epoch"], e.get("nu"), e.get("reason"), e["val_error"], e["test_error"], params_of(e) or None,
                   e.get("at_edge"))


def best_of(evaluations: Iterable[Evaluation]) -> Evaluation | None:
    """The evaluation of lowest validation error, the earliest on ties (None for none)."""
    return min(evaluations, key=lambda v: (v.val_error, v.epoch), default=None)


@dataclass(frozen=True)
class Epoch:
    """One epoch's mean training loss and the nu it trained at."""

    epoch: int
    loss: float
    nu: float | None

    @classmethod
    def from_results(cls, h: dict[str, Any]) -> Epoch:
        """From an epoch of a run's history (results.json, or a grid table's record of it)."""
        return cls(h["epoch"], h["loss"], h.get("nu"))


@dataclass(frozen=True)
class Row:
    """A finished run: read at its best validation epoch (``epoch``, ``val_error``, ``test_error``),
    why it stopped (``stopped_by``: patience, cap or schedule) after ``epochs_trained`` epochs, every
    evaluation and each epoch's loss. ``checkpoint``: its best epoch's checkpoint on this machine
    (a continuation's start), never kept in a record."""

    job: str
    epoch: int
    val_error: float
    test_error: float
    stopped_by: str | None
    epochs_trained: int | None
    evaluations: tuple[Evaluation, ...]
    history: tuple[Epoch, ...] = ()
    checkpoint: Path | None = None

    def read(self, rule: str) -> Evaluation | None:
        """The evaluation the run is read at under ``rule`` (best, paper, last); None where the rule
        finds none (``paper`` on a run with no level's end)."""
        evals: Iterable[Evaluation] = self.evaluations
        if rule == "paper":
            evals = [v for v in evals if v.reason == STAGE_END]
        elif rule == "last":
            evals = self.evaluations[-1:]
        elif rule != "best":
            raise ValueError(f"no reading {rule!r}: one of {', '.join(RULES)}")
        return best_of(evals)

    def loss_at(self, epoch: int) -> float | None:
        return next((h.loss for h in self.history if h.epoch == epoch), None)

    def nu_at(self, epoch: int) -> float | None:
        """The nu it trained at in ``epoch`` (None where its history does not say)."""
        return next((h.nu for h in self.history if h.epoch == epoch), None)

    def to_json(self) -> dict[str, Any]:
        """The row as a record keeps it (no checkpoint path: it names this machine's files)."""
        out = asdict(self)
        out.pop("checkpoint")
        return {**out, "evaluations": [v.to_json() for v in self.evaluations], "history": list(out["history"])}

    @classmethod
    def from_json(cls, kept: dict[str, Any], checkpoint: Path | None = None) -> Row:
        return cls(kept["job"], kept["epoch"], kept["val_error"], kept["test_error"], kept.get("stopped_by"),
                   kept.get("epochs_trained"), tuple(Evaluation(**v) for v in kept["evaluations"]),
                   tuple(Epoch(**h) for h in kept.get("history", ())), checkpoint)


def from_run(run: Path) -> Row | None:
    """The row of the run in folder ``run`` (its name the job's); None while it has not finished or
    has no evaluation."""
    results = read_results(run)
    if not results or results.get("status") not in FINAL_STATUSES or not results.get("evaluations"):
        return None
    evaluations = tuple(Evaluation.from_results(e) for e in results["evaluations"])
    best = best_of(evaluations)
    ckpt = run / "checkpoints" / checkpoint_name(best.epoch)
    return Row(run.name, best.epoch, best.val_error, best.test_error, results.get("stopped_by"),
               results.get("epochs"), evaluations,
               tuple(Epoch.from_results(h) for h in results.get("history", ())), ckpt if ckpt.exists() else None)


def from_entry(entry: dict[str, Any]) -> Row:
    """A row from a selected entry as the grid tables' records keep it (scheda.protocol.kinds: its
    epoch, errors and stopping, its run's evaluations and history under ``results``; the classifier's
    choice only of the epoch it is read at: ``params`` and ``edge``)."""
    results = entry.get("results") or {}

    def evaluation(e: dict[str, Any]) -> Evaluation:
        v = Evaluation.from_results(e)
        if v.epoch != entry["epoch"] or "params" not in entry:
            return v
        return replace(v, params=dict(entry["params"]), at_edge=(entry["edge"] is not None) if "edge" in entry else None)

    return Row(entry["job"], entry["epoch"], entry["val_error"], entry["test_error"], entry.get("stopped_by"),
               entry.get("epochs_trained"), tuple(evaluation(e) for e in results.get("evaluations", ())),
               tuple(Epoch.from_results(h) for h in results.get("history", ())))


Rows = dict[str, dict[str, Row | None]]  # seed -> model -> row (None: not finished)


def to_record(rows: Rows) -> dict[str, dict[str, Any]] | None:
    """``rows`` as a record keeps them; None while any has not finished."""
    if any(row is None for by_model in rows.values() for row in by_model.values()):
        return None
    return {seed: {model: row.to_json() for model, row in by_model.items() if row is not None}
            for seed, by_model in rows.items()}


def from_record(kept: dict[str, dict[str, Any]]) -> Rows:
    return {seed: {model: Row.from_json(row) for model, row in by_model.items()} for seed, by_model in kept.items()}
