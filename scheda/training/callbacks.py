"""Callbacks the training loop calls at epoch, stage and interrupt boundaries: here the
checkpoints and the progress bar; evaluation's in scheda.evaluation.evaluate, and the metric
loggers (TensorBoard, CSV, MLflow) in scheda.loggers."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Sequence

from tqdm import tqdm

from scheda.runs.rundir import checkpoint_name, pick
from scheda.training.checkpoint import prune_checkpoints, save_checkpoint
from scheda.training.trainer import Callback, ModelState  # the hooks the loop calls, beside the state they get

__all__ = ["Callback", "CheckpointCallback", "Patience", "ProgressBar",
           "TqdmLoggingHandler", "patience_spent"]

log = logging.getLogger(__name__)


class CheckpointCallback(Callback):
    """Saves a checkpoint at the end of every schedule stage, every ``every`` epochs, and where the
    patience rule stopped the model (its last epoch). With ``keep`` (``trainer.keep_checkpoints``)
    it then removes all but the newest ``keep`` and the one of the best of ``evaluations`` (the
    run's, read after the evaluation callback has added the epoch's). ``saved``, called after each
    checkpoint, lets the run record what a resume from it keeps (its time so far: a run killed
    outright, with no handler, keeps that much)."""

    def __init__(self, directory: str | Path, every: int = 0, keep: int | None = None,
                 evaluations: Sequence[dict[str, Any]] = (), saved: Callable[[], None] | None = None):
        self.directory = Path(directory)
        self.every, self.keep, self.evaluations, self.saved = every, keep, evaluations, saved
        self.last_path: Path | None = None

    def on_epoch_end(self, state, metrics):
        epoch = metrics["epoch"]
        if metrics["stage_end"] or state.converged or (self.every > 0 and epoch % self.every == 0):
            self.last_path = save_checkpoint(self.directory / checkpoint_name(epoch), state.state_dict())
            log.info("checkpoint %s", self.last_path)
            if self.saved is not None:
                self.saved()
            if self.keep is not None:
                best = pick(self.evaluations, "best")
                for path in prune_checkpoints(self.directory, self.keep, best["epoch"] if best else None):
                    log.info("removed checkpoint %s (trainer.keep_checkpoints=%d)", path.name, self.keep)

    def on_interrupt(self, state):
        name = checkpoint_name(state.epoch, state.partial.n_batches)
        self.last_path = save_checkpoint(self.directory / name, state.state_dict())
        log.info("checkpoint %s (interrupted)", self.last_path)




STAGE_EPOCH = "stage_epoch"  # an evaluation's reason: evaluate.stage_epochs (the patience rule does not count it)


def patience_spent(evaluations: Sequence[dict[str, Any]], patience: int, after_epoch: int) -> bool:
    """Whether the last ``patience`` evaluations made after epoch ``after_epoch`` all came after the
    best validation error so far (the earliest on ties): the rule that a model has converged. The
    evaluations a few epochs into a level (``evaluate.stage_epochs``) may be the best, but are not
    counted: the rule's spacing is the periodic evaluations'."""
    if not evaluations:
        return False
    best = min(evaluations, key=lambda e: (e["val_error"], e["epoch"]))
    since = [e for e in evaluations if e["epoch"] > max(best["epoch"], after_epoch) and e.get("reason") != STAGE_EPOCH]
    return len(since) >= patience


class Patience(Callback):
    """Training to convergence (``trainer.patience``): a model stops once ``patience`` evaluations
    in its schedule's last stage have not improved on its best validation error, and not before
    ``min_epochs``. The stages before the last run their length (a ScheDA's levels are the method's).
    It reads the run's evaluations (restored from a checkpoint on resume), so it keeps no state of
    its own: a resumed run decides as the uninterrupted one would. Runs after the evaluation."""

    def __init__(self, evaluations: list[dict[str, Any]], patience: int, min_epochs: int = 0):
        self.evaluations, self.patience, self.min_epochs = evaluations, patience, min_epochs

    def _decide(self, state: ModelState) -> bool:
        # at the cap too: a model whose last evaluations brought nothing new stopped by the rule, not the cap
        return (self.min_epochs <= state.epoch
                and patience_spent(self.evaluations, self.patience, state.schedule.last_stage_start))

    def on_fit_start(self, state):
        state.converged = self._decide(state)

    def on_epoch_end(self, state, metrics):
        state.converged = self._decide(state)
        if state.converged:
            best = min(self.evaluations, key=lambda e: (e["val_error"], e["epoch"]))
            log.info("converged: no new best validation error in %d evaluations (best %.4f at epoch %d); "
                     "stopped at epoch %d of at most %d", self.patience, best["val_error"], best["epoch"],
                     state.epoch, state.schedule.total_epochs)


class TqdmLoggingHandler(logging.StreamHandler):
    """A console log handler that prints above the progress bar instead of through it
    (configs/hydra/default.yaml installs it as Hydra's console handler). Each line is one write,
    flushed at once: the jobs of a parallel sweep share the console, and a line written in two
    pieces (tqdm writes the text, then the newline), or left in a block buffer when the console is
    a pipe or a file, came out cut into another job's line."""

    label = ""  # a parallel sweep's job: "[#1]" before each of its lines (label_console)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tqdm.write(self.label + self.format(record) + self.terminator, file=self.stream, end="")
            self.flush()
        except Exception:  # noqa: BLE001 - logging must never raise
            self.handleError(record)


def label_console(label: str) -> None:
    """Put ``label`` before every console line of this process (its TqdmLoggingHandlers): the jobs
    of a joblib sweep share one console, where an evaluation's line did not say whose it was."""
    loggers = [logging.getLogger(), *(logging.getLogger(name) for name in list(logging.root.manager.loggerDict))]
    for handler in {h for logger in loggers for h in getattr(logger, "handlers", [])}:
        if isinstance(handler, TqdmLoggingHandler):
            handler.label = label


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
