"""Your own data as arrays: ``dataset=arrays dataset.root=<a folder of .npy files, or one .npz>``.

The files (or the .npz's members) are named ``train_x`` (N x d: any d, uint8 or float), and
optionally ``train_y`` (N integer labels), ``test_x`` / ``test_y`` (a test split of the same d)
and ``unlabelled_x`` (more inputs, for the autoencoder only). Values are divided by
``dataset.scale`` (default 255 for uint8, 1 for floats) and must then lie in [0, 1].

The labelled training rows give a seeded validation split (``dataset.val_fraction``, a tenth by
default, or exactly ``dataset.val_size`` rows) and, when there is no ``test_x``, a test split of
the same size, carved the same way (the log says so). Without ``train_y`` the run trains the
autoencoder and skips evaluation, and says so. ``.npy`` files are memory-mapped, so a file
larger than memory is read as the run needs it; an .npz is read whole. ``dataset.image_shape``
(e.g. ``[3,32,32]``, channels first) lets TensorBoard draw the filters; without it none are drawn.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Mapping, Optional

import numpy as np
from scheda.config import Component, register
from scheda.data import Splits
from scheda.utils.errors import ConfigError, DataError

log = logging.getLogger(__name__)

NAMES = ("train_x", "train_y", "test_x", "test_y", "unlabelled_x")
HANDED = "handed:"  # the root of a run whose arrays were handed to it (scheda.train(data=...)): no files
CHUNK = 1 << 16  # rows checked at a time (a memory-mapped file is never read whole for a check)


def _path(root: str) -> Path:
    return Path(os.path.expanduser(str(root))).absolute()


def read_arrays(root: str) -> dict[str, np.ndarray]:
    """The arrays ``root`` holds by name (memory-mapped .npy files, or an .npz's members)."""
    if str(root).startswith(HANDED):
        raise DataError(f"dataset.root={root}: this run's arrays were handed to it (scheda.train(data=...)) and "
                        f"are not on disk: write them to an .npz and point dataset.root at it")
    path = _path(root)
    try:
        if path.is_file():
            with np.load(path, allow_pickle=False) as npz:
                found = {name: npz[name] for name in NAMES if name in npz.files}
        elif path.is_dir():
            found = {name: np.load(path / f"{name}.npy", mmap_mode="r", allow_pickle=False)
                     for name in NAMES if (path / f"{name}.npy").exists()}
        else:
            raise DataError(f"dataset.root={root}: no such folder or .npz file; point it at a folder of "
                            f"train_x.npy (and train_y.npy, ...) or at one .npz")
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        # numpy takes any file without its header (a corrupt one, another format) for pickled objects
        why = "not numpy's .npy/.npz format, or Python objects" if "pickled" in str(exc) else f"{type(exc).__name__}: {exc}"
        raise DataError(f"dataset.root={root}: cannot read its arrays ({why}); "
                        f"write them again with numpy.save or numpy.savez") from None
    if "train_x" not in found:
        raise DataError(f"dataset.root={root} has no train_x: it needs train_x (N x d), and optionally "
                        f"train_y, test_x, test_y, unlabelled_x")
    return found


def _scale_of(x: np.ndarray, scale: float | None) -> float:
    return float(scale) if scale is not None else (255.0 if x.dtype == np.uint8 else 1.0)


def _check_inputs(name: str, x: np.ndarray, d: int | None, scale: float) -> None:
    """Rank, width, number type and range after scaling, chunk by chunk; one line each."""
    if x.ndim != 2:
        raise DataError(f"{name} must be a matrix of N rows x d inputs, not of shape {x.shape}")
    if d is not None and x.shape[1] != d:
        raise DataError(f"{name} has {x.shape[1]} inputs a row and train_x {d}: they must match")
    if x.dtype.kind not in "uif":
        raise DataError(f"{name} holds {x.dtype}: use numbers (uint8, or floats)")
    for first in range(0, x.shape[0], CHUNK):
        part = np.asarray(x[first:first + CHUNK], dtype=np.float64) / scale
        if np.isnan(part).any():
            raise DataError(f"{name} holds NaN (from row {first}): remove or replace those values")
        if part.size and (part.min() < 0 or part.max() > 1):
            raise DataError(f"{name} lies in [{part.min():g}, {part.max():g}] after dividing by "
                            f"dataset.scale={scale:g}: the inputs must lie in [0, 1]; set dataset.scale")


def _check_labels(name: str, y: np.ndarray, rows: int, of: str) -> np.ndarray:
    if y.ndim != 1 or y.shape[0] != rows:
        raise DataError(f"{name} has shape {y.shape} for {rows} rows of {of}: one label a row")
    if y.dtype.kind not in "iu":
        if y.dtype.kind != "f" or not np.all(np.isfinite(y)) or not np.all(y == np.round(y)):
            raise DataError(f"{name} holds {y.dtype} values that are not integers: labels are class numbers")
    y = np.asarray(y, dtype=np.int64)
    if y.size and y.min() < 0:
        raise DataError(f"{name} has a negative label ({y.min()}): labels are class numbers 0, 1, ...")
    return y


def split(n: int, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the rest and of a seeded part of ``size`` rows, each kept sorted."""
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[size:]), np.sort(perm[:size])


@register("dataset")
@dataclass
class ArraysConfig(Component):
    """Your own data: a folder of .npy files or one .npz (``train_x``; optionally ``train_y``,
    ``test_x``/``test_y``, ``unlabelled_x`` for the autoencoder only); see scheda/data/arrays.py."""

    name: str = "arrays"
    root: str = "${oc.env:SCHEDA_DATA,data}/arrays"  # a folder of train_x.npy (train_y.npy, ...), or one .npz
    scale: Optional[float] = None  # divide the inputs by this; null: 255 for uint8, 1 for floats
    val_fraction: float = 0.1  # of the labelled training rows, a seeded validation split
    val_size: Optional[int] = None  # exactly this many validation rows instead
    split_seed: int = 0
    train_limit: Optional[int] = None  # use only the first N training rows (after the split)
    image_shape: Optional[List[int]] = None  # e.g. [3, 32, 32] (channels first): filters are drawn only then

    def check(self) -> None:
        if not self.root:
            raise self.invalid("root", "must name a folder of .npy files or an .npz file")
        if self.scale is not None and not (self.scale > 0 and math.isfinite(self.scale)):
            raise self.invalid("scale", "must be a positive number or null")
        if not 0 < self.val_fraction < 1:
            raise self.invalid("val_fraction", "must be in (0, 1)")
        if self.val_size is not None and self.val_size < 1:
            raise self.invalid("val_size", "must be >= 1 or null")
        if self.train_limit is not None and self.train_limit < 1:
            raise self.invalid("train_limit", "must be >= 1 or null")
        if self.image_shape is not None and len(self.image_shape) != 3:
            raise self.invalid("image_shape", "must be [channels, height, width] or null")

    def handed(self, arrays: Mapping[str, Any]) -> "ArraysConfig":
        """This data set with ``arrays`` handed to the run instead of its files (numpy arrays or
        tensors by name: ``train_x`` and optionally the rest of :data:`NAMES`)."""
        unknown = sorted(set(arrays) - set(NAMES))
        if unknown or "train_x" not in arrays:
            raise DataError(f"data handed to a run: {', '.join(unknown) + ' unknown, ' if unknown else ''}"
                            f"give train_x and optionally {', '.join(NAMES[1:])}")
        out = dataclasses.replace(self)
        out._handed = {name: v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v)
                       for name, v in arrays.items()}
        return out

    def arrays(self) -> dict[str, np.ndarray]:
        handed = getattr(self, "_handed", None)
        return dict(handed) if handed is not None else read_arrays(self.root)

    @property
    def n_input(self) -> int:
        """d, from train_x's header (a memory map: nothing is read)."""
        return int(self.arrays()["train_x"].shape[1])

    def load(self) -> Splits:
        arrays = self.arrays()
        x = arrays["train_x"]
        d, scale = (x.shape[1] if x.ndim == 2 else None), _scale_of(x, self.scale)
        _check_inputs("train_x", x, None, scale)
        if self.image_shape is not None and math.prod(self.image_shape) != d:
            raise ConfigError(f"dataset.image_shape={list(self.image_shape)} holds {math.prod(self.image_shape)} "
                              f"inputs and train_x rows {d}: they must match (or set it to null)")
        for name in ("test_x", "unlabelled_x"):
            if name in arrays:
                _check_inputs(name, arrays[name], d, scale)
        labelled = "train_y" in arrays
        shape = tuple(self.image_shape) if self.image_shape is not None else None
        if not labelled:
            log.info("dataset.root=%s has no train_y: the run trains the autoencoder and skips evaluation",
                     self.root)
            rows = np.arange(x.shape[0])[: self.train_limit]
            empty = np.zeros((0, d), dtype=x.dtype)
            none = np.zeros(0, dtype=np.int64)
            return Splits("arrays", x[rows], none, empty, none, empty, none, max_value=scale, image_shape=shape,
                          unlabeled_x=arrays.get("unlabelled_x"), labelled=False)
        y = _check_labels("train_y", arrays["train_y"], x.shape[0], "train_x")
        if y.size and np.unique(y).size < 2:
            log.warning("train_y holds one class (%d): every evaluation's error is 0 and says nothing of the "
                        "features; give labels of two classes or more, or drop train_y", int(y[0]))
        size = self.val_size if self.val_size is not None else max(1, round(self.val_fraction * x.shape[0]))
        has_test = "test_x" in arrays
        if has_test != ("test_y" in arrays):
            raise DataError(f"dataset.root={self.root} has {'test_x' if has_test else 'test_y'} without "
                            f"{'test_y' if has_test else 'test_x'}: give both, or neither")
        carved = 0 if has_test else size
        if size + carved >= x.shape[0]:
            raise ConfigError(f"dataset.val_size={size} leaves no training rows of {x.shape[0]}"
                              f"{' (a test split as large is carved too: there is no test_x)' if carved else ''}: "
                              f"use a smaller dataset.val_size or val_fraction")
        rest, val = split(x.shape[0], size, self.split_seed)
        if has_test:
            test_x, test_y = arrays["test_x"], _check_labels("test_y", arrays["test_y"], arrays["test_x"].shape[0],
                                                            "test_x")
            test_rows = np.arange(test_x.shape[0])
        else:
            keep, test = split(rest.shape[0], carved, self.split_seed + 1)
            test_rows = rest[test]
            test_x, test_y, rest = x[test_rows], y[test_rows], rest[keep]
            log.info("dataset.root=%s has no test_x: %d training rows are the test split (seeded, "
                     "dataset.split_seed)", self.root, carved)
        rest = rest[: self.train_limit]
        return Splits("arrays", x[rest], y[rest], x[val], y[val], test_x, test_y, max_value=scale,
                      image_shape=shape, unlabeled_x=arrays.get("unlabelled_x"),
                      indices={"train": rest, "val": val, "test": test_rows})
