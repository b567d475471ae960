"""results.json: one file per run with its status, training history and every evaluation,
rewritten atomically whenever something is added, so a finished evaluation is never lost."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping

from scheda.io import atomic_write_json

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
    from scheda.errors import DivergenceError

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
