
import pytest
import torch

from scheda.training.checkpoint import find_checkpoint, load_checkpoint, load_model_weights, save_checkpoint
from scheda.utils.errors import CheckpointError
from scheda.model.autoencoder import DenoisingAutoencoder


def _state(model):
    return {"model": model.state_dict(), "epoch": 1}


def test_directory_resolves_to_latest_checkpoint(tmp_path):
    for epoch in (2, 10, 7):
        save_checkpoint(tmp_path / "checkpoints" / f"epoch_{epoch:05d}.pt", {"model": {}, "epoch": epoch})
    assert find_checkpoint(tmp_path).name == "epoch_00010.pt"
    assert find_checkpoint(tmp_path / "checkpoints").name == "epoch_00010.pt"
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="no checkpoint"):
        find_checkpoint(tmp_path / "empty")
    for k in (0, 1, 2):  # a fused sweep's run: its models hold the checkpoints (it said "no checkpoint in" the run)
        save_checkpoint(tmp_path / "fused" / "models" / str(k) / "checkpoints" / "epoch_00001.pt", {"model": {}, "epoch": 1})
    with pytest.raises(CheckpointError, match=r"fused is a fused sweep of 3 models.*pass one of them, .*fused/models/0 .. 2"):
        find_checkpoint(tmp_path / "fused")
    assert find_checkpoint(tmp_path / "fused" / "models" / "2").name == "epoch_00001.pt"


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


def test_a_checkpoint_of_0_2_counts_its_updates_under_step(cifar_arrays, tmp_path):
    """The count of minibatch updates is ``updates``; 0.2 wrote it as ``step``, read for one release."""

    from scheda.run import run
    from scheda.training.checkpoint import load_checkpoint, save_checkpoint

    from helpers import STAGES, TINY, compose_cfg

    base = [f"dataset.root={cifar_arrays}", *TINY, *STAGES, "trainer.checkpoint_every=1", "logger=none"]
    golden = run(compose_cfg(base), tmp_path / "golden")
    run(compose_cfg([*base, "trainer.max_epochs=1"]), tmp_path / "part")
    path = tmp_path / "part" / "checkpoints" / "epoch_00001.pt"
    state = load_checkpoint(path)
    assert "updates" in state and "step" not in state
    old = {k: v for k, v in state.items() if k not in ("path", "format_version")}
    old["step"] = old.pop("updates")
    save_checkpoint(path, old)
    resumed = run(compose_cfg([*base, f"resume={tmp_path / 'part'}"]), tmp_path / "part")
    assert [h["loss"] for h in resumed["history"]] == [h["loss"] for h in golden["history"]]
    assert load_checkpoint(tmp_path / "part")["updates"] == load_checkpoint(tmp_path / "golden")["updates"]
