"""Import paths of the flat layout that the subpackages replaced: ``import scheda.noise`` still
works for one release, as the module's new home (``scheda.model.noise``), with a
DeprecationWarning that names it. Pickles and user code that name an old path load the same
classes."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

MOVED = {
    **{f"scheda.{m}": f"scheda.utils.{m}" for m in ("errors", "io", "lock", "fork", "interrupt", "progress", "seeding",
                                                    "devices", "environment", "stats")},
    **{f"scheda.{m}": f"scheda.runs.{m}" for m in ("resume", "gather", "sweep_summary")},
    "scheda.results": "scheda.runs.rundir",
    **{f"scheda.{m}": f"scheda.model.{m}" for m in ("noise", "schedule", "optim")},
    **{f"scheda.{m}": f"scheda.training.{m}" for m in ("trainer", "step", "kernels", "callbacks", "checkpoint", "rules")},
    **{f"scheda.{m}": f"scheda.evaluation.{m}" for m in ("evaluate", "classifiers", "finetune", "export")},
    # the analysis commands left the protocol's package (they are not the protocol)
    "scheda.protocol.analysis": "scheda.analysis.core",
    **{f"scheda.protocol.{m}": f"scheda.analysis.{m}" for m in ("concat_eval", "feature_similarity", "plot_filters")},
    "scheda.protocol.export_features": "scheda.evaluation.export_features",
}


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path and gives it the module at the new one (the same module object)."""

    def find_spec(self, name, path=None, target=None):
        if name in MOVED:
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec):
        new = MOVED[spec.name]
        warnings.warn(f"{spec.name} is now {new}; the old path works for this release only: import {new}",
                      DeprecationWarning, stacklevel=2)
        return importlib.import_module(new)

    def exec_module(self, module):
        """The module at the new path is imported already."""


def install() -> None:
    if not any(isinstance(f, MovedModules) for f in sys.meta_path):
        sys.meta_path.append(MovedModules())
