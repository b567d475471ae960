"""The training loop: plain minibatch SGD over one tensor of training data on the device.

Each epoch draws a permutation from the run's generator and slices minibatches from it, so
there is no per-sample Python in the hot loop, and a seed (plus a checkpoint's generator
state on resume) fixes every permutation and corruption.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Sequence

import torch

from scheda.callbacks import Callback, ScheduleCallback
from scheda.errors import DivergenceError
from scheda.model import DenoisingAutoencoder
from scheda.noise import NoiseFn
from scheda.schedule import NoiseSchedule
from scheda.step import make_step

log = logging.getLogger(__name__)


class Trainer:
    def __init__(
        self,
        model: DenoisingAutoencoder,
        optimizer: torch.optim.Optimizer,
        noise: NoiseFn,
        schedule: NoiseSchedule,
        train_x: torch.Tensor,
        batch_size: int,
        generator: torch.Generator,
        callbacks: Sequence[Callback] = (),
        fused: bool = True,
        precision: str = "fp32",
    ):
        self.model = model
        self.optimizer = optimizer
        self.noise = noise
        self.schedule = schedule
        self.train_x = train_x
        self.batch_size = batch_size
        self.generator = generator
        self.step_fn = make_step(model, optimizer, noise, batch_size, train_x.device, fused, precision)
        self.schedule_cb = ScheduleCallback(schedule)
        self.callbacks: list[Callback] = [self.schedule_cb, *callbacks]
        self.epoch = 0  # completed epochs
        self.step = 0  # completed minibatch updates
        self.history: list[dict[str, Any]] = []

    @property
    def device(self) -> torch.device:
        return self.train_x.device

    def fit(self) -> list[dict[str, Any]]:
        """Train until the schedule ends; returns the per-epoch metrics."""
        try:
            for cb in self.callbacks:
                cb.on_fit_start(self)
            while self.epoch < self.schedule.total_epochs:
                metrics = self.train_epoch()
                for cb in self.callbacks:
                    cb.on_epoch_end(self, metrics)
                if metrics["stage_end"]:
                    for cb in self.callbacks:
                        cb.on_stage_end(self, metrics)
            for cb in self.callbacks:
                cb.on_fit_end(self)
        finally:
            for cb in self.callbacks:
                cb.close()
        return self.history

    def train_epoch(self) -> dict[str, Any]:
        nu = self.schedule_cb.on_epoch_start(self)
        random_nu = self.schedule_cb.per_minibatch
        x_all, n, bs, gen = self.train_x, self.train_x.shape[0], self.batch_size, self.generator
        self.model.train()
        start = time.perf_counter()
        perm = torch.randperm(n, generator=gen, device=self.device)
        loss_sum = torch.zeros((), device=self.device)
        nu_sum = torch.zeros((), device=self.device)
        n_batches = 0
        for first in range(0, n, bs):
            idx = perm[first:first + bs]
            batch_nu = self.schedule_cb.batch_nu(gen, self.device) if random_nu else nu
            loss_sum += self.step_fn(x_all, idx, batch_nu, gen) * idx.shape[0]
            if random_nu:
                nu_sum += batch_nu
            n_batches += 1
        # The epoch's one host-device sync; non-finite weights count as divergence too, so a
        # checkpoint never stores them even when the last update broke them.
        finite = torch.stack([torch.isfinite(p).all() for p in self.model.parameters()]).all()
        epoch_loss, finite = (loss_sum / n).item(), bool(finite)
        mean_nu = (nu_sum / n_batches).item() if random_nu else nu
        seconds = time.perf_counter() - start
        if not (finite and math.isfinite(epoch_loss)):
            what = f"training loss became {epoch_loss}" if not math.isfinite(epoch_loss) else "weights became non-finite"
            raise DivergenceError(
                f"{what} in epoch {self.epoch + 1} (nu={mean_nu:g}): lower optim.lr; "
                f"the checkpoints written before it are kept"
            )
        self.epoch += 1
        self.step += n_batches
        metrics = {
            "epoch": self.epoch,
            "nu": mean_nu,
            "loss": epoch_loss,
            "seconds": seconds,
            "stage": self.schedule.stage_index(self.epoch - 1),
            "stage_end": self.schedule.is_stage_end(self.epoch - 1),
        }
        self.history.append(metrics)
        log.info("epoch %d nu=%.4g loss=%.4f (%.2fs)", self.epoch, mean_nu, epoch_loss, seconds)
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "epoch": self.epoch,
            "step": self.step,
            "history": list(self.history),
            "generator": self.generator.get_state(),
            "callbacks": {type(cb).__name__: cb.state_dict() for cb in self.callbacks},
            "schedule": [[s.nu, s.epochs] for s in self.schedule.stages],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue exactly where a checkpoint left off (weights, optimizer, RNG, schedule)."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.epoch, self.step = int(state["epoch"]), int(state["step"])
        self.history = list(state["history"])
        self.generator.set_state(state["generator"].cpu())
        for cb in self.callbacks:
            cb.load_state_dict(state["callbacks"].get(type(cb).__name__, {}))
