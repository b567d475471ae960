"""Every graphed path on the CPU, through CUDA graphs' stand-in (scheda.training.graphs.StandIn: the
capture's warm-up, undone, and nothing of the captured call run; each replay runs it on the static
buffers the step copied in): the torch step graphed, the Triton and two-pass steps in Triton's
interpreter, and the fused fine-tuning, each against its eager self bit for bit (weights, loss sums,
generator states) through calls of new lengths in mid-epoch, a short last minibatch and a resume."""

from __future__ import annotations

import pytest
import torch

from scheda.model.autoencoder import DenoisingAutoencoder
from scheda.model.noise import build_noise
from scheda.model.optim import SGD
from scheda.model.schedule import NoiseSchedule, Stage
from scheda.training.graphs import StandIn, graphs_for, undone
from scheda.training.step import BatchedStep, GraphedStep, TritonStep, TwoPassStep
from scheda.training.steps import StepChoice
from scheda.training.trainer import ModelState

D, H, N, BS = 40, 12, 101, 4  # 25 whole minibatches of 4 and a last one of 1


def _models(M=2):
    models = [DenoisingAutoencoder(D, H, generator=torch.Generator().manual_seed(k)) for k in range(M)]
    return models, [SGD(m.parameters(), lr=0.05 * (k + 1)) for k, m in enumerate(models)], \
        [torch.Generator().manual_seed(10 + k) for k in range(M)]


def _state(models, gens, sums):
    return [p.detach().clone() for m in models for p in m.parameters()] + [g.get_state() for g in gens] + [sums.clone()]


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert torch.equal(x, y)


def test_graphs_off_cuda_are_the_stand_in():
    assert isinstance(graphs_for(torch.device("cpu")), StandIn)


def test_a_warm_up_leaves_the_epochs_loss_sums_as_they_were():
    """A capture's warm-up mid-epoch (the loss summed so far not zero) must not erase that loss."""
    w, sums, g = torch.ones(3), torch.tensor([2.5, 1.0]), torch.Generator().manual_seed(0)
    state = g.get_state()
    with undone([w], [g], sums):
        w.add_(1), sums.add_(7), torch.rand(3, generator=g)
    assert torch.equal(w, torch.ones(3)) and torch.equal(sums, torch.tensor([2.5, 1.0]))
    assert torch.equal(g.get_state(), state)


def _calls(step, x, perm, cuts, nus):
    """An epoch handed to ``step`` in calls ending at the row counts ``cuts`` (then the rest)."""
    first = 0
    for cut in [*cuts, N]:
        step(x, perm[:, first:cut], nus, step_generators[id(step)])
        first = cut


step_generators: dict[int, list] = {}


def _epoch(make, cuts, graphed):
    models, opts, gens = _models()
    x = torch.rand(N, D, generator=torch.Generator().manual_seed(2))
    step = make(models, opts, gens, x, graphed)
    step_generators[id(step)] = gens
    perm = torch.stack([torch.randperm(N, generator=torch.Generator().manual_seed(k)) for k in range(2)])
    with torch.no_grad():
        _calls(step, x, perm, cuts, [0.3, 0.5])
    return _state(models, gens, step.loss_sums)


def _torch_step(models, opts, gens, x, graphed):
    noises = [build_noise({"name": "masking"}) for _ in models]
    step = BatchedStep(models, opts, noises, BS, x.device)
    if not graphed:
        return step
    graphed_step = GraphedStep(step, x, gens)
    graphed_step.prepare()
    return graphed_step


def _per_minibatch(step):
    """The torch step takes one minibatch a call (the loop hands it so): cut the rows into them."""
    def call(x, idx, nus, gens):
        for first in range(0, idx.shape[1], BS):
            step(x, idx[:, first:first + BS], nus, gens)
    call.loss_sums = step.loss_sums
    return call


def test_the_torch_step_graphed_is_the_eager_step_bit_for_bit():
    runs = []
    for graphed in (False, True):
        models, opts, gens = _models()
        x = torch.rand(N, D, generator=torch.Generator().manual_seed(2))
        step = _torch_step(models, opts, gens, x, graphed)
        perm = torch.stack([torch.randperm(N, generator=torch.Generator().manual_seed(k)) for k in range(2)])
        call = _per_minibatch(step)
        call(x, perm[:, :37], [0.3, 0.5], gens)  # the last of these minibatches short: eager, then replays again
        call(x, perm[:, 37:], [0.3, 0.5], gens)
        runs.append(_state(models, gens, step.loss_sums))
    _same(*runs)


def _triton(models, opts, gens, x, graphed):
    step = TritonStep(models, opts, [build_noise({"name": "masking"}) for _ in models], BS, x, gens, graphed)
    step.prepare()
    return step


def _two_pass(models, opts, gens, x, graphed):
    step = TwoPassStep(models, opts, [build_noise({"name": "masking"}) for _ in models], BS, x, gens, graphed)
    step.prepare()
    return step


@pytest.mark.parametrize("make", [_triton, _two_pass], ids=["triton", "two_pass"])
def test_the_triton_steps_graphed_are_their_eager_selves_through_calls_of_new_lengths(make):
    """The loop's calls (16 minibatches, the rest with a short last one), and calls cut at new
    lengths in mid-epoch (3 whole minibatches, 5, 1, 7): whatever the graphed step replays, the
    eager step's bits, with the loss summed before each call kept (no capture inside an epoch)."""
    eager = _epoch(make, [64], graphed=False)
    _same(eager, _epoch(make, [64], graphed=True))
    _same(eager, _epoch(make, [12, 32, 36, 64], graphed=True))


def test_no_graph_is_captured_inside_an_epoch():
    models, opts, gens = _models()
    x = torch.rand(N, D, generator=torch.Generator().manual_seed(2))
    step = _two_pass(models, opts, gens, x, graphed=True)
    assert sorted(step.graphs) == [1, step.minibatches]
    with pytest.raises(RuntimeError, match="no graph of 3 minibatches was captured when the step was prepared"):
        step._graph(3)


@pytest.mark.parametrize("kind", ["fused", "triton", "two_pass"])
def test_a_graphed_run_resumed_mid_epoch_repeats_the_uninterrupted_run(kind):
    """Through the real loop, graphed (the stand-in): an epoch interrupted after its first call,
    checkpointed and resumed, gives the uninterrupted run's losses and weights bit for bit."""
    def trainer():
        [model], [opt], _ = _models(1)
        x = torch.rand(70, D, generator=torch.Generator().manual_seed(4))
        return ModelState(model, opt, build_noise({"name": "masking"}), NoiseSchedule("constant", [Stage(0.4, 2)]),
                          x, BS, torch.Generator().manual_seed(7), step=StepChoice(kind, cuda_graph=True))

    golden = trainer()
    golden.fit()
    assert golden.ran == {"kind": kind, "cuda_graph": True, "precision": "fp32", "fallback": None}

    class Stop:
        requested, signum, name = False, 2, "SIGINT"

        def forward(self):
            return None

    first = trainer()
    stop = Stop()
    first.stop = stop
    first.on_batch = lambda n: setattr(stop, "requested", True)  # stop after the first call of the epoch
    from scheda.utils.interrupt import Interrupted

    with pytest.raises(Interrupted):
        first.fit()
    resumed = trainer()
    resumed.load_state_dict(first.state_dict())
    resumed.fit()
    assert [h["loss"] for h in resumed.history] == [h["loss"] for h in golden.history]
    for key, value in golden.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[key], value), key
    assert torch.equal(resumed.generator.get_state(), golden.generator.get_state())


def test_the_fused_finetuning_graphed_is_its_eager_step():
    from scheda.model.network import FinetuneNet
    from scheda.training.finetune import FusedFinetune

    x, y = torch.rand(53, D, generator=torch.Generator().manual_seed(1)), torch.arange(53) % 10
    runs = []
    for graphed in (False, True):
        nets = [FinetuneNet(DenoisingAutoencoder(D, H, generator=torch.Generator().manual_seed(0)), 10) for _ in range(3)]
        step = FusedFinetune(nets, [0.1, 0.05, 0.01], x, y, 8, graphed=graphed)
        assert (step.graph is not None) is graphed and step.fallback is None
        perm = torch.randperm(53, generator=torch.Generator().manual_seed(0)).repeat(3, 1)
        step.eager(perm[:, :8])
        for first in range(8, 53, 8):  # the loss summed before the first replay stays; the last minibatch is short
            step(perm[:, first:first + 8])
        runs.append([p.detach().clone() for net in nets for p in net.parameters()] + [step.loss_sums.clone()])
    _same(*runs)
