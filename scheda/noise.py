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


def masking(x: torch.Tensor, nu: Nu, generator: torch.Generator) -> torch.Tensor:
    """Zero each input independently with probability nu (the paper's corruption)."""
    if isinstance(nu, float) and nu == 0.0:
        return x
    return x * (_uniform_like(x, generator) >= nu)


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
