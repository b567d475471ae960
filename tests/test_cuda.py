"""The CUDA path (``python -m pytest -m cuda`` on a machine with a GPU; skipped without one, and
left out of the default suite, which stays CPU-only). scripts/gpu_check.sh runs these first."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from scheda.training.checkpoint import load_checkpoint
from scheda.evaluation.classifiers import Liblinear, TorchLogReg, objective
from scheda.model.autoencoder import DenoisingAutoencoder
from scheda.model.optim import SGD
from scheda.run import run
from scheda.model.schedule import NoiseSchedule, Stage
from scheda.model.noise import build_noise
from scheda.training.step import AutogradStep, BatchedStep, FusedStep, GraphedStep, TritonStep, TwoPassStep
from scheda.training.steps import StepChoice
from scheda.training.trainer import ModelState

from helpers import N_VAL, REPO, STAGES, TINY, compose_cfg

masking = build_noise({"name": "masking"})

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")]
CUDA = torch.device("cuda")
ON_CUDA = [o for o in TINY if not o.startswith("trainer.device")] + ["trainer.device=cuda", "logger=none"]


def _model(d=64, H=24, seed=0, device=CUDA, dtype=torch.float32):
    m = DenoisingAutoencoder(d, H, generator=torch.Generator().manual_seed(seed)).to(device=device, dtype=dtype)
    return m, SGD(m.parameters(), lr=0.05)


def _data(n=203, d=64, device=CUDA, dtype=torch.float32):
    return (torch.rand(n, d, generator=torch.Generator().manual_seed(1)) > 0.5).to(device=device, dtype=dtype)


def test_fused_step_matches_autograd_and_a_float64_reference_on_cuda():
    (m_f, o_f), (m_a, o_a), (m_64, o_64) = _model(), _model(), _model(device=CUDA, dtype=torch.float64)
    fused, auto = FusedStep(m_f, o_f, masking, 20, CUDA), AutogradStep(m_a, o_a, masking)
    reference = AutogradStep(m_64, o_64, masking)
    x, x64 = _data(), _data(dtype=torch.float64)
    gens = [torch.Generator(device=CUDA).manual_seed(3) for _ in range(3)]
    for i in range(12):
        idx = torch.randperm(203, device=CUDA, generator=torch.Generator(device=CUDA).manual_seed(i))[:20 if i < 11 else 3]
        losses = [fused(x, idx, 0.3, gens[0]), auto(x, idx, 0.3, gens[1]), reference(x64, idx, 0.3, gens[2])]
        torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(losses[0].double(), losses[2], rtol=1e-4, atol=1e-3)
    for pf, pa, p64 in zip(m_f.parameters(), m_a.parameters(), m_64.parameters()):
        torch.testing.assert_close(pf, pa, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(pf.double(), p64, rtol=1e-3, atol=1e-5)


def test_graphed_step_equals_the_eager_step_and_advances_the_generator_alike():
    (m_e, o_e), (m_g, o_g) = _model(), _model()
    x = _data()
    g_e, g_g = torch.Generator(device=CUDA).manual_seed(5), torch.Generator(device=CUDA).manual_seed(5)
    eager = BatchedStep([m_e], [o_e], [masking], 20, CUDA)
    graphed = GraphedStep(BatchedStep([m_g], [o_g], [masking], 20, CUDA), x, [g_g])
    graphed.prepare()
    for i in range(11):
        idx = torch.arange(i * 20, min(i * 20 + 20, 203), device=CUDA).unsqueeze(0)  # the last has 3 rows
        torch.testing.assert_close(graphed(x, idx, [0.3], [g_g]), eager(x, idx, [0.3], [g_e]), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(m_g.W, m_e.W, rtol=1e-4, atol=1e-6)
    assert torch.equal(g_g.get_state(), g_e.get_state())


def test_the_bf16_step_graphed_is_its_eager_step_and_follows_fp32_on_cuda():
    """The CPU's bf16 torch step on CUDA (the same code, scheda.training.products): captured in a
    graph it replays its eager self, and it stays within bf16's rounding of the fp32 step."""
    (m_e, o_e), (m_g, o_g), (m_32, o_32) = _model(), _model(), _model()
    x = _data()
    gens = [torch.Generator(device=CUDA).manual_seed(5) for _ in range(3)]
    eager = BatchedStep([m_e], [o_e], [masking], 20, CUDA, "bf16")
    graphed = GraphedStep(BatchedStep([m_g], [o_g], [masking], 20, CUDA, "bf16"), x, [gens[1]])
    graphed.prepare()
    fp32 = BatchedStep([m_32], [o_32], [masking], 20, CUDA)
    for i in range(11):
        idx = torch.arange(i * 20, min(i * 20 + 20, 203), device=CUDA).unsqueeze(0)  # the last has 3 rows
        loss = eager(x, idx, [0.3], [gens[0]])
        torch.testing.assert_close(graphed(x, idx, [0.3], [gens[1]]), loss, rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(loss, fp32(x, idx, [0.3], [gens[2]]), rtol=2e-2, atol=0.05)
    assert m_e.W.dtype == torch.float32 and not torch.equal(m_e.W, m_32.W)
    torch.testing.assert_close(m_g.W, m_e.W, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(m_e.W, m_32.W, rtol=0, atol=2e-2 * m_32.W.abs().max().item())


def _sweep(K, d=64, H=24):
    models = [DenoisingAutoencoder(d, H, generator=torch.Generator().manual_seed(k)).to(CUDA) for k in range(K)]
    opts = [SGD(m.parameters(), lr=0.05 * (k + 1)) for k, m in enumerate(models)]
    return models, opts, [torch.Generator(device=CUDA).manual_seed(10 + k) for k in range(K)]


def test_the_triton_step_graphed_is_the_torch_step_on_cuda():
    """Two models, 1003 rows in minibatches of 20: three replays of the 16-minibatch graph, two of
    the one-minibatch graph, a partial minibatch of 3 rows eager; the same masks and updates as
    the torch step, and the generators advanced alike."""
    x = _data(n=1003)
    (m_ref, o_ref, g_ref), (m_tri, o_tri, g_tri) = _sweep(2), _sweep(2)
    ref = BatchedStep(m_ref, o_ref, [build_noise({"name": "masking"}), build_noise({"name": "masking"})], 20, CUDA)
    tri = TritonStep(m_tri, o_tri, [build_noise({"name": "masking"}), build_noise({"name": "masking"})], 20, x, g_tri, graphed=True)
    tri.prepare()
    perm = torch.stack([torch.randperm(1003, device=CUDA, generator=torch.Generator(device=CUDA).manual_seed(k))
                        for k in range(2)])
    for first in range(0, 1003, 20):
        ref(x, perm[:, first:first + 20], [0.3, 0.5], g_ref)
    for first in range(0, 1003, 320):
        tri(x, perm[:, first:first + 320], [0.3, 0.5], g_tri)
    torch.testing.assert_close(tri.take_loss_sums().sum(1), ref.take_loss_sums(), rtol=1e-5, atol=1e-3)
    for a, b in zip(m_ref, m_tri):
        for pa, pb in zip(a.parameters(), b.parameters()):
            torch.testing.assert_close(pb, pa, rtol=1e-4, atol=1e-6)
    assert all(torch.equal(a.get_state(), b.get_state()) for a, b in zip(g_ref, g_tri))


@pytest.mark.parametrize("step_class, eager_rows", [(TritonStep, 20), (TwoPassStep, 960)])
def test_the_triton_steps_graphs_repeat_their_eager_minibatches_bit_for_bit(step_class, eager_rows):
    """What a resume from the middle of an epoch rests on: a minibatch gives the same bits whether
    the 16-minibatch graph, the one-minibatch graph or the eager kernels run it (the two-pass
    step's eager call of all 48 minibatches encodes each inside the pass before it)."""
    x = _data(n=1003)
    runs = []
    for graphed, rows in ((False, eager_rows), (True, 320), (True, 20)):
        models, opts, gens = _sweep(2)
        step = step_class(models, opts, [build_noise({"name": "masking"}), build_noise({"name": "masking"})], 20, x, gens, graphed=graphed)
        step.prepare()
        for first in range(0, 960, rows):
            step(x, torch.arange(first, first + rows, device=CUDA).repeat(2, 1), [0.3, 0.5], gens)
        runs.append([p.clone() for m in models for p in m.parameters()] + [step.take_loss_sums()])
    for other in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], other))


@pytest.mark.parametrize("precision, tolerance", [("fp32", 1e-4), ("tf32x3", 1e-3)])
def test_the_two_pass_step_graphed_is_the_torch_step_on_cuda(precision, tolerance):
    """As the Triton step's test: 1003 rows in calls of 16 minibatches, the last call of 2 whole
    minibatches and 3 rows; several tiles of W's rows and columns; fp32 and three-pass TF32."""
    x = _data(n=1003, d=200)
    (m_ref, o_ref, g_ref), (m_tp, o_tp, g_tp) = _sweep(2, d=200, H=70), _sweep(2, d=200, H=70)
    ref = BatchedStep(m_ref, o_ref, [build_noise({"name": "masking"}), build_noise({"name": "masking"})], 20, CUDA)
    tp = TwoPassStep(m_tp, o_tp, [build_noise({"name": "masking"}), build_noise({"name": "masking"})], 20, x, g_tp, graphed=True, precision=precision)
    tp.prepare()
    perm = torch.stack([torch.randperm(1003, device=CUDA, generator=torch.Generator(device=CUDA).manual_seed(k))
                        for k in range(2)])
    for first in range(0, 1003, 20):
        ref(x, perm[:, first:first + 20], [0.3, 0.5], g_ref)
    for first in range(0, 1003, 320):
        tp(x, perm[:, first:first + 320], [0.3, 0.5], g_tp)
    torch.testing.assert_close(tp.take_loss_sums().sum(1), ref.take_loss_sums(), rtol=tolerance, atol=1e-2)
    for a, b in zip(m_ref, m_tp):
        for pa, pb in zip(a.parameters(), b.parameters()):
            torch.testing.assert_close(pb, pa, rtol=tolerance, atol=tolerance / 100)
    assert all(torch.equal(a.get_state(), b.get_state()) for a, b in zip(g_ref, g_tp))


@pytest.mark.parametrize("cuda_graph, triton", [(False, False), (True, False), (False, True), (True, True)])
def test_an_epoch_makes_no_host_device_synchronisation(cuda_graph, triton):
    m, opt = _model(d=3072, H=100)
    trainer = ModelState(m, opt, masking, NoiseSchedule("constant", [Stage(0.3, 3)]), _data(n=1000, d=3072), 20,
                      torch.Generator(device=CUDA).manual_seed(0), step=StepChoice("triton" if triton else "fused", cuda_graph))
    trainer.train_epoch()  # the first epoch builds (and captures) the step
    torch.cuda.set_sync_debug_mode("error")
    try:
        [epoch] = trainer.alone.run_minibatches([trainer])
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert trainer.end_epoch(epoch)["epoch"] == 2


STEPS = ["trainer.cuda_graph=false", "trainer.cuda_graph=true", "trainer.step=fused"]


@pytest.mark.parametrize("graph", STEPS)
def test_fused_sweep_equals_the_models_alone_on_cuda(cifar_arrays, tmp_path, graph):
    common = [f"dataset.root={cifar_arrays}", *ON_CUDA, graph, "trainer.batch_size=15", "schedule=constant",
              "schedule.epochs=2", "evaluate.enabled=false"]
    run(compose_cfg([*common, "trainer.parallel.nu=[0.2,0.5]"]), tmp_path / "fused")
    for k, nu in enumerate([0.2, 0.5]):
        run(compose_cfg([*common, f"schedule.nu={nu}"]), tmp_path / f"alone{k}")
        fused, alone = load_checkpoint(tmp_path / "fused" / "models" / str(k)), load_checkpoint(tmp_path / f"alone{k}")
        for key in alone["model"]:
            torch.testing.assert_close(fused["model"][key], alone["model"][key], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("graph", STEPS)
def test_resume_on_cuda_gives_the_uninterrupted_run(cifar_arrays, tmp_path, graph):
    base = [f"dataset.root={cifar_arrays}", *ON_CUDA, graph, *STAGES, "trainer.checkpoint_every=1"]
    run(compose_cfg(base), tmp_path / "golden")
    run(compose_cfg(base + ["trainer.max_epochs=1"]), tmp_path / "part")
    run(compose_cfg(base + [f"resume={tmp_path / 'part'}"]), tmp_path / "resumed")
    golden, resumed = load_checkpoint(tmp_path / "golden"), load_checkpoint(tmp_path / "resumed")
    for key in golden["model"]:
        assert torch.equal(golden["model"][key], resumed["model"][key]), key


def _blobs(n=3000, d=200, k=10, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    x = (rng.normal(0, 1, (k, d))[y] + rng.normal(0, 2, (n, d))).astype(np.float32)
    return 1 / (1 + np.exp(-x)), y


def test_torch_lr_on_cuda_reaches_the_cpu_objective_and_liblinear_takes_cuda_features():
    x, y = _blobs()
    for C in (0.01, 1.0):
        cpu = TorchLogReg(x, y, eps=1e-6, dtype=torch.float64).fit(C)
        gpu = TorchLogReg(torch.from_numpy(x).to(CUDA), y, eps=1e-6, device=CUDA, dtype=torch.float64).fit(C)
        f_cpu, f_gpu = objective(cpu, x, y, C), objective(gpu, x, y, C)
        assert abs(f_gpu - f_cpu) <= 1e-6 * f_cpu
    from scheda.evaluation.classifiers import build_classifier

    lib = build_classifier({"name": "liblinear", "eps": 1e-4}, torch.from_numpy(x).to(CUDA), y, CUDA)
    assert isinstance(lib, Liblinear) and objective(lib.fit(1.0), x, y, 1.0) > 0


@pytest.mark.parametrize("stacked", [False, True], ids=["one layer", "a stack of two"])
def test_fused_finetuning_graphed_equals_its_eager_step_on_cuda(stacked):
    """The learning-rate grid's fused step captured in a CUDA graph (a partial last minibatch
    eager) gives the eager step's nets and losses, of one layer and of a stack (64 -> 32 -> 24)."""
    from scheda.model.network import FinetuneNet
    from scheda.training.finetune import FusedFinetune

    x, y = _data(n=203, d=64), torch.arange(203, device=CUDA) % 10
    runs = []
    for graphed in (False, True):
        below = [_model(d=64, H=32, seed=1)[0]] if stacked else []
        nets = [FinetuneNet(_model(d=32 if stacked else 64, H=24)[0], 10, below=below) for _ in range(3)]
        step = FusedFinetune(nets, [0.1, 0.05, 0.01], x, y, 20, graphed=graphed)
        assert (step.graph is not None) is graphed and step.fallback is None
        perm = torch.randperm(203, device=CUDA, generator=torch.Generator(device=CUDA).manual_seed(0)).repeat(3, 1)
        for first in range(0, 203, 20):
            step(perm[:, first:first + 20])
        runs.append([p.clone() for net in nets for p in net.parameters()] + [step.loss_sums.clone()])
    for a, b in zip(*runs):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_finetuning_on_cuda(cifar_arrays, tmp_path):
    result = run(compose_cfg([f"dataset.root={cifar_arrays}", *ON_CUDA, *STAGES, "finetune=cpu",
                              "finetune.max_epochs=2", "classifier.c_log2_min=-2", "classifier.c_log2_max=0"]),
                 tmp_path / "run")
    assert result["device"].startswith("cuda") and result["finetune"]["chosen"]["test_error"] <= 1.0


def test_the_smoke_protocol_on_cuda(cifar_arrays, tmp_path):
    env = {**{k: v for k, v in os.environ.items() if k != "SCHEDA_DATA"}, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "reproduce.py"), "scale=smoke", "out_dir=runs",
                           f"report_dir={tmp_path / 'reports'}",
                           f"overrides=['dataset.root={cifar_arrays}','dataset.val_size={N_VAL}','trainer.device=cuda']"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(next((tmp_path / "runs" / "continue").glob("scheda_*/results.json")).read_text())
    assert results["device"].startswith("cuda") and results["status"] == "completed"


def test_a_default_run_on_cuda_is_the_graphed_triton_step_and_matches_the_eager_torch_run(cifar_arrays, tmp_path):
    """trainer.cuda_graph=null and trainer.step=auto (the defaults) turn both on for the fused
    step with masking on CUDA; the result is the eager torch step's."""
    base = [f"dataset.root={cifar_arrays}", *ON_CUDA, *STAGES, "evaluate.enabled=false"]
    default = run(compose_cfg(base), tmp_path / "default")
    eager = run(compose_cfg(base + ["trainer.cuda_graph=false", "trainer.step=fused"]), tmp_path / "eager")
    assert default["cuda_graph"] is True and default["triton"] is True
    assert eager["cuda_graph"] is False and eager["triton"] is False
    a, b = load_checkpoint(tmp_path / "default"), load_checkpoint(tmp_path / "eager")
    for key in a["model"]:
        torch.testing.assert_close(a["model"][key], b["model"][key], rtol=1e-4, atol=1e-6)
