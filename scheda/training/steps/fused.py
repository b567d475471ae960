"""trainer.step=fused: the tied cross-entropy DA's update written out by hand for M models at once
(scheda.training.step.BatchedStep; the composite DA's, CompositeStep), graphed on CUDA where a graph
can capture it, its bf16 update compiled in one pass where asked (scheda.training.products). auto's
choice wherever it applies and the Triton step does not."""

from __future__ import annotations

import dataclasses
import logging

from scheda.training.steps import (FUSED_STEP, PLAIN_SGD, StepKind, built, register_step, trains_composite,
                                   trains_fused)
from scheda.utils.lazy import lazy

network = lazy("scheda.model.network", globals())
step = lazy("scheda.training.step", globals())
products = lazy("scheda.training.products", globals())

log = logging.getLogger(__name__)


@register_step
class Fused(StepKind):
    name, title = "fused", "torch step"
    auto_rank = 1

    def refusal(self, config) -> str | None:
        if config.model.name == "composite" and not trains_composite(config):
            return (f"trainer.step=fused trains a composite DA of cross-entropy alone, with plain SGD ({PLAIN_SGD}) in "
                    f"fp32, tf32 or bf16: use trainer.step=auto (it then runs autograd) or autograd")
        if not (trains_fused(config) or trains_composite(config)):
            return f"trainer.step=fused needs {FUSED_STEP}: use trainer.step=auto (it then runs autograd) or autograd"
        return None

    def build(self, choice, models, optimizers, noises, batch_size, x_all, generators):
        try:
            return self._eager(choice, models, optimizers, noises, batch_size, x_all, generators)
        except products.CompileError as exc:  # only a compiled update raises it
            log.warning("the compiled bf16 update cannot be built here (%s): training with the eager update; "
                        "trainer.compile=false skips the attempt", exc)
            eager = dataclasses.replace(choice, compiled=False)
            return built(self._eager(eager, models, optimizers, noises, batch_size, x_all, generators), eager,
                         f"the compiled update could not be built here ({exc})")

    @staticmethod
    def _eager(choice, models, optimizers, noises, batch_size, x_all, generators):
        """The composite or fused step (graphed or not; its bf16 update compiled where chosen), built and marked."""
        if isinstance(models[0], network.CompositeDA):
            if len(models) > 1 or choice.cuda_graph:
                raise ValueError("the composite step trains one model, uncaptured (scheda.planning.rules refuses "
                                 "the rest)")
            return built(step.CompositeStep(models[0], optimizers[0], noises[0], batch_size, x_all.device,
                                            choice.precision, choice.compiled), choice, None)
        batched = step.BatchedStep(models, optimizers, noises, batch_size, x_all.device, choice.precision,
                                   choice.compiled)
        if not choice.cuda_graph:
            return built(batched, choice, None)
        graphed = step.GraphedStep(batched, x_all, generators)
        graphed.prepare()
        return built(graphed, choice, None)
