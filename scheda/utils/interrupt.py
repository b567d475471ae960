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
(joblib's workers) hands the signal to them and waits for their checkpoints before it ends:
:func:`jobs_stop_first`; each worker, stopped, waits for the sweep to end (:func:`wait_for_the_sweep`).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager, nullcontext
from typing import Callable, Iterator

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
    import sys

    @functools.wraps(main)
    def command(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except KeyboardInterrupt as exc:
            message = exc.message if isinstance(exc, Interrupted) else "interrupted by SIGINT: no file was " \
                "left half-written; run the same command again"
            print(message, file=sys.stderr)
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


# Python's resource tracker, and loky's own (joblib's workers: "leaked semlock objects to clean up")
QUIET_TRACKER = ("ignore::UserWarning:multiprocessing.resource_tracker,"
                 "ignore::UserWarning:joblib.externals.loky.backend.resource_tracker")
SWEEP_PID = "SCHEDA_SWEEP_PID"  # set by a sweep's process (hydra_plugins.scheda_sweeper) for the jobs it starts


WARNING = {s for s in (getattr(signal, "SIGUSR1", None),) if s is not None}  # Slurm's, before a time limit
STOPPED = "scheda-stopped"  # a sweep's worker that stopped names itself so (Linux's /proc/<pid>/comm)
JOBS_STOP_BOUND = 300.0  # seconds a sweep waits for its workers' checkpoints (an evaluation may have to end first)


def in_sweep_worker() -> bool:
    """This job runs in a process a sweep started for its jobs (joblib's worker), not in the sweep's
    own: such a worker stops after an interrupted job (:func:`wait_for_the_sweep`), or it would take
    the sweep's next one."""
    pid = os.environ.get(SWEEP_PID)
    return pid is not None and pid != str(os.getpid())


def job_processes() -> list[int]:
    """This process's children that run jobs (Linux's /proc; elsewhere none are known): every
    child but the resource tracker joblib starts beside its workers, which ends with this process."""
    me, found = str(os.getpid()), []
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for pid in entries:
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = f.read().rsplit(")", 1)[1].split()[1]
            if ppid == me:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"resource_tracker" not in f.read():
                        found.append(int(pid))
        except (OSError, IndexError):
            continue  # ended meanwhile
    return found


def _running(pid: int) -> bool:
    """The job process has neither ended nor stopped to wait for its sweep's end."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":  # a zombie has ended
                return False
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip() != STOPPED
    except OSError:
        return False


def wait_for_the_sweep(signum: int, code: int | None = None) -> None:
    """In a sweep's worker whose job stopped on a signal (checkpointed, its line printed), or that
    held no job: say so (the process's name), have the sweep stop too, and wait for it to end, as
    its launcher then ends its workers. A worker that ended by itself instead made joblib's
    executor take the pool for broken and kill the other workers, one of them perhaps in an
    evaluation before its checkpoint (its results.json was left ``running``, its line never
    printed). Ends the process with ``code`` once the sweep has gone (None: 128 + signum)."""
    global _worker_stopped
    _worker_stopped = True
    try:
        with open("/proc/self/comm", "w") as f:
            f.write(STOPPED)
    except OSError:
        pass
    sweep = int(os.environ.get(SWEEP_PID, "0"))
    if sweep and os.getppid() == sweep:
        try:  # the sweep's own handler hands the stop on to its other workers (a later signal is a no-op there)
            os.kill(sweep, signum if signum in (signal.SIGINT, signal.SIGTERM) else signal.SIGTERM)
        except OSError:
            pass
        while os.getppid() == sweep:
            time.sleep(0.1)
    os._exit(128 + signum if code is None else code)


_worker_stopped = False


def _worker_handler(signum, frame):
    """A sweep's worker between runs (a run installs its own handlers, and puts this one back)."""
    if not _worker_stopped:  # once stopped, a later signal (the sweep handing on the stop) is not news
        wait_for_the_sweep(signum)


def worker_signals() -> None:
    """Joblib's worker initializer: a signal to a worker that holds no run (between two jobs, or
    before its first: a ``kill`` of the process group, Slurm's stop or time-limit warning to all
    of a job's processes) stops it without ending it (:func:`wait_for_the_sweep`). An ignored
    signal stays ignored."""
    for s in SIGNALS:
        if signal.getsignal(s) is not signal.SIG_IGN:
            signal.signal(s, _worker_handler)


def _start_trackers_deaf_to(signals: set[int]) -> None:
    """Start multiprocessing's and joblib's resource trackers (if not running) with ``signals``
    blocked, which they inherit. Where the platform or joblib lacks what this needs, they start
    later as joblib starts them (only their noise on such a signal comes back)."""
    if not signals or not hasattr(signal, "pthread_sigmask"):
        return
    try:
        import multiprocessing.resource_tracker as standard
        from joblib.externals.loky.backend import resource_tracker as loky
    except ImportError:
        return
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        for tracker in (standard, loky):
            getattr(tracker, "ensure_running", lambda: None)()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


@contextmanager
def workers_wait_for_the_sweep() -> Iterator[None]:
    """Joblib's process pool (loky, the backend Hydra's joblib launcher names) starts its workers
    with :func:`worker_signals`, through joblib's public registry of backends, for the duration.
    The resource trackers that joblib starts beside its workers are started first, with SIGUSR1
    blocked (they inherit the mask, and unblock only SIGINT and SIGTERM, which they ignore):
    Slurm's warning to all of a job's processes ended them, and their relaunched copies printed
    tracebacks as the workers stopped."""
    from joblib import parallel

    _start_trackers_deaf_to(WARNING)
    previous = parallel.BACKENDS["loky"]

    class StoppingLoky(previous):
        def __init__(self, **kwargs):
            super().__init__(**kwargs, initializer=worker_signals)

    parallel.register_parallel_backend("loky", StoppingLoky)
    try:
        yield
    finally:
        parallel.register_parallel_backend("loky", previous)


@contextmanager
def jobs_stop_first(bound: float = JOBS_STOP_BOUND, joblib: bool = False,
                    cancel: Callable[[float], list[str]] | None = None) -> Iterator[None]:
    """While a sweep runs: SIGINT, SIGTERM or SIGUSR1 to its process reaches its job processes as SIGTERM
    (a Ctrl-C at a terminal reached them already; a second SIGINT would stop them before their
    checkpoint), the process waits up to ``bound`` seconds for them to checkpoint and stop, then
    raises :class:`Interrupted`. Without this the sweep's launcher (joblib) stopped at once, killed
    its workers mid-checkpoint and printed a traceback. Jobs in this process (Hydra's basic
    launcher) answer the signal themselves: their run installs its own handlers. ``joblib``: the
    jobs run in joblib's workers, which wait for the sweep's end once stopped
    (:func:`workers_wait_for_the_sweep`). ``cancel``: the jobs run in a scheduler's queue (Slurm),
    not here: it cancels them, waits up to the seconds it is given for them to end (each
    checkpoints on the scheduler's SIGTERM) and returns the ids it cancelled."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    stopping: list[int] = []

    def handler(signum, frame):
        if stopping:  # the wait is not cut short; a signal already on its way is not news (SIG_IGN set here
            return    # made Python report the one it had taken: "Signal 15 ignored due to race condition")
        stopping.append(signum)
        if cancel is not None:
            cancelled = cancel(bound)
            raise Interrupted(signum, f"sweep interrupted by {signal.Signals(signum).name}: its finished jobs are kept, "
                                      f"its Slurm jobs cancelled ({', '.join(cancelled) or 'none was submitted'}), "
                                      f"each running one checkpointed; run the same command again to continue")
        workers = job_processes()
        for pid in workers:
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass
        deadline = time.monotonic() + bound
        while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        raise Interrupted(signum, f"sweep interrupted by {signal.Signals(signum).name}: its finished jobs are kept, "
                                  f"each stopped job checkpointed (continue it with scheda-train resume=<its directory>)")

    previous = {s: signal.signal(s, handler) for s in SIGNALS
                if signal.getsignal(s) is not signal.SIG_IGN}  # an ignored one stays so, as in stop_on_signals
    saved = {name: os.environ.get(name) for name in (SWEEP_PID, "PYTHONWARNINGS")}
    os.environ[SWEEP_PID] = str(os.getpid())
    # The resource tracker joblib starts (a process of its own) cleans up the semaphores of workers that
    # ended on a signal, and says so at its end in two lines of warning: not news after the line above.
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [saved["PYTHONWARNINGS"], QUIET_TRACKER]))
    try:
        with workers_wait_for_the_sweep() if joblib else nullcontext():
            yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        for s, h in previous.items():
            signal.signal(s, h)
