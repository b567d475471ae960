"""What a run ran on, recorded in its results.json (``environment``) so that a number can be
traced to its code and machine: scheda's version, the git commit of the checkout it ran from
(and whether tracked files were modified), Python, torch, CUDA and cuDNN, the device and the host.
``scheda-results --env`` shows them as columns."""

from __future__ import annotations

import functools
import importlib.util
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import scheda
from scheda.utils.lazy import lazy

torch = lazy("torch", globals())

SOURCE = Path(scheda.__file__).resolve().parents[1]  # a checkout's root, when scheda runs from one


def _git(*args: str) -> str | None:
    """``git -C <checkout> ARGS``'s output, None where it fails. Without git's optional locks:
    ``git status`` otherwise takes the checkout's index.lock to refresh the index, and a run killed
    meanwhile (a sweep's process group, SIGKILL) left it behind, so that the user's next ``git
    commit`` failed with "Unable to create index.lock"."""
    try:
        proc = subprocess.run(["git", "-C", str(SOURCE), *args], capture_output=True, text=True, timeout=10,
                              env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def source_revision() -> tuple[str | None, bool | None]:
    """The commit of the checkout scheda is imported from and whether its tracked files differ
    from it; (None, None) for an installed copy (a wheel) or without git."""
    if not (SOURCE / ".git").exists():
        return None, None
    commit = _git("rev-parse", "HEAD")
    if commit is None:
        return None, None
    status = _git("status", "--porcelain", "--untracked-files=no")
    return commit, (bool(status) if status is not None else None)


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU's model where the system says it (Linux), else its architecture."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or device.type


@functools.lru_cache(maxsize=None)
def _describe(device: str) -> dict[str, Any]:
    commit, dirty = source_revision()
    cuda = torch.device(device).type == "cuda"
    return {"scheda": scheda.__version__, "git_commit": commit, "git_dirty": dirty,
            "python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda if cuda else None,
            "cudnn": torch.backends.cudnn.version() if cuda and torch.backends.cudnn.is_available() else None,
            "device": device, "device_name": device_name(torch.device(device)), "host": socket.gethostname(),
            "platform": f"{sys.platform}-{platform.machine()}"}


def describe(device: torch.device) -> dict[str, Any]:
    """The environment of a run on ``device`` (once per process and device: a fused sweep's
    models share it)."""
    return dict(_describe(str(device)))


def invoked_as(entry_point: str, module: str, shim: str) -> str:
    """The command as the user typed it, for the hints a command prints (how to resume, how to
    retry): ``python -m <module>``, the checkout's ``python <shim>``, or the installed
    ``entry_point`` (also where none of these started the process: the Python API, a worker)."""
    argv0 = Path(sys.argv[0])
    spec = importlib.util.find_spec(module)
    if spec is not None and spec.origin and argv0.resolve() == Path(spec.origin).resolve():
        return f"python -m {module}"
    if argv0.suffix == ".py" and argv0.name == Path(shim).name:
        return f"python {shim}"
    return entry_point

