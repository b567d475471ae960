"""SIGKILL a training run at random points, resume it, and get the uninterrupted run's weights."""

import csv
import io
import json
import random
import signal
import time
from pathlib import Path

import pytest
import torch

from scheda.training.checkpoint import load_checkpoint

from helpers import TINY, run_module, run_train, start_faulty_train

EPOCHS = 8
SCHEDULE = ["schedule=decreasing", "schedule.nu0=0.6", "schedule.delta_nu=0.1", "schedule.K=2",
            "schedule.initial_epochs=2", "schedule.T=3", "trainer.checkpoint_every=1",
            "evaluate.enabled=false", "logger=none"]


def _args(root, out):
    return [f"dataset.root={root}", *TINY, *SCHEDULE, f"hydra.run.dir={out}"]


def _wait_for(path: Path, proc, timeout=120):
    deadline = time.time() + timeout
    while not path.exists():
        assert proc.poll() is None, f"run ended before {path.name} appeared: {proc.stderr.read()}"
        assert time.time() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def _status(run_dir: Path) -> str:
    proc = run_module("scheda.runs.gather", [run_dir, "--format", "csv"], timeout=120)
    assert proc.returncode == 0, proc.stderr
    return next(csv.DictReader(io.StringIO(proc.stdout)))["status"]


def _kill(proc):
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    root = tmp_path_factory.mktemp("golden")
    from helpers import write_cifar_arrays

    data = write_cifar_arrays(root / "cifar10")
    proc = run_train(_args(data, root / "run"), cwd=root)
    assert proc.returncode == 0, proc.stderr
    return data, load_checkpoint(root / "run"), json.loads((root / "run" / "results.json").read_text())


def _resume_and_compare(golden, killed_dir, tmp_path, out=None):
    """Resume ``killed_dir`` into ``out`` (a new directory unless given; ``killed_dir`` itself: in place)."""
    data, golden_state, golden_results = golden
    out = out or tmp_path / "resumed"
    proc = run_train([*_args(data, out), f"resume={killed_dir}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    final = load_checkpoint(out)
    assert final["epoch"] == EPOCHS
    for key, value in golden_state["model"].items():
        assert torch.equal(final["model"][key], value), f"{key} differs after resume"
    results = json.loads((out / "results.json").read_text())
    assert results["switches"] == golden_results["switches"]
    assert [h["nu"] for h in results["history"]] == [0.6, 0.6, 0.5, 0.5, 0.4, 0.4, 0.3, 0.3]
    assert [h["loss"] for h in results["history"]] == [h["loss"] for h in golden_results["history"]]
    return results


@pytest.mark.parametrize("seed", [0, 1])
def test_kill_at_a_random_point_then_resume(golden, tmp_path, seed):
    rng = random.Random(seed)
    data = golden[0]
    killed = tmp_path / "killed"
    proc = start_faulty_train(_args(data, killed), tmp_path, epoch_sleep=0.15)
    _wait_for(killed / "checkpoints" / "epoch_00001.pt", proc)
    time.sleep(rng.uniform(0.0, 0.15 * (EPOCHS - 2)))
    _kill(proc)
    done = load_checkpoint(killed)["epoch"]
    assert 1 <= done < EPOCHS
    # no handler ran, yet its time is on record to its newest checkpoint, or the one before where the kill fell
    # between the checkpoint's write and the record's (0.15 s of sleep after each epoch's end)
    killed_seconds = json.loads((killed / "results.json").read_text())["seconds"]
    assert killed_seconds >= 0.15 * (done - 2)
    resumed = _resume_and_compare(golden, killed, tmp_path, out=killed if seed else None)
    if seed:  # resumed in place: its record spans both attempts (a new directory's starts its own)
        assert resumed["seconds"] > killed_seconds and [a["action"] for a in resumed["attempts"]] == ["ran", "resumed"]


def test_kill_during_a_checkpoint_write_then_resume(golden, tmp_path):
    data = golden[0]
    killed = tmp_path / "killed"
    target = killed / "checkpoints" / "epoch_00004.pt"
    proc = start_faulty_train(_args(data, killed), tmp_path, hang_write=target.name)
    _wait_for(Path(str(target) + ".hanging"), proc)
    assert _status(killed) == "running"
    _kill(proc)
    # results.json still says running, and nothing will change that: scheda-results reads its lock's dead holder
    assert json.loads((killed / "results.json").read_text())["status"] == "running"
    assert _status(killed) == "killed"
    assert not target.exists()  # the half-written file never took the checkpoint's name
    assert list(target.parent.glob(".epoch_00004.pt.*.tmp"))
    assert load_checkpoint(killed)["epoch"] == 3  # the previous checkpoint is intact and chosen
    _resume_and_compare(golden, killed, tmp_path)
