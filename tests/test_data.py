import json
import os
from pathlib import Path

import numpy as np
import pytest

from scheda.data import load_dataset
from scheda.data.cifar10 import detect_layout, split_train_val
from scheda.utils.errors import ConfigError, DataError

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


@pytest.fixture
def cifar_server(tmp_path):
    """A local HTTP server (127.0.0.1) serving a small archive in the official format."""
    import hashlib
    import http.server
    import sys
    import tarfile
    import threading
    from functools import partial

    from helpers import write_cifar_batches

    source = write_cifar_batches(tmp_path / "source")
    served = tmp_path / "served"
    served.mkdir()
    archive = served / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *args: None

    class Server(http.server.ThreadingHTTPServer):
        def handle_error(self, request, client_address):
            """A client that stops reading (a download refused part-way) is no server error to print."""
            if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
                super().handle_error(request, client_address)

    server = Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/cifar-10-python.tar.gz"
    yield url, hashlib.md5(archive.read_bytes()).hexdigest(), source
    server.shutdown()
    server.server_close()


def test_a_missing_data_set_is_downloaded_once_and_read_as_arrays(tmp_path, cifar_server):
    url, md5, source = cifar_server
    root = tmp_path / "fresh" / "cifar10"
    data = load_dataset(_cfg(root, download=True, download_url=url, download_md5=md5))
    for name in ("train_x.npy", "train_y.npy", "test_x.npy", "test_y.npy"):
        assert (root / name).exists()
    expected = load_dataset(_cfg(source))
    assert np.array_equal(data.train_x, expected.train_x) and np.array_equal(data.test_y, expected.test_y)
    # Later runs read the arrays: no download (a dead URL would fail).
    again = load_dataset(_cfg(root, download=True, download_url="http://127.0.0.1:1/x.tar.gz"))
    assert np.array_equal(again.val_x, expected.val_x)


def test_a_download_that_fails_its_checksum_is_refused(tmp_path, cifar_server):
    url, _, _ = cifar_server
    with pytest.raises(DataError, match="downloading CIFAR-10 from http://127.0.0.1:.* failed"):
        load_dataset(_cfg(tmp_path / "bad", download=True, download_url=url, download_md5="0" * 32))
    assert not (tmp_path / "bad" / "train_x.npy").exists()


def test_the_quick_start_runs_on_a_machine_with_no_data_but_a_network(tmp_path, cifar_server):
    from helpers import run_train

    url, md5, _ = cifar_server
    proc = run_train(["+experiment=quick", "dataset.val_size=20", "model.hidden=16", f"dataset.download_url={url}",
                      f"dataset.download_md5={md5}", "trainer.device=cpu", f"hydra.run.dir={tmp_path / 'run'}"],
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "data" / "cifar10" / "train_x.npy").exists()  # the default root, data/cifar10
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["status"] == "completed" and results["evaluations"]
