"""The ``model`` group: the tied-weight denoising autoencoder's schemas, which build the networks
of scheda.model.network (``h = s(W x~ + b)``, ``z = sigmoid(W^T h + b')``, W hidden x input).

The networks live in a module of their own: an ``nn.Module`` subclass imports torch when its
module is imported, and ``--help`` composes the config from this module without torch. Their
names still import from here (``from scheda.model.autoencoder import DenoisingAutoencoder``).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import ClassVar, List, Mapping, Optional

from scheda.config import Component, register, typed
from scheda.utils.errors import ConfigError
from scheda.utils.lazy import lazy

torch = lazy("torch", globals())
network = lazy("scheda.model.network", globals())
log = logging.getLogger(__name__)

ACTIVATIONS = ("sigmoid", "relu")  # the encoder's s (scheda.model.network.ACTIVATION_FUNCTIONS)
LOSSES = ("cross_entropy", "squared_error")
NETWORKS = ("DenoisingAutoencoder", "CompositeDA")  # scheda.model.network's, importable from here


def __getattr__(name: str):
    """The networks, imported (with torch) when first asked for."""
    if name in NETWORKS:
        return getattr(network, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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

    def build(self, n_input: int, generator: torch.Generator | None = None) -> network.DenoisingAutoencoder:
        return network.DenoisingAutoencoder(n_input, self.hidden, generator=generator, **self.kwargs())


@register("model")
@dataclass
class CompositeConfig(DAConfig):
    """The composite DA (the paper's Section 5): hidden units in equal groups, group s trained on
    the input corrupted at ``group_nus[s]`` (null: the schedule's nu); the reconstruction sums the
    groups' decoder terms. ``update``: alternating (one group's parameters at a time, in turn,
    ``switch_every`` epochs each; the paper found it much better, its Figure 7 switching far apart)
    | joint."""

    name: str = "composite"
    group_nus: List[Optional[float]] = field(default_factory=lambda: [0.7, 0.1])
    update: str = "alternating"
    switch_every: int = 1  # alternating: epochs a group trains before the next one's turn

    def check(self) -> None:
        super().check()
        if not self.group_nus:
            raise ConfigError("model.group_nus is empty: give one noise level (or null) per group")
        for i, nu in enumerate(self.group_nus):
            if nu is not None and not (isinstance(nu, (int, float)) and 0 <= nu < math.inf):
                raise ConfigError(f"model.group_nus[{i}]={nu!r} must be a noise level >= 0 or null (the schedule's nu)")
        if self.hidden % len(self.group_nus):
            raise self.invalid("hidden", f"must be divisible by the {len(self.group_nus)} groups of model.group_nus")
        if self.update not in ("alternating", "joint"):
            raise self.invalid("update", "must be alternating or joint")
        if not isinstance(self.switch_every, int) or self.switch_every < 1:
            raise self.invalid("switch_every", "must be >= 1 (epochs a group trains before the next one's turn)")

    def build(self, n_input: int, generator: torch.Generator | None = None) -> network.DenoisingAutoencoder:
        """The model, once per run (a config is checked more often than that: the warning is said here)."""
        if None not in self.group_nus:
            log.warning("model.group_nus fixes every group's noise level: the schedule sets only the epochs, "
                        "and the nu it logs is not used")
        return network.CompositeDA(n_input, self.hidden, self.group_nus, self.update, generator=generator,
                                   switch_every=self.switch_every, **self.kwargs())


@register("model")
@dataclass
class RawConfig(Component):
    """No model: evaluate the raw inputs (paper: 59.78 % test error on CIFAR-10 pixels)."""

    trains: ClassVar[bool] = False
    name: str = "raw"


def build_model(config: Mapping, n_input: int, generator: torch.Generator | None = None) -> network.DenoisingAutoencoder:
    """The model ``config`` (the model group) describes; ``model=raw`` trains none."""
    spec = typed("model", config)
    if not isinstance(spec, DAConfig):
        raise ConfigError(f"model.name={spec.name!r} has no model to build: use da or composite")
    return spec.build(n_input, generator)
