"""Corruption processes q(x~ | x) with a single level nu (Vincent et al., 2010).

Each option of the ``noise`` group is a config schema (data: its name) that knows its process;
:func:`build_noise` puts one to work as a :class:`Corruption`, which holds what the process keeps
between calls (the masking noise's scratch buffers), one per model. A corruption takes a clean
minibatch ``x`` in [0, 1], the level ``nu`` (a float, or a 0-dim tensor for schedules that draw
nu per minibatch), and the run's generator, so that a seed fixes every corruption. ``nu = 0``
returns ``x`` unchanged.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from typing import ClassVar, Mapping

from omegaconf import MISSING

from scheda.config import Component, register, typed
from scheda.utils.errors import ConfigError
from scheda.utils.lazy import lazy

torch = lazy("torch", globals())

Nu = "float | torch.Tensor"  # a level, or one per row (a fused sweep)


def _uniform_like(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    return torch.empty_like(x).uniform_(generator=generator)


MASK_BITS = 15  # masks compare 15-bit random integers with a threshold: nu is exact to 2^-15


def mask_threshold(nu: Nu) -> int | torch.Tensor:
    """round(nu * 2^15): an input survives when its 15-bit random draw is >= this."""
    if isinstance(nu, torch.Tensor):
        return torch.round(nu * (1 << MASK_BITS)).to(torch.int16)
    return int(round(nu * (1 << MASK_BITS)))


def reference_keep(words: list[int], n: int, nu: float) -> list[bool]:
    """The masking rule every step implements, written out on integers: the specification the torch
    noise (:class:`Masking`) and the Triton kernels (scheda.training.kernels) are tested against
    (tests/test_noise.py). A minibatch's ``n`` inputs, row-major, take one 64-bit draw of the
    generator per four (``words``, as ``torch.int64.random_`` gives them): input i reads the 16-bit
    lane i % 4 of draw i // 4, lanes counted from the draw's least significant bits (what viewing the
    int64 draws as int16 gives on a little-endian machine), keeps its low 15 bits, and survives when
    they are >= round(nu * 2^15)."""
    threshold = mask_threshold(nu)
    lane = (1 << MASK_BITS) - 1
    return [((words[i // 4] & 0xFFFFFFFFFFFFFFFF) >> (16 * (i % 4)) & lane) >= threshold for i in range(n)]


def _is_zero(nu: Nu) -> bool:
    return isinstance(nu, float) and nu == 0.0


@dataclass
class Noise(Component, abc.ABC):
    """Base of the noise group's schemas: which corruption process a run uses (no state: what
    a process keeps between calls lives in the :class:`Corruption` built from it)."""

    name: str = MISSING
    # What nu is for this noise and its range [0, nu_max): a probability below 1 unless said otherwise.
    nu_means: ClassVar[str] = "a probability"
    nu_max: ClassVar[float] = 1.0

    def check_levels(self, levels: Mapping[str, float | None]) -> None:
        """Each noise level a run sets (``levels``: the setting that gives it -> its value; None: none
        set) is one this noise can apply: a ConfigError naming the first that is not (a masking
        probability of 1.5; a Gaussian std of 1.5 is allowed)."""
        for key, nu in levels.items():
            if nu is not None and not 0 <= nu < self.nu_max:
                raise ConfigError(f"{key}={nu!r} is outside noise={self.name}'s range: its nu is {self.nu_means} in "
                                  f"[0, {self.nu_max:g}): lower it, or choose a noise whose nu reaches it")

    @abc.abstractmethod
    def corrupt(self, x: torch.Tensor, nu: Nu, generator: torch.Generator, out: torch.Tensor) -> torch.Tensor:
        """Write the corruption of ``x`` at level ``nu`` (not 0) into ``out`` and return it."""

    def corrupt_reusing(self, x: torch.Tensor, nu: Nu, generator: torch.Generator, out: torch.Tensor,
                        scratch: dict) -> torch.Tensor:
        """:meth:`corrupt` with ``scratch``, the caller's buffers kept between calls, for a process
        that would otherwise allocate its draws each call (the masking noise)."""
        return self.corrupt(x, nu, generator, out)


class Corruption:
    """A noise schema put to work, called as ``corruption(x, nu, generator, out=None)``: ``out``
    (the shape of ``x``) receives the corruption without a fresh allocation (the fused training
    step passes its preallocated buffer for every noise alike), and the scratch buffers the
    process reuses between calls are this object's, so two models never share them."""

    def __init__(self, noise: Noise):
        self.noise = noise
        self.scratch: dict = {}

    @property
    def name(self) -> str:
        return self.noise.name

    def __call__(self, x: torch.Tensor, nu: Nu, generator: torch.Generator,
                 out: torch.Tensor | None = None) -> torch.Tensor:
        if _is_zero(nu):
            return x if out is None else out.copy_(x)
        return self.noise.corrupt_reusing(x, nu, generator, torch.empty_like(x) if out is None else out, self.scratch)


@register("noise")
@dataclass
class Masking(Noise):
    """Zero each input independently with probability nu (the paper's corruption).

    The randomness comes from raw 64-bit draws cut into four 16-bit lanes, each masked to 15
    bits (the generator's int64 draws lie in [0, 2^63), so only 15 bits of every lane are
    uniform): one draw per four inputs instead of one float per input. The drop
    probability is nu rounded to a multiple of 2^-15 (within 1.6e-5 of nu). The draws and
    the mask live in the caller's scratch buffers (grown when a larger input comes)."""

    name: str = "masking"

    def corrupt(self, x, nu, generator, out):
        return self.corrupt_reusing(x, nu, generator, out, {})

    def corrupt_reusing(self, x, nu, generator, out, scratch):
        n = x.numel()
        n_words = (n + 3) // 4
        words, mask = scratch.get("masking", (None, None))
        if words is None or words.numel() < n_words or words.device != x.device:
            words = torch.empty(n_words, dtype=torch.int64, device=x.device)
            mask = torch.empty(n, dtype=torch.bool, device=x.device)
            scratch["masking"] = (words, mask)
        words = words[:n_words].random_(generator=generator)
        draws = words.view(torch.int16)[:n].view(x.shape).bitwise_and_((1 << MASK_BITS) - 1)
        keep = torch.ge(draws, mask_threshold(nu), out=mask[:n].view(x.shape))
        return torch.mul(x, keep, out=out)


@register("noise")
@dataclass
class Gaussian(Noise):
    """Add isotropic Gaussian noise of standard deviation nu (any nu >= 0)."""

    name: str = "gaussian"
    nu_means: ClassVar[str] = "a standard deviation"
    nu_max: ClassVar[float] = math.inf

    def corrupt(self, x, nu, generator, out):
        return out.normal_(generator=generator).mul_(nu).add_(x)


@register("noise")
@dataclass
class SaltPepper(Noise):
    """Set each input with probability nu to 0 or 1 (equally likely), from one uniform draw."""

    name: str = "salt_pepper"

    def corrupt(self, x, nu, generator, out):
        u = torch.empty_like(x).uniform_(generator=generator)
        salt = (u < nu * 0.5).to(x.dtype)
        return torch.where(u < nu, salt, x, out=out)


def build_noise(config: Mapping | Noise) -> Corruption:
    """The corruption process ``config`` (the noise group, or its schema) names, with buffers of its own."""
    return Corruption(typed("noise", config))
