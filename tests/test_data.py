import os
from pathlib import Path

import numpy as np
import pytest

from scheda.data import load_dataset
from scheda.data.cifar10 import detect_layout, split_train_val
from scheda.errors import ConfigError, DataError

from helpers import N_TEST, N_TRAIN, N_VAL


def _cfg(root, **kw):
    cfg = dict(name="cifar10", root=str(root), download=False, val_size=N_VAL, split_seed=0, train_limit=None)
    cfg.update(kw)
    return cfg


def test_arrays_and_batches_layouts_give_the_same_splits(cifar_arrays, cifar_batches):
    assert detect_layout(cifar_arrays) == "arrays" and detect_layout(cifar_batches) == "batches"
    a, b = load_dataset(_cfg(cifar_arrays)), load_dataset(_cfg(cifar_batches))
    for split in ("train", "val", "test"):
        assert np.array_equal(getattr(a, f"{split}_x"), getattr(b, f"{split}_x"))
        assert np.array_equal(getattr(a, f"{split}_y"), getattr(b, f"{split}_y"))
    assert a.train_x.shape == (N_TRAIN - N_VAL, 3072) and a.val_x.shape == (N_VAL, 3072)
    assert a.test_x.shape == (N_TEST, 3072) and a.image_shape == (3, 32, 32)


def test_batches_folder_itself_can_be_the_root(cifar_batches):
    data = load_dataset(_cfg(cifar_batches / "cifar-10-batches-py"))
    assert data.train_x.shape[0] == N_TRAIN - N_VAL


def test_split_is_a_fixed_disjoint_partition():
    train, val = split_train_val(50000, 5000, 0)
    assert len(train) == 45000 and len(val) == 5000
    assert len(np.union1d(train, val)) == 50000
    again, _ = split_train_val(50000, 5000, 0)
    other, _ = split_train_val(50000, 5000, 1)
    assert np.array_equal(train, again) and not np.array_equal(train, other)


def test_tensor_is_pixels_over_255(cifar_arrays):
    data = load_dataset(_cfg(cifar_arrays))
    x = data.tensor("val", "cpu")
    assert x.dtype.is_floating_point and x.shape == data.val_x.shape
    np.testing.assert_array_equal(x.numpy(), data.val_x.astype(np.float32) / np.float32(255))


def test_train_limit(cifar_arrays):
    assert load_dataset(_cfg(cifar_arrays, train_limit=10)).train_x.shape[0] == 10
    with pytest.raises(ConfigError, match="dataset.train_limit"):
        load_dataset(_cfg(cifar_arrays, train_limit=0))


def test_missing_data_names_both_layouts_and_scheda_data(tmp_path):
    with pytest.raises(DataError) as exc:
        load_dataset(_cfg(tmp_path / "nothing"))
    msg = str(exc.value)
    assert "\n" not in msg
    for needle in ("train_x.npy", "cifar-10-batches-py", "dataset.download=true", "SCHEDA_DATA"):
        assert needle in msg


def test_failed_download_is_a_clear_error(tmp_path, monkeypatch):
    import torchvision.datasets.utils as tv_utils

    def offline(*args, **kwargs):
        raise OSError("network is unreachable")

    monkeypatch.setattr(tv_utils, "download_and_extract_archive", offline)
    with pytest.raises(DataError, match="downloading CIFAR-10 .* failed .*network is unreachable"):
        load_dataset(_cfg(tmp_path / "dl", download=True))


def test_truncated_npy_is_a_clear_error(cifar_arrays):
    path = cifar_arrays / "train_x.npy"
    path.write_bytes(path.read_bytes()[:5000])
    with pytest.raises(DataError, match="train_x.npy is truncated"):
        load_dataset(_cfg(cifar_arrays))


@pytest.mark.parametrize("name, array, match", [
    ("train_x", np.zeros((N_TRAIN, 100), np.uint8), "shape"),
    ("train_x", np.zeros((N_TRAIN, 3072), np.float32), "uint8"),
    ("train_y", np.zeros(N_TRAIN - 1, np.uint8), "labels for"),
    ("test_y", np.full(N_TEST, 11, np.uint8), "labels must be in 0..9"),
])
def test_malformed_arrays_are_clear_errors(cifar_arrays, name, array, match):
    np.save(cifar_arrays / f"{name}.npy", array)
    with pytest.raises(DataError, match=match):
        load_dataset(_cfg(cifar_arrays))


def test_corrupt_or_missing_batch_is_a_clear_error(cifar_batches):
    folder = cifar_batches / "cifar-10-batches-py"
    (folder / "data_batch_3").write_bytes(b"not a pickle")
    with pytest.raises(DataError, match="data_batch_3 is truncated or not a CIFAR-10 batch"):
        load_dataset(_cfg(cifar_batches))
    (folder / "data_batch_3").unlink()
    with pytest.raises(DataError, match="data_batch_3 is missing"):
        load_dataset(_cfg(cifar_batches))


def test_val_size_must_fit(cifar_arrays):
    with pytest.raises(ConfigError, match="dataset.val_size"):
        load_dataset(_cfg(cifar_arrays, val_size=N_TRAIN))


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("SCHEDA_DATA"), reason="set SCHEDA_DATA to a data root with cifar10/")
def test_real_cifar10_arrays():
    data = load_dataset(_cfg(Path(os.environ["SCHEDA_DATA"]) / "cifar10", val_size=5000))
    assert data.train_x.shape == (45000, 3072) and data.val_x.shape == (5000, 3072)
    assert data.test_x.shape == (10000, 3072) and data.train_x.dtype == np.uint8
    for y in (data.train_y, data.val_y, data.test_y):
        assert y.min() == 0 and y.max() == 9
    assert np.bincount(data.test_y).tolist() == [1000] * 10
    assert np.bincount(np.concatenate([data.train_y, data.val_y])).tolist() == [5000] * 10
    # The official order: first training image is a frog, first test image a cat.
    train_idx, val_idx = split_train_val(50000, 5000, 0)
    first = data.train_y[0] if train_idx[0] == 0 else data.val_y[0]
    assert first == 6 and data.test_y[0] == 3
