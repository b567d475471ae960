"""One writer per directory: a run (and a ``scheda-reproduce`` invocation) holds an advisory
lock (``fcntl.flock``) on ``<dir>/.lock`` for its life, so a second ``resume=`` of the same run,
a second protocol on the same ``out_dir`` or a sweep rerun while the first is alive is refused
at once instead of writing over it. The kernel releases the lock when its holder dies, however
(SIGKILL, a node failure): a later process takes it over without a stale-lock rule, and a job
Slurm requeues after its first try ended runs as usual. The file holds the holder's pid, host
and start time, for the refusal's message; it stays when the lock is released."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import socket
import time
from pathlib import Path
from typing import Iterator

from scheda.utils.errors import BusyError
from scheda.utils.io import shown_path

LOCK = ".lock"
_held: set[int] = set()  # this process's lock descriptors, for release_inherited_locks


@contextlib.contextmanager
def hold(directory: str | os.PathLike, what: str = "run") -> Iterator[Path]:
    """Hold ``directory``'s lock while the block runs; BusyError (one line naming the holder) if
    a live process holds it."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 512, 0).decode(errors="replace").strip() or "another process"
            raise BusyError(f"{shown_path(directory)} is in use by {holder}: one {what} writes there at a time; "
                            f"wait for it to end or stop it (a dead holder's lock is released by itself)",
                            holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since "
                      f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode(), 0)
        _held.add(fd)
        yield path
    finally:
        _held.discard(fd)
        os.close(fd)  # closing releases the lock


def holder_gone(directory: str | os.PathLike) -> bool:
    """Whether the process that last took ``directory``'s lock ran on this host and has ended
    without a trace of its own (SIGKILL, the OOM killer): then a results.json that says "running"
    will never say anything else. False where that cannot be told: no lock file, another host,
    a live pid (which may be a reused one: the run then reads as running, as it always did).
    Reads the lock file only: a probe that took the lock could refuse a run starting that instant."""
    try:
        text = (Path(directory) / LOCK).read_text(errors="replace")
    except OSError:
        return False
    found = re.match(r"pid (\d+) on (\S+) since", text)
    if found is None or found.group(2) != socket.gethostname():
        return False
    pid = int(found.group(1))
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):  # another user's live process; a pid no process can have
        return False
    try:  # killed, not yet reaped by its parent: a zombie holds no lock and runs nothing
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except (OSError, IndexError):  # no /proc (macOS): a live pid
        return False


def release_inherited_locks() -> None:
    """In a forked child: close the lock descriptors inherited from the parent. A lock stays held
    while any copy of its descriptor is open, so a child that kept them would hold its parent's
    directory after the parent died."""
    for fd in _held:
        os.close(fd)
    _held.clear()
