"""The steps that can train a run, one module each (a :class:`StepKind`): what it needs of the run's
settings and device (its refusal, one line), whether ``trainer.step=auto`` takes it there, how the
loop builds it, what trains the run instead where it cannot be built here (its fallback), and which
of the benchmark's timings is its epoch (scripts/bench_train.py, the estimate). ``trainer.step``
names one of :data:`REGISTRY` or ``auto``; scheda.planning.rules asks the named step's refusal and
lets :func:`auto_kind` choose; :class:`StepChoice` builds the one chosen. The updates themselves are
scheda.training.step's. Adding a step is one module here, registered with :func:`register_step`,
and its tests; every step draws its masks as scheda.model.noise.reference_keep does, bit for bit.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from scheda.utils.lazy import lazy

torch = lazy("torch", globals())

log = logging.getLogger(__name__)

# What the hand-written steps train, in the words of their refusals
FUSED_STEP = "model.name=da, model.loss=cross_entropy, trainer.precision fp32, tf32 or bf16"
PLAIN_SGD = "optim.momentum=0 and optim.weight_decay=0"


def trains_fused(config: Any) -> bool:
    """Whether the hand-written step can train the models: a tied cross-entropy DA in any precision
    (bf16: its products, scheda.training.products; tf32x3: the two-pass step's), trainer.step not autograd."""
    return config.model.name == "da" and config.model.loss == "cross_entropy" and config.trainer.step != "autograd"


def plain_sgd(config: Any) -> bool:
    return config.optim.momentum == 0 and config.optim.weight_decay == 0


def parallel(config: Any) -> bool:
    par = config.trainer.parallel
    return bool(par.nu or par.lr or par.seed)


def trains_composite(config: Any) -> bool:
    """Whether the composite DA's hand-written step (scheda.training.step.CompositeStep) can train
    the run: a cross-entropy composite DA with plain SGD, one model, fp32, tf32 or bf16, trainer.step
    not autograd (no Triton form, no CUDA graph: it runs eager)."""
    return (config.model.name == "composite" and config.model.loss == "cross_entropy" and plain_sgd(config)
            and not parallel(config) and config.trainer.step != "autograd"
            and config.trainer.precision in ("fp32", "tf32", "bf16"))


class CannotRunHere(Exception):
    """A step that this machine cannot build (a compiler, a header): its kind's fallback trains instead."""


class StepKind(ABC):
    """One step: its name (``trainer.step``), the devices it runs on, its place in ``auto``'s order
    (``auto_rank``: lower first; None: only by name), its fallback and its benchmark timing."""

    name: ClassVar[str]
    title: ClassVar[str]  # in words, in a log line
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    auto_rank: ClassVar[int | None] = None
    fallback: ClassVar[str | None] = None  # the kind that trains where this one raises CannotRunHere

    def device_refusal(self, device: "torch.device") -> str | None:
        """Why it cannot run on ``device`` (None: it can)."""
        if device.type in self.devices:
            return None
        return (f"trainer.step={self.name} needs a {' or '.join(d.upper() for d in self.devices)} device, not "
                f"{device}: use trainer.device={self.devices[0]} or trainer.step=auto")

    def refusal(self, config: Any) -> str | None:
        """Why it cannot train this run, the device aside (None: it can)."""
        return None

    def timing(self, cuda_graph: bool | None) -> str | None:
        """The benchmark row's key that times its epoch (None: the eager torch step's, eager_s)."""
        return None

    @abstractmethod
    def build(self, choice: "StepChoice", models: list, optimizers: list, noises: list, batch_size: int,
              x_all: "torch.Tensor", generators: list):
        """The step for these models (marked by :func:`built`); raises CannotRunHere where this
        machine cannot build it and it has a fallback."""


REGISTRY: dict[str, StepKind] = {}


def register_step(cls: type[StepKind]) -> type[StepKind]:
    """Class decorator: ``trainer.step`` can name the step from here on (and ``auto`` consider it)."""
    if cls.name in REGISTRY or cls.name == "auto":
        raise ValueError(f"step {cls.name!r} is registered twice (or is the word 'auto')")
    REGISTRY[cls.name] = cls()
    return cls


def step_kind(name: str) -> StepKind:
    if name not in REGISTRY:
        raise ValueError(f"a step is one of {', '.join(REGISTRY)}, not {name!r}")
    return REGISTRY[name]


def auto_kind(config: Any, device: "torch.device") -> str:
    """What ``trainer.step=auto`` trains with on ``device``: the first step in ``auto_rank``'s order
    that runs there and can train the run (autograd, last, takes every run)."""
    ranked = sorted((k for k in REGISTRY.values() if k.auto_rank is not None), key=lambda k: k.auto_rank)
    return next(k.name for k in ranked if k.device_refusal(device) is None and k.refusal(config) is None)


@dataclass(frozen=True)
class StepChoice:
    """Which minibatch update trains a run's models, chosen once (scheda.planning.rules.choose_step)
    and built by the loop for the models it holds (again when a fused sweep's model drops out):
    ``kind`` names a step of :data:`REGISTRY`; ``cuda_graph`` captures the fused or Triton step in
    CUDA graphs; ``precision`` is the products' (bf16: the torch step's in bf16 with fp32 weights,
    scheda.training.products; autograd's under autocast); ``compiled``: the fused or composite
    step's bf16 update in one compiled pass over W (scheda.training.products.OnePassBf16Products;
    where torch.compile cannot build it, the eager update, recorded as the fallback). Every step it
    builds is called as ``step(x_all, idx [M, rows], nus, generators)`` with ``rows`` at most its
    ``minibatches`` minibatches, and keeps the M summed losses (scheda.training.step.LossSums)."""

    kind: str = "fused"
    cuda_graph: bool = False
    precision: str = "fp32"
    compiled: bool = False

    def __post_init__(self):
        step_kind(self.kind)
        if self.compiled and (self.kind != "fused" or self.precision != "bf16"):
            raise ValueError("the compiled update is the fused or composite step's in bf16 (scheda.planning.rules)")

    @property
    def triton(self) -> bool:
        return self.kind in ("triton", "two_pass")

    def describe(self) -> dict:
        """What results.json records of a step."""
        return {"kind": self.kind, "cuda_graph": self.cuda_graph, "precision": self.precision,
                **({"compiled": True} if self.compiled else {})}

    def build(self, models: list, optimizers: list, noises: list, batch_size: int, x_all: "torch.Tensor",
              generators: list):
        """The chosen step for these models; it says what it is (``ran``, a StepChoice) and why that
        differs from this choice (``fallback``: None, or the reason). A step that this machine cannot
        build (the Triton steps without a C compiler or Python's headers) says so and trains with its
        kind's fallback instead: the one change of step that is not refused, and it is recorded."""
        kind = step_kind(self.kind)
        try:
            return kind.build(self, models, optimizers, noises, batch_size, x_all, generators)
        except CannotRunHere as exc:
            if kind.fallback is None:
                raise
            instead = dataclasses.replace(self, kind=kind.fallback,
                                          precision="fp32" if self.precision == "tf32x3" else self.precision)
            log.warning("the %s cannot run here (%s): training with the %s; trainer.step=%s skips the attempt",
                        kind.title, exc, step_kind(kind.fallback).title, kind.fallback)
            step = instead.build(models, optimizers, noises, batch_size, x_all, generators)
            return built(step, instead, f"the {kind.title} could not run here ({exc})")


def built(step, ran: StepChoice, fallback: str | None):
    """``step`` marked with what it is: the choice it implements, and why that is not the plan's."""
    step.ran, step.fallback = ran, fallback
    return step


for _module in ("autograd", "fused", "triton", "two_pass"):  # trainer.step's listing order
    importlib.import_module(f"{__name__}.{_module}")
