"""What every metric logger is, and what a run logs through it.

A backend implements :class:`MetricLogger` (the four methods torchtune's metric loggers share:
``log``, ``log_dict``, ``log_config``, ``close``; images and text are optional, and a backend
without them ignores them). ``logger=[tensorboard,csv]`` selects several: :class:`Loggers`
sends each call to all of them, and :class:`LoggingCallback` is the one place that says what
the loop logs (loss, nu, epoch time, where nu changed, filters at each stage end). Evaluation
and fine-tuning call the same interface; only the backend modules know their library.
"""

from __future__ import annotations

import abc
import logging
import dataclasses
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from scheda.training.callbacks import Callback
from scheda.config import Component, register
from scheda.model.schedule import NoiseSchedule
from scheda.runs.rundir import kept, status_of
from scheda.utils.lazy import lazy

torch = lazy("torch", globals())

log = logging.getLogger(__name__)

GROUP = "logger"


class MetricLogger(abc.ABC):
    """One backend. Steps are epochs (fine-tuning: its own epochs, under ``finetune/``)."""

    @abc.abstractmethod
    def log(self, name: str, value: float, epoch: int) -> None:
        """One scalar; a backend that has no other method has all it needs."""

    def log_dict(self, payload: Mapping[str, float], epoch: int) -> None:
        for name, value in payload.items():
            self.log(name, value, epoch)

    def log_config(self, config: Mapping[str, Any]) -> None:
        """The run's hyper-parameters (:func:`hparams`), once a training start."""

    def log_image(self, name: str, image: np.ndarray, epoch: int) -> None:
        """An [H, W, C] image in [0, 1]; a backend without images ignores it."""

    def log_text(self, name: str, text: str, epoch: int) -> None:
        """Markdown; a backend without text ignores it."""

    def log_reported(self, results: Mapping[str, Any]) -> None:
        """The evaluation a finished run reports (under the patience rule its best, rundir.kept) as
        ``reported/val_error`` and ``reported/test_error`` at its epoch: TensorBoard's HParams and
        MLflow's run tables show a scalar's last value, which for eval/val_error is the patience past it."""
        read = kept(results)
        if read is not None:
            self.log_dict({"reported/val_error": read["val_error"], "reported/test_error": read["test_error"]},
                          read["epoch"])

    def close(self, status: str = "completed") -> None:
        """Flush and release; ``status`` is the run's (completed, failed, interrupted)."""


class LoggerConfig(Component, abc.ABC):
    """Base of a logger's schema: builds its backend for one run directory."""

    @abc.abstractmethod
    def build(self, run_dir: Path, purge_epoch: int | None) -> MetricLogger:
        """The backend writing this run's records (``purge_epoch``: see :func:`build_loggers`)."""

    def where(self, run_dir: Path) -> str | None:
        """Where a finished run's records are, as its last lines say it (None: nothing to say)."""
        return None

    @classmethod
    def label(cls, node: Any, label: str) -> None:
        """Name this run's records within a sweep (``label``: its swept values), in ``node`` (a copy of
        its typed config, the plan's: scheda.planning.plan.labelled); a backend whose records live in
        the run directory needs nothing."""


class Loggers(MetricLogger):
    """Several backends as one (none at all with ``logger=none``)."""

    def __init__(self, loggers: Sequence[MetricLogger] = ()):
        self.loggers = list(loggers)

    def __bool__(self) -> bool:
        return bool(self.loggers)

    def log(self, name, value, epoch):
        for lg in self.loggers:
            lg.log(name, value, epoch)

    def log_dict(self, payload, epoch):
        for lg in self.loggers:
            lg.log_dict(payload, epoch)

    def log_config(self, config):
        for lg in self.loggers:
            lg.log_config(config)

    def log_image(self, name, image, epoch):
        for lg in self.loggers:
            lg.log_image(name, image, epoch)

    def log_text(self, name, text, epoch):
        for lg in self.loggers:
            lg.log_text(name, text, epoch)

    def close(self, status: str = "completed") -> None:
        """Close every backend, even when one of them fails (the first failure is raised after)."""
        loggers, self.loggers = self.loggers, []
        error = None
        for lg in loggers:
            try:
                lg.close(status)
            except Exception as exc:  # noqa: BLE001 - the others still close
                error = error or exc
        if error is not None:
            raise error

    def close_stopped(self, exc: BaseException) -> None:
        """Close with the status ``exc`` gives a run (failed, diverged, interrupted: a backend
        records it), never raising: the run's own error is the one to report."""
        try:
            self.close(status_of(exc))
        except Exception as error:  # noqa: BLE001 - the run's own error is the one to report
            log.warning("closing the loggers failed: %s", error)


@register(GROUP)
@dataclasses.dataclass
class NoLoggerConfig(LoggerConfig):
    """``logger=none``: results.json and train.log only (the same as ``logger=[]``)."""

    name: str = "none"

    def build(self, run_dir: Path, purge_epoch: int | None) -> "Loggers":
        return Loggers()


def build_loggers(configs: Sequence[LoggerConfig], run_dir: Path, purge_epoch: int | None = None) -> Loggers:
    """Every selected backend for ``run_dir``; ``purge_epoch``: a resumed run drops what it
    logged from that epoch on (it logs those epochs again)."""
    return Loggers([cfg.build(Path(run_dir), purge_epoch) for cfg in configs])


class LoggingCallback(Callback):
    """What the training loop logs: the run's hyper-parameters at the start, per epoch the
    reconstruction loss, nu and the epoch's time, each change of nu, and at each stage end the
    first ``n_filters`` filters (images for image data, top words for text)."""

    def __init__(self, loggers: MetricLogger, hparams: dict[str, Any], image_shape: tuple[int, int, int] | None,
                 vocabulary: list[str] | None = None, n_filters: int = 100):
        self.loggers, self.hparams = loggers, hparams
        self.image_shape, self.vocabulary, self.n_filters = image_shape, vocabulary, n_filters
        self.switches_logged = 0

    def on_fit_start(self, state):
        self.loggers.log_config(self.hparams)
        self.switches_logged = len(state.switches)

    def on_epoch_end(self, state, metrics):
        self.loggers.log_dict({"train/reconstruction_ce": metrics["loss"], "train/nu": metrics["nu"],
                               "time/epoch_seconds": metrics["seconds"]}, metrics["epoch"])
        for switch in state.switches[self.switches_logged:]:  # where the noise level changed
            if switch["nu"] is not None:
                self.loggers.log("schedule/nu_at_switch", switch["nu"], switch["epoch"])
                self.loggers.log_text("schedule/switches", f"after epoch {switch['epoch']}: nu = {switch['nu']:g}",
                                      switch["epoch"])
        self.switches_logged = len(state.switches)

    def on_stage_end(self, state, metrics):
        if self.n_filters <= 0:
            return
        if self.image_shape is not None:
            self.loggers.log_image("filters", filter_grid(state.model.filters(), self.image_shape, self.n_filters),
                                   metrics["epoch"])
        if self.vocabulary is not None:
            self.loggers.log_text("filters/top_words", top_words(state.model.filters(), self.vocabulary,
                                                                 self.n_filters), metrics["epoch"])


def normalised_filters(W: torch.Tensor, image_shape: tuple[int, int, int]) -> np.ndarray:
    """Rows of W as [n, H, W, C] images in [0, 1], each normalised to its own range."""
    w = W.detach().float().cpu()
    lo, hi = w.min(1, keepdim=True).values, w.max(1, keepdim=True).values
    w = (w - lo) / (hi - lo).clamp_min(1e-12)
    return w.reshape(-1, *image_shape).permute(0, 2, 3, 1).numpy()


def filter_grid(W: torch.Tensor, image_shape: tuple[int, int, int], n: int | None = None,
                padding: int = 1) -> np.ndarray:
    """The first ``n`` rows of W tiled as one [H, W, C] image in [0, 1] (a square grid, white
    between filters), for the loggers and the figures alike."""
    images = normalised_filters(W[:n] if n else W, image_shape)
    h, w, c = images.shape[1:]
    side = int(np.ceil(np.sqrt(images.shape[0])))
    rows = int(np.ceil(images.shape[0] / side))
    grid = np.ones((rows * (h + padding) - padding, side * (w + padding) - padding, c), dtype=np.float32)
    for i, img in enumerate(images):
        r, q = divmod(i, side)
        grid[r * (h + padding):r * (h + padding) + h, q * (w + padding):q * (w + padding) + w] = img
    return grid


def top_words(filters: torch.Tensor, vocabulary: list[str], n_units: int = 100, k: int = 10,
              units: list[int] | None = None) -> str:
    """A markdown table: for each of the first ``n_units`` hidden units, the ``k`` input words
    with the largest weights (what a text filter responds to); ``units``: the rows' unit numbers
    when ``filters`` is a sample of them."""
    w = filters[:n_units].detach().float().cpu()
    top = torch.topk(w, min(k, w.shape[1]), dim=1).indices
    names = units if units is not None else range(len(top))
    rows = [f"| {u} | {', '.join(vocabulary[j] for j in row.tolist())} |" for u, row in zip(names, top)]
    return "| unit | top words |\n|---|---|\n" + "\n".join(rows)


def hparams(run: Any, seed: int, schedule: NoiseSchedule) -> dict[str, Any]:
    """The settings a run's hyper-parameter table compares, named by their config keys: the
    schedule's own (a constant schedule has no K; a list of stages gives its first and last nu),
    the model's hidden units, lr, the noise, the seed and the epochs."""
    out: dict[str, Any] = {"schedule": run.schedule.name}
    values = {f.name: getattr(run.schedule, f.name) for f in dataclasses.fields(run.schedule) if f.name != "name"}
    out.update({f"schedule.{k}": v for k, v in values.items() if isinstance(v, (bool, int, float, str))})
    fixed = [s.nu for s in schedule.stages if s.nu is not None]
    if fixed and any(isinstance(v, (list, tuple)) for v in values.values()):
        out.update({"schedule.nu_first": fixed[0], "schedule.nu_last": fixed[-1]})
    out.update({"model.hidden": int(run.model.hidden), "optim.lr": float(run.optim.lr), "noise": run.noise.name,
                "seed": int(seed), "epochs": schedule.total_epochs})
    return out
