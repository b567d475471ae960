"""TensorBoard logging inside the run directory: per-epoch scalars, filter images at each
stage end, and each run's hyper-parameters for the HParams table.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from scheda.callbacks import Callback
from scheda.config import Component, register
from scheda.schedule import NoiseSchedule


@register("logger")
@dataclass
class TensorBoardConfig(Component):
    name: str = "tensorboard"
    log_dir: str = "tensorboard"  # inside the run directory
    n_filters: int = 100  # filters shown as images at each stage end

    def check(self) -> None:
        if self.n_filters < 0:
            raise self.invalid("n_filters", "must be >= 0")

    def build(self, run_dir: Path, hparams: dict[str, Any], data, purge_step: int | None) -> "TensorBoardLogger":
        return TensorBoardLogger(Path(run_dir) / self.log_dir, hparams, data.image_shape, self.n_filters,
                                 vocabulary=data.vocabulary, purge_step=purge_step)


@register("logger")
@dataclass
class NoLoggerConfig(Component):
    """No TensorBoard: results.json and train.log only."""

    name: str = "none"

    def build(self, run_dir, hparams, data, purge_step) -> None:
        return None


def normalised_filters(W: torch.Tensor, image_shape: tuple[int, int, int]) -> np.ndarray:
    """Rows of W as [n, H, W, C] images in [0, 1], each normalised to its own range."""
    w = W.detach().float().cpu()
    lo, hi = w.min(1, keepdim=True).values, w.max(1, keepdim=True).values
    w = (w - lo) / (hi - lo).clamp_min(1e-12)
    return w.reshape(-1, *image_shape).permute(0, 2, 3, 1).numpy()


def filter_grid(W: torch.Tensor, image_shape: tuple[int, int, int], n: int | None = None,
                padding: int = 1) -> np.ndarray:
    """The first ``n`` rows of W tiled as one [H, W, C] image in [0, 1] (a square grid, white
    between filters), for TensorBoard and the figures alike."""
    images = normalised_filters(W[:n] if n else W, image_shape)
    h, w, c = images.shape[1:]
    side = int(np.ceil(np.sqrt(images.shape[0])))
    rows = int(np.ceil(images.shape[0] / side))
    grid = np.ones((rows * (h + padding) - padding, side * (w + padding) - padding, c), dtype=np.float32)
    for i, img in enumerate(images):
        r, q = divmod(i, side)
        grid[r * (h + padding):r * (h + padding) + h, q * (w + padding):q * (w + padding) + w] = img
    return grid




def top_words(filters: torch.Tensor, vocabulary: list[str], n_units: int = 100, k: int = 10) -> str:
    """A markdown table: for each of the first ``n_units`` hidden units, the ``k`` input words
    with the largest weights (what a text filter responds to)."""
    w = filters[:n_units].detach().float().cpu()
    top = torch.topk(w, min(k, w.shape[1]), dim=1).indices
    rows = [f"| {i} | {', '.join(vocabulary[j] for j in row.tolist())} |" for i, row in enumerate(top)]
    return "| unit | top words |\n|---|---|\n" + "\n".join(rows)


def hparams(run: Any, seed: int, schedule: NoiseSchedule) -> dict[str, Any]:
    """The settings the HParams table compares, named by their config keys: the schedule's own
    (a constant schedule has no K; a list of stages gives its first and last nu), the model's
    hidden units, lr, the noise, the seed and the epochs. No run writes the experiment summary:
    TensorBoard then builds it from every run and lists first the keys whose values differ (a
    sweep's), which its table shows without a click."""
    out: dict[str, Any] = {"schedule": run.schedule.name}
    values = {f.name: getattr(run.schedule, f.name) for f in dataclasses.fields(run.schedule) if f.name != "name"}
    out.update({f"schedule.{k}": v for k, v in values.items() if isinstance(v, (bool, int, float, str))})
    fixed = [s.nu for s in schedule.stages if s.nu is not None]
    if fixed and any(isinstance(v, (list, tuple)) for v in values.values()):
        out.update({"schedule.nu_first": fixed[0], "schedule.nu_last": fixed[-1]})
    out.update({"model.hidden": int(run.model.hidden), "optim.lr": float(run.optim.lr), "noise": run.noise.name,
                "seed": int(seed), "epochs": schedule.total_epochs})
    return out


class TensorBoardLogger(Callback):
    def __init__(self, log_dir: str | Path, hparams: dict[str, Any],
                 image_shape: tuple[int, int, int] | None, n_filters: int = 100,
                 vocabulary: list[str] | None = None, purge_step: int | None = None):
        self.log_dir = Path(log_dir)
        self.purge_step = purge_step  # a resumed run drops what it logged after its checkpoint
        self.hparams = hparams
        self.image_shape = image_shape
        self.n_filters = n_filters
        self.vocabulary = vocabulary
        self.writer = None
        self.switches_logged = 0

    def on_fit_start(self, trainer):
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams as hparams_summaries

        self.writer = SummaryWriter(str(self.log_dir), purge_step=self.purge_step)
        # The run's session records only, in its own event file: an experiment summary per run
        # would make TensorBoard take one run's (where nothing differs, so the table's columns are
        # the first keys by name); and no one-point hparam/* charts in Scalars (add_hparams writes those).
        _, session_start, session_end = hparams_summaries(self.hparams, {})
        for summary in (session_start, session_end):
            self.writer.file_writer.add_summary(summary)
        self.switches_logged = len(trainer.switches)

    def on_epoch_end(self, trainer, metrics):
        step = metrics["epoch"]
        self.writer.add_scalar("train/reconstruction_ce", metrics["loss"], step)
        self.writer.add_scalar("train/nu", metrics["nu"], step)
        self.writer.add_scalar("time/epoch_seconds", metrics["seconds"], step)
        for switch in trainer.switches[self.switches_logged:]:  # where the noise level changed
            if switch["nu"] is not None:
                self.writer.add_scalar("schedule/nu_at_switch", switch["nu"], switch["epoch"])
                self.writer.add_text("schedule/switches", f"after epoch {switch['epoch']}: nu = {switch['nu']:g}",
                                     switch["epoch"])
        self.switches_logged = len(trainer.switches)

    def on_stage_end(self, trainer, metrics):
        if self.image_shape is not None and self.n_filters > 0:
            grid = filter_grid(trainer.model.filters(), self.image_shape, self.n_filters)
            self.writer.add_image("filters", grid, metrics["epoch"], dataformats="HWC")
        if self.vocabulary is not None and self.n_filters > 0:
            text = top_words(trainer.model.filters(), self.vocabulary, self.n_filters)
            self.writer.add_text("filters/top_words", text, metrics["epoch"])

    def close(self):
        if self.writer is not None:
            self.writer.close()
            self.writer = None
