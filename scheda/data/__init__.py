"""Data modules: each loads one data set into labelled train/validation/test splits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import torch

from scheda.errors import ConfigError


@dataclass
class Splits:
    """A data set split for the paper's protocol, as uint8/float arrays on the host.

    Stored values are divided by ``max_value`` to give the model's [0, 1] inputs (255 for pixels).
    """

    name: str
    train_x: np.ndarray
    train_y: np.ndarray
    val_x: np.ndarray
    val_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    max_value: float = 1.0
    image_shape: tuple[int, int, int] | None = None

    @property
    def n_input(self) -> int:
        return self.train_x.shape[1]

    def tensor(self, split: str, device: torch.device | str) -> torch.Tensor:
        """One split's inputs as a single float32 tensor in [0, 1] on ``device``."""
        x = torch.from_numpy(np.ascontiguousarray(getattr(self, f"{split}_x"))).to(device)
        x = x.to(torch.float32)
        if self.max_value != 1.0:
            x.div_(self.max_value)
        return x


def dataset_spec(cfg: Mapping):
    """The module that serves ``dataset.name``; it knows its input size before loading."""
    from scheda.data import cifar10

    modules = {"cifar10": cifar10}
    name = cfg.get("name")
    if name not in modules:
        raise ConfigError(f"dataset.name={name!r} is unknown: use one of {', '.join(modules)}")
    return modules[name]


def load_dataset(cfg: Mapping) -> Splits:
    return dataset_spec(cfg).load(cfg)
