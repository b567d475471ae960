"""One GPU per job of a local parallel sweep (``hydra/launcher=joblib``, which does not do it).

Each joblib worker process pins itself, the first time it runs a job, to one of the visible
GPUs that no other worker holds (a lock file held for the worker's life), by setting
``CUDA_VISIBLE_DEVICES`` before CUDA starts; a reused worker keeps its GPU, so the jobs it runs
later see the same one. With more jobs at once than GPUs, the rest share them all. Imports
no torch: it must run before CUDA does.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import tempfile
from pathlib import Path
from typing import IO

_held: tuple[str, IO] | None = None  # the GPU this process holds, and its lock file


def visible_gpus() -> list[str]:
    """The GPUs this process may use: CUDA_VISIBLE_DEVICES when set, else what nvidia-smi lists."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip()]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [str(i) for i, line in enumerate(line for line in out.splitlines() if line.startswith("GPU "))]


def claim_gpu(lock_dir: Path | None = None) -> str | None:
    """Pin this process to a free GPU (see the module docstring); the GPU, or None when there
    are fewer than two or all are held."""
    global _held
    if _held is not None:
        return _held[0]
    gpus = visible_gpus()
    if len(gpus) < 2:
        return None
    folder = lock_dir or Path(tempfile.gettempdir()) / f"scheda-gpus-{os.getuid()}"
    folder.mkdir(parents=True, exist_ok=True)
    for gpu in gpus:
        lock = open(folder / f"{gpu}.lock", "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            continue
        _held = (gpu, lock)
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
        return gpu
    return None
