"""The tied-weight denoising autoencoder.

``h = s(W x~ + b)``, ``z = sigmoid(W^T h + b')`` with ``W`` of shape [hidden x input]; the
loss is the cross-entropy between ``z`` and the clean ``x`` summed over input dimensions and
averaged over the minibatch (Vincent et al., 2010), computed from the logits for stability.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import ClassVar, List, Mapping, Optional

import torch
import torch.nn.functional as F
from torch import nn

from scheda.config import Component, register, typed
from scheda.utils.errors import ConfigError

log = logging.getLogger(__name__)

ACTIVATIONS = {"sigmoid": torch.sigmoid, "relu": torch.relu}
LOSSES = ("cross_entropy", "squared_error")


class DenoisingAutoencoder(nn.Module):
    def __init__(
        self,
        n_input: int,
        n_hidden: int,
        activation: str = "sigmoid",
        loss: str = "cross_entropy",
        init_scale: float = 4.0,
        encoder_bias_init: float = 0.0,
        decoder_bias_init: float = 0.0,
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        self.n_input, self.n_hidden = n_input, n_hidden
        self.activation, self.loss_name = activation, loss
        # The classic dA initialisation (LISA-lab tutorial): U(+-4 sqrt(6 / (fan_in + fan_out))).
        bound = init_scale * math.sqrt(6.0 / (n_input + n_hidden))
        weight = torch.empty(n_hidden, n_input).uniform_(-bound, bound, generator=generator)
        self.W = nn.Parameter(weight)
        self.b = nn.Parameter(torch.full((n_hidden,), float(encoder_bias_init)))
        self.b_prime = nn.Parameter(torch.full((n_input,), float(decoder_bias_init)))
        self._act = ACTIVATIONS[activation]

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Hidden representation ``s(W x + b)``; no corruption is applied here."""
        return self._act(F.linear(x, self.W, self.b))

    def decode_logits(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(h, self.W.t(), self.b_prime)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Reconstruction ``z`` of ``x`` (no corruption)."""
        return torch.sigmoid(self.decode_logits(self.encode(x)))

    def loss(self, x_tilde: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Reconstruction error of ``x`` from its corruption ``x_tilde``, mean over the minibatch."""
        return self._reconstruction_error(self.decode_logits(self.encode(x_tilde)), x)

    def _reconstruction_error(self, logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        if self.loss_name == "cross_entropy":
            total = F.binary_cross_entropy_with_logits(logits, x, reduction="sum")
        else:
            total = (torch.sigmoid(logits) - x).pow(2).sum()
        return total / x.shape[0]

    def training_loss(self, x: torch.Tensor, noise, nu, generator: torch.Generator) -> torch.Tensor:
        """The denoising loss of one minibatch: corrupt ``x`` at ``nu``, reconstruct it."""
        return self.loss(noise(x, nu, generator), x)

    def set_epoch(self, epoch: int) -> None:
        """Called before each (0-based) epoch; a variant that trains by epoch (alternating groups) overrides it."""

    def after_backward(self) -> None:
        """Called between backward and the optimiser's step; a variant that freezes parts overrides it."""

    @property
    def fusable(self) -> bool:
        """Whether the hand-written tied-DA step (scheda.training.step) computes this model's update."""
        return type(self) is DenoisingAutoencoder and self.loss_name == "cross_entropy"

    @torch.no_grad()
    def encode_dataset(self, x: torch.Tensor, chunk_size: int = 8192) -> torch.Tensor:
        """Encode a whole data set in large chunks without building a graph."""
        return torch.cat([self.encode(x[i:i + chunk_size]) for i in range(0, x.shape[0], chunk_size)])

    def filters(self) -> torch.Tensor:
        """The rows of W: one input-space filter per hidden unit."""
        return self.W.detach()


class CompositeDA(DenoisingAutoencoder):
    """The composite DA (the paper's Section 5): the hidden units are split into S equal groups;
    group s sees the input corrupted at its own level ``group_nus[s]`` (``None``: the schedule's
    nu), its code is ``h_s = s(W_s x~_s + b_s)``, and the reconstruction sums every group's
    decoder term, ``z = sigmoid(sum_s W_s^T h_s + b')``. ``update='alternating'`` trains one
    group's (W_s, b_s) per epoch in turn (b' always), which the paper found much better than
    updating everything at once (``'joint'``). Features for evaluation are the whole hidden
    layer without noise, the concatenation of the groups' codes (``encode``, inherited)."""

    def __init__(self, n_input: int, n_hidden: int, group_nus, update: str = "alternating", **kwargs):
        super().__init__(n_input, n_hidden, **kwargs)
        group_nus = list(group_nus)
        size = n_hidden // len(group_nus)
        self.groups = [slice(i * size, (i + 1) * size) for i in range(len(group_nus))]
        self.group_nus, self.update = group_nus, update
        self.active: int | None = None

    def set_epoch(self, epoch: int) -> None:
        """The group trained in this (0-based) epoch, when alternating."""
        self.active = epoch % len(self.groups) if self.update == "alternating" else None

    def training_loss(self, x: torch.Tensor, noise, nu, generator: torch.Generator) -> torch.Tensor:
        """Each group corrupts the input at its own level."""
        logits = self.b_prime.expand_as(x)
        for group, group_nu in zip(self.groups, self.group_nus):
            x_tilde = noise(x, nu if group_nu is None else float(group_nu), generator)
            h = self._act(F.linear(x_tilde, self.W[group], self.b[group]))
            logits = logits + h @ self.W[group]
        return self._reconstruction_error(logits, x)

    def after_backward(self) -> None:
        """Alternating updates: only the active group's W_s, b_s (and the shared b') move."""
        if self.active is None:
            return
        for i, group in enumerate(self.groups):
            if i != self.active:
                self.W.grad[group] = 0
                self.b.grad[group] = 0


# --- the model group's options -----------------------------------------------------------
@register("model")
@dataclass
class DAConfig(Component):
    """The tied-weight DA."""

    trains: ClassVar[bool] = True
    name: str = "da"
    hidden: int = 1000  # hidden units
    activation: str = "sigmoid"  # sigmoid | relu (encoder); the decoder is always sigmoid
    loss: str = "cross_entropy"  # cross_entropy | squared_error, summed over inputs, mean over the minibatch
    init_scale: float = 4.0  # W ~ U(+-init_scale * sqrt(6 / (input + hidden)))
    encoder_bias_init: float = 0.0
    decoder_bias_init: float = 0.0

    def check(self) -> None:
        if self.activation not in ACTIVATIONS:
            raise self.invalid("activation", f"is unknown: use one of {', '.join(ACTIVATIONS)}")
        if self.loss not in LOSSES:
            raise self.invalid("loss", f"is unknown: use one of {', '.join(LOSSES)}")
        if self.hidden < 1:
            raise self.invalid("hidden", "must be >= 1")
        if not (self.init_scale > 0 and math.isfinite(self.init_scale)):
            raise self.invalid("init_scale", "must be a positive number")

    def kwargs(self) -> dict:
        return dict(activation=self.activation, loss=self.loss, init_scale=self.init_scale,
                    encoder_bias_init=self.encoder_bias_init, decoder_bias_init=self.decoder_bias_init)

    def build(self, n_input: int, generator: torch.Generator | None = None) -> DenoisingAutoencoder:
        return DenoisingAutoencoder(n_input, self.hidden, generator=generator, **self.kwargs())


@register("model")
@dataclass
class CompositeConfig(DAConfig):
    """The composite DA (the paper's Section 5): hidden units in equal groups, group s trained on
    the input corrupted at ``group_nus[s]`` (null: the schedule's nu); the reconstruction sums the
    groups' decoder terms. ``update``: alternating (one group's parameters per epoch, in turn;
    the paper found it much better) | joint."""

    name: str = "composite"
    group_nus: List[Optional[float]] = field(default_factory=lambda: [0.7, 0.1])
    update: str = "alternating"

    def check(self) -> None:
        super().check()
        if not self.group_nus:
            raise ConfigError("model.group_nus is empty: give one noise level (or null) per group")
        for i, nu in enumerate(self.group_nus):
            if nu is not None and not 0 <= nu < 1:
                raise ConfigError(f"model.group_nus[{i}]={nu!r} must be in [0, 1) or null (the schedule's nu)")
        if self.hidden % len(self.group_nus):
            raise self.invalid("hidden", f"must be divisible by the {len(self.group_nus)} groups of model.group_nus")
        if self.update not in ("alternating", "joint"):
            raise self.invalid("update", "must be alternating or joint")

    def build(self, n_input: int, generator: torch.Generator | None = None) -> DenoisingAutoencoder:
        """The model, once per run (a config is checked more often than that: the warning is said here)."""
        if None not in self.group_nus:
            log.warning("model.group_nus fixes every group's noise level: the schedule sets only the epochs, "
                        "and the nu it logs is not used")
        return CompositeDA(n_input, self.hidden, self.group_nus, self.update, generator=generator, **self.kwargs())


@register("model")
@dataclass
class RawConfig(Component):
    """No model: evaluate the raw inputs (paper: 59.78 % test error on CIFAR-10 pixels)."""

    trains: ClassVar[bool] = False
    name: str = "raw"


def build_model(config: Mapping, n_input: int, generator: torch.Generator | None = None) -> DenoisingAutoencoder:
    """The model ``config`` (the model group) describes; ``model=raw`` trains none."""
    spec = typed("model", config)
    if not isinstance(spec, DAConfig):
        raise ConfigError(f"model.name={spec.name!r} has no model to build: use da or composite")
    return spec.build(n_input, generator)
