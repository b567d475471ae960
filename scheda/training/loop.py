"""The one lockstep loop: M >= 1 members trained epoch by epoch by one step, built for the members
still training and built again when one drops out. DA training (scheda.training.trainer.Trainer:
the models of a run or of a fused sweep) and fine-tuning (scheda.evaluation.finetune: the
learning rates of a grid) each give it their members, their step and what one epoch does; the
loop keeps the active set, the step and the order of the hooks, so neither repeats them.
"""

from __future__ import annotations

import abc
from typing import Any, Callable, Iterator, Sequence

from scheda.utils.lazy import lazy

torch = lazy("torch", globals())


class Loop(abc.ABC):
    """Trains ``members`` (each says when it is ``finished``) to their ends: :meth:`on_fit_start`,
    then :meth:`run_epoch` of the active members while any is, then :meth:`on_fit_end`;
    :meth:`on_fit_stopped` when an epoch fails or is interrupted (a member's last whole state
    written, say), :meth:`close` always: the words of the callbacks' hooks
    (scheda.training.trainer.Callback), which DA training calls from these. ``build_step(active)`` makes the step that trains ``active`` in one call;
    :meth:`step_for` keeps it until the active set changes."""

    def __init__(self, members: Sequence[Any], build_step: Callable[[list[Any]], Any]):
        self.members = list(members)
        self.build_step = build_step
        self._step: Any = None
        self._built_for: list[int] | None = None

    def step_for(self, active: list[Any]) -> Any:
        """The step of the members in ``active``, built when that set changes."""
        if self._built_for != [id(m) for m in active]:
            self._step = self.build_step(active)
            self._built_for = [id(m) for m in active]
        return self._step

    def fit(self) -> None:
        try:
            self.on_fit_start()
            while active := [m for m in self.members if not m.finished]:
                self.run_epoch(active)
            self.on_fit_end()
        except BaseException as exc:
            self.on_fit_stopped(exc)
            raise
        finally:
            self.close()

    def on_fit_start(self) -> None:
        """Before the first epoch."""

    @abc.abstractmethod
    def run_epoch(self, active: list[Any]) -> None:
        """One epoch of every member in ``active``, by ``self.step_for(active)``: what a loop of
        its own kind of member does (every subclass says it)."""

    def on_fit_end(self) -> None:
        """After the last member finished."""

    def on_fit_stopped(self, exc: BaseException) -> None:
        """An epoch raised ``exc`` (it is raised again after this)."""

    def close(self) -> None:
        """Release what the loop holds; called whatever happened."""


def minibatch_slices(perms: list[torch.Tensor], start: int, rows: int) -> Iterator[tuple[int, torch.Tensor]]:
    """An epoch's calls of a step: from row ``start`` of each member's permutation, ``rows`` rows
    at a time (the last call shorter), as ``(first row, idx [M, rows])``; one member's is a view of
    its permutation, no copy on the hot path. DA training and fine-tuning both walk their epochs so."""
    n = perms[0].shape[0]
    for first in range(start, n, rows):
        yield first, (perms[0][first:first + rows].unsqueeze(0) if len(perms) == 1 else
                      torch.stack([p[first:first + rows] for p in perms]))
