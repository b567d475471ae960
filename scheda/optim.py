"""The optimiser: plain minibatch SGD, as in the paper (momentum and weight decay optional)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch

from scheda.config import Component, register, typed


@register("optim")
@dataclass
class SGDConfig(Component):
    """Plain minibatch SGD, as in the paper."""

    name: str = "sgd"
    lr: float = 0.01  # paper grid: 0.002, 0.01, 0.05 (ScheDA continuations use 0.01)
    momentum: float = 0.0
    weight_decay: float = 0.0

    def check(self) -> None:
        if not self.lr > 0:
            raise self.invalid("lr", "must be > 0")
        if not 0 <= self.momentum < 1:
            raise self.invalid("momentum", "must be in [0, 1)")
        if self.weight_decay < 0:
            raise self.invalid("weight_decay", "must be >= 0")

    def build(self, params) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay)


def build_optimizer(cfg: Mapping, params) -> torch.optim.Optimizer:
    return typed("optim", cfg).build(params)
