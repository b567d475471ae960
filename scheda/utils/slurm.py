"""A submission's jobs in Slurm, as submitit leaves them: it names a job's folder under its
``submitit_folder`` by the job's id (``<array>_<task>``), which is how a sweep or a protocol phase
knows the jobs it submitted. Used by the protocol's watch on its phases (scheda.protocol.slurm)
and by a sweep stopped by a signal, which cancels its jobs rather than leaving them running."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path


def quiet(command: list[str]) -> str:
    """A Slurm command's output; "" when it cannot run or does not answer in 30 s."""
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def submitted_arrays(submitit_dir: Path, since: float) -> list[str]:
    """The job arrays submitted into ``submitit_dir`` (the folder holding submitit's job folders)
    since ``since`` (a time.time())."""
    return sorted({p.name.split("_")[0] for p in submitit_dir.glob("*_*")
                   if p.is_dir() and p.name.split("_")[0].isdigit() and p.stat().st_mtime >= since - 1}) \
        if submitit_dir.is_dir() else []


def queued(ids: list[str], *states: str) -> list[tuple[str, str]] | None:
    """The jobs of ``ids`` (arrays' tasks one by one) in Slurm's queue as (job id, partition); None
    when squeue did not answer (nothing is concluded from silence)."""
    command = ["squeue", "-h", "-r", "-j", ",".join(ids), "-o", "%i|%P", *(["-t", ",".join(states)] if states else [])]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return [tuple(line.split("|", 1)) for line in done.stdout.splitlines() if "|" in line]


def cancel_submitted(submitit_dir: Path, since: float, bound: float) -> list[str]:
    """Cancel the arrays submitted into ``submitit_dir`` since ``since`` and wait, up to ``bound``
    seconds, until Slurm has none of their jobs: a running job gets SIGTERM and checkpoints where
    it stands before it ends (a pending one just leaves the queue). Returns the arrays cancelled."""
    arrays = submitted_arrays(submitit_dir, since)
    if not arrays:
        return []
    quiet(["scancel", *arrays])
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline and queued(arrays):
        time.sleep(1)
    return arrays
