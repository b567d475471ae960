"""TensorBoard logging inside the run directory: per-epoch scalars, filter images at each
stage end, and hparams with the same keys in every run (so runs compare in the HParams tab).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from scheda.analysis import filter_grid
from scheda.callbacks import Callback
from scheda.schedule import NoiseSchedule


def top_words(filters: torch.Tensor, vocabulary: list[str], n_units: int = 100, k: int = 10) -> str:
    """A markdown table: for each of the first ``n_units`` hidden units, the ``k`` input words
    with the largest weights (what a text filter responds to)."""
    w = filters[:n_units].detach().float().cpu()
    top = torch.topk(w, min(k, w.shape[1]), dim=1).indices
    rows = [f"| {i} | {', '.join(vocabulary[j] for j in row.tolist())} |" for i, row in enumerate(top)]
    return "| unit | top words |\n|---|---|\n" + "\n".join(rows)


def hparams(cfg: Mapping, schedule: NoiseSchedule) -> dict[str, Any]:
    """A fixed set of keys, meaningful for every schedule (nan where a run has no value)."""
    fixed = [s.nu for s in schedule.stages if s.nu is not None]
    return {
        "dataset": str(cfg["dataset"]["name"]),
        "model/hidden": int(cfg["model"]["hidden"]),
        "model/activation": str(cfg["model"]["activation"]),
        "model/loss": str(cfg["model"]["loss"]),
        "noise": str(cfg["noise"]["name"]),
        "schedule": str(cfg["schedule"]["name"]),
        "schedule/nu_first": fixed[0] if fixed else math.nan,
        "schedule/nu_last": fixed[-1] if fixed else math.nan,
        "schedule/stages": len(schedule.stages),
        "epochs": schedule.total_epochs,
        "optim/lr": float(cfg["optim"]["lr"]),
        "optim/momentum": float(cfg["optim"]["momentum"]),
        "trainer/batch_size": int(cfg["trainer"]["batch_size"]),
        "seed": int(cfg["seed"]),
        "init_from": str(cfg.get("init_from") or ""),
    }


class TensorBoardLogger(Callback):
    def __init__(self, log_dir: str | Path, hparams: dict[str, Any],
                 image_shape: tuple[int, int, int] | None, n_filters: int = 100,
                 final_metrics: Callable[[], dict[str, float]] | None = None,
                 vocabulary: list[str] | None = None, purge_step: int | None = None):
        self.log_dir = Path(log_dir)
        self.purge_step = purge_step  # a resumed run drops what it logged after its checkpoint
        self.hparams = hparams
        self.image_shape = image_shape
        self.n_filters = n_filters
        self.final_metrics = final_metrics
        self.vocabulary = vocabulary
        self.writer = None
        self.last_loss = math.nan

    def on_fit_start(self, trainer):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(self.log_dir), purge_step=self.purge_step)

    def on_epoch_end(self, trainer, metrics):
        step = metrics["epoch"]
        self.writer.add_scalar("train/reconstruction_ce", metrics["loss"], step)
        self.writer.add_scalar("train/nu", metrics["nu"], step)
        self.writer.add_scalar("time/epoch_seconds", metrics["seconds"], step)
        self.last_loss = metrics["loss"]

    def on_stage_end(self, trainer, metrics):
        if self.image_shape is not None and self.n_filters > 0:
            grid = filter_grid(trainer.model.filters(), self.image_shape, self.n_filters)
            self.writer.add_image("filters", grid, metrics["epoch"], dataformats="HWC")
        if self.vocabulary is not None and self.n_filters > 0:
            text = top_words(trainer.model.filters(), self.vocabulary, self.n_filters)
            self.writer.add_text("filters/top_words", text, metrics["epoch"])

    def on_fit_end(self, trainer):
        metrics = self.final_metrics() if self.final_metrics else {}
        metrics["hparam/train_reconstruction_ce"] = self.last_loss
        self.writer.add_hparams(self.hparams, metrics, run_name=".")

    def close(self):
        if self.writer is not None:
            self.writer.close()
            self.writer = None
