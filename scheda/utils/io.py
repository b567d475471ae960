"""Atomic file writes: a crash or a full disk never leaves a half-written result behind.

Every file scheda produces (checkpoints, results) is written to a temporary file in the same
directory, flushed to disk, and renamed over the target; a reader sees the old file or the
new one, never a mix.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, IO

from scheda.utils.errors import CheckpointError


def shown_path(path: str | Path) -> str:
    """``path`` as the user would type it here: relative to the working directory when inside it
    (what a report or a message names; never another machine's absolute path)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def print_line(message: object) -> None:
    """``message`` and its newline to stderr in one write: the jobs of a sweep share one console,
    and ``print`` writes the two apart where stderr is unbuffered (``PYTHONUNBUFFERED=1``, as
    containers and Slurm scripts often set), so two jobs' lines ran into one."""
    sys.stderr.write(f"{message}\n")
    sys.stderr.flush()


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


class _Watched:
    """The temporary file as the writer sees it, remembering the OSError a write raised: torch's
    and other writers report a full disk as their own error (torch.save: a RuntimeError about
    a position in its zip container), which would hide it."""

    def __init__(self, f: IO[bytes]):
        self._f, self.error = f, None

    def write(self, data) -> int:
        try:
            return self._f.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


# Where a file cannot be written at all (a folder that cannot be made, no permission, a read-only
# file system): the user's to fix, as a full disk is.
_UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT, errno.ENOTDIR, errno.EEXIST)


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> Path:
    """Call ``write(f)`` on a temporary file beside ``path`` and rename it into place."""
    path = Path(path)
    tmp, watched = None, None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp's 0600 would hide results from a shared group
        with os.fdopen(fd, "wb") as f:
            watched = _Watched(f)
            write(watched)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        if not isinstance(exc, OSError) and watched is not None and watched.error is not None:
            exc = watched.error  # the writer's own error for it
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise CheckpointError(
                f"disk full while writing {path}: free space there or point hydra.run.dir "
                f"elsewhere; the previous file (if any) is intact"
            ) from exc
        if isinstance(exc, OSError) and exc.errno in _UNWRITABLE:
            why = "a file stands where its folder would go" if exc.errno in (errno.EEXIST, errno.ENOTDIR) \
                else exc.strerror
            raise CheckpointError(f"cannot write {path}: {why} ({exc.filename}): choose a folder you can write to; "
                                  f"the previous file (if any) is intact") from exc
        raise
    _fsync_dir(path.parent)
    return path


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    data = (json.dumps(obj, indent=2, sort_keys=False, allow_nan=True) + "\n").encode()
    return atomic_write(path, lambda f: f.write(data))


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
