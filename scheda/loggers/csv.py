"""``logger=csv``: every scalar a run logs as a row of ``metrics.csv`` in its run directory
(``name,epoch,value,time``), readable without TensorBoard: ``scheda-results --metric NAME``
reads it, and so does ``pandas.read_csv(...).pivot_table(index="epoch", columns="name")``."""

from __future__ import annotations

import csv
import io
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheda.config import register
from scheda.utils.io import atomic_write, shown_path
from scheda.loggers.base import GROUP, LoggerConfig, MetricLogger
from scheda.runs.rundir import METRICS_HEADER as HEADER

FINETUNE = "finetune/"  # fine-tuning's own epochs: a resumed training run keeps them


@register(GROUP)
@dataclass
class CSVConfig(LoggerConfig):
    name: str = "csv"
    file: str = "metrics.csv"  # inside the run directory

    def check(self) -> None:
        if not self.file or Path(self.file).is_absolute() or ".." in Path(self.file).parts:
            raise self.invalid("file", "must be a file name inside the run directory")

    def where(self, run_dir: Path) -> str | None:
        """The run's own file, or its models' (a fused sweep); an earlier attempt's (attempts/) is not this run's."""
        own = run_dir / self.file
        if own.exists():
            shown = shown_path(own)
        elif any((run_dir / "models").glob(f"*/{self.file}")):
            shown = f"{shown_path(run_dir)}/models/*/{self.file}"
        else:
            return None
        return f"metrics: {shown} (scheda-results --metric NAME)"

    def build(self, run_dir: Path, purge_epoch: int | None) -> "CSVLogger":
        return CSVLogger(Path(run_dir) / self.file, purge_epoch=purge_epoch)


class CSVLogger(MetricLogger):
    """Appends one row per scalar and flushes each epoch's rows, so a killed run keeps them."""

    def __init__(self, path: str | Path, purge_epoch: int | None = None):
        self.path = Path(path)
        self.purge_epoch = purge_epoch
        self._file = None
        self._writer: Any = None

    def _open(self):
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.purge_epoch is not None and self.path.exists():
                self._purge(self.purge_epoch)
            new = not self.path.exists() or self.path.stat().st_size == 0
            self._file = open(self.path, "a", newline="")
            self._writer = csv.writer(self._file)
            if new:
                self._writer.writerow(HEADER)
        return self._writer

    def _purge(self, epoch: int) -> None:
        """Drop the training rows from ``epoch`` on (logged after the checkpoint a run resumes), atomically."""
        with open(self.path, newline="") as f:
            rows = list(csv.reader(f))
        kept = [HEADER] + [r for r in rows[1:] if len(r) == len(HEADER) and
                           (r[0].startswith(FINETUNE) or _epoch(r[1]) < epoch)]

        text = io.StringIO()
        csv.writer(text).writerows(kept)
        atomic_write(self.path, lambda out: out.write(text.getvalue().encode()))

    def log(self, name, value, epoch):
        self.log_dict({name: value}, epoch)

    def log_dict(self, payload, epoch):
        writer, now = self._open(), f"{time.time():.3f}"
        for name, value in payload.items():
            value = float(value)
            writer.writerow([name, int(epoch), repr(value) if math.isfinite(value) else str(value), now])
        self._file.flush()

    def close(self, status: str = "completed") -> None:
        if self._file is not None:
            self._file.close()
            self._file, self._writer = None, None


def _epoch(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return -1
