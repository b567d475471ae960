"""A run's plan (scheda.planning.plan) is made once, from the typed config: its device, its one
step, and its K >= 1 models, each with its schedule built once; what runs is what it planned."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from omegaconf import OmegaConf

from scheda.run import run
from scheda.planning.plan import make_plan
from scheda.training.steps import StepChoice

from helpers import TINY, compose_cfg

BASE = [*TINY, "logger=none", "evaluate.enabled=false", "schedule=decreasing", "schedule.nu0=0.5",
        "schedule.delta_nu=0.1", "schedule.K=1", "schedule.nu_final=0.3", "schedule.initial_epochs=1"]


def _trained(results) -> list[float]:
    return [h["nu"] for h in results["history"]]


def test_a_run_trains_what_its_plan_says_and_leaves_its_config_as_composed(cifar_arrays, tmp_path):
    """The run's record is its plan's (the step, the schedule, every noise level trained); the
    composed config is read-only to the run (what it decides lives in its plan and its record)."""
    cfg = compose_cfg([f"dataset.root={cifar_arrays}", *BASE])
    plan = make_plan(cfg)
    results = run(cfg, tmp_path / "one")
    assert results["status"] == "completed" and results["plan"] == plan.record()
    assert results["schedule"] == plan.models[0].schedule.describe()
    assert _trained(results) == plan.models[0].schedule.epoch_nus() == [0.5, 0.4, 0.3]
    assert cfg.resume is None and cfg.init_from is None and OmegaConf.is_readonly(cfg) is not True


def test_a_resumed_run_takes_its_checkpoint_from_the_plan_not_from_a_config_written_back(cifar_arrays, tmp_path):
    """A killed run run again resumes from its own directory: the decision is the run's record
    (``config.resume``), the composed config stays as composed (its resume unset)."""
    cfg = compose_cfg([f"dataset.root={cifar_arrays}", *BASE, "trainer.max_epochs=2"])
    first = run(cfg, tmp_path / "one")
    assert first["epochs"] == 2 and first["config"]["resume"] is None
    saved = tmp_path / "one" / "results.json"
    saved.write_text(json.dumps({**json.loads(saved.read_text()), "status": "running"}))  # what a SIGKILL leaves
    again_cfg = compose_cfg([f"dataset.root={cifar_arrays}", *BASE])
    again = run(again_cfg, tmp_path / "one")
    assert again["status"] == "completed" and again["epochs"] == 3 and _trained(again) == [0.5, 0.4, 0.3]
    assert [a["action"] for a in again["attempts"]] == ["ran", "resumed"]
    assert again["config"]["resume"] == str(tmp_path / "one") and again_cfg.resume is None


def test_a_fused_sweep_trains_each_model_as_planned(cifar_arrays, tmp_path):
    cfg = compose_cfg([f"dataset.root={cifar_arrays}", *BASE, "trainer.parallel.nu=[0.5,0.4]",
                       "trainer.parallel.seed=[1,2,3]"])
    plan = make_plan(cfg)
    results = run(cfg, tmp_path / "sweep")
    assert [m["status"] for m in results["models"]] == ["completed"] * 6
    for planned in plan.models:
        model = json.loads((tmp_path / "sweep" / planned.subdir / "results.json").read_text())
        assert _trained(model) == planned.schedule.epoch_nus() and model["config"]["seed"] == planned.config.seed
    assert [_trained(json.loads((tmp_path / "sweep" / p.subdir / "results.json").read_text()))[0]
            for p in plan.models] == [0.5, 0.5, 0.5, 0.4, 0.4, 0.4]


def test_the_plan_holds_the_device_the_step_and_each_models_values(cifar_arrays):
    plan = make_plan(compose_cfg([f"dataset.root={cifar_arrays}", *BASE, "trainer.parallel.nu=[0.5,0.4]",
                                  "trainer.parallel.lr=[0.1]"]))
    assert plan.device == torch.device("cpu") and plan.step == StepChoice("fused", False, "fp32") and plan.sweep
    assert [(m.subdir, m.overrides) for m in plan.models] == [
        ("models/0", {"schedule.nu0": 0.5, "optim.lr": 0.1}), ("models/1", {"schedule.nu0": 0.4, "optim.lr": 0.1})]
    assert [m.schedule.epoch_nus() for m in plan.models] == [[0.5, 0.4, 0.3], [0.4, 0.3]]
    assert [m.config.optim.lr for m in plan.models] == [0.1, 0.1] and plan.config.optim.lr != 0.1
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.step = StepChoice("autograd")
    one = make_plan(compose_cfg([f"dataset.root={cifar_arrays}", *BASE, "trainer.step=autograd"]))
    assert not one.sweep and one.step.kind == "autograd" and [m.subdir for m in one.models] == [""]


def test_what_ran_is_what_the_plan_chose(cifar_arrays, tmp_path):
    """results.json records the step the plan chose (CPU: the fused torch step, no graph, no Triton)."""
    run(compose_cfg([f"dataset.root={cifar_arrays}", *BASE]), tmp_path / "one")
    saved = json.loads((tmp_path / "one" / "results.json").read_text())
    assert (saved["cuda_graph"], saved["triton"], saved["two_pass"]) == (False, False, False)


def test_results_record_the_plan_and_the_command_line_and_the_api_read_it(cifar_arrays, tmp_path):
    """What a run is, decided once in its plan, is written in results.json (``plan``); the sweepers' value
    and scheda.load read it there instead of deciding it again."""
    import json

    import pytest

    from scheda import load
    from scheda.run import run
    from scheda.utils.errors import ConfigError

    from helpers import TINY, compose_cfg

    base = [f"dataset.root={cifar_arrays}", *TINY, "schedule=constant", "schedule.epochs=1", "logger=none"]
    one = run(compose_cfg(base), tmp_path / "one")
    assert one["plan"]["sweep"] is False and one["plan"]["models"] == 1 and one["plan"]["step"]["kind"] == "fused"
    sweep = run(compose_cfg([*base, "trainer.parallel.nu=[0.2,0.4]"]), tmp_path / "sweep")
    assert sweep["plan"] == {**sweep["plan"], "sweep": True, "models": 2}
    assert json.loads((tmp_path / "sweep" / "results.json").read_text())["plan"]["sweep"] is True
    with pytest.raises(ConfigError, match="is a fused sweep"):
        load(tmp_path / "sweep")
    assert load(tmp_path / "one").results["plan"]["sweep"] is False
