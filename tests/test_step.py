import pytest
import torch

from scheda.model.autoencoder import DenoisingAutoencoder
from scheda.model.noise import build_noise
from scheda.model.optim import SGD
from scheda.training.step import AutogradStep, BatchedStep, FusedStep, OneModel
from scheda.training.steps import StepChoice

masking, gaussian, salt_pepper = (build_noise({"name": n}) for n in ("masking", "gaussian", "salt_pepper"))


def _pair(activation="sigmoid", momentum=0.0, weight_decay=0.0, noise=masking, d=40, H=12, bs=16):
    steps = []
    for _ in range(2):
        model = DenoisingAutoencoder(d, H, activation=activation, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            model.b.uniform_(-0.1, 0.1, generator=torch.Generator().manual_seed(1))
        opt = SGD(model.parameters(), lr=0.05, momentum=momentum, weight_decay=weight_decay)
        steps.append((model, opt))
    fused = FusedStep(steps[0][0], steps[0][1], noise, bs, torch.device("cpu"))
    auto = AutogradStep(steps[1][0], steps[1][1], noise)
    return fused, auto


@pytest.mark.parametrize("activation", ["sigmoid", "relu"])
@pytest.mark.parametrize("momentum, weight_decay", [(0.0, 0.0), (0.9, 1e-3)])
@pytest.mark.parametrize("nu", [0.3, 0.0, "random"])
def test_fused_step_matches_autograd(activation, momentum, weight_decay, nu):
    fused, auto = _pair(activation, momentum, weight_decay)
    x_all = (torch.rand(100, 40, generator=torch.Generator().manual_seed(2)) > 0.5).float()
    g_fused, g_auto = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    for i in range(8):
        idx = torch.randperm(100, generator=torch.Generator().manual_seed(i))[: 16 if i < 7 else 9]  # last partial
        level = torch.tensor(0.1 + 0.05 * i) if nu == "random" else nu
        loss_f = fused(x_all, idx, level, g_fused)
        loss_a = auto(x_all, idx, level, g_auto)
        torch.testing.assert_close(loss_f, loss_a, rtol=1e-5, atol=1e-4)
    for pf, pa in zip(fused.model.parameters(), auto.model.parameters()):
        torch.testing.assert_close(pf, pa, rtol=1e-4, atol=1e-6)


def test_fused_step_with_another_noise():
    fused, auto = _pair(noise=gaussian)
    x_all = torch.rand(50, 40)
    g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    for _ in range(3):
        idx = torch.arange(16)
        torch.testing.assert_close(fused(x_all, idx, 0.2, g1), auto(x_all, idx, 0.2, g2), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(fused.model.W, auto.model.W, rtol=1e-4, atol=1e-6)


def test_the_step_choice_builds_the_step_it_names_and_autograd_for_one_model_only():
    """The plan chooses (scheda.planning.rules.choose_step, tested in test_rules); the choice builds
    that step and decides nothing: a step built for models it cannot train is a programming error."""
    x = torch.rand(30, 10)
    g = torch.Generator()

    def build(choice, *models):
        opts = [SGD(m.parameters(), lr=0.1) for m in models]
        return choice.build(list(models), opts, [masking] * len(models), 8, x, [g] * len(models))

    m = DenoisingAutoencoder(10, 4)
    assert isinstance(build(StepChoice(), m), BatchedStep)
    for choice in (StepChoice("autograd"), StepChoice("autograd", precision="bf16")):
        step = build(choice, m)
        assert isinstance(step, OneModel) and isinstance(step.step, AutogradStep)
        assert step(x, torch.arange(8).unsqueeze(0), [0.3], [g]).shape == (1,)  # called like K models, K = 1
    se = DenoisingAutoencoder(10, 4, loss="squared_error")
    assert isinstance(build(StepChoice("autograd"), se).step, AutogradStep)
    with pytest.raises(ValueError, match="the autograd step trains one model"):
        build(StepChoice("autograd"), m, DenoisingAutoencoder(10, 4))
    with pytest.raises(ValueError, match="the batched step trains tied cross-entropy DAs"):
        build(StepChoice(), se)
    with pytest.raises(ValueError, match="a step is one of"):
        StepChoice("eager")


@pytest.mark.parametrize("noise", [masking, gaussian, salt_pepper])
@pytest.mark.parametrize("nu", [0.4, 0.0])
def test_every_noise_into_a_buffer_equals_a_fresh_corruption(noise, nu):
    x = torch.rand(7, 9)
    out = torch.empty(7, 9)
    a = noise(x, nu, torch.Generator().manual_seed(5), out=out)
    masking(torch.rand(30, 31), 0.2, torch.Generator())  # buffers of another size in between
    b = noise(x, nu, torch.Generator().manual_seed(5))
    assert a.data_ptr() == out.data_ptr() and torch.equal(a, b)


def test_summed_cross_entropy_is_exact_and_stable():
    from scheda.training.step import summed_cross_entropy

    logits = torch.tensor([[-200.0, -30.0, -1.0, 0.0, 2.0, 40.0, 300.0]])
    x = torch.tensor([[0.0, 1.0, 0.3, 1.0, 0.0, 0.5, 1.0]])
    expected = torch.nn.functional.binary_cross_entropy_with_logits(logits.double(), x.double(), reduction="sum")
    got = summed_cross_entropy(logits, x, torch.empty_like(logits))
    torch.testing.assert_close(got.double(), expected, rtol=1e-6, atol=1e-5)
    batched = summed_cross_entropy(torch.stack([logits, -logits]), torch.stack([x, x]),
                                   torch.empty(2, 1, 7), batched=True)
    torch.testing.assert_close(batched[0], got)
