"""A scheda command (``python -m scheda.train ...``, ``python scripts/reproduce.py ...``) run as
a fork of a server that imported the training code once: the command then costs a fork, not a
Python start and torch's import (about 2 s, paid by every stage of every protocol invocation).
The child is what the command would be: its own process, in the given directory and
environment, its signals, output and exit code its own."""

from __future__ import annotations

import atexit
import multiprocessing
import os
import subprocess
import sys
import threading
import traceback
from pathlib import Path

PRELOAD = ["scheda.train"]  # what the server imports before its first fork


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
    if new_session:
        os.setsid()
    for path, fd in ((stdout, 1), (stderr, 2)):
        if path is not None:
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
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
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    threading._shutdown()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
