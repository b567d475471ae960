"""results.json: one file per run with its status, training history and every evaluation,
rewritten atomically whenever something is added, so a finished evaluation is never lost."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from scheda.io import atomic_write_json

log = logging.getLogger(__name__)


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
