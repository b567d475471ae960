import re

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


@pytest.mark.parametrize("overrides, refused", [
    (["noise=masking", "schedule=constant", "schedule.nu=1.5"],
     "schedule.nu=1.5 is outside noise=masking's range: its nu is a probability in [0, 1)"),
    (["noise=salt_pepper", "schedule=constant", "schedule.nu=1.0"], "noise=salt_pepper's range: its nu is a probability"),
    (["noise=masking", "schedule=random_uniform", "schedule.high=1.2"], "schedule.high=1.2 is outside"),
    (["noise=masking", "schedule=stages", "schedule.stages=[{nu:0.5,epochs:1},{nu:1.5,epochs:1}]"],
     "schedule.stages[1].nu=1.5 is outside"),
    (["noise=masking", "schedule=constant", "trainer.parallel.nu=[0.5,1.5]"], "trainer.parallel.nu[1]=1.5 is outside"),
    (["noise=masking", "schedule=increasing", "schedule.nu0=0.5", "schedule.delta_nu=0.5", "schedule.nu_final=1.5"],
     "schedule.nu_final=1.5 is outside"),
    (["noise=gaussian", "schedule=constant", "schedule.nu=1.5"], None),
    (["noise=gaussian", "schedule=decreasing", "schedule.nu0=1.5", "schedule.delta_nu=0.5"], None),
    (["noise=gaussian", "schedule=increasing", "schedule.nu0=0.5", "schedule.delta_nu=0.5", "schedule.nu_final=1.5"],
     None),
])
def test_each_noise_checks_its_own_range_of_nu(overrides, refused):
    """nu is a probability for masking and salt-and-pepper noise, a standard deviation for Gaussian
    noise: a std of 1.5 trains, a masking probability of 1.5 is refused in one line, before any data."""
    from scheda.planning.plan import make_plan

    from helpers import TINY, compose_cfg

    cfg = compose_cfg([*TINY, "logger=none", *overrides])
    if refused is None:
        plan = make_plan(cfg)
        assert max(nu for m in plan.models for nu in m.schedule.epoch_nus()) == 1.5
    else:
        with pytest.raises(ConfigError, match=re.escape(refused)):
            make_plan(cfg)


# --- the masking rule every step implements (scheda.model.noise.reference_keep) -----------------

def _words(generator: torch.Generator, n: int) -> list[int]:
    """The draws a step takes for ``n`` inputs from ``generator``: one int64 per four inputs."""
    return torch.empty((n + 3) // 4, dtype=torch.int64).random_(generator=generator).tolist()


@pytest.mark.parametrize("shape, nu", [((7, 13), 0.3), ((20, 3072), 0.7), ((1, 3), 0.05)])
def test_the_torch_masking_noise_keeps_the_inputs_the_reference_rule_keeps(shape, nu):
    """Sizes that do not divide by four: the last draw's unused lanes are skipped, as the rule says."""
    from scheda.model.noise import reference_keep

    n = shape[0] * shape[1]
    kept = masking(torch.ones(shape), nu, _gen(3)) != 0
    assert kept.flatten().tolist() == reference_keep(_words(_gen(3), n), n, nu)


@pytest.mark.parametrize("nu", [0.0, 0.5, 0.999])
def test_the_triton_kernel_keeps_the_inputs_the_reference_rule_keeps(nu):
    """The Triton step's corruption kernel (run by Triton's interpreter here) on the same draws: each of two
    models its own rows, draws and threshold."""
    pytest.importorskip("triton")
    from scheda.model.noise import mask_threshold, reference_keep
    from scheda.training import kernels

    M, n, d = 2, 5, 11
    x_all = torch.rand(9, d) + 0.1
    idx = torch.tensor([[0, 3, 8, 1, 4], [2, 2, 7, 0, 5]])
    draws = [_words(_gen(10 + k), n * d) for k in range(M)]
    words = torch.tensor(draws, dtype=torch.int64)
    levels = [nu, 0.3]
    thr = torch.tensor([mask_threshold(v) for v in levels], dtype=torch.int32)
    x, x_tilde = torch.empty(M, n, d), torch.empty(M, n, d)
    kernels.corrupt(x_all, idx, words.view(torch.int16), thr, x, x_tilde)
    for k in range(M):
        assert torch.equal(x[k], x_all[idx[k]])
        assert (x_tilde[k] != 0).flatten().tolist() == reference_keep(draws[k], n * d, levels[k])
