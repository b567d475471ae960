"""The supplementary experiment: DAs trained from scratch with nu drawn per minibatch, uniform
on [low, high] or from a discrete set (``scale.random_nu``), one per lr of the DA grid."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from omegaconf import DictConfig

from scheda.protocol.jobs import JobSpec, fmt, rule_values
from scheda.protocol.kinds.base import ContinuationKind, register_kind


class RandomNu(ContinuationKind):
    """A random-nu DA: evaluated and checkpointed 20 times over its ``scale.random_nu.epochs`` (with
    ``scale.patience``: its cap, the rule stopping it earlier, as a DA of the grid)."""

    eager = True

    @abstractmethod
    def noise(self, cfg: DictConfig) -> dict[str, Any]:
        """The schedule's own values from ``scale.random_nu``."""

    @staticmethod
    def every(cfg: DictConfig) -> int:
        """Epochs between evaluations (and checkpoints): 20 over the run."""
        return max(1, cfg.epochs // 20)

    def cap(self, scale: DictConfig) -> str | None:
        return f"{self.label} at most {scale.random_nu.epochs} epochs (evaluated every {self.every(scale.random_nu)})"

    def plan(self, scale: DictConfig, hidden: int, by_nu: dict[str, Any]) -> list[JobSpec]:
        cfg = scale.random_nu
        if cfg.hidden not in (None, hidden):
            return []
        every = self.every(cfg)
        return [JobSpec(f"{self.name}_h{hidden}_lr{fmt(lr)}", "continue", groups={"schedule": self.name},
                        values={"model.hidden": hidden, "schedule.epochs": cfg.epochs, "optim.lr": lr,
                                **self.noise(cfg), "evaluate.every": every, "trainer.checkpoint_every": every,
                                **rule_values(scale.patience)},
                        meta={"kind": self.name, "hidden": hidden, "lr": lr})
                for lr in scale.da.lr]


@register_kind
class RandomUniform(RandomNu):
    name, label = "random_uniform", "Random nu, uniform"

    def noise(self, cfg: DictConfig) -> dict[str, Any]:
        return {"schedule.low": cfg.low, "schedule.high": cfg.high}


@register_kind
class RandomDiscrete(RandomNu):
    name, label = "random_discrete", "Random nu, discrete"

    def noise(self, cfg: DictConfig) -> dict[str, Any]:
        return {"schedule.values": list(cfg["values"])}
