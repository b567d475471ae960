"""Every rule between config groups (scheda.planning.rules) refuses its config with one line before the
run loads its data or writes anything but the failure's record; the list of cases covers every
rule there is. The rules read the typed config and the device they are given (a CUDA device here,
where this machine has none), and the step they leave is chosen once (rules.choose_step)."""

from __future__ import annotations

import json

import pytest

import torch

from scheda.planning import rules
from scheda.planning.plan import typed_config
from scheda.utils.errors import ConfigError
from scheda.run import run
from helpers import STAGES, TINY, compose_cfg

# rule -> overrides that break it (and only it), and the start of its message
CASES = {
    "cuda_settings_need_a_cuda_device": (["trainer.device=cpu", "trainer.cuda_graph=true"],
                                         "trainer.cuda_graph=true needs a CUDA device, not cpu"),
    "the_step_can_train_the_run": (["trainer.step=triton", "noise=gaussian"],
                                   "trainer.step=triton needs the masking noise"),
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
    "finetune_output_needs_the_top_codes": (["stack_on=runs/l1", "evaluate.layers=all", "finetune.enabled=true"],
                                            "finetune.init_output=classifier starts the output layer from the "
                                            "classifier of the top"),
    "finetune_output_needs_an_evaluation": (["finetune.enabled=true", "evaluate.enabled=false"],
                                            "finetune.init_output=classifier starts the output layer from the frozen"),
    "raw_needs_evaluation": (["model=raw", "evaluate.enabled=false"], "model=raw only evaluates"),
    "raw_has_no_encoder_to_finetune": (["model=raw", "finetune.enabled=true"],
                                       "finetune.enabled=true fine-tunes an autoencoder's encoder, and model=raw"),
    "patience_needs_evaluations": (["trainer.patience=3", "evaluate.every=0"],
                                   "trainer.patience counts evaluations without a new best"),
    "finetune_fused_needs_plain_sgd": (["finetune.enabled=true", "finetune.momentum=0.9"],
                                       "finetune.fused=true trains every learning rate at once with plain SGD"),
    "compile_needs_its_step": (["trainer.compile=true"], "trainer.compile=true compiles the bf16 step's update, "
                                                         "not trainer.precision=fp32's"),
    # on a CPU without bf16 arithmetic (the fixture below takes it away)
    "bf16_needs_bf16_arithmetic": (["trainer.device=cpu", "trainer.precision=bf16"],
                                   "trainer.precision=bf16: this CPU has neither AVX512-BF16 nor AMX"),
}
NEEDS_A_CPU = {"cuda_settings_need_a_cuda_device", "bf16_needs_bf16_arithmetic"}


@pytest.fixture
def no_bf16_cpu(monkeypatch):
    """A CPU without AVX512-BF16 or AMX, whatever this one has."""
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)


@pytest.fixture
def bf16_cpu(monkeypatch):
    """A CPU with AVX512-BF16, whatever this one has."""
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
NEEDS_CUDA = {"the_step_can_train_the_run"}  # off CUDA the device rule refuses the Triton step first
CUDA = torch.device("cuda")
# Every reason a CUDA graph refuses a run (rules.the_step_can_train_the_run), each alone.
GRAPH_REFUSALS = [
    (["trainer.step=autograd"], "trainer.cuda_graph=true needs the fused step"),
    (["model.loss=squared_error"], "trainer.cuda_graph=true needs the fused step"),
    (["optim.momentum=0.9"], "trainer.cuda_graph=true needs plain SGD"),
    (["optim.weight_decay=0.001"], "trainer.cuda_graph=true needs plain SGD"),
    (["schedule=random_uniform"], "trainer.cuda_graph=true needs one noise level per epoch"),
    (["schedule=random_discrete"], "trainer.cuda_graph=true needs one noise level per epoch"),
]

# Every reason the Triton step refuses a run (rules.the_step_can_train_the_run), each alone.
TRITON_REFUSALS = [
    (["trainer.precision=bf16"], "trainer.step=triton computes its products in fp32"),
    (["model.loss=squared_error"], "trainer.step=triton needs the plain fused step"),
    (["optim.momentum=0.9"], "trainer.step=triton needs the plain fused step"),
    (["noise=salt_pepper"], "trainer.step=triton needs the masking noise"),
    (["schedule=random_uniform"], "trainer.step=triton needs the masking noise, one noise level per epoch"),
]


def test_the_cases_cover_every_rule():
    assert sorted(CASES) == sorted(rule.__name__ for rule in rules.RULES)


def _cfg(cifar_arrays, overrides):
    schedule = [] if any(o.startswith("schedule=") for o in overrides) else STAGES
    tiny = [o for o in TINY if "model=raw" not in overrides or not o.startswith("model.")]  # raw has no hidden units
    return compose_cfg([f"dataset.root={cifar_arrays}", *tiny, *schedule, *overrides])


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_rule_refuses_its_config_and_only_its_own(cifar_arrays, name, no_bf16_cpu):
    overrides, message = CASES[name]
    cfg = _cfg(cifar_arrays, [o for o in overrides if not o.startswith("resume=")])
    if name == "resume_or_init_from":
        cfg.resume = "RUN"
    typed = typed_config(cfg)
    device = torch.device("cpu") if name in NEEDS_A_CPU else CUDA
    assert [rule.__name__ for rule in rules.RULES if rule(typed, device)] == [name]
    assert getattr(rules, name)(typed, device).startswith(message)


# resume= reads the run it continues before anything else (scheda.runs.reentry), so its rule is
# checked on the typed config above; off CUDA the device rule refuses the CUDA-graph and Triton cases first.
@pytest.mark.parametrize("name", sorted(set(CASES) - NEEDS_CUDA - {"resume_or_init_from"}))
def test_a_broken_rule_stops_the_run_before_any_file(cifar_arrays, tmp_path, name, no_bf16_cpu):
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


@pytest.mark.parametrize("overrides", [["model.loss=squared_error"], ["optim.momentum=0.9"], ["trainer.step=autograd"]])
def test_a_fused_sweep_is_refused_before_its_data_for_each_step_it_cannot_share(cifar_arrays, overrides):
    """Every setting without the plain fused step refuses trainer.parallel among the rules, not
    once the data are loaded and the step is built."""
    typed = typed_config(_cfg(cifar_arrays, ["trainer.parallel.lr=[0.1,0.2]", *overrides]))
    assert [rule.__name__ for rule in rules.RULES if rule(typed, CUDA)] == ["parallel_needs_the_fused_step"]


@pytest.mark.parametrize("overrides, message", GRAPH_REFUSALS)
def test_cuda_graph_true_refuses_each_run_a_graph_cannot_take(cifar_arrays, overrides, message):
    cfg = _cfg(cifar_arrays, ["trainer.cuda_graph=true", *overrides])
    typed = typed_config(cfg)
    assert [rule.__name__ for rule in rules.RULES if rule(typed, CUDA)] == ["the_step_can_train_the_run"]
    assert rules.the_step_can_train_the_run(typed, CUDA).startswith(message)


@pytest.mark.parametrize("overrides, graphed", [
    ([], True),
    (["trainer.cuda_graph=false"], False),
    *[(overrides, False) for overrides, _ in GRAPH_REFUSALS],
])
def test_cuda_graph_null_turns_on_only_where_a_graph_can_take_the_step(cifar_arrays, overrides, graphed):
    """trainer.cuda_graph defaults to null: on a CUDA device it becomes true exactly when the run
    has the fused step and plain SGD (no refusal either way); off CUDA it stays off."""
    typed = typed_config(_cfg(cifar_arrays, overrides))
    assert rules.choose_step(typed, torch.device("cpu")).cuda_graph is False
    assert rules.choose_step(typed, CUDA).cuda_graph is graphed


@pytest.mark.parametrize("overrides, message", TRITON_REFUSALS)
def test_step_triton_refuses_each_run_its_kernels_cannot_take(cifar_arrays, overrides, message):
    typed = typed_config(_cfg(cifar_arrays, ["trainer.step=triton", *overrides]))
    assert [rule.__name__ for rule in rules.RULES if rule(typed, CUDA)] == ["the_step_can_train_the_run"]
    assert rules.the_step_can_train_the_run(typed, CUDA).startswith(message)


@pytest.mark.parametrize("overrides, kind", [
    ([], "triton"),
    (["trainer.step=fused"], "fused"),
    (["trainer.step=autograd"], "autograd"),
    *[(overrides, "autograd" if "loss" in overrides[0] else "fused")
      for overrides, _ in TRITON_REFUSALS],
])
def test_step_auto_is_the_triton_step_only_where_its_kernels_can_take_the_run(cifar_arrays, overrides, kind):
    """trainer.step defaults to auto: on a CUDA device the Triton step exactly where it applies, else
    the fused step where that applies, else autograd; off CUDA the torch step trains (it measures
    faster on a CPU)."""
    typed = typed_config(_cfg(cifar_arrays, overrides))
    assert rules.choose_step(typed, torch.device("cpu")).kind == ("fused" if kind == "triton" else kind)
    assert rules.choose_step(typed, CUDA).kind == kind


# Every reason the two-pass step refuses a run, each alone: the Triton step's, then its own.
@pytest.mark.parametrize("overrides, message", [
    (["trainer.batch_size=200"], "trainer.step=two_pass keeps a minibatch in one program: trainer.batch_size=200 "
                                 "must be <= 128"),
    (["noise=gaussian"], "trainer.step=two_pass needs the masking noise"),
    (["optim.momentum=0.9"], "trainer.step=two_pass needs the plain fused step"),
    (["trainer.precision=tf32"], "trainer.step=two_pass computes its products in fp32 or tf32x3"),
])
def test_step_two_pass_refuses_each_run_its_kernels_cannot_take(cifar_arrays, overrides, message):
    typed = typed_config(_cfg(cifar_arrays, ["trainer.step=two_pass", *overrides]))
    assert [rule.__name__ for rule in rules.RULES if rule(typed, CUDA)] == ["the_step_can_train_the_run"]
    assert rules.the_step_can_train_the_run(typed, CUDA).startswith(message)


@pytest.mark.parametrize("overrides, message", [
    (["trainer.precision=tf32x3"], "trainer.precision=tf32x3 is the two-pass step's product precision"),
    (["trainer.step=fused", "model.loss=squared_error"], "trainer.step=fused needs model.name=da"),
])
def test_the_step_refuses_what_only_another_step_takes(cifar_arrays, overrides, message):
    typed = typed_config(_cfg(cifar_arrays, overrides))
    assert [rule.__name__ for rule in rules.RULES if rule(typed, CUDA)] == ["the_step_can_train_the_run"]
    assert rules.the_step_can_train_the_run(typed, CUDA).startswith(message)


def test_two_pass_is_a_triton_step(cifar_arrays):
    """trainer.step=two_pass: the Triton step, as TwoPassStep; tf32x3 is allowed with it."""
    typed = typed_config(_cfg(cifar_arrays, ["trainer.step=two_pass", "trainer.precision=tf32x3"]))
    rules.check(typed, CUDA)
    step = rules.choose_step(typed, CUDA)
    assert step.triton and step.kind == "two_pass" and step.precision == "tf32x3"


@pytest.mark.parametrize("old, step", [
    (["trainer.fused=false"], "autograd"), (["trainer.fused=true"], "auto"), (["trainer.triton=true"], "triton"),
    (["trainer.triton=false"], "fused"), (["trainer.two_pass=true"], "two_pass"), (["trainer.two_pass=false"], "auto"),
    (["trainer.fused=false", "trainer.triton=false"], "autograd"),
])
def test_the_old_step_flags_are_read_as_trainer_step_with_a_warning(cifar_arrays, caplog, old, step):
    """0.2's trainer.fused / triton / two_pass, read as the one trainer.step for one release; given
    with trainer.step they are refused (two settings for one choice)."""
    typed = typed_config(_cfg(cifar_arrays, old))
    assert typed.trainer.step == step
    assert any(f"read as trainer.step={step}" in r.getMessage() for r in caplog.records)
    if step != "auto":
        with pytest.raises(ConfigError, match="both choose the step: set trainer.step only"):
            typed_config(_cfg(cifar_arrays, [*old, "trainer.step=fused" if step != "fused" else "trainer.step=triton"]))


def test_a_run_recorded_with_the_old_flags_resumes_under_trainer_step(cifar_arrays, tmp_path):
    """A run's results.json written by 0.2 (trainer.fused=true, triton=null, two_pass=false: the
    default) resumes under trainer.step=auto, the same step; one recorded with fused=false is refused
    a resume under auto (it trained by autograd) and resumes under trainer.step=autograd."""
    from scheda.runs.reentry import config_changes

    cfg = _cfg(cifar_arrays, [])
    new = json.loads(json.dumps(typed_config(cfg).composed))
    old = json.loads(json.dumps(new))
    old["trainer"].pop("step")
    old["trainer"].update(fused=True, triton=None, two_pass=False)
    assert config_changes(old, new)[1] == []
    old["trainer"]["fused"] = False
    assert config_changes(old, new)[1] == ["trainer.step"]
    assert config_changes(old, {**new, "trainer": {**new["trainer"], "step": "autograd"}})[1] == []


def test_a_run_recorded_before_a_key_existed_resumes_as_it_trained(cifar_arrays):
    """A record without a key added since (rundir.ADDED_KEYS: evaluate.layers) compares equal to a
    config with that key at the value that kept what the run did (a resume warns of no change), and
    differs from any other."""
    from scheda.runs.reentry import config_changes
    from scheda.runs.rundir import ADDED_KEYS

    new = json.loads(json.dumps(typed_config(_cfg(cifar_arrays, [])).composed))
    old = json.loads(json.dumps(new))
    for key in ADDED_KEYS:
        group, name = key.split(".")
        old[group].pop(name)
    assert config_changes(old, new)[0] == []
    assert config_changes(old, {**new, "evaluate": {**new["evaluate"], "layers": "all"}})[0] == ["evaluate.layers"]


# bf16 products (scheda.training.products): the settings a bf16 run may combine with.
BF16_SETTINGS = [[], ["trainer.parallel.seed=[1,2]"], ["trainer.parallel.lr=[0.1,0.2]"], ["optim.momentum=0.9"],
                 ["model.activation=relu"], ["schedule=random_uniform"], ["trainer.step=fused"],
                 ["trainer.step=autograd"], ["model.loss=squared_error"], ["noise=gaussian"],
                 ["trainer.step=triton"], ["trainer.step=fused", "model.loss=squared_error"]]


@pytest.mark.parametrize("overrides", BF16_SETTINGS)
def test_bf16_refuses_nothing_on_cuda_that_it_accepts_on_the_cpu(cifar_arrays, bf16_cpu, overrides):
    """The bf16 torch step is the same code on both devices: its rules (the CUDA-only settings
    aside) refuse the same runs on a CPU with bf16 arithmetic as on a CUDA device, and the step they
    leave is the same torch step in bf16 (CUDA adds only its graph)."""
    typed = typed_config(_cfg(cifar_arrays, ["trainer.precision=bf16", *overrides]))
    cpu = torch.device("cpu")

    def refused(device):
        return [rule.__name__ for rule in rules.RULES
                if rule.__name__ != "cuda_settings_need_a_cuda_device" and rule(typed, device)]

    assert refused(CUDA) == refused(cpu)
    if not refused(cpu):
        on_cpu, on_cuda = rules.choose_step(typed, cpu), rules.choose_step(typed, CUDA)
        assert (on_cpu.kind, on_cpu.precision) == (on_cuda.kind, on_cuda.precision)
        assert on_cpu.precision == "bf16"
        assert on_cpu.kind == ("autograd" if {"trainer.step=autograd", "model.loss=squared_error"} & set(overrides)
                               else "fused")


def test_bf16_on_a_cpu_without_bf16_arithmetic_is_one_line_naming_fp32(cifar_arrays, tmp_path, no_bf16_cpu):
    """Before any data or training: the run fails with one line that names the fix."""
    out = tmp_path / "run"
    out.mkdir()
    with pytest.raises(ConfigError, match=r"use trainer.precision=fp32$"):
        run(_cfg(cifar_arrays, ["trainer.device=cpu", "trainer.precision=bf16"]), out)
    assert sorted(p.name for p in out.iterdir()) == [".lock", "results.json"]


# Every reason the compiled bf16 update refuses a run (rules.compile_needs_its_step), each alone.
COMPILE_REFUSALS = [
    (["trainer.step=autograd"], "cpu", "trainer.compile=true needs the fused or composite step"),
    (["model.loss=squared_error"], "cpu", "trainer.compile=true needs the fused or composite step"),
    (["optim.momentum=0.9"], "cpu", "trainer.compile=true folds plain SGD into the update"),
    ([], "cuda", "trainer.compile=true compiles the CPU's bf16 update, not cuda's"),
]


@pytest.mark.parametrize("overrides, device, message", COMPILE_REFUSALS)
def test_compile_true_refuses_each_run_the_one_pass_update_cannot_take(cifar_arrays, bf16_cpu, overrides, device,
                                                                       message):
    typed = typed_config(_cfg(cifar_arrays, ["trainer.compile=true", "trainer.precision=bf16", *overrides]))
    assert [rule.__name__ for rule in rules.RULES if rule(typed, torch.device(device))] == ["compile_needs_its_step"]
    assert rules.compile_needs_its_step(typed, torch.device(device)).startswith(message)


@pytest.mark.parametrize("overrides, epochs, compiled", [
    (["trainer.precision=bf16"], rules.COMPILE_EPOCHS, True),
    (["trainer.precision=bf16"], rules.COMPILE_EPOCHS - 1, False),  # too short to win the compilation back
    (["trainer.precision=bf16", "trainer.compile=true"], 1, True),
    (["trainer.precision=bf16", "trainer.compile=false"], 1000, False),
    ([], 1000, False),  # fp32: nothing to compile
    *[(["trainer.precision=bf16", *overrides], 1000, False) for overrides, device, _ in COMPILE_REFUSALS
      if device == "cpu"],
])
def test_compile_null_compiles_the_bf16_update_where_it_applies_and_the_run_is_long(cifar_arrays, bf16_cpu, overrides,
                                                                                    epochs, compiled):
    typed = typed_config(_cfg(cifar_arrays, overrides))
    assert rules.choose_step(typed, torch.device("cpu"), epochs).compiled is compiled
    assert rules.choose_step(typed, CUDA, epochs).compiled is False or "trainer.compile=true" in overrides
