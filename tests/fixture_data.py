"""Tiny CIFAR-10 arrays with class structure, in the real file layout, with numpy alone: what
the tests and the GPU check's tiny mode (scripts/gpu_check.sh --tiny) train on. Nothing of
scheda is imported here, so a script that needs only the data starts in a fraction of a second."""

from __future__ import annotations

from pathlib import Path

import numpy as np

N_TRAIN, N_TEST = 100, 30


def make_cifar_arrays(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Images with class structure (a per-class mean + noise), labels balanced over 10 classes."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 10
    rng.shuffle(y)
    means = np.random.default_rng(123).integers(30, 220, size=(10, 3072))
    x = np.clip(means[y] + rng.normal(0, 25, size=(n, 3072)), 0, 255).astype(np.uint8)
    return x, y.astype(np.uint8)


def write_cifar_arrays(root: Path, n_train: int = N_TRAIN, n_test: int = N_TEST) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    train_x, train_y = make_cifar_arrays(n_train, 1)
    test_x, test_y = make_cifar_arrays(n_test, 2)
    for name, arr in dict(train_x=train_x, train_y=train_y, test_x=test_x, test_y=test_y).items():
        np.save(root / f"{name}.npy", arr)
    return root
