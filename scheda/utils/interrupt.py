"""Stopping cleanly on SIGINT (Ctrl-C), SIGTERM (how Slurm and most schedulers stop a job)
and SIGUSR1 (Slurm's usual warning before a time limit, ``--signal=USR1@60``); and on SIGUSR2
where submitit handles it (its warning before a time limit), which gets the signal next so it
can requeue the job once the run is checkpointed.

The handler only records the request; the trainer checks it after every minibatch, writes a
checkpoint of where it stands (mid-epoch included) and results.json, and raises
:class:`Interrupted`, whose exit status is the conventional 128 + the signal's number. A
second Ctrl-C while the checkpoint is written stops at once.

A process that only waits on others (the protocol waits on its stages) takes SIGTERM as it
takes Ctrl-C: :func:`terminate_as_interrupt`.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGUSR1", None)) if s is not None)
# Taken only where a handler is already installed, and handed on to it after the checkpoint:
# submitit's (Hydra's submitit launcher) requeues a job on it before its time limit.
FORWARDED = tuple(s for s in (getattr(signal, "SIGUSR2", None),) if s is not None)


class Interrupted(KeyboardInterrupt):
    """A run stopped by a signal after saving its state (a BaseException, like Ctrl-C's, so a
    sweep stops too instead of going on to its next job)."""

    def __init__(self, signum: int, message: str, forward=None):
        super().__init__(message)
        self.signum, self.message, self.forward = signum, message, forward

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def __str__(self) -> str:
        return self.message


class StopRequest:
    """Set by the signal handler; read by the trainer between minibatches."""

    def __init__(self):
        self.signum: int | None = None
        self.previous: dict[int, object] = {}

    def forward(self):
        """The handler that had the signal before the run (submitit's requeue), to call once the
        run is checkpointed; None for the signals a run answers itself."""
        handler = self.previous.get(self.signum) if self.signum in FORWARDED else None
        return (lambda: handler(self.signum, None)) if callable(handler) else None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else ""


NEVER = StopRequest()  # for trainers built outside a run (tests, scripts)


@contextmanager
def stop_on_signals() -> Iterator[StopRequest]:
    """Install the handlers for the duration of a run (main thread only; elsewhere, as under
    some launchers' worker threads, signals keep their default behaviour)."""
    stop = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum, frame):
        if stop.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: stop now
        stop.signum = signum

    taken = SIGNALS + tuple(s for s in FORWARDED if callable(signal.getsignal(s)))
    stop.previous = {s: signal.signal(s, handler) for s in taken}
    try:
        yield stop
    finally:
        for s, h in stop.previous.items():
            signal.signal(s, h)


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises :class:`Interrupted` where the main thread stands, as Ctrl-C raises
    KeyboardInterrupt: a ``kill`` or a scheduler's stop then runs the same clean-up (stop the
    children, record what ran) instead of ending the process with its children left running."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        signal.signal(signum, signal.SIG_IGN)  # a second SIGTERM does not cut the clean-up short
        raise Interrupted(signum, signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
