"""The Python API (scheda/api.py): train from arrays or tensors in this process, twice in a row as a
notebook would, encode numpy to numpy and tensors to tensors, load a run back; bad calls refused
in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import scheda
from scheda.utils.errors import ConfigError, DataError

from helpers import compose_cfg

SMALL = ["model.hidden=6", "schedule=constant", "schedule.epochs=2", "trainer.device=cpu",
         "trainer.progress_bar=false", "logger=none", "classifier.c_log2_min=-1", "classifier.c_log2_max=0"]
RNG = np.random.default_rng(0)


def test_train_encode_load_and_train_again_in_one_process(tmp_path):
    x, y = RNG.random((120, 9)).astype(np.float32), RNG.integers(0, 3, 120)
    run = scheda.train(SMALL, data=(x, y), output_dir=tmp_path / "a")
    assert run.dir == tmp_path / "a" and run.results["status"] == "completed"
    assert run.results["evaluations"][-1]["test_n"] == 12  # a tenth carved as the test split
    features = run.encode(x)
    assert isinstance(features, np.ndarray) and features.shape == (120, 6)
    as_tensor = run.encode(torch.from_numpy(x))
    assert isinstance(as_tensor, torch.Tensor) and np.allclose(as_tensor.numpy(), features)
    expected = torch.sigmoid(torch.from_numpy(x) @ run.model.W.T + run.model.b).detach().numpy()
    assert np.allclose(features, expected, atol=1e-6)
    assert np.allclose(scheda.load(run.dir).encode(x), features)
    # a notebook's second call: a dict of overrides, tensors without labels (no evaluation)
    second = scheda.train({"model.hidden": 4, **{o.split("=")[0]: o.split("=")[1] for o in SMALL[1:]}},
                          data=torch.from_numpy(x), output_dir=tmp_path / "b")
    assert second.results["status"] == "completed" and not second.results.get("evaluations")
    assert second.encode(x).shape == (120, 4)
    assert run.status == "completed"


def test_a_run_killed_outright_reads_killed(tmp_path):
    """results.json says running, and the process named in its lock has ended: the Run says killed,
    as scheda-results does (scheda.runs.rundir.run_status); while that process lives, running."""
    import socket
    import subprocess

    rng = np.random.default_rng(5)  # its own: the module's RNG feeds the other tests their values
    x, y = rng.random((60, 9)).astype(np.float32), rng.integers(0, 3, 60)
    run = scheda.train(SMALL, data=(x, y), output_dir=tmp_path / "a")
    results = json.loads((run.dir / "results.json").read_text())
    (run.dir / "results.json").write_text(json.dumps({**results, "status": "running"}))
    assert scheda.load(run.dir).status == "running"  # its lock names this process, alive
    ended = subprocess.Popen(["true"])
    ended.wait()
    (run.dir / ".lock").write_text(f"pid {ended.pid} on {socket.gethostname()} since 2026-11-29 10:00:00\n")
    again = scheda.load(run.dir)
    assert again.status == "killed" and repr(again) == f"Run({str(run.dir)!r}, status='killed')"


def test_bad_calls_are_refused_in_one_line(tmp_path):
    x = RNG.random((50, 5))
    with pytest.raises(ConfigError, match=r"give \(train_x,\), \(train_x, train_y\)"):
        scheda.train(SMALL, data=(x, x[:, 0], x))
    with pytest.raises(ConfigError, match="give a list of strings"):
        scheda.train("model.hidden=4")
    with pytest.raises(ConfigError, match=r"^optim.lrr is not a setting of optim \(SGDConfig\): did you mean optim.lr\?$"):
        scheda.train(["optim.lrr=1"], data=(x,), output_dir=tmp_path / "typo")  # Hydra's two lines, as the command's one
    with pytest.raises(ConfigError, match=r"^model.hidden: Value 'many' of type 'str' could not be converted"):
        scheda.train({"model.hidden": "many"}, data=(x,), output_dir=tmp_path / "type")
    with pytest.raises(DataError, match="train_x holds NaN"):
        scheda.train(SMALL, data=(np.full((50, 5), np.nan),), output_dir=tmp_path / "nan")
    with pytest.raises(ConfigError, match="holds no scheda run"):
        scheda.load(tmp_path)
    run = scheda.train(SMALL, data=(x,), output_dir=tmp_path / "ok")
    with pytest.raises(ValueError, match="encode takes rows of 5 inputs"):
        run.encode(x[:, :3])
    # pixels not divided by their scale were encoded silently (a sigmoid of them is all ones)
    with pytest.raises(ValueError, match=r"encode takes inputs in \[0, 1\], as the run trained on them .* not values "
                                         r"in \[0\.\d+, 2[0-9]{2}\.\d+\]: divide them by their scale first"):
        run.encode(255 * x)
    holes = x.copy()
    holes[0, 0] = holes[7, 3] = np.nan
    with pytest.raises(ValueError, match="encode's inputs hold 2 NaN values"):
        run.encode(holes)
    assert run.encode((255 * x).astype(np.uint8)).shape == (50, 6) and run.encode(x[:0]).shape == (0, 6)
    from scheda.data import load_dataset

    with pytest.raises(DataError, match="were handed to it"):  # the arrays lived for the call only
        load_dataset({"name": "arrays", "root": run.results["config"]["dataset"]["root"]})
    with pytest.raises(DataError, match="give train_x and optionally"):  # run() itself, handed a wrong name
        from scheda.run import run as run_config

        run_config(compose_cfg(["dataset=arrays", *SMALL]), tmp_path / "wrong", data={"train_X": x})
    with pytest.raises(ConfigError, match="compose it with dataset=arrays, not dataset=cifar10"):
        run_config(compose_cfg(SMALL), tmp_path / "cifar", data={"train_x": x})


@pytest.mark.parametrize("damage", [b'{"status": "compl', b"\xa9\x00 not even text"], ids=["cut", "binary"])
def test_a_damaged_results_json_is_named_in_one_line_where_a_run_is_read(tmp_path, damage):
    """A results.json cut short, or not UTF-8 at all, is an error naming the file where the run
    itself is asked for, and a run without results where only its label or checkpoints are
    wanted (plot-filters, export): no JSONDecodeError or UnicodeDecodeError traceback."""
    from scheda.analysis.core import run_label, sweep_models
    from scheda.training.checkpoint import find_model
    from scheda.utils.errors import CheckpointError

    run = scheda.train(SMALL, data=(RNG.random((30, 5)),), output_dir=tmp_path / "run")
    (run.dir / "results.json").write_bytes(damage)
    with pytest.raises(DataError, match=r"run/results.json cannot be read as JSON \(cut short or damaged\): its "
                                        r"checkpoints are in .*run/checkpoints$"):
        scheda.load(run.dir)
    assert run_label(run.dir) == "run" and find_model(run.dir).name == "epoch_00002.pt"
    with pytest.raises(DataError, match="run has no readable results.json"):
        sweep_models(run.dir)
    from scheda.training.checkpoint import load_run_model

    with pytest.raises(CheckpointError, match="has neither .hydra/config.yaml nor a results.json with the run's"):
        load_run_model(run.dir, "cpu")


def test_a_runs_logged_scalars_read_back_as_its_curves(tmp_path):
    x, y = RNG.random((90, 7)).astype(np.float32), RNG.integers(0, 3, 90)
    overrides = [o for o in SMALL if not o.startswith("logger=")]
    run = scheda.train([*overrides, "logger=[csv]", "evaluate.every=1"], data=(x, y), output_dir=tmp_path / "csv")
    curves = run.metrics
    assert sorted(curves["train/nu"]) == [1, 2]
    assert curves["train/reconstruction_ce"] == {h["epoch"]: h["loss"] for h in run.results["history"]}
    assert curves["eval/val_error"] == {e["epoch"]: e["val_error"] for e in run.results["evaluations"]}
    assert scheda.load(tmp_path / "csv").metrics == curves
    assert scheda.train(SMALL, data=(x, y), output_dir=tmp_path / "none").metrics == {}  # logger=none: no curves
