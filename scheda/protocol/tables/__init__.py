"""The protocol's tables, one module each: the phases a table runs (scheda.protocol.tables.base.Phase),
each declaring its jobs, what it reads of them, its share of the estimate and its section of the
report. ``configs/table/<name>.yaml`` names its phases in ``phases``; every module here is
imported when the package is, so a new module's phases need no list edited elsewhere."""

from __future__ import annotations

import importlib
import pkgutil

from scheda.protocol.tables.base import (REGISTRY, REPORT, Phase, Progress, RecordedPhase, chosen_phases, phases_of,
                                         register_phase)

# The grid tables' phases first (their order is the registry's); then any other module here.
_BUILTIN = ("grid",)
for _module in [*_BUILTIN, *sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in (*_BUILTIN, "base"))]:
    importlib.import_module(f"{__name__}.{_module}")

__all__ = ["REGISTRY", "REPORT", "Phase", "Progress", "RecordedPhase", "chosen_phases", "phases_of", "register_phase"]
