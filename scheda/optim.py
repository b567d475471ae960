"""The optimiser: plain minibatch SGD, as in the paper (momentum and weight decay optional)."""

from __future__ import annotations

import torch
from omegaconf import DictConfig

from scheda.errors import ConfigError


def build_optimizer(cfg: DictConfig, params) -> torch.optim.Optimizer:
    if cfg.name != "sgd":
        raise ConfigError(f"optim.name={cfg.name!r} is unknown: use sgd")
    if not cfg.lr > 0:
        raise ConfigError(f"optim.lr={cfg.lr} must be > 0")
    if not 0 <= cfg.momentum < 1:
        raise ConfigError(f"optim.momentum={cfg.momentum} must be in [0, 1)")
    if cfg.weight_decay < 0:
        raise ConfigError(f"optim.weight_decay={cfg.weight_decay} must be >= 0")
    return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
