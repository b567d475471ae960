"""Divergence, a full disk, bad data and bad checkpoints, through the users' entry point:
one clear line, the finished checkpoints kept, and the failure recorded in results.json."""

import errno
import io
import json
import os

import numpy as np
import pytest
import torch

from scheda.training.checkpoint import load_checkpoint, save_checkpoint
from scheda.utils.errors import CheckpointError
from scheda.run import run

from helpers import N_TRAIN, STAGES, TINY, compose_cfg, run_train


def _one_error_line(proc, *needles):
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def test_divergence_stops_keeps_checkpoints_and_is_recorded(cifar_arrays, tmp_path):
    out = tmp_path / "run"
    # A good run, then a new run from its weights with a learning rate that overflows.
    good = run_train([f"dataset.root={cifar_arrays}", *TINY, *STAGES, f"hydra.run.dir={tmp_path / 'good'}",
                      "trainer.max_epochs=2", "evaluate.enabled=false"], cwd=tmp_path)
    assert good.returncode == 0, good.stderr
    proc = run_train([f"dataset.root={cifar_arrays}", *TINY, *STAGES, f"hydra.run.dir={out}", "optim.lr=1e38",
                      f"init_from={tmp_path / 'good'}", "trainer.checkpoint_every=1"], cwd=tmp_path)
    line = _one_error_line(proc, "in epoch 1 (nu=0.5)", "optim.lr")
    assert "non-finite" in line or "nan" in line or "inf" in line
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "diverged" and "epoch 1" in results["error"]
    assert not (out / "checkpoints").exists() or not list((out / "checkpoints").glob("epoch_*.pt"))
    assert load_checkpoint(tmp_path / "good")["epoch"] == 2


def test_divergence_after_good_epochs_keeps_the_last_good_checkpoint(cifar_arrays, tmp_path, monkeypatch):
    import scheda.training.trainer

    calls = {"n": 0}
    original = scheda.training.trainer.Trainer.run_minibatches

    def poisoned(self, active):
        calls["n"] += 1
        if calls["n"] == 3:
            with torch.no_grad():
                active[0].model.W.fill_(float("nan"))
        return original(self, active)

    monkeypatch.setattr(scheda.training.trainer.Trainer, "run_minibatches", poisoned)
    cfg = compose_cfg([f"dataset.root={cifar_arrays}", *TINY, *STAGES, "trainer.checkpoint_every=1",
                       "evaluate.enabled=false", "logger=none"])
    with pytest.raises(scheda.utils.errors.DivergenceError, match=r"epoch 3 \(nu=0.2\)"):
        run(cfg, tmp_path / "run")
    state = load_checkpoint(tmp_path / "run")
    assert state["epoch"] == 2 and torch.isfinite(state["model"]["W"]).all()
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["status"] == "diverged" and results["epochs"] == 2 and len(results["history"]) == 2


class _NearlyFullDisk(io.RawIOBase):
    """A file on a disk with ``free`` bytes left: a write that does not fit fails with ENOSPC,
    smaller ones (the buffer's last flush, at close) still go through, as on a real disk."""

    def __init__(self, fd: int, free: int):
        self.fd, self.free = fd, free

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        if len(data) > self.free:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.free -= len(data)
        return os.write(self.fd, data)

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        if not self.closed:
            os.close(self.fd)
        super().close()


def test_disk_full_during_a_run(cifar_arrays, tmp_path, monkeypatch):
    """The second checkpoint finds 20 kB left on the disk; torch.save itself (not a stand-in)
    meets the ENOSPC and reports it as a RuntimeError of its own ("unexpected pos")."""
    import tempfile

    real_fdopen, real_mkstemp, names = os.fdopen, tempfile.mkstemp, {}

    def remembered(*args, **kwargs):  # which temporary file each descriptor is
        fd, name = real_mkstemp(*args, **kwargs)
        names[fd] = name
        return fd, name

    def nearly_full_for_epoch_2(fd, *args, **kwargs):
        if ".epoch_00002.pt." in names.get(fd, ""):
            return io.BufferedWriter(_NearlyFullDisk(fd, free=20_000))
        return real_fdopen(fd, *args, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", remembered)
    monkeypatch.setattr(os, "fdopen", nearly_full_for_epoch_2)
    cfg = compose_cfg([f"dataset.root={cifar_arrays}", *TINY, *STAGES, "trainer.checkpoint_every=1",
                       "evaluate.enabled=false", "logger=none"])
    with pytest.raises(CheckpointError, match="disk full while writing .*epoch_00002.pt"):
        run(cfg, tmp_path / "run")
    monkeypatch.undo()
    assert load_checkpoint(tmp_path / "run")["epoch"] == 1
    assert [p.name for p in (tmp_path / "run" / "checkpoints").iterdir()] == ["epoch_00001.pt"]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["status"] == "failed" and "disk full" in results["error"]


@pytest.mark.parametrize("corrupt, needles", [
    (lambda root: (root / "train_x.npy").write_bytes((root / "train_x.npy").read_bytes()[:3000]),
     ["train_x.npy is truncated"]),
    (lambda root: np.save(root / "train_x.npy", np.zeros((N_TRAIN, 3072), np.float64)), ["uint8"]),
    (lambda root: np.save(root / "test_x.npy", np.zeros((30, 1024), np.uint8)), ["shape (N, 3072)"]),
    (lambda root: np.save(root / "train_y.npy", np.full(N_TRAIN, 10, np.uint8)), ["labels must be in 0..9"]),
])
def test_bad_data_is_one_line(cifar_arrays, tmp_path, corrupt, needles):
    corrupt(cifar_arrays)
    out = tmp_path / "run"
    proc = run_train([f"dataset.root={cifar_arrays}", *TINY, *STAGES, f"hydra.run.dir={out}"], cwd=tmp_path)
    _one_error_line(proc, *needles)
    assert json.loads((out / "results.json").read_text())["status"] == "failed"


@pytest.mark.parametrize("key", ["resume", "init_from"])
def test_corrupt_checkpoint_is_one_line(cifar_arrays, tmp_path, key):
    bad = tmp_path / "epoch_00003.pt"
    bad.write_bytes(b"PK\x03\x04 this is not a checkpoint")
    proc = run_train([f"dataset.root={cifar_arrays}", *TINY, *STAGES, f"hydra.run.dir={tmp_path / 'run'}",
                      f"{key}={bad}"], cwd=tmp_path)
    _one_error_line(proc, "epoch_00003.pt is corrupt")


@pytest.mark.parametrize("key", ["resume", "init_from"])
def test_checkpoint_of_another_shape_is_one_line(cifar_arrays, tmp_path, key):
    from scheda.model.autoencoder import DenoisingAutoencoder

    other = tmp_path / "other.pt"
    save_checkpoint(other, {"model": DenoisingAutoencoder(3072, 5).state_dict(), "epoch": 1})
    proc = run_train([f"dataset.root={cifar_arrays}", *TINY, *STAGES, f"hydra.run.dir={tmp_path / 'run'}",
                      f"{key}={other}"], cwd=tmp_path)
    _one_error_line(proc, "W of shape (5, 3072)", "(8, 3072)", "model.hidden")
