"""Schedules of levels continued from a selected DA(nu0): ScheDA (nu0 down by delta_nu every K
epochs, Section 3) and its control of Section 4.1.1 (the same steps up). Their grids are
``scale.scheda`` and ``scale.increasing``; their best runs get controls (phase 4)."""

from __future__ import annotations

import logging
from typing import Any, ClassVar, Iterable

from omegaconf import DictConfig

from scheda.model.schedule import level_count
from scheda.utils.errors import ConfigError
from scheda.protocol.jobs import JobSpec, continuation_values, fmt
from scheda.protocol.kinds.base import ContinuationKind, control_kinds, register_kind

log = logging.getLogger(__name__)


def starts(kind: str, grid: DictConfig, hidden: int, by_nu: dict[str, Any]) -> Iterable[tuple[float, dict]]:
    """Each nu0 of a continuation grid with the selected DA(nu0) it continues (none: skipped, said)."""
    for nu0 in grid.nu0:
        start = by_nu.get(fmt(nu0))
        if start is None:
            log.warning("%s from nu0=%g (%d hidden): no selected DA(%g) to continue; skipped", kind, nu0, hidden, nu0)
            continue
        yield nu0, start


class LevelKind(ContinuationKind):
    """nu0 -> nu0 + direction * delta_nu every K epochs, T levels up to ``nu_final``."""

    direction: ClassVar[int]  # -1: noise decreases; +1: it increases
    schedule: ClassVar[str]  # the schedule config group's choice
    title: ClassVar[str]  # its name in Figure 2's legend
    short: ClassVar[str]  # and in Figure 5's
    controlled = True
    in_figure5 = True

    def check(self, scale: DictConfig) -> None:
        grid = scale[self.name]
        if not (grid.nu0 and grid.delta_nu and grid.K):
            raise ConfigError(f"scale.{self.name}.nu0, delta_nu and K must each list at least one value")
        if grid.max_epochs is not None:
            longest = max(level_count(self.direction, nu0, dnu, grid.nu_final) * K
                          for nu0 in grid.nu0 for dnu in grid.delta_nu for K in grid.K)
            if grid.max_epochs < longest:
                raise ConfigError(f"scale.{self.name}.max_epochs={grid.max_epochs} would cut a schedule of {longest} "
                                  f"epochs: the cap must be at least every schedule's length")

    def plan(self, scale: DictConfig, hidden: int, by_nu: dict[str, Any]) -> list[JobSpec]:
        """One continuation per (nu0, delta_nu, K) that has at least one level between nu0 and
        nu_final (ScheDA from 0.1 with delta_nu 0.1 down to 0.05 has none: it is not planned).
        Evaluated after each level; with ``scale.patience`` also every K epochs of its last level,
        which the rule stops (at most ``max_epochs`` in all), each evaluation checkpointed."""
        grid = scale[self.name]
        jobs = []
        for nu0, start in starts(self.name, grid, hidden, by_nu):
            for delta_nu in grid.delta_nu:
                levels = level_count(self.direction, nu0, delta_nu, grid.nu_final)
                if levels == 0:
                    log.info("%s from nu0=%g with delta_nu=%g has no level up to nu_final=%g: not planned",
                             self.name, nu0, delta_nu, grid.nu_final)
                    continue
                jobs += [self.job(scale, hidden, start, nu0, delta_nu, K, grid.nu_final) for K in grid.K]
        return jobs

    def job(self, scale: DictConfig, hidden: int, start: dict[str, Any], nu0: float, delta_nu: float, K: int,
            nu_final: float) -> JobSpec:
        """One continuation of ``start`` (a selected DA(nu0)'s entry: its checkpoint and epoch) at
        its kind's lr and cap, under the scale's rule: every K epochs."""
        grid = scale[self.name]
        levels = level_count(self.direction, nu0, delta_nu, nu_final)
        values = continuation_values(scale.patience, grid.max_epochs, K)  # the rule: every K
        return JobSpec(
            f"{self.name}_h{hidden}_nu{fmt(nu0)}_dnu{fmt(delta_nu)}_K{K}", "continue",
            groups={"schedule": self.schedule},
            values={"model.hidden": hidden, "schedule.nu0": nu0, "schedule.delta_nu": delta_nu,
                    "schedule.K": K, "schedule.initial_epochs": 0, "schedule.nu_final": nu_final,
                    "optim.lr": grid.lr, "init_from": start["checkpoint"], **values},
            meta={"kind": self.name, "hidden": hidden, "nu0": nu0, "delta_nu": delta_nu, "K": K,
                  "levels": levels, "epochs": values.get("trainer.max_epochs", levels * K),
                  "start_epoch": start["epoch"], "start_checkpoint": start["checkpoint"]})

    def controls(self, scale: DictConfig, hidden: int, best: dict[str, Any]) -> list[JobSpec]:
        return [control.job(scale[self.name], hidden, best, scale.patience) for control in control_kinds(scale)]

    def cap(self, scale: DictConfig) -> str | None:
        epochs = scale[self.name].get("max_epochs")
        return f"{self.label} at most {epochs} epochs in all (evaluated every K)" if epochs else None

    def describe(self, e: dict[str, Any]) -> str:
        return f"nu0={fmt(e['nu0'])}, dnu={fmt(e['delta_nu'])}, K={e['K']}, {self.reached(e)}"

    def series(self, e: dict[str, Any]) -> str:
        return f"{self.name} dnu={fmt(e['delta_nu'])} K={e['K']}"

    def legend(self, e: dict[str, Any]) -> str:
        return f"{self.title}({fmt(e['nu0'])}, dnu {fmt(e['delta_nu'])}, K {e['K']})"

    def figure5_legend(self, e: dict[str, Any]) -> str:
        return f"{self.short} dnu={fmt(e['delta_nu'])}, K={e['K']}"


@register_kind
class ScheDA(LevelKind):
    name, label, title, short = "scheda", "ScheDA", "ScheDA", "ScheDA"
    direction, schedule = -1, "decreasing"

    def qualifies(self) -> str:
        return ""  # the controls of the paper's own schedule: named alone


@register_kind
class Increasing(LevelKind):
    name, label, title, short = "increasing", "Increasing schedule", "Increasing", "increasing"
    direction, schedule = 1, "increasing"
    compared_with = "scheda"  # Section 4.1.1's question: the direction of the schedule
    question_against = ("does raising nu differ from lowering it (each schedule the best of its own grid on "
                        "validation, each from its own selected DA of the same seed)")
