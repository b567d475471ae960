"""torch imported where it is first used, not where a module is imported.

Every config group's schema lives beside the code that uses its values, and that code is torch
code. ``--help`` and shell completion only compose the config from the schemas: importing torch
for them cost 1.2 s of the 2.2 s that ``scheda-train --help`` took on 2 cores. A module that
holds a schema therefore names torch through :func:`lazy`: the first attribute read (``torch.zeros``,
``torch.Tensor``) imports torch and puts the real module in the module's namespace in place of the
stand-in, so every later read is a plain global lookup. Code that needs torch when the module is
imported (an ``nn.Module`` subclass) lives in a module that imports torch itself.
"""

from __future__ import annotations

import importlib
from typing import Any


class _Lazy:
    """A stand-in for module ``name``, bound to ``as_name`` in ``namespace``."""

    def __init__(self, name: str, namespace: dict[str, Any], as_name: str):
        self._name, self._namespace, self._as_name = name, namespace, as_name

    def __getattr__(self, attr: str) -> Any:
        module = importlib.import_module(self._name)
        if self._namespace.get(self._as_name) is self:
            self._namespace[self._as_name] = module
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"<{self._name}, imported on first use>"


def lazy(name: str, namespace: dict[str, Any], as_name: str | None = None) -> Any:
    """``torch = lazy("torch", globals())``: module ``name`` imported on its first use (see above);
    ``as_name``: the global it is bound to, when not the module's last name
    (``F = lazy("torch.nn.functional", globals(), "F")``)."""
    return _Lazy(name, namespace, as_name or name.rsplit(".", 1)[-1])


def no_grad(function):
    """``@torch.no_grad()`` for a function of a module that imports torch lazily: the decorator
    would import torch when the module is imported."""
    import functools

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        import torch

        with torch.no_grad():
            return function(*args, **kwargs)

    return wrapper
