"""A sweep whose jobs run in processes of its own (joblib's loky workers) stopped by a signal: the
sweep hands it to its workers and waits for their checkpoints before it ends
(:func:`jobs_stop_first`); each worker, stopped, waits for the sweep to end
(:func:`wait_for_the_sweep`); their resource trackers stay deaf to the signals and quiet about the
semaphores a stopped pool leaves (QUIET_TRACKER). The signals themselves, and a single process's
clean stop, are scheda.utils.interrupt's.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager, nullcontext
from typing import Callable, Iterator

from scheda.utils.interrupt import SIGNALS, Interrupted

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
    """While a sweep runs: SIGTERM or SIGUSR1 to its process reaches its job processes as the same
    signal, and SIGINT as SIGTERM (a Ctrl-C at a terminal reached them already; a second SIGINT
    would stop them before their checkpoint), so that each job's line names what stopped the
    sweep (handed on as SIGTERM, Slurm's SIGUSR1 to every process of a job was named SIGTERM by a
    job that took the sweep's first); the process waits up to ``bound`` seconds for them to
    checkpoint and stop, then raises :class:`Interrupted`. Without this the sweep's launcher (joblib) stopped at once, killed
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
                os.kill(pid, signal.SIGTERM if signum == signal.SIGINT else signum)
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
