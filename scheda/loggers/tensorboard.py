"""``logger=tensorboard``: event files inside the run directory (``tensorboard --logdir`` on a
run or a whole sweep), with each run's hyper-parameters for TensorBoard's HParams table."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from scheda.config import register
from scheda.loggers.base import GROUP, LoggerConfig, MetricLogger
from scheda.utils.io import shown_path


@register(GROUP)
@dataclass
class TensorBoardConfig(LoggerConfig):
    name: str = "tensorboard"
    log_dir: str = "tensorboard"  # inside the run directory
    n_filters: int = 100  # filters shown as images (top words for text) at each stage end

    def check(self) -> None:
        if self.n_filters < 0:
            raise self.invalid("n_filters", "must be >= 0")

    def build(self, run_dir: Path, purge_epoch: int | None) -> "TensorBoardLogger":
        return TensorBoardLogger(Path(run_dir) / self.log_dir, purge_epoch=purge_epoch)

    def where(self, run_dir: Path) -> str | None:
        root = Path(self.log_dir).parts[0]
        return f"curves: tensorboard --logdir {shown_path(run_dir)}" if any(run_dir.glob(f"**/{root}")) else None

    @classmethod
    def label(cls, node, label: str) -> None:
        """TensorBoard names each run by its folder: a sweep's curves by their swept values, not job numbers."""
        node.log_dir = f"{node.get('log_dir', cls.log_dir)}/{label}"


class TensorBoardLogger(MetricLogger):
    """One SummaryWriter, opened at the first record (a run that fails its checks writes no event file)."""

    def __init__(self, log_dir: str | Path, purge_epoch: int | None = None):
        self.log_dir = Path(log_dir)
        self.purge_epoch = purge_epoch  # a resumed run drops what it logged after its checkpoint
        self._writer = None

    @property
    def writer(self):
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self.log_dir), purge_step=self.purge_epoch)
        return self._writer

    def log(self, name, value, epoch):
        self.writer.add_scalar(name, value, epoch)

    def log_config(self, config):
        from torch.utils.tensorboard.summary import hparams as hparams_summaries

        # The run's session records only: an experiment summary per run would make TensorBoard
        # take one run's (where nothing differs); with none, TensorBoard builds it from every run
        # and lists first the keys whose values differ (a sweep's). add_hparams would also draw
        # one-point hparam/* charts in Scalars.
        _, session_start, session_end = hparams_summaries(dict(config), {})
        for summary in (session_start, session_end):
            self.writer.file_writer.add_summary(summary)

    def log_image(self, name, image, epoch):
        self.writer.add_image(name, image, epoch, dataformats="HWC")

    def log_text(self, name, text, epoch):
        self.writer.add_text(name, text, epoch)

    def close(self, status: str = "completed") -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
