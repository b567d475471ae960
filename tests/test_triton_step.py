"""The Triton step (scheda.training.step.TritonStep, kernels in scheda.training.kernels) on the CPU, its kernels in
Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET=1): the same update as the torch
step, for one model and a fused sweep, through the real training loop, resumed exactly. Its
CUDA graph is tested on a GPU (tests/test_cuda.py)."""

import pytest
import torch

from scheda.model.autoencoder import DenoisingAutoencoder
from scheda.model.noise import build_noise
from scheda.model.optim import SGD
from scheda.model.schedule import NoiseSchedule, Stage
from scheda.training import kernels
from scheda.training.step import BatchedStep, TritonStep, TwoPassStep
from scheda.training.steps import StepChoice
from scheda.training.trainer import ModelState

D, H = 40, 12


def _models(K, activation="sigmoid"):
    models = [DenoisingAutoencoder(D, H, activation=activation, generator=torch.Generator().manual_seed(k))
              for k in range(K)]
    opts = [SGD(m.parameters(), lr=0.05 * (k + 1)) for k, m in enumerate(models)]
    return models, opts, [torch.Generator().manual_seed(10 + k) for k in range(K)]


@pytest.mark.parametrize("K, activation", [(1, "sigmoid"), (3, "relu")])
def test_an_epoch_of_the_triton_step_is_the_torch_steps(K, activation):
    """Same masks (each model's words from its own generator), same update: losses and weights to
    float tolerance after an epoch whose last minibatch is partial (101 = 6 x 16 + 5), each
    model at its own noise level and learning rate."""
    x_all = torch.rand(101, D, generator=torch.Generator().manual_seed(2))
    (m_ref, o_ref, g_ref), (m_tri, o_tri, g_tri) = _models(K, activation), _models(K, activation)
    ref = BatchedStep(m_ref, o_ref, [build_noise({"name": "masking"}) for _ in range(K)], 16, torch.device("cpu"))
    tri = TritonStep(m_tri, o_tri, [build_noise({"name": "masking"}) for _ in range(K)], 16, x_all, g_tri, graphed=False)
    nus = [0.3 + 0.1 * k for k in range(K)]
    perm = torch.stack([torch.randperm(101, generator=torch.Generator().manual_seed(k)) for k in range(K)])
    for first in range(0, 101, 16):
        ref(x_all, perm[:, first:first + 16], nus, g_ref)
    tri(x_all, perm, nus, g_tri)  # all seven minibatches in one call
    torch.testing.assert_close(tri.take_loss_sums().sum(1), ref.take_loss_sums(), rtol=1e-5, atol=1e-4)
    assert not tri.take_loss_sums().any()  # taken: the slots start again from zero
    for a, b in zip(m_ref, m_tri):
        for pa, pb in zip(a.parameters(), b.parameters()):
            torch.testing.assert_close(pb, pa, rtol=1e-5, atol=1e-6)
    assert all(torch.equal(a.get_state(), b.get_state()) for a, b in zip(g_ref, g_tri))


def _trainer(triton, epochs=2, n=70):
    [model], [opt], _ = _models(1)
    x = torch.rand(n, D, generator=torch.Generator().manual_seed(4))
    return ModelState(model, opt, build_noise({"name": "masking"}), NoiseSchedule("constant", [Stage(0.4, epochs)]), x, 4,
                   torch.Generator().manual_seed(7), step=StepChoice("triton" if triton else "fused"))


def test_the_training_loop_hands_the_triton_step_whole_replays_and_gets_the_torch_steps_epochs():
    """70 rows in minibatches of 4: a call of 16 minibatches, then 2 more, the last of 2 rows;
    the epochs' losses (summed on the device, read at the epoch's end) and weights are the torch
    step's."""
    torch_run, triton_run = _trainer(False), _trainer(True)
    torch_run.fit()
    calls = []
    original = TritonStep.__call__
    TritonStep.__call__ = lambda self, x, idx, nus, gens: calls.append(idx.shape[1]) or original(self, x, idx, nus, gens)
    try:
        triton_run.fit()
    finally:
        TritonStep.__call__ = original
    assert isinstance(triton_run.alone._step, TritonStep)
    assert calls == [64, 6] * 2
    for a, b in zip(torch_run.history, triton_run.history):
        assert a["epoch"] == b["epoch"] and a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    torch.testing.assert_close(triton_run.model.W, torch_run.model.W, rtol=1e-5, atol=1e-6)


def test_resuming_the_triton_step_repeats_the_uninterrupted_run_bit_for_bit():
    golden = _trainer(True)
    golden.fit()
    first = _trainer(True, epochs=2)
    first.train_epoch()
    state = first.state_dict()
    resumed = _trainer(True)
    resumed.load_state_dict(state)
    resumed.fit()
    assert [h["loss"] for h in resumed.history] == [h["loss"] for h in golden.history]
    for key, value in golden.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[key], value), key


def test_where_triton_cannot_compile_the_torch_step_trains_from_the_same_state(monkeypatch, caplog):
    """A kernel that fails when the step is built (no C compiler, no Python headers): one warning,
    the torch step, and the warm-up's draws and updates undone, so the run is the one
    trainer.step=fused would give."""
    from scheda.training import kernels

    def fails(*args, **kwargs):
        raise RuntimeError("Failed to compile the launcher: cc not found\nmore detail")

    [model], [opt], [gen] = _models(1)
    x_all = torch.rand(40, D, generator=torch.Generator().manual_seed(2))
    weights, state = model.W.detach().clone(), gen.get_state()
    monkeypatch.setattr(kernels, "corrupt", fails)
    with caplog.at_level("WARNING", logger="scheda.training.steps"):
        step = StepChoice("triton").build([model], [opt], [build_noise({"name": "masking"})], 8, x_all, [gen])
    assert type(step) is BatchedStep
    # the step says what it is, and why it is not the plan's (results.json records both)
    assert step.ran == StepChoice("fused") and step.fallback.startswith("the Triton step could not run here (RuntimeError")
    assert torch.equal(gen.get_state(), state) and torch.equal(model.W, weights)
    [warning] = [r.getMessage() for r in caplog.records]
    assert warning == ("the Triton step cannot run here (RuntimeError: Failed to compile the launcher: cc not found): "
                       "training with the torch step; trainer.step=fused skips the attempt")


# --- The two-pass step (scheda.training.step.TwoPassStep): the decode, then one pass over W's rows ---

D2, H2 = 150, 40  # several tiles of W's rows (16) and columns (64), none full at the edge
N2, B2 = 53, 16  # an epoch of 4 minibatches, the last of 5 rows: the first, the chained middle, a partial last
WHOLE = 1  # kernels.ROWS_PROGRAMS that keeps pass (ii) whole (S = 1): the default splits it here


def _two_pass_models(K, activation):
    models = [DenoisingAutoencoder(D2, H2, activation=activation, generator=torch.Generator().manual_seed(k))
              for k in range(K)]
    return (models, [SGD(m.parameters(), lr=0.05 * (k + 1)) for k, m in enumerate(models)],
            [torch.Generator().manual_seed(10 + k) for k in range(K)])


def _two_pass_epoch(K, activation, cuts):
    """An epoch of N2 rows in minibatches of B2 (the last partial) by the two-pass step, handed to
    it in calls that end at the minibatch counts ``cuts``."""
    x_all = torch.rand(N2, D2, generator=torch.Generator().manual_seed(2))
    models, opts, gens = _two_pass_models(K, activation)
    step = TwoPassStep(models, opts, [build_noise({"name": "masking"}) for _ in range(K)], B2, x_all, gens, graphed=False)
    perm = torch.stack([torch.randperm(N2, generator=torch.Generator().manual_seed(k)) for k in range(K)])
    nus = [0.3 + 0.1 * k for k in range(K)]
    first = 0
    for cut in [*cuts, -(-N2 // B2)]:
        step(x_all, perm[:, first * B2:cut * B2], nus, gens)
        first = cut
    return x_all, perm, nus, models, gens, step.take_loss_sums()


@pytest.mark.parametrize("K, activation, programs, splits", [(1, "sigmoid", None, 3), (3, "relu", None, 3),
                                                             (1, "sigmoid", WHOLE, 1), (3, "relu", WHOLE, 1)])
def test_an_epoch_of_the_two_pass_step_is_the_torch_steps(K, activation, programs, splits, monkeypatch):
    """The same masks and update as the torch step, each model at its own level and rate, over a
    partial last minibatch: losses and weights to float tolerance, the generators where the torch
    step leaves them; with pass (ii) split in column chunks (its partial sums summed by the next
    kernel) and whole."""
    if programs is not None:
        monkeypatch.setattr(kernels, "ROWS_PROGRAMS", programs)
    assert kernels.rows_splits(K, H2, D2) == splits
    x_all, perm, nus, models, gens, losses = _two_pass_epoch(K, activation, [])
    ref_models, ref_opts, ref_gens = _two_pass_models(K, activation)
    ref = BatchedStep(ref_models, ref_opts, [build_noise({"name": "masking"}) for _ in range(K)], B2, torch.device("cpu"))
    for first in range(0, N2, B2):
        ref(x_all, perm[:, first:first + B2], nus, ref_gens)
    torch.testing.assert_close(losses.sum(1), ref.take_loss_sums(), rtol=1e-5, atol=1e-4)
    for a, b in zip(ref_models, models):
        for pa, pb in zip(a.parameters(), b.parameters()):
            torch.testing.assert_close(pb, pa, rtol=1e-5, atol=1e-6)
    assert all(torch.equal(a.get_state(), b.get_state()) for a, b in zip(ref_gens, gens))


@pytest.mark.parametrize("programs", [None, WHOLE], ids=["split", "whole"])
def test_where_the_loop_cuts_the_two_pass_steps_minibatches_changes_no_bit(programs, monkeypatch):
    """A call's first minibatch is encoded alone, by the loop that encodes the next minibatch
    inside the update pass: an epoch in one call or one minibatch a call (a graph's replays, a
    resumed epoch; every other cutting lies between) gives the same bits, pass (ii) split or whole."""
    if programs is not None:
        monkeypatch.setattr(kernels, "ROWS_PROGRAMS", programs)
    runs = [_two_pass_epoch(3, "sigmoid", cuts) for cuts in ([], list(range(1, -(-N2 // B2))))]
    for _, _, _, models, gens, losses in runs[1:]:
        assert torch.equal(losses, runs[0][5])
        for a, b in zip(runs[0][3], models):
            for pa, pb in zip(a.parameters(), b.parameters()):
                assert torch.equal(pa, pb)
        assert all(torch.equal(a.get_state(), b.get_state()) for a, b in zip(runs[0][4], gens))


def _two_pass_trainer(epochs=2, n=70):
    [model], [opt], _ = _models(1)
    x = torch.rand(n, D, generator=torch.Generator().manual_seed(4))
    return ModelState(model, opt, build_noise({"name": "masking"}), NoiseSchedule("constant", [Stage(0.4, epochs)]), x, 4,
                      torch.Generator().manual_seed(7), step=StepChoice("two_pass"))


def test_the_training_loop_trains_with_the_two_pass_step_and_resumes_it_bit_for_bit():
    """Through the real loop (calls of 16 minibatches, then 2 more, the last of 2 rows): the torch
    step's epochs; and an epoch checkpointed and resumed repeats the uninterrupted run exactly."""
    torch_run, golden = _trainer(False), _two_pass_trainer()
    torch_run.fit()
    golden.fit()
    assert isinstance(golden.alone._step, TwoPassStep)
    for a, b in zip(torch_run.history, golden.history):
        assert a["epoch"] == b["epoch"] and a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    torch.testing.assert_close(golden.model.W, torch_run.model.W, rtol=1e-5, atol=1e-6)
    first = _two_pass_trainer()
    first.train_epoch()
    resumed = _two_pass_trainer()
    resumed.load_state_dict(first.state_dict())
    resumed.fit()
    assert [h["loss"] for h in resumed.history] == [h["loss"] for h in golden.history]
    for key, value in golden.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[key], value), key
