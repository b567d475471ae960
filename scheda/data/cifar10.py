"""CIFAR-10 as the paper uses it: 45000 train / 5000 validation / 10000 test, pixels / 255,
vectors of 3072 in the official channel-major order (1024 red, 1024 green, 1024 blue).

``dataset.root`` may hold either layout; the loader detects which:

* arrays: ``train_x.npy`` (50000x3072 uint8), ``train_y.npy``, ``test_x.npy``, ``test_y.npy``
  (the layout of a data root made for scheda, e.g. ``$SCHEDA_DATA/cifar10``);
* torchvision's official python version: ``cifar-10-batches-py/data_batch_1..5, test_batch``.

When it holds neither, the official archive is downloaded (``dataset.download``, on by
default; torchvision's downloader shows progress and checks the MD5), extracted and written as
the arrays once; later runs read the arrays. ``dataset.download=false`` never downloads.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Mapping, Optional

import numpy as np

from scheda.config import Component, register
from scheda.data import Splits
from scheda.utils.errors import ConfigError, DataError
from scheda.utils.io import atomic_write

n_input = 3072
image_shape = (3, 32, 32)
N_CLASSES = 10
ARRAY_FILES = ("train_x.npy", "train_y.npy", "test_x.npy", "test_y.npy")
BATCHES_DIR = "cifar-10-batches-py"
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
OFFICIAL_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"  # torchvision's CIFAR10.url
OFFICIAL_MD5 = "c58f30108f718f92721af3b95e74349a"


def _where_to_put_it(root: Path, downloading: bool = False) -> str:
    """The ways to give the data; ``downloading``: the download was tried, so not that one."""
    download = "" if downloading else ", or set dataset.download=true (it fetches the official archive)"
    return (
        f"put train_x.npy/train_y.npy/test_x.npy/test_y.npy (uint8 arrays) or the official "
        f"{BATCHES_DIR}/ in {root}{download}, or set SCHEDA_DATA to a data root that holds cifar10/"
    )


def detect_layout(root: Path) -> str | None:
    """'arrays', 'batches' or None, by what ``root`` holds."""
    if all((root / f).exists() for f in ARRAY_FILES):
        return "arrays"
    if (root / BATCHES_DIR).is_dir() or (root / TRAIN_BATCHES[0]).exists():
        return "batches"
    return None


def _check(x: np.ndarray, y: np.ndarray, source: str, n: int | None = None) -> None:
    if x.dtype != np.uint8 or x.ndim != 2 or x.shape[1] != n_input:
        raise DataError(f"{source}: images must be uint8 of shape (N, {n_input}), got "
                        f"{x.dtype} {x.shape}; re-create the file")
    if y.ndim != 1 or y.shape[0] != x.shape[0]:
        raise DataError(f"{source}: {y.shape[0] if y.ndim == 1 else y.shape} labels for "
                        f"{x.shape[0]} images; re-create the file")
    if n is not None and x.shape[0] != n:
        raise DataError(f"{source}: expected {n} images, found {x.shape[0]}; re-create the file")
    if y.size and (y.min() < 0 or y.max() >= N_CLASSES):
        raise DataError(f"{source}: labels must be in 0..{N_CLASSES - 1}, found {y.min()}..{y.max()}")


def _load_npy(path: Path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise DataError(f"{path} is truncated or not a .npy array ({exc}); re-create it") from exc


def load_arrays(root: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    train_x, train_y, test_x, test_y = (_load_npy(root / f) for f in ARRAY_FILES)
    _check(train_x, train_y, f"{root}/train_x.npy+train_y.npy")
    _check(test_x, test_y, f"{root}/test_x.npy+test_y.npy")
    return train_x, train_y.astype(np.int64), test_x, test_y.astype(np.int64)


def _read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        with open(path, "rb") as f:
            entry = pickle.load(f, encoding="latin1")
        x = np.asarray(entry["data"], dtype=np.uint8) if "data" in entry else None
        y = np.asarray(entry.get("labels", entry.get("fine_labels")))
    except FileNotFoundError as exc:
        raise DataError(f"{path} is missing; the official {BATCHES_DIR}/ has data_batch_1..5 "
                        f"and test_batch") from exc
    except Exception as exc:
        raise DataError(f"{path} is truncated or not a CIFAR-10 batch ({type(exc).__name__}: {exc}); "
                        f"re-download it with dataset.download=true") from exc
    if x is None or y.ndim != 1:
        raise DataError(f"{path} has no 'data'/'labels' entries; re-download it with dataset.download=true")
    _check(x, y, str(path))
    return x, y.astype(np.int64)


def load_batches(root: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    folder = root / BATCHES_DIR if (root / BATCHES_DIR).is_dir() else root
    train = [_read_batch(folder / name) for name in TRAIN_BATCHES]
    test_x, test_y = _read_batch(folder / TEST_BATCH)
    return (np.concatenate([x for x, _ in train]), np.concatenate([y for _, y in train]), test_x, test_y)


def download(root: Path, url: str, md5: str | None) -> None:
    """Fetch and extract the official python archive into ``root``, then write it as the arrays
    (atomically: an interrupted conversion leaves no half array behind)."""
    from torchvision.datasets.utils import download_and_extract_archive

    try:
        download_and_extract_archive(url, str(root), filename=url.rsplit("/", 1)[-1] or "cifar-10-python.tar.gz",
                                     md5=md5)
    except Exception as exc:
        raise DataError(f"downloading CIFAR-10 from {url} into {root} failed ({type(exc).__name__}: {exc}): "
                        f"check the network, or {_where_to_put_it(root, downloading=True)}") from None
    if detect_layout(root) != "batches":
        raise DataError(f"{url} did not hold {BATCHES_DIR}/: set dataset.download_url to the official "
                        f"python version's archive")
    for name, array in zip(ARRAY_FILES, load_batches(root)):
        atomic_write(root / name, lambda f, a=array: np.save(f, a.astype(np.uint8), allow_pickle=False))


def split_train_val(n: int, val_size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the train and validation parts: a fixed seeded permutation, each kept sorted."""
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[val_size:]), np.sort(perm[:val_size])


def load(config: Mapping) -> Splits:
    root = Path(os.path.expanduser(str(config["root"]))).absolute()
    layout = detect_layout(root)
    if layout is None and config.get("download", False):
        download(root, config.get("download_url", OFFICIAL_URL), config.get("download_md5", OFFICIAL_MD5))
        layout = detect_layout(root)
    if layout is None:
        raise DataError(f"CIFAR-10 not found in {root}: {_where_to_put_it(root)}")
    train_x, train_y, test_x, test_y = load_arrays(root) if layout == "arrays" else load_batches(root)

    val_size = config["val_size"]
    if not isinstance(val_size, int) or not 0 < val_size < train_x.shape[0]:
        raise ConfigError(f"dataset.val_size={val_size} must be in 1..{train_x.shape[0] - 1} "
                          f"(the official training set has {train_x.shape[0]} images here)")
    train_idx, val_idx = split_train_val(train_x.shape[0], val_size, config["split_seed"])
    limit = config.get("train_limit")
    if limit is not None:
        train_idx = train_idx[:limit]
    return Splits(
        name="cifar10",
        train_x=train_x[train_idx], train_y=train_y[train_idx],
        val_x=train_x[val_idx], val_y=train_y[val_idx],
        test_x=test_x, test_y=test_y,
        max_value=255.0,
        image_shape=image_shape,
        indices={"train": train_idx, "val": val_idx, "test": np.arange(test_x.shape[0])},
    )


@register("dataset")
@dataclass
class Cifar10Config(Component):
    """CIFAR-10 as the paper uses it: 45000 train / 5000 validation / 10000 test, pixels / 255."""

    name: str = "cifar10"
    # A folder with train_x.npy/train_y.npy/test_x.npy/test_y.npy or cifar-10-batches-py/.
    root: str = "${oc.env:SCHEDA_DATA,data}/cifar10"
    download: bool = True  # fetch the official archive when root holds neither layout (false: never)
    download_url: str = OFFICIAL_URL
    download_md5: Optional[str] = OFFICIAL_MD5  # of the archive at download_url; null: not checked
    val_size: int = 5000  # taken from the 50000 official training images by a seeded permutation
    split_seed: int = 0
    train_limit: Optional[int] = None  # use only the first N training examples (quick CPU runs)
    image_shape: ClassVar[tuple[int, int, int]] = image_shape

    @property
    def n_input(self) -> int:
        return n_input

    def check(self) -> None:
        if self.train_limit is not None and self.train_limit < 1:
            raise ConfigError(f"dataset.train_limit={self.train_limit} must be a positive integer or null")

    def load(self) -> Splits:
        return load(self)
