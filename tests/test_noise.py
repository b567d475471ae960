import pytest
import torch

from scheda.utils.errors import ConfigError
from scheda.model.noise import build_noise

masking, gaussian, salt_pepper = (build_noise({"name": n}) for n in ("masking", "gaussian", "salt_pepper"))


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("nu", [0.05, 0.3, 0.7])
def test_masking_zeroes_fraction_nu(nu):
    x = torch.rand(200, 3072) * 0.9 + 0.1  # no zeros before corruption
    out = masking(x, nu, _gen())
    assert abs((out == 0).float().mean().item() - nu) < 0.005
    kept = out != 0
    assert torch.equal(out[kept], x[kept])


def test_masking_accepts_a_tensor_nu_and_is_seeded():
    x = torch.rand(100, 50) + 0.1
    a = masking(x, torch.tensor(0.4), _gen(5))
    b = masking(x, 0.4, _gen(5))
    assert torch.equal(a, b)
    assert not torch.equal(a, masking(x, 0.4, _gen(6)))


@pytest.mark.parametrize("fn", [masking, gaussian, salt_pepper])
def test_zero_nu_is_no_corruption(fn):
    x = torch.rand(10, 20)
    assert torch.equal(fn(x, 0.0, _gen()), x)


def test_salt_pepper_fraction_and_balance():
    x = torch.full((400, 1000), 0.5)
    out = salt_pepper(x, 0.4, _gen())
    changed = out != 0.5
    assert abs(changed.float().mean().item() - 0.4) < 0.005
    assert abs((out == 1).float().mean().item() - 0.2) < 0.005
    assert set(out[changed].unique().tolist()) == {0.0, 1.0}


def test_gaussian_has_std_nu():
    x = torch.zeros(500, 1000)
    out = gaussian(x, 0.3, _gen())
    assert abs(out.std().item() - 0.3) < 0.003 and abs(out.mean().item()) < 0.003


def test_unknown_noise_is_a_config_error():
    with pytest.raises(ConfigError, match="noise.name"):
        build_noise({"name": "dropout"})
