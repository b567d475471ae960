"""The protocol's job kinds, one class each (scheda.protocol.kinds.base.JobKind): planning,
selection, the report, the figures, the seeds and the estimate ask a run's kind what to do.

Adding a kind is one module in this package: subclass a role's base class (ContinuationKind,
ControlKind, FinetuneKind, ...) and decorate it with ``@register_kind``; every module here is
imported when the package is. A schedule of ``scale.schedules`` is a kind of its own name
(ScheduleKind) without being registered.
"""

from __future__ import annotations

import importlib
import pkgutil

from omegaconf import DictConfig

from scheda.utils.errors import ConfigError
from scheda.protocol.kinds.base import (BASELINE, CONTINUATION, CONTROL, FINETUNE, GRID, REGISTRY, JobKind,
                                        control_kinds, of_role, register_kind)
from scheda.protocol.kinds.schedule import ScheduleKind

# The built-in kinds first, in the order the protocol lists them; then any other module here.
_BUILTIN = ("da", "levels", "random_nu", "control", "finetune")
for _module in [*_BUILTIN, *sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in _BUILTIN)]:
    importlib.import_module(f"{__name__}.{_module}")


def kind_of(name: str) -> JobKind:
    """The kind of a run (its meta's ``kind``): a registered one, else the schedule of that name
    continued from ``scale.schedules``."""
    return REGISTRY.get(name) or ScheduleKind(name)


def continuation(name: str, scale: DictConfig) -> JobKind:
    """A table's continuation by name: a registered continuation kind or a schedule with its grid
    in ``scale.schedules``; a one-line error naming both otherwise."""
    kind = REGISTRY.get(name)
    if kind is not None and kind.role == CONTINUATION:
        return kind
    if kind is None and name in scale.schedules:
        return ScheduleKind(name)
    raise ConfigError(f"table.continuations has {name!r}: use any of "
                      f"{', '.join(k.name for k in of_role(CONTINUATION))}, or a schedule with its grid in "
                      f"scale.schedules.{name}")


__all__ = ["BASELINE", "CONTINUATION", "CONTROL", "FINETUNE", "GRID", "JobKind", "continuation", "control_kinds", "kind_of",
           "of_role", "register_kind"]
