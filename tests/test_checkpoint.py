
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


def _names(run_dir):
    return sorted(p.name for p in (run_dir / "checkpoints").iterdir())


def test_keep_checkpoints_keeps_the_newest_and_the_best_and_changes_nothing_else(cifar_arrays, tmp_path):
    """``trainer.keep_checkpoints=N``: the newest N and the best evaluation's (the model the rule
    keeps) stay; the run trains, stops and reports as with every checkpoint kept, a run cut short
    resumes from what is left, and scheda-export's model is the kept one."""
    from scheda.run import run
    from scheda.training.checkpoint import find_model

    from helpers import TINY, compose_cfg

    base = [f"dataset.root={cifar_arrays}", *TINY, "optim.lr=0.5", "schedule=constant", "schedule.epochs=12",
            "evaluate.every=1", "trainer.patience=2", "trainer.checkpoint_every=1", "logger=none"]
    golden = run(compose_cfg(base), tmp_path / "golden")
    last, best = golden["epochs"], min(golden["evaluations"], key=lambda e: (e["val_error"], e["epoch"]))["epoch"]
    assert golden["stopped_by"] == "patience" and best == last - 2 and len(_names(tmp_path / "golden")) == last

    def same(summary):
        assert (summary["epochs"], summary["stopped_by"]) == (last, "patience")
        assert [h["loss"] for h in summary["history"]] == [h["loss"] for h in golden["history"]]
        assert [(e["epoch"], e["val_error"], e["test_error"]) for e in summary["evaluations"]] == \
            [(e["epoch"], e["val_error"], e["test_error"]) for e in golden["evaluations"]]

    same(run(compose_cfg([*base, "trainer.keep_checkpoints=1"]), tmp_path / "one"))
    assert _names(tmp_path / "one") == [f"epoch_{best:05d}.pt", f"epoch_{last:05d}.pt"]
    assert find_model(tmp_path / "one").name == f"epoch_{best:05d}.pt"
    kept = load_checkpoint(find_model(tmp_path / "one"))["model"]
    for key, value in load_checkpoint(tmp_path / "golden" / "checkpoints" / f"epoch_{best:05d}.pt")["model"].items():
        assert torch.equal(kept[key], value), key

    run(compose_cfg([*base, "trainer.keep_checkpoints=2", "trainer.max_epochs=3"]), tmp_path / "part")
    best_by_3 = min((e for e in golden["evaluations"] if e["epoch"] <= 3), key=lambda e: (e["val_error"], e["epoch"]))
    assert _names(tmp_path / "part") == [f"epoch_{e:05d}.pt" for e in sorted({best_by_3["epoch"], 2, 3})]
    same(run(compose_cfg([*base, "trainer.keep_checkpoints=2", f"resume={tmp_path / 'part'}",
                          "trainer.max_epochs=12"]), tmp_path / "part"))
    assert _names(tmp_path / "part") == [f"epoch_{e:05d}.pt" for e in (best, last - 1, last)]

    # no evaluation to read a best from: the newest only
    run(compose_cfg([*base, "evaluate.enabled=false", "trainer.patience=null", "schedule.epochs=5",
                     "trainer.keep_checkpoints=2"]), tmp_path / "plain")
    assert _names(tmp_path / "plain") == ["epoch_00004.pt", "epoch_00005.pt"]

