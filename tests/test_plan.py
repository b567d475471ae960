"""A run's plan (scheda.planning.plan) is made once, from the typed config: its device, its one
step, and its K >= 1 models, each with its schedule built once; what runs is what it planned."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

import scheda.run
from scheda.config import GROUPS
from scheda.run import run
from scheda.planning.plan import make_plan
from scheda.training.step import StepChoice

from helpers import TINY, compose_cfg

BASE = [*TINY, "logger=none", "evaluate.enabled=false", "schedule=decreasing", "schedule.nu0=0.5",
        "schedule.delta_nu=0.1", "schedule.K=1", "schedule.nu_final=0.3", "schedule.initial_epochs=1"]


@pytest.fixture
def counted(monkeypatch):
    """How often a plan is made, a schedule built (every schedule option's build counted) and the
    noise group checked (typed once: what builds from it neither types nor checks it again)."""
    from scheda.model.noise import Masking

    counts = {"plans": 0, "schedules": 0, "noise checks": 0}
    check = Masking.check

    def check_counted(self):
        counts["noise checks"] += 1
        return check(self)

    monkeypatch.setattr(Masking, "check", check_counted)
    make_plan_ = scheda.run.make_plan

    def make_plan_counted(*args, **kwargs):
        counts["plans"] += 1
        return make_plan_(*args, **kwargs)

    monkeypatch.setattr(scheda.run, "make_plan", make_plan_counted)
    for cls in GROUPS["schedule"].values():
        def build(self, _build=cls.build):
            counts["schedules"] += 1
            return _build(self)
        monkeypatch.setattr(cls, "build", build)
    return counts


def test_a_run_makes_its_plan_once_builds_its_schedule_once_and_types_each_group_once(cifar_arrays, tmp_path, counted):
    results = run(compose_cfg([f"dataset.root={cifar_arrays}", *BASE]), tmp_path / "one")
    assert results["status"] == "completed" and results["epochs"] == 3  # nu 0.5, 0.4, 0.3
    assert counted == {"plans": 1, "schedules": 1, "noise checks": 1}


def test_a_fused_sweep_makes_one_plan_and_one_schedule_a_model(cifar_arrays, tmp_path, counted):
    results = run(compose_cfg([f"dataset.root={cifar_arrays}", *BASE, "trainer.parallel.nu=[0.5,0.4]",
                               "trainer.parallel.seed=[1,2,3]"]), tmp_path / "sweep")
    assert [m["status"] for m in results["models"]] == ["completed"] * 6
    assert counted == {"plans": 1, "schedules": 6, "noise checks": 1}


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
    one = make_plan(compose_cfg([f"dataset.root={cifar_arrays}", *BASE, "trainer.fused=false"]))
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
