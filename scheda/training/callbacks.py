"""Callbacks the training loop calls at epoch, stage and interrupt boundaries: here the
checkpoints and the progress bar; evaluation's in scheda.evaluation.evaluate, and the metric
loggers (TensorBoard, CSV, MLflow) in scheda.loggers."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from scheda.runs.rundir import checkpoint_name
from scheda.training.checkpoint import save_checkpoint

if TYPE_CHECKING:  # the loop calls the callbacks; they sit beside it, not above it
    from scheda.training.trainer import ModelState

log = logging.getLogger(__name__)


class Callback:
    """Hooks the loop calls with one model's state (scheda.training.trainer.ModelState); ``epoch``
    in ``metrics`` counts completed epochs (1 after the first)."""

    def on_fit_start(self, state: "ModelState") -> None: ...

    def on_epoch_end(self, state: "ModelState", metrics: dict[str, Any]) -> None: ...

    def on_stage_end(self, state: "ModelState", metrics: dict[str, Any]) -> None: ...

    def on_fit_end(self, state: "ModelState") -> None: ...

    def on_interrupt(self, state: "ModelState") -> None:
        """A signal stopped training mid-epoch (``state.partial`` says where)."""

    def close(self) -> None:
        """Release resources; called even when training fails."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class CheckpointCallback(Callback):
    """Saves a checkpoint at the end of every schedule stage and every ``every`` epochs."""

    def __init__(self, directory: str | Path, every: int = 0):
        self.directory = Path(directory)
        self.every = every
        self.last_path: Path | None = None

    def on_epoch_end(self, state, metrics):
        epoch = metrics["epoch"]
        if metrics["stage_end"] or (self.every > 0 and epoch % self.every == 0):
            self.last_path = save_checkpoint(self.directory / checkpoint_name(epoch), state.state_dict())
            log.info("checkpoint %s", self.last_path)

    def on_interrupt(self, state):
        name = checkpoint_name(state.epoch, state.partial.n_batches)
        self.last_path = save_checkpoint(self.directory / name, state.state_dict())
        log.info("checkpoint %s (interrupted)", self.last_path)


class TqdmLoggingHandler(logging.StreamHandler):
    """A console log handler that prints above the progress bar instead of through it
    (configs/hydra/default.yaml installs it as Hydra's console handler)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tqdm.write(self.format(record), file=self.stream)
        except Exception:  # noqa: BLE001 - logging must never raise
            self.handleError(record)


class ProgressBar(Callback):
    """One bar per run over every example of every epoch: examples/s and the time left, with
    the epoch, nu and loss beside it; ticks after each minibatch (off when not a terminal)."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.bar = None
        self.total_epochs = 0

    def on_fit_start(self, state):
        from scheda.utils.progress import bar

        n = state.train_x.shape[0]
        self.total_epochs = state.schedule.total_epochs
        self.bar = bar(self.total_epochs * n, "train", "ex", self.enabled, initial=state.epoch * n, unit_scale=True)
        if not self.bar.disable:
            state.on_batch = self.bar.update

    def on_epoch_end(self, state, metrics):
        if self.bar is not None:
            nu = metrics["nu"]
            self.bar.set_postfix(epoch=f"{metrics['epoch']}/{self.total_epochs}", nu=f"{nu:.3g}",
                                 loss=f"{metrics['loss']:.2f}", refresh=False)

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None
