"""Corruption processes q(x~ | x) with a single level nu (Vincent et al., 2010).

Each takes a clean minibatch ``x`` in [0, 1], the level ``nu`` (a float, or a 0-dim tensor
for schedules that draw nu per minibatch), and the run's generator, so that a seed fixes
every corruption. ``nu = 0`` returns ``x`` unchanged.
"""

from __future__ import annotations

from typing import Callable, Mapping

import torch

from scheda.errors import ConfigError

Nu = float | torch.Tensor
NoiseFn = Callable[[torch.Tensor, Nu, torch.Generator], torch.Tensor]


def _uniform_like(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    return torch.empty_like(x).uniform_(generator=generator)


MASK_BITS = 15  # masks compare 15-bit random integers with a threshold: nu is exact to 2^-15


def mask_threshold(nu: Nu) -> int | torch.Tensor:
    """round(nu * 2^15): an input survives when its 15-bit random draw is >= this."""
    if isinstance(nu, torch.Tensor):
        return torch.round(nu * (1 << MASK_BITS)).to(torch.int16)
    return int(round(nu * (1 << MASK_BITS)))


def masking(x: torch.Tensor, nu: Nu, generator: torch.Generator, out: torch.Tensor | None = None,
            words: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Zero each input independently with probability nu (the paper's corruption).

    The randomness comes from raw 64-bit draws cut into four 16-bit lanes, each masked to 15
    bits (the generator's int64 draws lie in [0, 2^63), so only 15 bits of every lane are
    uniform): one draw per four inputs instead of one float per input. The drop
    probability is nu rounded to a multiple of 2^-15 (within 1.6e-5 of nu). ``out``,
    ``words`` (int64, >= numel/4) and ``mask`` (bool, >= numel) are optional preallocated
    buffers for the trainer's fused step.
    """
    if isinstance(nu, float) and nu == 0.0:
        return x if out is None else out.copy_(x)
    n = x.numel()
    n_words = (n + 3) // 4
    if words is None:
        words = torch.empty(n_words, dtype=torch.int64, device=x.device)
    words = words[:n_words].random_(generator=generator)
    draws = words.view(torch.int16)[:n].view(x.shape).bitwise_and_((1 << MASK_BITS) - 1)
    keep = torch.ge(draws, mask_threshold(nu), out=None if mask is None else mask.view(-1)[:n].view(x.shape))
    return torch.mul(x, keep, out=out)


def gaussian(x: torch.Tensor, nu: Nu, generator: torch.Generator) -> torch.Tensor:
    """Add isotropic Gaussian noise of standard deviation nu."""
    if isinstance(nu, float) and nu == 0.0:
        return x
    return x + nu * torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)


def salt_pepper(x: torch.Tensor, nu: Nu, generator: torch.Generator) -> torch.Tensor:
    """Set each input with probability nu to 0 or 1 (equally likely), from one uniform draw."""
    if isinstance(nu, float) and nu == 0.0:
        return x
    u = _uniform_like(x, generator)
    salt = (u < nu * 0.5).to(x.dtype)
    return torch.where(u < nu, salt, x)


NOISES: dict[str, NoiseFn] = {"masking": masking, "gaussian": gaussian, "salt_pepper": salt_pepper}


def build_noise(cfg: Mapping) -> NoiseFn:
    name = cfg.get("name")
    if name not in NOISES:
        raise ConfigError(f"noise.name={name!r} is unknown: use one of {', '.join(NOISES)}")
    return NOISES[name]
