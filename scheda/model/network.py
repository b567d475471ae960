"""The networks: the tied-weight denoising autoencoder, its composite, and the classifier that
fine-tuning starts from a DA's encoder (scheda.training.finetune).

``h = s(W x~ + b)``, ``z = sigmoid(W^T h + b')`` with ``W`` of shape [hidden x input]; the
loss is the cross-entropy between ``z`` and the clean ``x`` summed over input dimensions and
averaged over the minibatch (Vincent et al., 2010), computed from the logits for stability.
Their schemas (the ``model`` group) are in scheda.model.autoencoder, which builds them: an
``nn.Module`` subclass needs torch when its module is imported, and a schema must not (``--help``).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn

ACTIVATION_FUNCTIONS = {"sigmoid": torch.sigmoid, "relu": torch.relu}  # the encoder's s, by model.activation


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
        self._act = ACTIVATION_FUNCTIONS[activation]

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


def alternating_group(epoch: int, groups: int, switch_every: int = 1) -> int:
    """The group an alternating composite DA trains in its (0-based) ``epoch``: each in turn,
    ``switch_every`` epochs at a time."""
    return (epoch // switch_every) % groups


class CompositeDA(DenoisingAutoencoder):
    """The composite DA (the paper's Section 5): the hidden units are split into S equal groups;
    group s sees the input corrupted at its own level ``group_nus[s]`` (``None``: the schedule's
    nu), its code is ``h_s = s(W_s x~_s + b_s)``, and the reconstruction sums every group's
    decoder term, ``z = sigmoid(sum_s W_s^T h_s + b')``. ``update='alternating'`` trains one
    group's (W_s, b_s) at a time, ``switch_every`` epochs each in turn (b' always), which the paper found much better than
    updating everything at once (``'joint'``). Features for evaluation are the whole hidden
    layer without noise, the concatenation of the groups' codes (``encode``, inherited)."""

    def __init__(self, n_input: int, n_hidden: int, group_nus, update: str = "alternating", switch_every: int = 1,
                 **kwargs):
        super().__init__(n_input, n_hidden, **kwargs)
        group_nus = list(group_nus)
        size = n_hidden // len(group_nus)
        self.groups = [slice(i * size, (i + 1) * size) for i in range(len(group_nus))]
        self.group_nus, self.update, self.switch_every = group_nus, update, switch_every
        self.active: int | None = None

    def set_epoch(self, epoch: int) -> None:
        """The group trained in this (0-based) epoch, when alternating."""
        self.active = (alternating_group(epoch, len(self.groups), self.switch_every) if self.update == "alternating"
                       else None)

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


class FinetuneNet(nn.Module):
    """x -> s(W x + b) -> softmax(V h + c), with (W, b) copied from a DA's encoder; a stacked DA's
    layers below (``below``, bottom first) encode x first, each layer's (W_l, b_l) fine-tuned too."""

    def __init__(self, da: DenoisingAutoencoder, n_classes: int, init: Any = None,
                 below: Sequence[DenoisingAutoencoder] = ()):
        """``init``: a linear classifier of the encoder's features to start the output layer from
        (its ``W`` [classes, hidden] and ``b``), or None (zeros)."""
        super().__init__()
        self.below_W = nn.ParameterList([nn.Parameter(layer.W.detach().clone().to(da.W.device)) for layer in below])
        self.below_b = nn.ParameterList([nn.Parameter(layer.b.detach().clone().to(da.W.device)) for layer in below])
        self._below_act = [ACTIVATION_FUNCTIONS[layer.activation] for layer in below]
        self.W = nn.Parameter(da.W.detach().clone())
        self.b = nn.Parameter(da.b.detach().clone())
        self.V = nn.Parameter(torch.zeros(n_classes, da.n_hidden, device=da.W.device))
        self.c = nn.Parameter(torch.zeros(n_classes, device=da.W.device))
        self._act = ACTIVATION_FUNCTIONS[da.activation]
        if init is not None:
            with torch.no_grad():
                self.V.copy_(torch.as_tensor(init.W, dtype=self.V.dtype))
                self.c.copy_(torch.as_tensor(init.b, dtype=self.c.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for W, b, act in zip(self.below_W, self.below_b, self._below_act):
            x = act(F.linear(x, W, b))
        return F.linear(self._act(F.linear(x, self.W, self.b)), self.V, self.c)

    @torch.no_grad()
    def correct(self, x: torch.Tensor, y: torch.Tensor, chunk_size: int = 8192) -> torch.Tensor:
        """Which rows it classifies right (encoded in chunks: no gradients, bounded memory)."""
        return torch.cat([self(x[i:i + chunk_size]).argmax(1) == y[i:i + chunk_size]
                          for i in range(0, x.shape[0], chunk_size)])

    def error(self, x: torch.Tensor, y: torch.Tensor, chunk_size: int = 8192) -> float:
        return int((~self.correct(x, y, chunk_size)).sum()) / x.shape[0]


FineTuneNet = FinetuneNet  # 0.2's spelling of the name, importable until 0.4 (one word: *finetune*)
