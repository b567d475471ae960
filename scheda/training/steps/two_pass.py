"""trainer.step=two_pass (opt-in): the Triton step as two passes over W a minibatch, the next
minibatch's encode inside the update's pass (scheda.training.kernels); it keeps a minibatch's rows in
one program and computes in fp32 or tf32x3. Where this machine cannot compile it, the fused torch
step trains instead, recorded."""

from __future__ import annotations

from scheda.training.step import TWO_PASS_PRECISIONS, TWO_PASS_ROWS
from scheda.training.steps import StepKind, built, register_step
from scheda.training.steps.triton import prepared, triton_refusal
from scheda.utils.lazy import lazy

step = lazy("scheda.training.step", globals())


@register_step
class TwoPass(StepKind):
    name, title = "two_pass", "two-pass step"
    devices = ("cuda",)
    fallback = "fused"

    def refusal(self, config) -> str | None:
        refusal = triton_refusal(config, self.name)
        if refusal:
            return refusal
        t = config.trainer
        if t.batch_size > TWO_PASS_ROWS:
            return (f"trainer.step=two_pass keeps a minibatch in one program: trainer.batch_size={t.batch_size} must "
                    f"be <= {TWO_PASS_ROWS} (or use trainer.step=triton)")
        if t.precision not in TWO_PASS_PRECISIONS:
            return f"trainer.step=two_pass computes its products in fp32 or tf32x3, not trainer.precision={t.precision}"
        return None

    def build(self, choice, models, optimizers, noises, batch_size, x_all, generators):
        return built(prepared(step.TwoPassStep(models, optimizers, noises, batch_size, x_all, generators,
                                               choice.cuda_graph, choice.precision)), choice, None)
