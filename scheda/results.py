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
        from scheda.errors import DivergenceError

        if isinstance(exc, DivergenceError):
            status = "diverged"
        elif isinstance(exc, (KeyboardInterrupt, SystemExit)):
            status = "interrupted"
        else:
            status = "failed"
        self.data.update(status=status, error=f"{type(exc).__name__}: {exc}")
        try:
            self.save()
        except Exception as write_error:  # noqa: BLE001 - the first error matters more
            log.warning("could not record the failure in %s: %s", self.path, write_error)

    def save(self) -> None:
        atomic_write_json(self.path, self.data)
