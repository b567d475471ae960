"""Every rule between config groups (scheda.training.rules) refuses its config with one line before the
run loads its data or writes anything but the failure's record; the list of cases covers every
rule there is."""

from __future__ import annotations

import dataclasses
import json

import pytest

from scheda.training import rules
from scheda.utils.errors import ConfigError
from scheda.run import run
from helpers import STAGES, TINY, compose_cfg

# rule -> overrides that break it (and only it), and the start of its message
CASES = {
    "graph_can_capture_the_step": (["trainer.cuda_graph=true", "trainer.precision=bf16"],
                                   "trainer.cuda_graph=true needs the fused step"),
    "triton_can_take_the_step": (["trainer.triton=true", "noise=gaussian"],
                                 "trainer.triton=true needs the masking noise"),
    "parallel_needs_the_fused_step": (["model.loss=squared_error", "trainer.parallel.lr=[0.1,0.2]"],
                                      "trainer.parallel needs the plain fused step"),
    "parallel_nu_needs_a_noise_level": (["schedule=random_uniform", "trainer.parallel.nu=[0.1,0.2]"],
                                        "trainer.parallel.nu needs schedule"),
    "parallel_trains": (["trainer.parallel.lr=[0.1,0.2]", "finetune.enabled=true", "finetune.standalone=true",
                         "init_from=x.pt"], "trainer.parallel trains models"),
    "resume_or_init_from": (["resume=RUN", "init_from=x.pt"], "resume and init_from are both set"),
    "standalone_needs_init_from": (["finetune.enabled=true", "finetune.standalone=true"],
                                   "finetune.standalone=true needs init_from"),
    "finetune_output_needs_a_linear_classifier": (["classifier=knn", "finetune.enabled=true"],
                                                  "finetune.init_output=classifier starts"),
    "raw_needs_evaluation": (["model=raw", "evaluate.enabled=false"], "model=raw only evaluates"),
    "two_pass_is_a_triton_step": (["trainer.precision=tf32x3"], "trainer.precision=tf32x3 is the two-pass step's"),
}
NEEDS_CUDA = {"graph_can_capture_the_step", "triton_can_take_the_step"}  # the trainer's own check comes first off CUDA
# Every reason a CUDA graph refuses a run (scheda.training.step.graph_refusal), each alone.
GRAPH_REFUSALS = [
    (["trainer.precision=bf16"], "trainer.cuda_graph=true needs the fused step"),
    (["trainer.fused=false"], "trainer.cuda_graph=true needs the fused step"),
    (["model.loss=squared_error"], "trainer.cuda_graph=true needs the fused step"),
    (["optim.momentum=0.9"], "trainer.cuda_graph=true needs plain SGD"),
    (["optim.weight_decay=0.001"], "trainer.cuda_graph=true needs plain SGD"),
    (["schedule=random_uniform"], "trainer.cuda_graph=true needs one noise level per epoch"),
    (["schedule=random_discrete"], "trainer.cuda_graph=true needs one noise level per epoch"),
]

# Every reason the Triton step refuses a run (scheda.training.step.triton_refusal), each alone.
TRITON_REFUSALS = [
    (["trainer.precision=bf16"], "trainer.triton=true needs the plain fused step"),
    (["trainer.fused=false"], "trainer.triton=true needs the plain fused step"),
    (["model.loss=squared_error"], "trainer.triton=true needs the plain fused step"),
    (["optim.momentum=0.9"], "trainer.triton=true needs the plain fused step"),
    (["noise=salt_pepper"], "trainer.triton=true needs the masking noise"),
    (["schedule=random_uniform"], "trainer.triton=true needs the masking noise, one noise level per epoch"),
]


def test_the_cases_cover_every_rule():
    assert sorted(CASES) == sorted(rule.__name__ for rule in rules.RULES)


def _cfg(cifar_arrays, overrides):
    schedule = [] if any(o.startswith("schedule=") for o in overrides) else STAGES
    tiny = [o for o in TINY if "model=raw" not in overrides or not o.startswith("model.")]  # raw has no hidden units
    return compose_cfg([f"dataset.root={cifar_arrays}", *tiny, *schedule, *overrides])


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_rule_refuses_its_config_and_only_its_own(cifar_arrays, name):
    overrides, message = CASES[name]
    cfg = _cfg(cifar_arrays, [o for o in overrides if not o.startswith("resume=")])
    if name == "resume_or_init_from":
        cfg.resume = "RUN"
    typed = _typed_without_device_checks(cfg)
    assert [rule.__name__ for rule in rules.RULES if rule(typed)] == [name]
    assert getattr(rules, name)(typed).startswith(message)


# resume= reads the run it continues before anything else (scheda.runs.resume), so its rule is
# checked on the typed config above; the CUDA-graph rules come after the trainer's own device check.
@pytest.mark.parametrize("name", sorted(set(CASES) - NEEDS_CUDA - {"resume_or_init_from"}))
def test_a_broken_rule_stops_the_run_before_any_file(cifar_arrays, tmp_path, name):
    overrides, message = CASES[name]
    out = tmp_path / "run"
    out.mkdir()
    with pytest.raises(ConfigError) as exc:
        run(_cfg(cifar_arrays, overrides), out)
    assert str(exc.value).startswith(message) and "\n" not in str(exc.value)
    # No data loaded, no TensorBoard, no checkpoint: only the failure's record, which a sweep reads.
    assert sorted(p.name for p in out.iterdir()) == [".lock", "results.json"]
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "failed" and message in results["error"]


def _typed_without_device_checks(cfg) -> rules.TypedRun:
    """The typed run, with trainer.cuda_graph, trainer.triton and trainer.two_pass kept off while
    checking (this machine has no CUDA) and put back after: the rules read values, not devices."""
    graph, triton, two_pass = cfg.trainer.cuda_graph, cfg.trainer.triton, cfg.trainer.two_pass
    cfg.trainer.cuda_graph = cfg.trainer.triton = cfg.trainer.two_pass = False
    typed = rules.typed_run(cfg)
    cfg.trainer.cuda_graph, cfg.trainer.triton, cfg.trainer.two_pass = graph, triton, two_pass
    return dataclasses.replace(typed, trainer=dataclasses.replace(typed.trainer, cuda_graph=graph, triton=triton,
                                                                  two_pass=two_pass))


@pytest.mark.parametrize("overrides", [["model.loss=squared_error"], ["optim.momentum=0.9"], ["trainer.fused=false"],
                                       ["trainer.precision=bf16"]])
def test_a_fused_sweep_is_refused_before_its_data_for_each_step_it_cannot_share(cifar_arrays, overrides):
    """Every setting without the plain fused step refuses trainer.parallel among the rules, not
    once the data are loaded and the step is built."""
    typed = _typed_without_device_checks(_cfg(cifar_arrays, ["trainer.parallel.lr=[0.1,0.2]", *overrides]))
    assert [rule.__name__ for rule in rules.RULES if rule(typed)] == ["parallel_needs_the_fused_step"]


@pytest.mark.parametrize("overrides, message", GRAPH_REFUSALS)
def test_cuda_graph_true_refuses_each_run_a_graph_cannot_take(cifar_arrays, overrides, message):
    cfg = _cfg(cifar_arrays, ["trainer.cuda_graph=true", *overrides])
    typed = _typed_without_device_checks(cfg)
    assert [rule.__name__ for rule in rules.RULES if rule(typed)] == ["graph_can_capture_the_step"]
    assert rules.graph_can_capture_the_step(typed).startswith(message)


@pytest.mark.parametrize("overrides, graphed", [
    ([], True),
    (["trainer.cuda_graph=false"], False),
    *[(overrides, False) for overrides, _ in GRAPH_REFUSALS],
])
def test_cuda_graph_null_turns_on_only_where_a_graph_can_take_the_step(cifar_arrays, monkeypatch, overrides, graphed):
    """trainer.cuda_graph defaults to null: on a CUDA device it becomes true exactly when the run
    has the fused step and plain SGD (no refusal either way); off CUDA it stays off."""
    from scheda.training.trainer import TrainerConfig
    import torch

    cfg = _cfg(cifar_arrays, overrides)
    assert rules.check_run(cfg).trainer.cuda_graph is False  # this machine: CPU
    monkeypatch.setattr(TrainerConfig, "resolve_device", lambda self: torch.device("cuda"))
    assert rules.check_run(cfg).trainer.cuda_graph is graphed


@pytest.mark.parametrize("overrides, message", TRITON_REFUSALS)
def test_triton_true_refuses_each_run_its_kernels_cannot_take(cifar_arrays, overrides, message):
    typed = _typed_without_device_checks(_cfg(cifar_arrays, ["trainer.triton=true", *overrides]))
    assert [rule.__name__ for rule in rules.RULES if rule(typed)] == ["triton_can_take_the_step"]
    assert rules.triton_can_take_the_step(typed).startswith(message)


@pytest.mark.parametrize("overrides, kernels", [
    ([], True),
    (["trainer.triton=false"], False),
    *[(overrides, False) for overrides, _ in TRITON_REFUSALS],
])
def test_triton_null_turns_on_only_where_its_kernels_can_take_the_step(cifar_arrays, monkeypatch, overrides, kernels):
    """trainer.triton defaults to null: on a CUDA device it becomes true exactly where the Triton
    step applies; off CUDA the torch step trains (it measures faster on a CPU)."""
    from scheda.training.trainer import TrainerConfig
    import torch

    cfg = _cfg(cifar_arrays, overrides)
    assert rules.check_run(cfg).trainer.triton is False  # this machine: CPU
    monkeypatch.setattr(TrainerConfig, "resolve_device", lambda self: torch.device("cuda"))
    assert rules.check_run(cfg).trainer.triton is kernels


# Every reason the two-pass step refuses a run, each alone: the Triton step's, then its own.
@pytest.mark.parametrize("overrides, message", [
    (["trainer.batch_size=200"], "trainer.two_pass=true keeps a minibatch in one program: trainer.batch_size=200 "
                                 "must be <= 128"),
    (["trainer.triton=false"], "trainer.two_pass=true is a Triton step"),
    (["noise=gaussian"], "trainer.two_pass=true needs the masking noise"),
    (["optim.momentum=0.9"], "trainer.two_pass=true needs the plain fused step"),
    (["trainer.precision=tf32"], "trainer.two_pass=true computes its products in fp32 or tf32x3"),
])
def test_two_pass_true_refuses_each_run_its_kernels_cannot_take(cifar_arrays, overrides, message):
    typed = _typed_without_device_checks(_cfg(cifar_arrays, ["trainer.two_pass=true", *overrides]))
    assert [rule.__name__ for rule in rules.RULES if rule(typed)] == ["two_pass_is_a_triton_step"]
    assert rules.two_pass_is_a_triton_step(typed).startswith(message)


def test_two_pass_turns_the_triton_step_on(cifar_arrays, monkeypatch):
    """trainer.two_pass=true with trainer.triton=null: the Triton step, as TwoPassStep; tf32x3 is allowed with it."""
    from scheda.training.trainer import TrainerConfig
    import torch

    monkeypatch.setattr(TrainerConfig, "resolve_device", lambda self: torch.device("cuda"))
    checked = rules.check_run(_cfg(cifar_arrays, ["trainer.two_pass=true", "trainer.precision=tf32x3"]))
    assert checked.trainer.triton is True and checked.trainer.step_builder().two_pass
