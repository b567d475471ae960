"""A scheda command (``python -m scheda.cli ...``, ``python scripts/reproduce.py ...``) run as
a fork of a process that imported the training code once: the command then costs a fork, not a
Python start and torch's import (about 2 s of CPU, paid by every phase of every protocol
invocation). The child is what the command would be: its own process, in the given directory
and environment, its signals, output and exit code its own.

Which process is forked: this one, when that is safe (Linux, a single thread, CUDA not started:
a CUDA context does not survive a fork), as in the protocol, which has imported the training
code for its own work anyway; otherwise (a test runner's threads) a fork server that imported it
(multiprocessing's forkserver), at the cost of one Python start per server."""

from __future__ import annotations

import atexit
import importlib
import logging
import multiprocessing
import multiprocessing.util
import os
import signal
import subprocess
import sys
import threading
import traceback
import weakref
from pathlib import Path

from hydra.core.global_hydra import GlobalHydra

from scheda.utils.io import print_line
from scheda.utils.lock import release_inherited_locks

# Imported before the first fork (by the server, or by this process): the command's module and
# what its runs import on their way, TensorBoard's writer above all (360 modules). A fork that
# imports them itself spends about 0.3 s more CPU on a tiny run.
PRELOAD = ["scheda.cli", "scheda.run", "torch.utils.tensorboard"]


# The native threads (not Python's) this process had when it first forked itself (torch's import starts
# one of its own); None before. A native thread that was not among them means a thread pool started since
# (torch's OpenMP workers, after an operation on several threads here): a child that computes on several
# threads would wait at the pool's barrier for ever, so the fork server takes over.
_SAFE_NATIVE: frozenset[int] | None = None


def native_threads() -> frozenset[int]:
    """The ids of this process's threads that are not Python's (OpenMP's, MKL's), as Linux lists them."""
    try:
        tasks = {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return frozenset()
    return frozenset(tasks - {os.getpid()} - {t.native_id for t in threading.enumerate()})


def fork_is_safe() -> bool:
    """This process can be forked as it stands: Linux (elsewhere system libraries may not survive
    a fork), one Python thread (another could hold a lock the child would wait on for ever), no
    native thread started since it first forked (:data:`_SAFE_NATIVE`), and CUDA not initialised
    here. ``torch.cuda.is_available()`` starts the CUDA driver without torch counting it as
    initialised: the protocol asks it only after its last stage."""
    if sys.platform != "linux" or threading.active_count() > 1:
        return False
    if _SAFE_NATIVE is not None and native_threads() - _SAFE_NATIVE:
        return False
    torch = sys.modules.get("torch")
    return torch is None or not torch.cuda.is_initialized()


class ForkedCommand:
    """``module``'s ``main()`` with ``sys.argv = [argv0, *args]`` (its exit status: what it
    returns or passes to sys.exit), started at once; Popen's interface (``poll``, ``wait``,
    ``terminate``, ``kill``, ``pid``, ``returncode``).
    ``stdout``/``stderr``: files that take the child's output (default: this process's own);
    ``new_session``: the child leads a process group of its own (its workers can be signalled
    with it)."""

    def __init__(self, module: str, argv0: str, args: list[str], cwd: str | Path | None = None,
                 env: dict[str, str] | None = None, stdout: Path | None = None, stderr: Path | None = None,
                 new_session: bool = False):
        self.args = [sys.executable, argv0, *args]
        if fork_is_safe():
            context = multiprocessing.get_context("fork")
            for name in PRELOAD:
                importlib.import_module(name)  # once here, not in every child
            global _SAFE_NATIVE
            if _SAFE_NATIVE is None:
                _SAFE_NATIVE = native_threads()
        else:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(PRELOAD)
        self._process = context.Process(
            target=_child, name=f"scheda-{module}",
            args=(module, [argv0, *args], str(cwd or os.getcwd()), dict(os.environ if env is None else env),
                  None if stdout is None else str(stdout), None if stderr is None else str(stderr), new_session))
        self._process.start()
        self.pid = self._process.pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and not self._process.is_alive():
            self._process.join()
            self.returncode = self._process.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def terminate(self) -> None:
        self._process.terminate()

    def kill(self) -> None:
        self._process.kill()


def _child(module: str, argv: list[str], cwd: str, environ: dict[str, str], stdout: str | None,
           stderr: str | None, new_session: bool) -> None:
    """Runs in the fork; ends the way the interpreter ends a program: threads and their exit
    callbacks first (joblib's executor stops its workers there), then the exit handlers
    (logging's flush). Multiprocessing's own ending would join those workers first, and wait on
    them for ever."""
    _forget_parent()
    if new_session:
        os.setsid()
    for path, fd, name in ((stdout, 1, "stdout"), (stderr, 2, "stderr")):
        if path is not None:
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
            # the parent's sys.stdout may write elsewhere than its fd 1 (a test runner's capture)
            setattr(sys, name, open(fd, "w", buffering=1, closefd=False))
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(environ)
    sys.argv = list(argv)
    code = 1
    try:
        returned = __import__(module, fromlist=["main"]).main()
        code = returned if isinstance(returned, int) else 0  # ``sys.exit(main())``
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print_line(exc.code)
    except BaseException:
        traceback.print_exc()
    threading._shutdown()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def exec_signals() -> None:
    """The signal dispositions a program started by exec would have: the parent's handlers back to
    the defaults (Python's Ctrl-C handler for SIGINT), and a signal the parent ignores still ignored
    (a background job of a script ignores Ctrl-C, and so must the phase it forks)."""
    for signum, default in ((signal.SIGTERM, signal.SIG_DFL), (signal.SIGINT, signal.default_int_handler)):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, default)


def _forget_parent() -> None:
    """Let go of what the forked parent owns, so that the command starts and ends as a program of
    its own: its directory locks (a child would hold them after the parent died), its signal
    handlers (a SIGTERM to the protocol's handler raised inside the phase's launcher), Hydra's global
    state (the command's ``@hydra.main`` sets it up), and its exit work (a test runner's clean-up
    of its temporary folders, objects' finalizers): the child keeps the standard exit handlers
    and runs those it registers itself."""
    release_inherited_locks()
    exec_signals()
    GlobalHydra.instance().clear()
    for finalizer in list(weakref.finalize._registry):  # the parent's objects
        finalizer.detach()
    atexit._clear()
    for handler in (logging.shutdown, multiprocessing.util._exit_function, weakref.finalize._exitfunc):
        atexit.register(handler)  # in the order importing them registers them: run last to first
