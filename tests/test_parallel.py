"""Fused sweeps (trainer.parallel): K models in one process equal the same models trained alone."""

import json

import pytest
import torch

from scheda.training.checkpoint import load_checkpoint
from scheda.utils.errors import ConfigError
from scheda.run import run

from helpers import TINY, compose_cfg, run_train

BASE = [*TINY, "logger=none", "classifier.c_log2_min=-2", "classifier.c_log2_max=0", "classifier=torch_lr"]


def _alone(root, tmp_path, name, overrides):
    return run(compose_cfg([f"dataset.root={root}", *BASE, *overrides]), tmp_path / name)


def _assert_same_weights(a, b):
    for key in a["model"]:
        torch.testing.assert_close(a["model"][key], b["model"][key], rtol=1e-4, atol=1e-6)


def test_each_fused_model_equals_the_model_trained_alone(cifar_arrays, tmp_path):
    schedule = ["schedule=constant", "schedule.epochs=3"]
    fused = run(compose_cfg([f"dataset.root={cifar_arrays}", *BASE, *schedule, "trainer.parallel.nu=[0.2,0.5]",
                             "trainer.parallel.lr=[0.01,0.05]"]), tmp_path / "fused")
    assert [m["overrides"] for m in fused["models"]] == [
        {"schedule.nu": 0.2, "optim.lr": 0.01}, {"schedule.nu": 0.2, "optim.lr": 0.05},
        {"schedule.nu": 0.5, "optim.lr": 0.01}, {"schedule.nu": 0.5, "optim.lr": 0.05}]
    assert fused["best_val_error"] == min(m["val_error"] for m in fused["models"])
    assert fused["seconds"] > 0  # the sweep's wall time: the protocol's report sums it (its Jobs table)
    for k, model in enumerate(fused["models"]):
        nu, lr = model["overrides"]["schedule.nu"], model["overrides"]["optim.lr"]
        alone = _alone(cifar_arrays, tmp_path, f"alone{k}", [*schedule, f"schedule.nu={nu}", f"optim.lr={lr}"])
        mine = json.loads((tmp_path / "fused" / "models" / str(k) / "results.json").read_text())
        assert mine["status"] == "completed" and mine["config"]["schedule"]["nu"] == nu
        assert [h["loss"] for h in mine["history"]] == pytest.approx([h["loss"] for h in alone["history"]], rel=1e-5)
        _assert_same_weights(load_checkpoint(tmp_path / "fused" / "models" / str(k)),
                             load_checkpoint(tmp_path / f"alone{k}"))
        assert len(mine["evaluations"]) == 1


@pytest.mark.parametrize("sizes", [["trainer.batch_size=15"], ["dataset.train_limit=77", "trainer.batch_size=15"]])
def test_fused_models_equal_alone_when_the_minibatch_does_not_divide_the_data(cifar_arrays, tmp_path, sizes):
    # 80 (or 77) training images in minibatches of 15: every epoch ends with a partial one.
    schedule = ["schedule=constant", "schedule.epochs=2", "evaluate.enabled=false", *sizes]
    run(compose_cfg([f"dataset.root={cifar_arrays}", *BASE, *schedule, "trainer.parallel.nu=[0.2,0.5]"]),
        tmp_path / "fused")
    for k, nu in enumerate([0.2, 0.5]):
        _alone(cifar_arrays, tmp_path, f"alone{k}", [*schedule, f"schedule.nu={nu}"])
        _assert_same_weights(load_checkpoint(tmp_path / "fused" / "models" / str(k)),
                             load_checkpoint(tmp_path / f"alone{k}"))


def test_models_of_different_lengths_and_random_schedules(cifar_arrays, tmp_path):
    # Decreasing to the last level above 0: nu0=0.3 runs 3 epochs, nu0=0.2 runs 2.
    schedule = ["schedule=decreasing", "schedule.K=1", "schedule.initial_epochs=1", "schedule.delta_nu=0.1"]
    fused = run(compose_cfg([f"dataset.root={cifar_arrays}", *BASE, *schedule, "trainer.parallel.nu=[0.3,0.2]"]),
                tmp_path / "fused")
    for k, nu in enumerate([0.3, 0.2]):
        alone = _alone(cifar_arrays, tmp_path, f"alone{k}", [*schedule, f"schedule.nu0={nu}"])
        mine = json.loads((tmp_path / "fused" / "models" / str(k) / "results.json").read_text())
        assert mine["switches"] == alone["switches"] and mine["epochs"] == alone["epochs"]
        _assert_same_weights(load_checkpoint(tmp_path / "fused" / "models" / str(k)), load_checkpoint(tmp_path / f"alone{k}"))
    random = ["schedule=random_uniform", "schedule.epochs=2"]
    run(compose_cfg([f"dataset.root={cifar_arrays}", *BASE, *random, "trainer.parallel.seed=[3,4]"]), tmp_path / "rnd")
    alone = _alone(cifar_arrays, tmp_path, "rnd_alone", [*random, "seed=4"])
    _assert_same_weights(load_checkpoint(tmp_path / "rnd" / "models" / "1"), load_checkpoint(tmp_path / "rnd_alone"))
    assert fused["models"][0]["status"] == "completed"
    from scheda.runs.rundir import summary_lines  # its last lines said "(0 epochs)"

    assert [m["epochs"] for m in fused["models"]] == [3, 2]
    assert summary_lines(fused, tmp_path / "fused")[0].endswith(" min (2-3 epochs)")


def test_parallel_through_the_entry_point_and_resume(cifar_arrays, tmp_path):
    args = [f"dataset.root={cifar_arrays}", *BASE, "schedule=constant", "schedule.epochs=3",
            "trainer.parallel.lr=[0.01,0.03]", "trainer.checkpoint_every=1"]
    first = run_train([*args, "trainer.max_epochs=2", f"hydra.run.dir={tmp_path / 'a'}"], cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    second = run_train([*args, f"resume={tmp_path / 'a'}", "trainer.max_epochs=null", f"hydra.run.dir={tmp_path / 'b'}"],
                       cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    golden = run_train([*args, f"hydra.run.dir={tmp_path / 'g'}"], cwd=tmp_path)
    assert golden.returncode == 0, golden.stderr
    for k in range(2):
        a = load_checkpoint(tmp_path / "b" / "models" / str(k))
        assert a["epoch"] == 3
        for key, value in load_checkpoint(tmp_path / "g" / "models" / str(k))["model"].items():
            assert torch.equal(a["model"][key], value)


@pytest.mark.parametrize("overrides, match", [
    (["trainer.parallel.lr=[0.01,0.02]", "optim.momentum=0.9"], "optim.momentum=0"),
    (["trainer.parallel.nu=[0.1,0.2]", "schedule=stages"], "trainer.parallel.nu needs schedule"),
    (["trainer.parallel.lr=[0.01,-1]"], "optim.lr=-1.0 must be > 0"),
])
def test_bad_parallel_configs(cifar_arrays, tmp_path, overrides, match):
    with pytest.raises(ConfigError, match=match):
        run(compose_cfg([f"dataset.root={cifar_arrays}", *BASE, *overrides]), tmp_path / "bad")


def test_a_fused_model_can_be_loaded_like_a_run(cifar_arrays, tmp_path):
    from scheda.training.checkpoint import load_run_model

    run(compose_cfg([f"dataset.root={cifar_arrays}", *BASE, "schedule=constant", "schedule.epochs=1",
                     "trainer.parallel.seed=[1,2]", "evaluate.enabled=false"]), tmp_path / "fused")
    cfg, model, state = load_run_model(tmp_path / "fused" / "models" / "1")
    assert cfg.seed == 2 and state["epoch"] == 1 and model.n_hidden == 8


def test_a_fused_sweep_records_each_models_config_as_composing_it_alone_would(cifar_arrays, tmp_path, caplog):
    """Building apart from running: each model is the sweep's typed run with its values set, and
    records the config that composing it alone would give (its metrics where a run's are)."""
    from omegaconf import OmegaConf

    overrides = [f"dataset.root={cifar_arrays}", *TINY, "classifier=torch_lr", "schedule=constant", "schedule.epochs=1",
                 "evaluate.enabled=false", "logger=[tensorboard,csv]"]
    with caplog.at_level("INFO", logger="scheda.run"):
        run(compose_cfg([*overrides, "trainer.parallel.nu=[0.2,0.5]", "trainer.parallel.seed=[3,4]"]),
            tmp_path / "fused")
    assert f"metrics: {tmp_path / 'fused'}/models/*/metrics.csv (scheda-results --metric NAME)" in caplog.text
    for k, (nu, seed) in enumerate([(0.2, 3), (0.2, 4), (0.5, 3), (0.5, 4)]):
        alone = OmegaConf.to_container(compose_cfg([*overrides, f"schedule.nu={nu}", f"seed={seed}"]), resolve=True)
        alone["logger"]["tensorboard"]["log_dir"] = f"tensorboard/schedule.nu={nu},seed={seed}"
        saved = OmegaConf.to_container(OmegaConf.load(tmp_path / "fused" / "models" / str(k) / "config.yaml"))
        assert saved == alone
        assert (tmp_path / "fused" / "models" / str(k) / "metrics.csv").exists()


def test_a_finished_fused_sweep_whose_resume_fails_on_its_data_keeps_every_models_record(cifar_arrays, tmp_path):
    """Resumed to train on (more epochs) from a shell whose data root is wrong: the sweep's record
    and each model's come back as they were, the failed resume noted in the sweep's attempts
    (each model's results.json had been rewritten empty, 'running', before the data failed)."""
    from scheda.utils.errors import DataError

    args = [*BASE, "schedule=constant", "schedule.epochs=2", "trainer.parallel.nu=[0.1,0.3]"]
    run(compose_cfg([f"dataset.root={cifar_arrays}", *args]), tmp_path / "sweep")
    before = {p: json.loads(p.read_text()) for p in sorted((tmp_path / "sweep").glob("**/results.json"))}
    with pytest.raises(DataError):
        run(compose_cfg([f"dataset.root={tmp_path / 'nowhere'}", "dataset.download=false", *args,
                         f"resume={tmp_path / 'sweep'}", "trainer.max_epochs=3"]), tmp_path / "sweep")
    for path, record in before.items():
        after = json.loads(path.read_text())
        assert after["status"] == "completed" and after["evaluations"] == record["evaluations"], path
    attempts = json.loads((tmp_path / "sweep" / "results.json").read_text())["attempts"]
    assert [(a["action"], a.get("status")) for a in attempts] == [("ran", None), ("resumed", "failed")]
    assert attempts[-1]["error"].startswith("DataError: CIFAR-10 not found in ")
