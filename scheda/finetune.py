"""Supervised fine-tuning (the paper's supplementary material): a one-hidden-layer network
whose hidden layer starts as the trained encoder (W, b) is trained on the labelled training
split for each learning rate of a grid; validation and test error are measured after every
epoch, and the test error is reported at the (learning rate, epoch) of lowest validation error.

The softmax output layer starts from the frozen-feature logistic regression's weights at its
chosen C when an evaluation ran (one-vs-rest scores are a good starting point for softmax
logits: the argmax, hence the starting error, is the same), else from zeros.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Mapping, Optional

import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import II
from torch import nn

from scheda.checkpoint import load_checkpoint, save_checkpoint
from scheda.classifiers import LinearModel
from scheda.config import Component, register, typed
from scheda.data import Splits
from scheda.errors import ConfigError, DivergenceError
from scheda.evaluate import pack_correct
from scheda.model import ACTIVATIONS, DenoisingAutoencoder
from scheda.optim import SGD
from scheda.progress import bar

log = logging.getLogger(__name__)
LAST = "finetune_last.pt"


class FineTuneNet(nn.Module):
    """x -> s(W x + b) -> softmax(V h + c), with (W, b) copied from a DA's encoder."""

    def __init__(self, da: DenoisingAutoencoder, n_classes: int, init: LinearModel | None = None):
        super().__init__()
        self.W = nn.Parameter(da.W.detach().clone())
        self.b = nn.Parameter(da.b.detach().clone())
        self.V = nn.Parameter(torch.zeros(n_classes, da.n_hidden, device=da.W.device))
        self.c = nn.Parameter(torch.zeros(n_classes, device=da.W.device))
        self._act = ACTIVATIONS[da.activation]
        if init is not None:
            with torch.no_grad():
                self.V.copy_(torch.as_tensor(init.W, dtype=self.V.dtype))
                self.c.copy_(torch.as_tensor(init.b, dtype=self.c.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self._act(F.linear(x, self.W, self.b)), self.V, self.c)

    @torch.no_grad()
    def correct(self, x: torch.Tensor, y: torch.Tensor, chunk_size: int = 8192) -> torch.Tensor:
        """Which rows it classifies right (encoded in chunks: no gradients, bounded memory)."""
        return torch.cat([self(x[i:i + chunk_size]).argmax(1) == y[i:i + chunk_size]
                          for i in range(0, x.shape[0], chunk_size)])

    def error(self, x: torch.Tensor, y: torch.Tensor, chunk_size: int = 8192) -> float:
        return int((~self.correct(x, y, chunk_size)).sum()) / x.shape[0]


@register("finetune")
@dataclass
class FinetuneConfig(Component):
    """Supervised fine-tuning after unsupervised training (off by default): a one-hidden-layer
    network initialised from the encoder, trained for every learning rate in ``lrs``; the test
    error is reported at the (lr, epoch) of lowest validation error. The paper: lr in
    {0.00125 * 2^-k, k = 0..4}, up to 2000 epochs, no early stopping."""

    enabled: bool = False
    standalone: bool = False  # true: skip unsupervised training, fine-tune init_from's encoder
    lrs: List[float] = field(default_factory=lambda: [0.00125 * 2.0 ** -k for k in range(5)])
    max_epochs: int = 2000
    patience: Optional[int] = None  # stop an lr after this many epochs without a new best val error
    batch_size: int = II("trainer.batch_size")
    momentum: float = 0.0
    init_output: str = "classifier"  # classifier: the frozen-feature LR's weights at its chosen C | zero

    def check(self) -> None:
        if not self.lrs or any(not (lr > 0 and math.isfinite(lr)) for lr in self.lrs):
            raise ConfigError(f"finetune.lrs={list(self.lrs)} must be a non-empty list of positive numbers")
        if self.max_epochs < 1:
            raise self.invalid("max_epochs", "must be >= 1")
        if self.patience is not None and self.patience < 1:
            raise self.invalid("patience", "must be >= 1 or null (no early stopping)")
        if self.batch_size < 1:
            raise self.invalid("batch_size", "must be >= 1")
        if self.init_output not in ("classifier", "zero"):
            raise self.invalid("init_output", "must be classifier or zero")


class FineTuner:
    """Runs the learning-rate grid in one job on data already on the device; resumable from
    ``checkpoints/finetune_last.pt`` (written atomically every epoch)."""

    def __init__(self, cfg: Mapping, da: DenoisingAutoencoder, data: Splits, inputs: dict[str, torch.Tensor],
                 device: torch.device, output_dir: Path, seed: int, init: LinearModel | None = None, writer=None):
        cfg = typed("finetune", cfg)
        self.cfg, self.da, self.device, self.seed = cfg, da, device, seed
        self.lrs = [float(lr) for lr in cfg.lrs]
        self.init = init if cfg.init_output == "classifier" else None
        self.writer = writer
        self.dir = output_dir / "checkpoints"
        self.x = inputs
        self.y = {s: torch.as_tensor(getattr(data, f"{s}_y"), device=device) for s in ("train", "val", "test")}
        self.n_classes = int(max(int(y.max()) for y in self.y.values())) + 1
        self.per_lr: list[dict[str, Any]] = []
        self._resume: dict[str, Any] | None = None

    def load(self, path: Path) -> bool:
        """Pick up a fine-tuning that was cut short; False when ``path`` holds none."""
        if not (path / LAST).exists():
            return False
        state = load_checkpoint(path / LAST, map_location=self.device)
        self.per_lr = list(state["per_lr"])
        self._resume = state if state.get("current") is not None else None
        log.info("resuming fine-tuning from %s (%d learning rates done)", path / LAST, len(self.per_lr))
        return True

    def run(self) -> dict[str, Any]:
        for i in range(len(self.per_lr), len(self.lrs)):
            self.per_lr.append(self._fit_one(i, self.lrs[i]))
            self._save(None)
        best = min(self.per_lr, key=lambda r: (r["val_error"], r["lr"]))
        return {"per_lr": self.per_lr, "chosen": {k: best.get(k) for k in ("lr", "best_epoch", "val_error", "test_error", "test_n",
                                                                  "test_correct")}}

    def _fit_one(self, index: int, lr: float) -> dict[str, Any]:
        cfg, x, y = self.cfg, self.x, self.y
        net = FineTuneNet(self.da, self.n_classes, self.init).to(self.device)
        opt = SGD(net.parameters(), lr=lr, momentum=cfg["momentum"])
        gen = torch.Generator(device=self.device).manual_seed(self.seed + 1000 * (index + 1))
        history: list[dict[str, Any]] = []
        best = {"epoch": 0, "val_error": net.error(x["val"], y["val"]), **self._test(net)}
        if self._resume is not None:
            state, self._resume = self._resume, None
            net.load_state_dict(state["current"]["net"])
            opt.load_state_dict(state["current"]["optimizer"])
            gen.set_state(state["current"]["generator"].cpu())
            history, best = list(state["current"]["history"]), dict(state["current"]["best"])
        n, bs = x["train"].shape[0], cfg["batch_size"]
        epoch = len(history)
        ticks = bar(cfg["max_epochs"], f"finetune lr={lr:g}", "epoch", initial=epoch)
        while epoch < cfg["max_epochs"]:
            if cfg["patience"] is not None and epoch - best["epoch"] >= cfg["patience"]:
                break
            start = time.perf_counter()
            perm = torch.randperm(n, generator=gen, device=self.device)
            loss_sum = torch.zeros((), device=self.device)
            for first in range(0, n, bs):
                idx = perm[first:first + bs]
                loss = F.cross_entropy(net(x["train"].index_select(0, idx)), y["train"].index_select(0, idx))
                opt.zero_grad(set_to_none=False)
                loss.backward()
                opt.step()
                loss_sum += loss.detach() * idx.shape[0]
            epoch += 1
            train_loss = (loss_sum / n).item()
            if not math.isfinite(train_loss):
                raise DivergenceError(f"fine-tuning loss became {train_loss} at lr={lr:g}, epoch {epoch}: "
                                      f"use smaller finetune.lrs")
            seconds = time.perf_counter() - start
            val, tested = net.error(x["val"], y["val"]), self._test(net)
            test = tested["test_error"]
            history.append({"epoch": epoch, "train_loss": train_loss, "val_error": val, "test_error": test,
                            "seconds": seconds})
            self._log(lr, history[-1])
            ticks.set_postfix(val=f"{100 * val:.2f}%", best=f"{100 * best['val_error']:.2f}%", refresh=False)
            ticks.update(1)
            if val < best["val_error"]:
                best = {"epoch": epoch, "val_error": val, **tested}
                save_checkpoint(self.dir / f"finetune_best_lr{index}.pt",
                                {"model": net.state_dict(), "epoch": epoch, "lr": lr, **best})
            self._save({"net": net.state_dict(), "optimizer": opt.state_dict(), "generator": gen.get_state(),
                        "history": history, "best": best})
        ticks.close()
        secs = [h["seconds"] for h in history]
        return {"lr": lr, "best_epoch": best["epoch"], "val_error": best["val_error"], "test_error": best["test_error"],
                "test_n": best.get("test_n"), "test_correct": best.get("test_correct"),
                "epochs_run": len(history), "seconds_per_epoch": float(np.mean(secs)) if secs else None,
                "history": history}

    def _test(self, net: FineTuneNet) -> dict[str, Any]:
        """Test error and which test images it got right (for McNemar's test between models)."""
        correct = net.correct(self.x["test"], self.y["test"])
        return {"test_error": int((~correct).sum()) / correct.numel(), "test_n": correct.numel(),
                "test_correct": pack_correct(correct)}

    def _save(self, current: dict[str, Any] | None) -> None:
        save_checkpoint(self.dir / LAST, {"model": {}, "kind": "finetune", "per_lr": self.per_lr,
                                          "current": current, "epoch": len(self.per_lr)})

    def _log(self, lr: float, h: dict[str, Any]) -> None:
        log.info("finetune lr=%g epoch %d: loss %.4f val %.4f test %.4f (%.1fs)", lr, h["epoch"], h["train_loss"],
                 h["val_error"], h["test_error"], h["seconds"])
        if self.writer is not None:
            for key in ("train_loss", "val_error", "test_error"):
                self.writer.add_scalar(f"finetune/lr_{lr:g}/{key}", h[key], h["epoch"])
