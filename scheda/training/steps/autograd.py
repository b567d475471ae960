"""trainer.step=autograd: ``model.training_loss``, ``backward``, ``optimizer.step`` for one model;
serves every option (any noise, squared error, any optimizer settings; bf16 as autocast). auto's
last resort, on every device."""

from __future__ import annotations

from scheda.training.steps import StepKind, built, register_step
from scheda.utils.lazy import lazy

torch = lazy("torch", globals())
step = lazy("scheda.training.step", globals())


@register_step
class Autograd(StepKind):
    name, title = "autograd", "autograd step"
    auto_rank = 2

    def timing(self, cuda_graph: bool | None) -> str | None:
        return "autograd_s"

    def build(self, choice, models, optimizers, noises, batch_size, x_all, generators):
        if len(models) > 1:
            raise ValueError("the autograd step trains one model (scheda.planning.rules refuses a sweep without "
                             "the fused step)")
        autocast = torch.bfloat16 if choice.precision == "bf16" else None
        return built(step.OneModel(step.AutogradStep(models[0], optimizers[0], noises[0], autocast), x_all.device),
                     choice, None)
