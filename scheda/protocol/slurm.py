"""What the protocol asks Slurm directly (``squeue``, ``sinfo``, ``sacct``, ``scancel``): the
launcher (submitit) waits on a job for ever and forgets why one stopped, so a phase whose
pending jobs no node can run is cancelled and reported, and what Slurm says of every job that
did not finish is kept in ``<phase>/scheduler.json`` for the report."""

from __future__ import annotations

import json
import logging
import subprocess
import time
from pathlib import Path

from scheda.utils.io import atomic_write_json
from scheda.utils.slurm import queued, quiet, submitted_arrays
from scheda.runs.rundir import FINAL_STATUSES, read_results

log = logging.getLogger(__name__)


NODE_GONE = ("down", "drain", "fail", "maint", "unknown", "future")  # sinfo states no job starts on


class NodeWatch:
    """Submitit waits on a job for ever, and notices a job that ended without a result (cancelled,
    failed with its node) only when it next asks sacct, up to 10 minutes later. Two things end a
    phase sooner. When every pending job of this submission has waited ``bound`` seconds with no
    node of its partition that can run it (a node went down, was drained), they are cancelled and
    recorded in ``scheduler.json`` as failed with the reason. When no job of this submission is
    left in Slurm's queue for ``grace`` seconds while one has not finished, the launcher waits
    on jobs that are gone: it is stopped, and the report says what Slurm said of each."""

    def __init__(self, phase_dir: Path, names: list[str], since: float, bound: float, grace: float = 5.0):
        self.phase_dir, self.names, self.since, self.bound, self.grace = phase_dir, names, since, bound, grace
        self.stuck_since: float | None = None
        self.empty_since: float | None = None

    def _queue(self, *states: str) -> list[tuple[str, str]] | None:
        """This submission's jobs in Slurm's queue as (job id, partition); None when there is no
        submission yet or squeue did not answer (nothing is concluded from silence)."""
        arrays = submitted_arrays(self.phase_dir / ".submitit", self.since)
        return queued(arrays, *states) if arrays else None

    def gave_up(self) -> bool:
        pending = self._queue("PENDING") or []
        partitions = {p.rstrip("*") for _, p in pending}
        no_node = bool(pending) and all(
            all(state.rstrip("*~#$@+").lower().startswith(NODE_GONE)
                for state in quiet(["sinfo", "-h", "-p", p, "-o", "%T"]).split()) for p in partitions)
        if not no_node:
            self.stuck_since = None
            return False
        self.stuck_since = self.stuck_since or time.time()
        if time.time() - self.stuck_since < self.bound:
            return False
        minutes = (time.time() - self.stuck_since) / 60
        log.error("no node of partition %s can run %d pending jobs (waited %.1f min, scheduler_wait_min): "
                  "cancelling them", ",".join(sorted(partitions)), len(pending), minutes)
        states = scheduler_states(self.phase_dir)
        for job_id, partition in pending:
            array, _, index = job_id.partition("_")
            if index.isdigit() and int(index) < len(self.names):
                states[self.names[int(index)]] = (f"Slurm job {job_id}: no node of partition {partition} could run it "
                                                  f"for {minutes:.1f} min (down or drained): cancelled")
            quiet(["scancel", job_id])
        atomic_write_json(self.phase_dir / "scheduler.json", states)
        return True

    def launcher_stranded(self) -> bool:
        """A job of this submission has not finished (no final results.json), yet none has been
        in the queue for ``grace`` seconds: the launcher waits on a job Slurm ended without a
        result (a finished job hands the launcher its result within a second)."""
        if self._queue() != [] or all((read_results(self.phase_dir / n) or {}).get("status") in FINAL_STATUSES
                                      for n in self.names):
            self.empty_since = None
            return False
        self.empty_since = self.empty_since or time.time()
        return time.time() - self.empty_since >= self.grace


def scheduler_states(phase_dir: Path) -> dict[str, str]:
    """What the scheduler said of the phase's jobs that did not finish (``<phase>/scheduler.json``)."""
    path = phase_dir / "scheduler.json"
    return json.loads(path.read_text()) if path.exists() else {}


def forget_scheduler_states(phase_dir: Path, names: list[str]) -> None:
    states = scheduler_states(phase_dir)
    if states:
        atomic_write_json(phase_dir / "scheduler.json", {k: v for k, v in states.items() if k not in names})


def record_scheduler_states(phase_dir: Path, names: list[str], since: float) -> None:
    """What Slurm says of each job of this submission that did not finish (cancelled, timed out,
    node failure, out of memory), kept in ``<phase>/scheduler.json`` for the report: a job
    stopped before it could write results.json otherwise leaves no word of why. Hydra's job
    number is the task index of the submitit job array (``.submitit/<array>_<index>``)."""
    folder = phase_dir / ".submitit"
    tasks = [p for p in folder.glob("*_*") if p.is_dir() and p.stat().st_mtime >= since - 1] if folder.is_dir() else []
    states = scheduler_states(phase_dir)
    for task in tasks:
        array, _, index = task.name.partition("_")
        if not (index.isdigit() and int(index) < len(names)):
            continue
        name = names[int(index)]
        results = read_results(phase_dir / name)
        if results is not None and results.get("status") in FINAL_STATUSES:
            states.pop(name, None)
            continue
        try:
            out = subprocess.run(["sacct", "-j", task.name, "-n", "-X", "-P", "-o", "State,ExitCode,Reason"],
                                 capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
        except (OSError, subprocess.TimeoutExpired):
            out = []
        if out and name not in states:
            state, exit_code, reason = (out[0].split("|") + ["", ""])[:3]
            states[name] = (f"Slurm job {task.name}: {state} (exit {exit_code}"
                            f"{', ' + reason if reason and reason != 'None' else ''})")
            if state.split()[0] in ("PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "SUSPENDED"):
                # The launcher stopped waiting for it (a node failed under it, say): nobody would
                # collect it, and a retry must not run beside it.
                quiet(["scancel", task.name])
                states[name] += ": cancelled, the launcher had stopped waiting for it"
    atomic_write_json(phase_dir / "scheduler.json", states)
