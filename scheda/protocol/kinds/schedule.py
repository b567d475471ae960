"""Any registered schedule with a noise-level key, continued from the selected DA(nu0)
checkpoints: its grid in ``scale.schedules.<name>`` (a ScheduleGridConfig), one run per
combination of the grid. Not registered by name: ``kind_of`` makes one for any name."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from scheda.model.schedule import build_schedule, nu_key, options_with_nu_key
from scheda.utils.errors import ConfigError
from scheda.protocol.config import ScheduleGridConfig
from scheda.protocol.jobs import JobSpec, continuation_values, fmt
from scheda.protocol.kinds.base import ContinuationKind, grid_points, settings_text
from scheda.protocol.kinds.levels import starts


class ScheduleKind(ContinuationKind):
    """The continuations of one schedule of ``scale.schedules``, named by the schedule."""

    def __init__(self, name: str):
        self.name = name
        self.label = f"Schedule {name}"

    @staticmethod
    def grid(scale: DictConfig, name: str) -> DictConfig:
        """``scale.schedules.<name>`` checked against its schema (ScheduleGridConfig)."""
        try:
            return OmegaConf.merge(OmegaConf.structured(ScheduleGridConfig), scale.schedules[name])
        except Exception as exc:  # noqa: BLE001 - OmegaConf's validation error, as the user's error
            raise ConfigError(f"scale.schedules.{name}: {str(exc).splitlines()[0]}") from None

    def check(self, scale: DictConfig) -> None:
        grid = self.grid(scale, self.name)
        key = nu_key({"name": self.name})
        if key is None:
            raise ConfigError(f"scale.schedules.{self.name}: a continuation starts at its DA's nu, and schedule "
                              f"{self.name} has no single one: use one of {', '.join(options_with_nu_key())}")
        if not grid.nu0:
            raise ConfigError(f"scale.schedules.{self.name}.nu0 must list at least one value")
        for settings in grid_points(grid):  # every planned schedule builds (or a one-line error now)
            build_schedule({"name": self.name, key: grid.nu0[0], **settings})

    def plan(self, scale: DictConfig, hidden: int, by_nu: dict[str, Any]) -> list[JobSpec]:
        """One run per combination of the grid, nu0 in the schedule's own noise-level key."""
        grid, key = self.grid(scale, self.name), nu_key({"name": self.name})
        # under the rule, evaluated as often as the DA grid (no K here)
        values = continuation_values(scale.patience, grid.max_epochs, scale.da.eval_every)
        jobs = []
        for nu0, start in starts(self.name, grid, hidden, by_nu):
            for settings in grid_points(grid):
                schedule = build_schedule({"name": self.name, key: nu0, **settings})
                tag = "_".join(f"{k}{fmt(v) if isinstance(v, float) else v}" for k, v in settings.items())
                jobs.append(JobSpec(
                    f"{self.name}_h{hidden}_nu{fmt(nu0)}{'_' + tag if tag else ''}", "continue",
                    groups={"schedule": self.name},
                    values={"model.hidden": hidden, f"schedule.{key}": nu0,
                            **{f"schedule.{k}": v for k, v in settings.items()}, "optim.lr": grid.lr,
                            "init_from": start["checkpoint"], **values},
                    meta={"kind": self.name, "hidden": hidden, "nu0": nu0, "settings": settings,
                          "levels": len(schedule.stages), "epochs": values.get("trainer.max_epochs", schedule.total_epochs),
                          "start_epoch": start["epoch"], "start_checkpoint": start["checkpoint"]}))
        return jobs

    def cap(self, scale: DictConfig) -> str | None:
        epochs = self.grid(scale, self.name).max_epochs
        return f"{self.label} at most {epochs} epochs in all (evaluated every {scale.da.eval_every})" if epochs else None

    def describe(self, e: dict[str, Any]) -> str:
        return f"nu0={fmt(e['nu0'])}, {settings_text(e)}, {self.reached(e)}"

    def series(self, e: dict[str, Any]) -> str:
        return f"{self.name} {settings_text(e)}"

    def legend(self, e: dict[str, Any]) -> str:
        return f"{self.name}({fmt(e['nu0'])}, {settings_text(e)})"
