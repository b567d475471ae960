"""The hand-written steps' products in bf16 (scheda.training.products): fp32 weights, bf16 operands,
the same trajectory as fp32 within bf16's rounding, and every form of the step (one model, a fused
sweep, an optimiser with state, the composite DA) through the same code."""

from __future__ import annotations

import json

import pytest
import torch

from scheda.model.autoencoder import DenoisingAutoencoder
from scheda.model.network import CompositeDA
from scheda.model.noise import build_noise
from scheda.model.optim import SGD
from scheda.training.products import Bf16Products, Fp32Products, bf16_refusal
from scheda.run import run
from scheda.training.checkpoint import load_checkpoint
from scheda.training.step import AutogradStep, BatchedStep, CompositeStep
from scheda.training.steps import StepChoice
from helpers import STAGES, TINY, compose_cfg, run_train

masking = build_noise({"name": "masking"})
CPU = torch.device("cpu")
needs_bf16 = pytest.mark.skipif(bf16_refusal(CPU) is not None, reason=f"bf16 products: {bf16_refusal(CPU)}")
D, H, BS, ROWS = 37, 11, 8, 61  # no size divides another: the epoch ends on a partial minibatch


def _data():
    return torch.rand(ROWS, D, generator=torch.Generator().manual_seed(2))


def _model(seed=0, activation="sigmoid"):
    model = DenoisingAutoencoder(D, H, activation=activation, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        model.b.uniform_(-0.1, 0.1, generator=torch.Generator().manual_seed(seed + 1))
    return model


def _epochs(step, models, epochs=3, nu=0.3, seeds=None):
    """``epochs`` passes over the data in minibatches of BS (the last one partial), each model its own
    generator (``seeds``: theirs, default 10, 11, ...); the losses of every minibatch."""
    x = _data()
    gens = [torch.Generator().manual_seed(s) for s in seeds or range(10, 10 + len(models))]
    losses = []
    for e in range(epochs):
        order = torch.randperm(ROWS, generator=torch.Generator().manual_seed(e))
        for first in range(0, ROWS, BS):
            idx = order[first:first + BS].repeat(len(models), 1)
            losses.append(step(x, idx, [nu] * len(models), gens).clone())
    return torch.stack(losses)


def _sgd(models, lr=0.05, momentum=0.0):
    return [SGD(m.parameters(), lr=lr, momentum=momentum) for m in models]


@needs_bf16
@pytest.mark.parametrize("activation", ["sigmoid", "relu"])
@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_the_bf16_step_follows_the_fp32_step_within_bf16_rounding(activation, momentum):
    """The same models, minibatches and masks: the bf16 step's losses and weights stay within bf16's
    rounding of the fp32 step's, the weights stay fp32, and the two are not the same step."""
    out = {}
    for precision in ("fp32", "bf16"):
        model = _model(activation=activation)
        step = BatchedStep([model], _sgd([model], momentum=momentum), [masking], BS, CPU, precision)
        assert isinstance(step.products, Bf16Products if precision == "bf16" else Fp32Products)
        out[precision] = (_epochs(step, [model]), model)
    (loss32, m32), (loss16, m16) = out["fp32"], out["bf16"]
    assert m16.W.dtype == torch.float32 and m16.b.dtype == torch.float32
    torch.testing.assert_close(loss16, loss32, rtol=2e-2, atol=0.05)
    torch.testing.assert_close(m16.W, m32.W, rtol=0, atol=2e-2 * m32.W.abs().max().item())
    assert not torch.equal(m16.W, m32.W)  # bf16's products ran, not fp32's


@needs_bf16
def test_updates_smaller_than_bf16s_resolution_reach_the_fp32_weights():
    """The master weights are fp32: a step of lr/n times the gradient far below bf16's resolution of
    W (8 bits of mantissa) still moves W, as it does in fp32."""
    moved = {}
    for precision in ("fp32", "bf16"):
        model = _model()
        before = model.W.detach().clone()
        step = BatchedStep([model], _sgd([model], lr=1e-5), [masking], BS, CPU, precision)
        _epochs(step, [model], epochs=1)
        moved[precision] = model.W.detach() - before
    # The setting means something: added to bf16 weights, nearly every update would be rounded away.
    w16 = before.bfloat16()
    assert ((w16 + moved["fp32"].bfloat16()) == w16).float().mean() > 0.9
    assert (moved["bf16"] != 0).float().mean() > 0.9  # and yet nearly every fp32 weight moved, as in fp32
    torch.testing.assert_close(moved["bf16"], moved["fp32"], rtol=0.05, atol=0.05 * moved["fp32"].abs().max().item())


@needs_bf16
def test_a_bf16_sweep_trains_each_model_as_it_trains_alone():
    """M models in one bf16 step (batched products): model k follows its own bf16 run alone."""
    alone = []
    for k in range(3):
        model = _model(seed=k)
        _epochs(BatchedStep([model], _sgd([model]), [masking], BS, CPU, "bf16"), [model], seeds=[10 + k])
        alone.append(model)
    swept = [_model(seed=k) for k in range(3)]
    gens_losses = _epochs(BatchedStep(swept, _sgd(swept), [masking] * 3, BS, CPU, "bf16"), swept)
    assert gens_losses.shape[1] == 3
    for a, s in zip(alone, swept):
        torch.testing.assert_close(s.W, a.W, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(s.b_prime, a.b_prime, rtol=1e-5, atol=1e-6)


@needs_bf16
def test_the_bf16_copy_is_taken_from_the_weights_each_minibatch():
    """Whoever writes W between minibatches (a resume's load, a test), the next products read it."""
    model = _model()
    step = BatchedStep([model], _sgd([model]), [masking], BS, CPU, "bf16")
    _epochs(step, [model], epochs=1)
    with torch.no_grad():
        model.W.mul_(0.5)
    step.products.begin()
    torch.testing.assert_close(step.products.W16[0].float(), model.W.detach(), rtol=1e-2, atol=1e-6)


@needs_bf16
@pytest.mark.parametrize("update", ["joint", "alternating"])
def test_the_bf16_composite_step_follows_its_fp32_step(update):
    out = {}
    for precision in ("fp32", "bf16"):
        model = CompositeDA(D, H, [0.2, 0.4], update, generator=torch.Generator().manual_seed(0))
        opt = SGD(model.parameters(), lr=0.05)
        step = StepChoice("fused", precision=precision).build([model], [opt], [masking], BS, _data(),
                                                              [torch.Generator()])
        assert isinstance(step, CompositeStep) and step.ran.precision == precision
        assert all(isinstance(p, Bf16Products if precision == "bf16" else Fp32Products) for p in step.products)
        x, g = _data(), torch.Generator().manual_seed(3)
        losses = []
        for epoch in range(3):
            model.set_epoch(epoch)
            for first in range(0, ROWS, BS):
                losses.append(step(x, torch.arange(first, min(first + BS, ROWS)).unsqueeze(0), [0.3], [g]))
        out[precision] = (torch.cat(losses), model)
    (l32, m32), (l16, m16) = out["fp32"], out["bf16"]
    torch.testing.assert_close(l16, l32, rtol=2e-2, atol=0.05)
    torch.testing.assert_close(m16.W, m32.W, rtol=0, atol=2e-2 * m32.W.abs().max().item())
    assert not torch.equal(m16.W, m32.W)


def test_the_fp32_composite_step_still_follows_autograd():
    """The composite step's stacked update (one product a group, as the DA step's) is the same
    update as autograd's, up to summation order."""
    models = [CompositeDA(D, H, [0.2, 0.4], "joint", generator=torch.Generator().manual_seed(0)) for _ in range(2)]
    fused = CompositeStep(models[0], SGD(models[0].parameters(), lr=0.05), masking, BS, CPU)
    auto = AutogradStep(models[1], SGD(models[1].parameters(), lr=0.05), masking)
    x, g1, g2 = _data(), torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    for first in range(0, ROWS, BS):
        idx = torch.arange(first, min(first + BS, ROWS))
        torch.testing.assert_close(fused(x, idx.unsqueeze(0), [0.3], [g1])[0], auto(x, idx, 0.3, g2),
                                   rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(models[0].W, models[1].W, rtol=1e-4, atol=1e-6)


def test_bf16_refusal_names_what_the_device_lacks(monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert "neither AVX512-BF16 nor AMX" in bf16_refusal(CPU)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert bf16_refusal(CPU) is None
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported")
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported")
    assert "cannot tell" in bf16_refusal(CPU)


@needs_bf16
def test_a_bf16_run_and_sweep_record_their_step_and_resume_as_the_golden_run(cifar_arrays, tmp_path):
    """``trainer.precision=bf16`` as a user runs it (train.py in its own process): the fused torch
    step trains in bf16 and results.json says so, for one model and a fused sweep; a bf16 run
    stopped after an epoch and resumed ends on the uninterrupted run's weights, bit for bit (its
    state is the fp32 weights and the generators: the bf16 copy is made anew each minibatch)."""
    base = [f"dataset.root={cifar_arrays}", *TINY, *STAGES, "logger=none", "trainer.checkpoint_every=1",
            "trainer.precision=bf16", "model.hidden=13"]
    proc = run_train([*base, f"hydra.run.dir={tmp_path / 'golden'}"])
    assert proc.returncode == 0, proc.stderr
    golden = json.loads((tmp_path / "golden" / "results.json").read_text())
    assert golden["status"] == "completed"
    assert (golden["step"]["kind"], golden["step"]["precision"], golden["step"]["fallback"]) == ("fused", "bf16", None)
    run(compose_cfg([*base, "trainer.max_epochs=1"]), tmp_path / "part")
    run(compose_cfg([*base, f"resume={tmp_path / 'part'}"]), tmp_path / "resumed")
    for key, value in load_checkpoint(tmp_path / "golden")["model"].items():
        assert value.dtype == torch.float32 and torch.equal(load_checkpoint(tmp_path / "resumed")["model"][key], value)
    run(compose_cfg([*base, "trainer.parallel.seed=[1,2]"]), tmp_path / "sweep")
    for k in range(2):
        model = json.loads((tmp_path / "sweep" / "models" / str(k) / "results.json").read_text())
        assert (model["step"]["kind"], model["step"]["precision"]) == ("fused", "bf16")


def test_a_tables_jobs_name_the_precision_that_trained_them():
    """The report's jobs table (scheda.protocol.launch.step_text): a DA trained in bf16 says so; a
    fine-tuning job names its own step, which computes in fp32 whatever trainer.precision says."""
    from scheda.protocol.launch import step_text
    from scheda.training.step import FinetuneChoice

    da = {"step": StepChoice("fused", precision="bf16").describe(), "config": {"finetune": {"standalone": False}}}
    tuned = {"step": StepChoice("fused", precision="bf16").describe(),
             "config": {"finetune": {"standalone": True}}, "plan": {"finetune_step": FinetuneChoice().describe()}}
    raw = {"step": StepChoice("fused", precision="bf16").describe(), "config": {"model": {"name": "raw"}}}
    assert step_text(da) == "fused, bf16"
    assert step_text(tuned) == "fused" and FinetuneChoice().describe()["precision"] == "fp32"
    assert step_text(raw) == ""  # trained nothing


def test_a_tables_report_head_names_the_precisions_its_jobs_trained_in():
    """scheda.protocol.report's head line, from the jobs' rows (scheda.protocol.launch.job_statuses):
    a bf16 table's DAs and its fine-tuning's own fp32, counted; nothing for jobs that trained none."""
    from scheda.protocol.report import _precisions

    rows = [{"precision": "bf16"}] * 5 + [{"precision": "fp32"}] * 2 + [{"precision": None}]
    assert _precisions(rows) == ["- Trained in: bf16 products over fp32 weights (5 jobs), fp32 (2 jobs)"]
    assert _precisions([{"precision": None}]) == []


# --- the bf16 update in one compiled pass (trainer.compile) ----------------------------------------
# The step's own tests run on any CPU (torch multiplies in bf16 everywhere, emulated where the CPU has no
# AVX512-BF16 or AMX); a run through train.py needs the arithmetic, which the rules ask for.

def _one_pass_and_eager(M: int, epochs: int = 3) -> dict:
    """Two copies of the same M models, one trained by the batched bf16 step with the one-pass update
    and one with the eager update: {compiled: (their losses, their models, the step)}."""
    out = {}
    for compiled in (True, False):
        models = [_model(seed=k) for k in range(M)]
        step = BatchedStep(models, _sgd(models), [masking] * M, BS, CPU, "bf16", compiled)
        out[compiled] = (_epochs(step, models, epochs=epochs), models, step)
    return out


def test_the_one_pass_update_trains_as_the_eager_bf16_update_bit_for_bit():
    """The same arithmetic in one loop: the weights and losses of one model, of a fused sweep of two and of
    the composite DA are the eager bf16 step's, bit for bit, over epochs that end on a partial minibatch."""
    from scheda.training.products import OnePassBf16Products

    for M in (1, 2):
        out = _one_pass_and_eager(M)
        (l1, m1, step), (l0, m0, _) = out[True], out[False]
        assert isinstance(step.products, OnePassBf16Products)
        assert torch.equal(l1, l0)
        for a, b in zip(m1, m0):
            assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    composites = []
    for compiled in (True, False):
        model = CompositeDA(D, H, [0.2, 0.4], "joint", generator=torch.Generator().manual_seed(0))
        step = StepChoice("fused", precision="bf16", compiled=compiled).build(
            [model], [SGD(model.parameters(), lr=0.05)], [masking], BS, _data(), [torch.Generator()])
        assert step.ran.compiled is compiled and step.fallback is None
        x, g = _data(), torch.Generator().manual_seed(3)
        for first in range(0, ROWS, BS):
            step(x, torch.arange(first, min(first + BS, ROWS)).unsqueeze(0), [0.3], [g])
        composites.append(model)
    assert torch.equal(composites[0].W, composites[1].W) and torch.equal(composites[0].b, composites[1].b)


def test_the_one_pass_copy_is_read_again_after_an_epoch_s_start():
    """The one-pass update writes the bf16 copy the next minibatch reads; weights written by another (a
    checkpoint's load) reach the products once the loop starts an epoch (``begin_epoch``). Without that
    call the products would read the stale copy, which is what the test shows can happen."""
    model = _model()
    step = BatchedStep([model], _sgd([model]), [masking], BS, CPU, "bf16", compiled=True)
    _epochs(step, [model], epochs=1)
    stale = step.products.W16.clone()
    with torch.no_grad():
        model.W.mul_(0.5)
    step.products.begin()
    assert torch.equal(step.products.W16, stale)  # no epoch started: the copy is the update's
    step.products.fresh = True
    step.begin_epoch()
    step.products.begin()
    assert torch.equal(step.products.W16[0], model.W.detach().to(torch.bfloat16))


def test_a_compiled_update_that_cannot_be_built_falls_back_and_says_so(monkeypatch):
    from scheda.training import products

    def no_compiler():
        raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found")

    monkeypatch.setattr(products, "_compiled", no_compiler)
    model = _model()
    step = StepChoice("fused", precision="bf16", compiled=True).build([model], _sgd([model]), [masking], BS, _data(),
                                                                      [torch.Generator()])
    assert type(step.products) is Bf16Products and step.ran == StepChoice("fused", precision="bf16")
    assert step.fallback == ("the compiled update could not be built here (RuntimeError: InvalidCxxCompiler: No "
                             "working C++ compiler found)")
    assert torch.isfinite(_epochs(step, [model], epochs=1)).all()


@needs_bf16
def test_a_compiled_bf16_run_records_its_step_and_ends_on_the_eager_run_s_weights(cifar_arrays, tmp_path):
    """``trainer.compile=true`` as a user runs it (train.py in its own process): results.json names the
    compiled update, and the run ends on the weights of the same run with the eager update, bit for bit."""
    base = [f"dataset.root={cifar_arrays}", *TINY, *STAGES, "logger=none", "trainer.precision=bf16",
            "model.hidden=13"]
    for compile_ in ("true", "false"):
        proc = run_train([*base, f"trainer.compile={compile_}", f"hydra.run.dir={tmp_path / compile_}"])
        assert proc.returncode == 0, proc.stderr
    compiled = json.loads((tmp_path / "true" / "results.json").read_text())
    assert compiled["step"]["compiled"] is True and compiled["step"]["fallback"] is None
    assert "compiled" not in json.loads((tmp_path / "false" / "results.json").read_text())["step"]
    weights = [load_checkpoint(tmp_path / name)["model"] for name in ("true", "false")]
    assert all(torch.equal(weights[0][key], value) for key, value in weights[1].items())


def test_one_process_builds_the_one_pass_update_for_any_number_of_shapes():
    """One compilation serves every shape (flat, dynamic): a long process meeting more shapes than torch's
    recompilation limit (8) still gets the one-pass update, not the fallback."""
    from scheda.training.products import OnePassBf16Products, products_for

    for H in range(3, 15):
        W = torch.rand(1 + H % 2, H, D)
        products = products_for("bf16", W, BS, compiled=True)
        assert isinstance(products, OnePassBf16Products)
        products.begin()
        A, B = torch.rand(1 + H % 2, 2 * BS, H), torch.rand(1 + H % 2, 2 * BS, D)
        products.B16.copy_(B)  # what encode and backward leave there: [x~; dz] in bf16
        before = W.clone()
        products.update(A, B)
        assert torch.equal(products.W16, W.to(torch.bfloat16)) and not torch.equal(W, before)
