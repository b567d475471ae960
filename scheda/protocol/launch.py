"""Running a phase: each phase is ONE ``python -m scheda.cli -m`` multirun of generated job
configs (``<out_dir>/jobs/protocol_job/<name>.yaml``), so the user's Hydra launcher (basic,
joblib, submitit) runs its jobs, with run directories ``<out_dir>/<phase>/<name>``; it runs in a
process of its own, forked from a server that imported the training code once (scheda.utils.fork). A job whose
results.json says completed (or diverged: a result too) is not rerun; one that was killed
resumes from its latest checkpoint; a finished job run with other settings is refused. The
launcher is given the jobs with the most work left first (:func:`longest_first`)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from scheda.utils.errors import CheckpointError, ConfigError
from scheda.utils.fork import ForkedCommand
from scheda.utils.sweep_signals import JOBS_STOP_BOUND
from scheda.utils.io import atomic_write, atomic_write_json
from scheda.protocol.jobs import JobSpec
from scheda.protocol.slurm import (
    NodeWatch,
    forget_scheduler_states,
    record_scheduler_states,
    scheduler_states,
)
from scheda.runs.reentry import checkpoint_files, has_checkpoint, keeps_init_from, reentry
from scheda.runs.rundir import CHECKPOINT_RE, FINAL_STATUSES, KILLED, read_results, run_status

log = logging.getLogger(__name__)


LAUNCHERS = ("basic", "joblib", "submitit_slurm", "submitit_local")
POLL_S = 5.0  # how often the protocol looks at a running phase
# What a run keeps on disk, not what it trains or reports: a finished run kept otherwise is the same result
# (a control run before controls kept their best epoch's checkpoint is still done; table=stacked asks it for one)
ON_DISK = ("trainer.checkpoint_every", "trainer.keep_checkpoints")


def job_action(run_dir: Path, job: JobSpec) -> str:
    """'done', 'resume' (a checkpoint to continue from) or 'new' (a failed job reruns), by the
    policy a sweep run again follows too (scheda.runs.reentry.reentry). A finished job run with other
    settings is an error: the protocol directory belongs to one scale."""
    results = read_results(run_dir)
    if results is not None and "config" in results:
        config = OmegaConf.create(results["config"])
        for key, value in job.values.items():
            if key in ON_DISK:
                continue
            found = OmegaConf.select(config, key)
            if key == "init_from":  # a run resumed before its record kept its start says none (older scheda)
                if not _same_start(found, value, run_dir.parent.parent) and not (found is None and config.get("resume")):
                    raise ConfigError(f"{run_dir} continued {found}, the selection now says {value}: "
                                      f"delete that run (or choose another out_dir)")
                continue
            if key == "stack_on":  # a layer of table=stacked: the run it stands on, inside out_dir
                if not _same_start(found, value, run_dir.parent.parent):
                    raise ConfigError(f"{run_dir} is stacked on {found}, the selection now says {value}: "
                                      f"delete that run (or choose another out_dir)")
                continue
            if found != value and not (isinstance(found, list) and list(found) == list(value)):
                raise ConfigError(f"{run_dir} was run with {key}={found}, this scale says {value}: "
                                  f"delete that run or choose another out_dir")
    action, _ = reentry(results.get("status") if results is not None else None, has_checkpoint(run_dir))
    return {"skipped": "done", "resumed": "resume"}.get(action, "new")


def _same_start(found: str | None, wanted: str, out_dir: Path) -> bool:
    """Whether a run continued the checkpoint (or stands on the run) the selection names now,
    comparing the part of the path inside out_dir (the directory may have been moved since)."""
    if found is None:
        return False
    try:
        inside = Path(wanted).relative_to(out_dir).parts
    except ValueError:
        return Path(found) == Path(wanted)
    return Path(found).parts[-len(inside):] == inside


def work_left(job: JobSpec, run_dir: Path) -> int:
    """What ``job`` has left to train, in epochs of one hidden unit (units x models x epochs): at
    its cap (``meta["epochs"]``, else its schedule's), less the epochs of the newest checkpoint it
    resumes from. The rule of training to convergence may stop any job sooner; the cap is the one
    bound known before it runs. A job without epochs (a fine-tuning: its preset's) counts one."""
    hidden = int(job.values.get("model.hidden", job.meta.get("hidden")) or 1)
    models = len(job.values.get("trainer.parallel.nu") or job.values.get("trainer.parallel.seed") or [None])
    epochs = int(job.meta.get("epochs") or job.values.get("schedule.epochs") or 1)
    done = max((int(m.group(1)) for p in checkpoint_files(run_dir) if (m := CHECKPOINT_RE.match(p.name))), default=0)
    return hidden * models * max(epochs - done, 1)


def longest_first(jobs: list[JobSpec], phase_dir: Path) -> list[JobSpec]:
    """A phase's jobs in the order a launcher starts them: the most work left first (stable among
    equals). A phase ends with its slowest job, so on fewer workers than jobs (joblib's n_jobs, a
    busy Slurm queue) the longest job started last would leave the others idle at the end."""
    return sorted(jobs, key=lambda job: -work_left(job, phase_dir / job.name))


def launcher_overrides(cfg: DictConfig, jobs: int | None = None) -> list[str]:
    """Hydra launcher overrides; local parallel jobs share the cores instead of each taking all. A
    launch of fewer ``jobs`` than ``n_jobs`` shares them among its own: a lone job gets every core
    (on 2 cores an epoch at H 500 took 4.9 s alone with both, 8.3 s with one beside another)."""
    if cfg.launcher not in LAUNCHERS:
        raise ConfigError(f"launcher={cfg.launcher!r} is unknown: use {', '.join(LAUNCHERS)}")
    if cfg.n_jobs < 1:
        raise ConfigError(f"n_jobs={cfg.n_jobs} must be >= 1")
    out = []
    if cfg.launcher == "joblib":
        threads = max(1, (os.cpu_count() or 1) // min(cfg.n_jobs, max(1, jobs or cfg.n_jobs)))
        out += ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={cfg.n_jobs}", f"trainer.num_threads={threads}"]
    elif cfg.launcher != "basic":
        out.append(f"hydra/launcher={cfg.launcher}")
    return out + list(cfg.launcher_overrides)


def phase_args(cfg: DictConfig, jobs_dir: Path, phase_dir: Path, names: list[str]) -> list[str]:
    """The phase's ``python -m scheda.cli`` arguments: one multirun of the named job configs."""
    return ["-m", f"+protocol_job={','.join(names)}",
            f"hydra.searchpath=[file://{jobs_dir.resolve()}]", f"hydra.sweep.dir={phase_dir.resolve()}",
            "hydra.sweep.subdir=${hydra:runtime.choices.protocol_job}", "trainer.progress_bar=false",
            *cfg.scale.train, *cfg.overrides, *launcher_overrides(cfg, len(names))]


def stop_phase(phase: ForkedCommand, grace: float = 0) -> None:
    """End a phase: a Ctrl-C that reached only this process (a Ctrl-C at the terminal reaches the
    phase too: ``grace`` lets it stop by itself), or a launcher that waits on jobs Slurm no longer
    has. SIGTERM: a running job checkpoints where it stands and the sweep stops; a sweep waits for
    its workers' checkpoints up to JOBS_STOP_BOUND (a job in an evaluation finishes it first), and
    this waits for the sweep a little longer before it kills it."""
    try:
        phase.wait(timeout=grace)
        return
    except subprocess.TimeoutExpired:
        phase.terminate()
    try:
        phase.wait(timeout=JOBS_STOP_BOUND + 30)
    except subprocess.TimeoutExpired:
        phase.kill()
        phase.wait()


def run_phase(cfg: DictConfig, out_dir: Path, phase: str, jobs: list[JobSpec],
              invocation: Invocation | None = None) -> dict[str, int]:
    """Launch the jobs of one phase that are not done; returns how many were skipped / run.
    ``invocation`` is told the time as the phase runs (its record survives a kill)."""
    jobs_dir = out_dir / "jobs"
    phase_dir = out_dir / phase
    todo = []
    for job in longest_first(jobs, phase_dir):
        action = job_action(phase_dir / job.name, job)
        if action == "done":
            continue
        spec = JobSpec(job.name, job.phase, job.groups, {"seed": cfg.scale.seeds[0], **job.values}, job.meta)
        if action == "resume":
            if not keeps_init_from({k: job.values.get(f"finetune.{k}") for k in ("enabled", "standalone")}):
                spec.values.pop("init_from", None)
            spec.values["resume"] = str((phase_dir / job.name).resolve())
        atomic_write(jobs_dir / "protocol_job" / f"{job.name}.yaml", lambda f, s=spec: f.write(s.yaml().encode()))
        todo.append(job.name)
    log.info("phase %s: %d jobs, %d already done, %d to run", phase, len(jobs), len(jobs) - len(todo), len(todo))
    if todo:
        args = phase_args(cfg, jobs_dir, phase_dir, todo)
        log.info("running: %s", " ".join([sys.executable, "-m", "scheda.cli", *args]))
        submitted = time.time()
        forget_scheduler_states(phase_dir, todo)  # this submission's word replaces the last one's
        # in the user's directory: relative overrides keep their meaning
        process = ForkedCommand("scheda.cli", str(Path(__file__).parents[1] / "cli.py"), args)
        watch = NodeWatch(phase_dir, todo, submitted, 60 * cfg.scheduler_wait_min) \
            if cfg.launcher == "submitit_slurm" else None
        try:
            while process.poll() is None:
                if invocation is not None:
                    invocation.tick(poll=POLL_S, ran_jobs=True)
                try:
                    process.wait(timeout=POLL_S)
                except subprocess.TimeoutExpired:
                    if watch is None:
                        continue
                    watch.gave_up()  # cancels the pending jobs no node can run
                    if watch.launcher_stranded():
                        log.warning("phase %s: no job of it is left in Slurm's queue, but the launcher still "
                                    "waits (submitit asks sacct rarely): stopping it", phase)
                        stop_phase(process)
        except KeyboardInterrupt:
            stop_phase(process, grace=2)
            raise
        code = process.returncode
        if code != 0:
            log.warning("phase %s: some jobs failed (exit %d); the report lists them", phase, code)
        if cfg.launcher == "submitit_slurm":
            record_scheduler_states(phase_dir, todo, submitted)
    return {"skipped": len(jobs) - len(todo), "run": len(todo)}


def trained_by(results: dict[str, Any]) -> dict[str, Any] | None:
    """The step record of what trained a run: its DA step, or a fine-tuning job's own step; None for
    a run that trained none (the raw baseline) or predates the record."""
    finetune = ((results.get("config") or {}).get("finetune") or {})
    if finetune.get("standalone") and (results.get("plan") or {}).get("finetune_step"):
        return results["plan"]["finetune_step"]
    if ((results.get("config") or {}).get("model") or {}).get("name") == "raw":
        return None
    return results.get("step")


def precision_of(results: dict[str, Any]) -> str | None:
    """The precision a run trained in (a step recorded before precisions were: fp32, the only one
    fine-tuning and the steps then had by default); None for a run that trained none."""
    step = trained_by(results)
    return step.get("precision", "fp32") if step else None


def step_text(results: dict[str, Any]) -> str:
    """The step that trained a run, as the report's jobs table names it (its fallback too); "" for
    a run that trained none or predates the record."""
    step = trained_by(results)
    if not step:
        return ""
    text = f"{step['kind']}{', graphed' if step.get('cuda_graph') else ''}"
    text += f", {step['precision']}" if step.get("precision", "fp32") != "fp32" else ""
    return text + (f" (fallback: {step['fallback']})" if step.get("fallback") else "")


def job_statuses(jobs: list[JobSpec], out_dir: Path) -> list[dict[str, Any]]:
    rows = []
    scheduler = {phase: scheduler_states(out_dir / phase) for phase in {job.phase for job in jobs}}
    for job in jobs:
        results = read_results(out_dir / job.phase / job.name)
        status = run_status(results, out_dir / job.phase / job.name) if results else "not run"
        results = results or {}
        error = results.get("error")
        said = scheduler[job.phase].get(job.name) if status not in FINAL_STATUSES else None
        if said:  # the scheduler's word on a job that did not finish
            status = "failed" if status in ("not run", "running", KILLED) else status
            error = f"{said}; {error}" if error else said
        rows.append({"name": job.name, "phase": job.phase, "status": status, "error": error,
                     "seconds": results.get("seconds"), "device": results.get("device"),
                     "step": step_text(results), "precision": precision_of(results)})
    return rows


class Invocation:
    """This invocation's entry in ``<out_dir>/invocations.json`` (the protocol's wall time is the
    sum over the invocations that ran jobs, however often it was resumed; the report names their
    launchers, not the one of the invocation that writes it). The entry is written when the
    invocation starts and again each minute while it waits on a phase, so one killed outright (a
    session or allocation ending: no handler runs) still counts, to within a minute, and says
    ``"ended": false``. A gap in that waiting far longer than its poll is the process stopped
    (``kill -STOP``, a suspended machine): its ``stopped_seconds``, not its ``seconds``.
    ``keep=False``: nothing written (an interim report; the running invocation records itself)."""

    BEAT_S = 60.0  # how stale a killed invocation's time may be
    STOP_SLACK_S = 25.0  # a poll this much later than its timeout was a stop, not work

    def __init__(self, out_dir: Path, cfg: DictConfig, started: float, keep: bool = True):
        self.path = out_dir / "invocations.json"
        self.keep = keep
        self.history = json.loads(self.path.read_text()) if self.path.exists() else []
        self.entry = {"started": datetime.fromtimestamp(started).isoformat(timespec="seconds"),
                      "seconds": time.time() - started, "stopped_seconds": 0.0, "table": cfg.table.name,
                      "ran_jobs": False, "launcher": cfg.launcher, "n_jobs": cfg.n_jobs, "ended": False}
        self._last = self._written = time.monotonic()
        self._warned = False
        self._write()

    def tick(self, poll: float | None = None, ran_jobs: bool = False) -> None:
        """Count the time since the last tick; ``poll``: the longest the caller meant to be away
        (its wait's timeout): beyond it by more than STOP_SLACK_S, the rest was a stop."""
        now = time.monotonic()
        gap, self._last = now - self._last, now
        if poll is not None and gap > poll + self.STOP_SLACK_S:
            self.entry["stopped_seconds"] += gap - poll
            gap = poll
        self.entry["seconds"] += gap
        started_jobs = ran_jobs and not self.entry["ran_jobs"]
        self.entry["ran_jobs"] = self.entry["ran_jobs"] or ran_jobs
        if started_jobs or now - self._written >= self.BEAT_S:
            try:  # while a phase runs: a full disk must not end the protocol and orphan its phase
                self._write()
            except (CheckpointError, OSError) as exc:
                if not self._warned:
                    log.warning("%s; its time is written again at the invocation's end", exc)
                    self._warned = True
                self._written = now

    def end(self, ran_jobs: bool) -> list[dict[str, Any]]:
        """The entry final; the history with it (without it when ``keep=False``)."""
        self.tick(ran_jobs=ran_jobs)
        self.entry["ended"] = True
        self._write()
        return [*self.history, self.entry] if self.keep else self.history

    def _write(self) -> None:
        if self.keep:
            atomic_write_json(self.path, [*self.history, self.entry])
            self._written = time.monotonic()
