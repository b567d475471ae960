"""The step registry (scheda.training.steps): a step is one module (its refusal, whether
trainer.step=auto takes it, its build, its fallback, its benchmark timing), and the config, the rules,
the plan, the loop and results.json take a new one from its registration alone."""

from __future__ import annotations

import json

import pytest
import torch

from scheda.planning import rules
from scheda.run import run
from scheda.training import step as implementations
from scheda.training.steps import (REGISTRY, CannotRunHere, StepChoice, StepKind, auto_kind, built, register_step,
                                   step_kind)
from scheda.training.checkpoint import load_checkpoint
from scheda.utils.errors import ConfigError

from helpers import TINY, compose_cfg

BASE = [*TINY, "logger=none", "evaluate.enabled=false", "schedule=constant", "schedule.nu=0.3", "schedule.epochs=2"]


@pytest.fixture
def registered():
    """Steps registered by a test, removed after it (the registry is the process's)."""
    before = dict(REGISTRY)
    yield
    REGISTRY.clear()
    REGISTRY.update(before)


def test_the_steps_are_registered_in_the_listing_order_and_auto_chooses_by_rank():
    assert list(REGISTRY) == ["autograd", "fused", "triton", "two_pass"]
    assert [k.name for k in sorted((k for k in REGISTRY.values() if k.auto_rank is not None),
                                   key=lambda k: k.auto_rank)] == ["triton", "fused", "autograd"]
    assert step_kind("two_pass").auto_rank is None and step_kind("triton").fallback == "fused"
    assert step_kind("autograd").timing(None) == "autograd_s" and step_kind("triton").timing(None) == "default_s"
    assert step_kind("triton").timing(False) is None and step_kind("fused").timing(None) is None
    with pytest.raises(ValueError, match="a step is one of autograd, fused, triton, two_pass, not 'eager'"):
        StepChoice("eager")


def _typed(*overrides: str):
    from scheda.planning.run_config import typed_config

    return typed_config(compose_cfg([*BASE, *overrides]))


def test_a_step_of_one_module_is_named_refused_built_and_recorded(cifar_arrays, tmp_path, registered):
    """A new step, one class: the fused update built directly (never graphed), for a tied DA alone."""

    @register_step
    class Plain(StepKind):
        name, title = "plain", "plain step"
        devices = ("cpu",)

        def refusal(self, config):
            return None if config.model.loss == "cross_entropy" else "trainer.step=plain needs model.loss=cross_entropy"

        def timing(self, cuda_graph):
            return "eager_s"

        def build(self, choice, models, optimizers, noises, batch_size, x_all, generators):
            return built(implementations.BatchedStep(models, optimizers, noises, batch_size, x_all.device,
                                                     choice.precision), choice, None)

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    config = _typed("trainer.step=plain")
    assert rules.choose_step(config, cpu).kind == "plain"
    assert auto_kind(_typed(), cpu) == "fused"  # auto never takes a step without a rank
    assert rules.cuda_settings_need_a_cuda_device(config, cuda) == (
        "trainer.step=plain needs a CPU device, not cuda: use trainer.device=cpu or trainer.step=auto")
    with pytest.raises(ConfigError, match="trainer.step=plain needs model.loss=cross_entropy"):
        rules.check(_typed("trainer.step=plain", "model.loss=squared_error"), cpu)
    run(compose_cfg([f"dataset.root={cifar_arrays}", *BASE, "trainer.step=plain"]), tmp_path / "plain")
    run(compose_cfg([f"dataset.root={cifar_arrays}", *BASE, "trainer.step=fused"]), tmp_path / "fused")
    results = json.loads((tmp_path / "plain" / "results.json").read_text())
    assert results["step"]["kind"] == "plain" and results["step"]["fallback"] is None
    torch.testing.assert_close(load_checkpoint(tmp_path / "plain")["model"]["W"],
                               load_checkpoint(tmp_path / "fused")["model"]["W"], rtol=0, atol=0)


def test_a_step_that_cannot_run_here_trains_by_its_fallback_recorded(cifar_arrays, tmp_path, registered):
    @register_step
    class Missing(StepKind):
        name, title = "missing", "missing step"
        fallback = "fused"

        def build(self, choice, models, optimizers, noises, batch_size, x_all, generators):
            raise CannotRunHere("no compiler here")

    run(compose_cfg([f"dataset.root={cifar_arrays}", *BASE, "trainer.step=missing"]), tmp_path / "run")
    step = json.loads((tmp_path / "run" / "results.json").read_text())["step"]
    assert step["kind"] == "fused" and step["fallback"] == "the missing step could not run here (no compiler here)"


def test_a_step_registered_twice_or_named_auto_is_refused(registered):
    class Again(StepKind):
        name, title = "fused", "again"

        def build(self, *args):
            raise AssertionError

    with pytest.raises(ValueError, match="registered twice"):
        register_step(Again)
    Again.name = "auto"
    with pytest.raises(ValueError, match="registered twice"):
        register_step(Again)
