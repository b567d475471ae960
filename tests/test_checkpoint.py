import errno
import os

import pytest
import torch

from scheda.checkpoint import find_checkpoint, load_checkpoint, load_model_weights, save_checkpoint
from scheda.errors import CheckpointError
from scheda.io import atomic_write
from scheda.model import DenoisingAutoencoder


def _state(model):
    return {"model": model.state_dict(), "epoch": 1}


def test_failed_write_leaves_the_previous_checkpoint_intact(tmp_path):
    path = tmp_path / "epoch_00001.pt"
    model = DenoisingAutoencoder(6, 3)
    save_checkpoint(path, _state(model))

    def crash(f):
        f.write(b"half a checkpoint")
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        atomic_write(path, crash)
    assert torch.equal(load_checkpoint(path)["model"]["W"], model.W)
    assert os.listdir(tmp_path) == ["epoch_00001.pt"]  # no temp file left behind


def test_disk_full_is_a_clear_error(tmp_path):
    path = tmp_path / "epoch_00001.pt"
    save_checkpoint(path, _state(DenoisingAutoencoder(6, 3)))

    def full(f):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(CheckpointError, match="disk full while writing .*epoch_00001.pt"):
        atomic_write(path, full)
    assert load_checkpoint(path)["epoch"] == 1


def test_directory_resolves_to_latest_checkpoint(tmp_path):
    for epoch in (2, 10, 7):
        save_checkpoint(tmp_path / "checkpoints" / f"epoch_{epoch:05d}.pt", {"model": {}, "epoch": epoch})
    assert find_checkpoint(tmp_path).name == "epoch_00010.pt"
    assert find_checkpoint(tmp_path / "checkpoints").name == "epoch_00010.pt"
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="no checkpoint"):
        find_checkpoint(tmp_path / "empty")


def test_missing_or_corrupt_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope.pt")
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"\x00garbage")
    with pytest.raises(CheckpointError, match="corrupt or not a scheda checkpoint"):
        load_checkpoint(bad)
    torch.save({"weights": 1}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not a scheda checkpoint"):
        load_checkpoint(tmp_path / "other.pt")


def test_checkpoint_of_another_shape_is_a_clear_error(tmp_path):
    save_checkpoint(tmp_path / "c.pt", _state(DenoisingAutoencoder(6, 3)))
    with pytest.raises(CheckpointError, match=r"W of shape \(3, 6\) but the model's is \(4, 6\).*model.hidden"):
        load_model_weights(DenoisingAutoencoder(6, 4), load_checkpoint(tmp_path / "c.pt"))
