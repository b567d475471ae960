import math

import pytest
import torch

from scheda.utils.errors import ConfigError
from scheda.model.autoencoder import DenoisingAutoencoder, build_model


def _model(activation="sigmoid", loss="cross_entropy", n_input=7, n_hidden=5):
    torch.manual_seed(0)
    m = DenoisingAutoencoder(n_input, n_hidden, activation=activation, loss=loss,
                             generator=torch.Generator().manual_seed(0)).double()
    with torch.no_grad():  # non-zero biases exercise every term of the gradient
        m.b.uniform_(-0.5, 0.5)
        m.b_prime.uniform_(-0.5, 0.5)
    return m


@pytest.mark.parametrize("activation", ["sigmoid", "relu"])
@pytest.mark.parametrize("loss", ["cross_entropy", "squared_error"])
def test_gradients_match_finite_differences(activation, loss):
    m = _model(activation, loss)
    x = torch.rand(4, 7, dtype=torch.float64)
    x_tilde = x * (torch.rand_like(x) > 0.3)
    params = (m.W, m.b, m.b_prime)

    def f(W, b, b_prime):
        h = m._act(x_tilde @ W.t() + b)
        logits = h @ W + b_prime
        if loss == "cross_entropy":
            return torch.nn.functional.binary_cross_entropy_with_logits(logits, x, reduction="sum") / 4
        return (torch.sigmoid(logits) - x).pow(2).sum() / 4

    assert torch.autograd.gradcheck(f, params, eps=1e-6, atol=1e-5)
    # The module's loss is the same function, so its autograd gradient matches too.
    grads = torch.autograd.grad(m.loss(x_tilde, x), params)
    expected = torch.autograd.grad(f(*params), params)
    for g, e in zip(grads, expected):
        torch.testing.assert_close(g, e)


def test_cross_entropy_gradient_matches_closed_form():
    """Tied weights: dW = h^T dz + dh^T x~ (in row form) with dz = z - x, dh = dz W^T h(1-h)."""
    m = _model()
    x = torch.rand(6, 7, dtype=torch.float64)
    x_tilde = x * (torch.rand_like(x) > 0.5)
    m.zero_grad()
    m.loss(x_tilde, x).backward()
    with torch.no_grad():
        h = torch.sigmoid(x_tilde @ m.W.t() + m.b)
        dz = (torch.sigmoid(h @ m.W + m.b_prime) - x) / 6
        dh = (dz @ m.W.t()) * h * (1 - h)
        torch.testing.assert_close(m.W.grad, dh.t() @ x_tilde + h.t() @ dz)
        torch.testing.assert_close(m.b.grad, dh.sum(0))
        torch.testing.assert_close(m.b_prime.grad, dz.sum(0))


def test_loss_is_summed_over_inputs_and_averaged_over_minibatch():
    m = _model()
    x = torch.rand(3, 7, dtype=torch.float64)
    z = m(x)
    expected = -(x * torch.log(z) + (1 - x) * torch.log(1 - z)).sum(1).mean()
    torch.testing.assert_close(m.loss(x, x), expected)


def test_init_follows_classic_dA_and_is_seeded():
    a = DenoisingAutoencoder(3072, 1000, generator=torch.Generator().manual_seed(3))
    b = DenoisingAutoencoder(3072, 1000, generator=torch.Generator().manual_seed(3))
    bound = 4 * math.sqrt(6 / (3072 + 1000))
    assert a.W.shape == (1000, 3072)
    assert a.W.abs().max() <= bound and a.W.abs().max() > 0.99 * bound
    assert torch.equal(a.W, b.W)
    assert torch.count_nonzero(a.b) == 0 and torch.count_nonzero(a.b_prime) == 0
    c = DenoisingAutoencoder(10, 4, encoder_bias_init=0.5, decoder_bias_init=-1.0)
    assert torch.all(c.b == 0.5) and torch.all(c.b_prime == -1.0)


def test_encode_dataset_matches_encode_in_chunks():
    m = _model().float()
    x = torch.rand(50, 7)
    torch.testing.assert_close(m.encode_dataset(x, chunk_size=8), m.encode(x))
    assert not m.encode_dataset(x).requires_grad


@pytest.mark.parametrize("kwargs, key", [
    (dict(activation="tanh"), "model.activation"),
    (dict(loss="hinge"), "model.loss"),
    (dict(hidden=0), "model.hidden"),
    (dict(init_scale=-1.0), "model.init_scale"),
])
def test_bad_model_config_names_the_key(kwargs, key):
    with pytest.raises(ConfigError, match=key):
        build_model(dict(name="da", hidden=3) | kwargs, n_input=5)
