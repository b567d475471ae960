"""trainer.step=triton: the fused update with the masking noise, its elementwise work in four
Triton kernels for all M models (scheda.training.kernels), graphed several minibatches a replay:
auto's choice on a CUDA device wherever it applies (on a CPU the torch step measures faster, and
Triton has no CPU backend but its interpreter). Where this machine cannot compile it (no C compiler,
no Python headers), the fused torch step trains instead, recorded."""

from __future__ import annotations

import importlib.util

from scheda.training.steps import (FUSED_STEP, PLAIN_SGD, CannotRunHere, StepKind, built, plain_sgd, register_step,
                                   trains_fused)
from scheda.utils.lazy import lazy

step = lazy("scheda.training.step", globals())

TRITON_STEP = "the masking noise, one noise level per epoch"


def triton_refusal(config, name: str = "triton") -> str | None:
    """Why a Triton step (``name``: it or its two-pass form) cannot train this run, the device aside
    (None: it can): its kernels hold the plain fused step and the masking noise, with the level
    fixed for the epoch; triton must be installed."""
    if not (trains_fused(config) and plain_sgd(config)):
        return f"trainer.step={name} needs the plain fused step: {FUSED_STEP}, {PLAIN_SGD}"
    if config.trainer.precision == "bf16":
        return (f"trainer.step={name} computes its products in fp32 (or tf32x3), not trainer.precision=bf16: use "
                f"trainer.step=auto or fused (bf16 products in the torch step)")
    if config.noise.name != "masking" or config.schedule.per_minibatch:
        return f"trainer.step={name} needs {TRITON_STEP}: use trainer.step=auto (it then runs the torch step) or fused"
    if importlib.util.find_spec("triton") is None:
        return f"trainer.step={name} needs triton: pip install triton (Linux), or use trainer.step=auto or fused"
    return None


def prepared(kernel_step):
    """``kernel_step`` compiled now; CannotRunHere (its first line) where this machine cannot."""
    try:
        kernel_step.prepare()
    except Exception as exc:  # noqa: BLE001 - triton cannot compile here (a C compiler, Python's headers)
        raise CannotRunHere(f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}") from exc
    return kernel_step


@register_step
class Triton(StepKind):
    name, title = "triton", "Triton step"
    devices = ("cuda",)
    auto_rank = 0
    fallback = "fused"

    def refusal(self, config) -> str | None:
        return triton_refusal(config, self.name)

    def timing(self, cuda_graph: bool | None) -> str | None:
        return "default_s" if cuda_graph is not False else None  # the benchmark's default on CUDA: graphed

    def build(self, choice, models, optimizers, noises, batch_size, x_all, generators):
        return built(prepared(step.TritonStep(models, optimizers, noises, batch_size, x_all, generators,
                                              choice.cuda_graph)), choice, None)
