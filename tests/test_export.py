"""scheda-export: weights as safetensors (with the run's config and noise levels as metadata),
features as an .npz with labels and row indices or as LIBSVM text that LIBLINEAR's own reader
reads; init_from=W.safetensors starts a run from exported weights. The issue's check: train from
an .npz of random data through scheda.train, encode, export both files, load the weights back."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import scheda
from scheda.utils.errors import CheckpointError
from scheda.evaluation.export import main as export

SMALL = ["model.hidden=6", "schedule=stages", "schedule.stages=[{nu:0.5,epochs:2},{nu:0.2,epochs:1}]",
         "trainer.device=cpu", "trainer.progress_bar=false", "logger=none", "classifier.c_log2_min=-1",
         "classifier.c_log2_max=0"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    rng = np.random.default_rng(0)
    np.savez(root / "mine.npz", train_x=rng.random((150, 11)).astype(np.float32), train_y=rng.integers(0, 3, 150))
    run = scheda.train([*SMALL, "dataset=arrays", f"dataset.root={root / 'mine.npz'}"], output_dir=root / "run")
    return root, run


def test_the_issues_check_train_encode_export_and_load_the_weights_back(trained, capsys):
    from safetensors import safe_open

    root, run = trained
    x = np.load(root / "mine.npz")["train_x"]
    features = run.encode(x)
    assert export([str(run.dir), "--weights", str(root / "W.safetensors"), "--features", str(root / "F.npz")]) == 0
    with safe_open(str(root / "W.safetensors"), framework="pt") as f:
        assert set(f.keys()) == {"W", "b", "b_prime"} and tuple(f.get_tensor("W").shape) == (6, 11)
        meta = f.metadata()
    assert meta["epoch"] == "3" and json.loads(meta["config"])["model"]["hidden"] == 6
    assert [h["nu"] for h in json.loads(meta["nu_history"])] == [0.5, 0.5, 0.2]
    saved = np.load(root / "F.npz")
    assert saved["train_x"].shape == (120, 6) and saved["val_x"].shape == (15, 6) and saved["test_x"].shape == (15, 6)
    assert np.allclose(saved["train_x"], features[saved["train_idx"]], atol=1e-6)  # the rows, by their indices
    assert sorted({*saved["train_idx"], *saved["val_idx"], *saved["test_idx"]}) == list(range(150))
    # the weights back, as init_from reads them, and a run started from them
    from scheda.training.checkpoint import load_checkpoint

    state = load_checkpoint(root / "W.safetensors")
    assert state["epoch"] == 3
    for key, value in run.model.state_dict().items():
        assert torch.equal(state["model"][key], value), key
    rest = [o for o in SMALL if not o.startswith("schedule")]
    again = scheda.train([*rest, "dataset=arrays", f"dataset.root={root / 'mine.npz'}",
                          f"init_from={root / 'W.safetensors'}", "schedule=constant", "schedule.epochs=1",
                          "evaluate.enabled=false"], output_dir=root / "again")
    assert again.results["status"] == "completed" and again.results["config"]["init_from"].endswith("W.safetensors")


def test_libsvm_features_are_read_by_liblinears_own_reader(trained, capsys):
    from liblinear.liblinearutil import svm_read_problem

    root, run = trained
    assert export([str(run.dir), "--features", str(root / "F.svm")]) == 0
    printed = capsys.readouterr().out
    assert all(f"F.{split}.svm: {split} features of 6" in printed for split in ("train", "val", "test")), printed
    y, x = svm_read_problem(str(root / "F.test.svm"))
    saved = np.load(root / "F.npz") if (root / "F.npz").exists() else None
    assert len(y) == 15 and len(x[0]) == 6
    if saved is not None:
        assert y == list(saved["test_y"].astype(float))


def test_bad_exports_are_refused_in_one_line(trained, tmp_path, capsys):
    root, run = trained
    with pytest.raises(SystemExit):
        export([str(run.dir)])  # nothing to export
    with pytest.raises(SystemExit):
        export([str(run.dir), "--weights", str(tmp_path / "W.pt")])
    assert export([str(run.dir), "--features", str(tmp_path / "F.csv")]) == 1
    assert "name an .npz (arrays) or an .svm" in capsys.readouterr().err
    (tmp_path / "bad.safetensors").write_bytes(b"nonsense")
    from scheda.training.checkpoint import load_checkpoint

    with pytest.raises(CheckpointError, match="cannot be read as exported weights"):
        load_checkpoint(tmp_path / "bad.safetensors")


def test_weights_of_a_run_trained_on_handed_arrays_need_no_data(tmp_path, monkeypatch, capsys):
    """README's Python example (scheda.train with data=(x, y)): its weights export (they need no
    data), and its features say in one line that the arrays are not on disk."""
    monkeypatch.chdir(tmp_path)
    x = np.random.default_rng(0).random((130, 24))
    run = scheda.train(["model.hidden=7", "schedule=constant", "schedule.nu=0.3", "schedule.epochs=2", "logger=none",
                        "trainer.progress_bar=false"], data=(x, np.arange(130) % 3))
    assert export([str(run.dir), "--weights", str(tmp_path / "W.safetensors")]) == 0
    from safetensors.torch import load_file

    assert torch.equal(load_file(tmp_path / "W.safetensors")["W"], run.model.W.detach())
    capsys.readouterr()
    assert export([str(run.dir), "--features", str(tmp_path / "F.npz")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: dataset.root=handed:") and "\n" not in err and not (tmp_path / "F.npz").exists()


def test_a_run_under_the_rule_gives_the_model_it_reports_and_resumes_from_its_newest(cifar_arrays, tmp_path, capsys,
                                                                                    caplog):
    """A run stopped by patience reports its best evaluation (epoch 1 here: nothing learns at lr
    1e-30, and ties go to the earliest); its newest checkpoint is the patience past it. The export,
    scheda.load and init_from=RUN take the reported model (they took the newest), a resume the
    newest; without the best epoch's checkpoint they fall back to the newest, saying so."""
    from helpers import TINY, run_train
    from scheda.training.checkpoint import find_model, load_checkpoint

    run_dir = tmp_path / "rule"
    proc = run_train([f"dataset.root={cifar_arrays}", *TINY, "schedule=constant", "schedule.epochs=5", "optim.lr=1e-30",
                      "trainer.patience=1", "evaluate.every=1", "trainer.checkpoint_every=1", "logger=none",
                      f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads((run_dir / "results.json").read_text())
    assert results["stopped_by"] == "patience" and results["epochs"] == 2
    assert find_model(run_dir).name == "epoch_00001.pt"
    assert export([str(run_dir), "--weights", str(tmp_path / "w.safetensors")]) == 0
    assert "from epoch 1 of " in capsys.readouterr().out
    best = load_checkpoint(run_dir / "checkpoints" / "epoch_00001.pt")["model"]
    assert torch.equal(scheda.load(run_dir).model.W, best["W"])
    continued = run_train([f"dataset.root={cifar_arrays}", *TINY, "schedule=constant", "schedule.epochs=1",
                           f"init_from={run_dir}", "logger=none", f"hydra.run.dir={tmp_path / 'next'}"], cwd=tmp_path)
    assert continued.returncode == 0, continued.stderr[-2000:]
    assert "epoch_00001.pt (epoch 1)" in (tmp_path / "next" / "train.log").read_text()
    (run_dir / "checkpoints" / "epoch_00001.pt").unlink()
    assert find_model(run_dir).name == "epoch_00002.pt"
    assert export([str(run_dir), "--weights", str(tmp_path / "w2.safetensors")]) == 0
    assert "reports its model at epoch 1, where no checkpoint was taken (trainer.checkpoint_every): using its " \
           "newest, epoch_00002.pt" in caplog.text
    resumed = run_train([f"resume={run_dir}", "trainer.patience=2"], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "epoch_00002.pt at epoch 2" in (run_dir / "train.log").read_text()
