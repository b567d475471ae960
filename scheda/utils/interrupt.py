"""Stopping cleanly on SIGINT (Ctrl-C), SIGTERM (how Slurm and most schedulers stop a job)
and SIGUSR1 (Slurm's usual warning before a time limit, ``--signal=USR1@60``); and on SIGUSR2
where submitit handles it (its warning before a time limit), which gets the signal next so it
can requeue the job once the run is checkpointed.

The handler only records the request; the trainer checks it after every minibatch, writes a
checkpoint of where it stands (mid-epoch included) and results.json, and raises
:class:`Interrupted`, whose exit status is the conventional 128 + the signal's number. A
second Ctrl-C while the checkpoint is written stops at once.

A process that only waits on others (the protocol waits on its phases) takes SIGTERM as it
takes Ctrl-C: :func:`terminate_as_interrupt`. A sweep whose jobs run in processes of its own
(joblib's workers) is scheda.utils.sweep_signals'.
"""

from __future__ import annotations

import os
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
    some launchers' worker threads, signals keep their default behaviour). A signal the process
    ignores stays ignored: a run started in the background of a script ignores Ctrl-C, as Python
    and the protocol around it do."""
    stop = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum, frame):
        if stop.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: stop now
        if not stop.requested:  # the first signal names the stop (a sweep hands on a Ctrl-C as SIGTERM)
            stop.signum = signum

    taken = tuple(s for s in SIGNALS if signal.getsignal(s) is not signal.SIG_IGN) + tuple(
        s for s in FORWARDED if callable(signal.getsignal(s)))
    stop.previous = {s: signal.signal(s, handler) for s in taken}
    _unanswered.clear()
    try:
        yield stop
        if stop.requested:  # the run ended before it reached a point that answers a stop
            _unanswered.append(stop.signum)
    finally:
        for s, h in stop.previous.items():
            signal.signal(s, h)


_unanswered: list[int] = []


def unanswered_stop() -> int | None:
    """The signal a run took but did not act on because it ended first (it came during the last
    evaluation, say), once: a sweep stops there instead of going on to its next job."""
    signum = _unanswered[-1] if _unanswered else None
    _unanswered.clear()
    return signum


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (and SIGUSR1, Slurm's warning before a time limit, which would end the process too)
    raises :class:`Interrupted` where the main thread stands, as Ctrl-C does (as
    Interrupted too): a ``kill`` or a scheduler's stop then runs the same clean-up (stop the
    children, record what ran) instead of ending the process with its children left running.
    The first signal names the stop; one that follows during the clean-up is not news (a job
    inside a long torch call when the Ctrl-C came gets its protocol's SIGTERM too, and both
    arrive together). A Ctrl-C the process ignores stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    first: list[int] = []

    def handler(signum, frame):
        if not first:  # later ones: a no-op (SIG_IGN for a signal already pending makes Python warn)
            first.append(signum)
            raise Interrupted(signum, signal.Signals(signum).name)

    taken = [s for s in SIGNALS if s == signal.SIGTERM or signal.getsignal(s) is not signal.SIG_IGN]
    previous = {s: signal.signal(s, handler) for s in taken}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def one_line_on_ctrl_c(main):
    """A console command that holds no run (scheda-export, the analysis tools): Ctrl-C ends it with
    one line and exit status 130, not a KeyboardInterrupt traceback; each writes its files
    atomically, so nothing half-written is left. ``Interrupted``'s own message wins."""
    import functools

    @functools.wraps(main)
    def command(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except KeyboardInterrupt as exc:
            message = exc.message if isinstance(exc, Interrupted) else "interrupted by SIGINT: no file was " \
                "left half-written; run the same command again"
            from scheda.utils.io import print_line

            print_line(message)
            return exc.exit_code if isinstance(exc, Interrupted) else 130

    return command


CLOSED_PIPE_EXIT = 128 + 13  # as a shell reports a command that SIGPIPE ended


def quiet_on_a_closed_pipe(main):
    """A console command whose reader went away (``scheda-train --help | head``, ``scheda-results
    DIR | head -3``) ends as ``cat`` would, with status 141 and nothing on stderr, not a
    BrokenPipeError traceback. Only stdout's own closed pipe is taken so (a socket's broken pipe,
    MLflow's say, is an error to report); stdout then goes to os.devnull, so that the
    interpreter's last flush does not raise again (Python's documented recipe). SIGPIPE itself
    stays ignored, as Python sets it: a default action would kill a run mid-write."""
    import functools
    import sys

    @functools.wraps(main)
    def command(*args, **kwargs):
        try:
            try:
                return main(*args, **kwargs)
            finally:
                sys.stdout.flush()
        except BrokenPipeError:
            if not _reader_gone(sys.stdout):
                raise
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(CLOSED_PIPE_EXIT)

    return command


def _reader_gone(stream) -> bool:
    """Whether ``stream`` writes into a pipe whose reading end is closed (poll says POLLERR)."""
    import select

    try:
        poll = select.poll()
        poll.register(stream.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    except (OSError, ValueError, AttributeError):  # no file descriptor, or no poll on this platform
        return False
