"""The Slurm path for real: jobs submitted through Hydra's submitit launcher to a running
single-node cluster (``bash .ci/slurm.sh start``; CI starts one). Skipped at once when no
slurmctld answers on this machine."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from helpers import TINY, run_train, slurm_cluster_answers, start_train
from test_reproduce import reproduce, start_reproduce


pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group("slurm"),  # one worker: one job queue at a time
              pytest.mark.skipif(not slurm_cluster_answers(), reason="no Slurm cluster here (bash .ci/slurm.sh start)")]


@pytest.fixture(autouse=True)
def _one_at_a_time(tmp_path_factory):
    """One Slurm test at a time on this machine, whatever xdist does with the group above (a
    grouping lost to a pytest/xdist mismatch let tests cancel each other's jobs): they share one
    queue and one node that some of them down."""
    with open(tmp_path_factory.getbasetemp().parent / "slurm-tests.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


LAUNCHER = ["hydra/launcher=submitit_slurm", "hydra.launcher.timeout_min=10", "hydra.launcher.cpus_per_task=1"]


def _reproduce(tmp_path: Path, data_root: Path, *args: str, wait: bool = True):
    """scale=smoke through Slurm (test_reproduce.reproduce_args); ``wait=False``: started in the
    background."""
    args = ("launcher=submitit_slurm",
            "launcher_overrides=['hydra.launcher.timeout_min=10','hydra.launcher.cpus_per_task=1']", *args)
    if not wait:
        return start_reproduce(tmp_path, data_root, *args)
    return reproduce(tmp_path, data_root, *args, timeout=600)


def test_a_protocol_through_slurm_continues_its_das_and_a_rerun_submits_nothing(cifar_arrays, tmp_path):
    """The DA grid and the ScheDA that continues the selected DA, each phase a job array, then the
    report; the other phases launch the same way (test_reproduce runs them all locally)."""
    started = time.time()
    trimmed = ("table.raw=false", "scale.control=false", "scale.finetune=null")
    proc = _reproduce(tmp_path, cifar_arrays, *trimmed)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = tmp_path / "runs"
    selected = json.loads((runs / "selection.json").read_text())["hidden"]["16"]["by_nu"]["0.5"]["checkpoint"]
    scheda = json.loads((runs / "continue" / "scheda_h16_nu0.5_dnu0.1_K1" / "results.json").read_text())
    assert scheda["status"] == "completed" and scheda["config"]["init_from"] == selected
    assert len(_submitted_ids(runs / "da")) == len(_submitted_ids(runs / "continue")) == 1  # one array each
    report = (tmp_path / "reports" / "table1_smoke.md").read_text()
    assert "launcher: submitit_slurm" in report and "| completed |" in report
    assert not [line for line in report.split("## Jobs")[1].splitlines()
                if line.startswith("| ") and "completed" not in line and "Status" not in line and "---" not in line]
    print(f"protocol through Slurm: {time.time() - started:.0f} s")
    again = _reproduce(tmp_path, cifar_arrays, *trimmed)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Submitit" not in again.stdout and again.stdout.count("0 to run") == 2


def test_a_cancelled_job_is_reported_and_the_command_fails(cifar_arrays, tmp_path):
    # DAs long enough (about 6 s of training here, after a Python start of 2-3 s) to be cancelled while
    # they train. The launcher waits for the array's tasks in order: the last one is cancelled, so the
    # first is waited on and completes. Cancelled only once both have logged an epoch: before the run
    # takes the signals, submitit's job ignores SIGTERM ("Bypassing signal SIGTERM") and a job
    # cancelled then trains on to its end (seen in CI with a fixed 2 s wait).
    proc = _reproduce(tmp_path, cifar_arrays, "scale.da.epochs=2000", "scale.da.eval_every=1000", "table.raw=false",
                      "phases=[da,select,report]", wait=False)
    deadline = time.time() + 120
    running: list[str] = []
    while len(running) < 2 or not _training(tmp_path / "runs" / "da", 2):
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        assert time.time() < deadline, "the jobs did not start training"
        running = subprocess.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i"], capture_output=True, text=True).stdout.split()
        time.sleep(0.2)
    job_id = max(running, key=lambda j: int(j.split("_")[1]))
    subprocess.run(["scancel", job_id], check=True)
    _, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 1, stderr[-3000:]
    line = stderr.strip().splitlines()[-1]
    assert line.startswith("error: ") and "did not finish: da_h16_nu" in line
    assert "rerun to retry them (finished jobs are kept): python scripts/reproduce.py scale=smoke" in line
    report = (tmp_path / "reports" / "table1_smoke.md").read_text()
    cancelled = [row for row in report.split("## Jobs")[1].splitlines() if row.startswith("| da_h16_nu")
                 and "completed" not in row]
    # Slurm's own word, whether the job was stopped in its training (it then also checkpoints) or
    # before it could write results.json.
    assert len(cancelled) == 1 and f"Slurm job {job_id}: CANCELLED" in cancelled[0], cancelled


def _training(folder: Path, jobs: int) -> bool:
    """Whether ``jobs`` runs in ``folder`` have each logged a finished epoch (their stop handlers are in place)."""
    logs = list(folder.glob("*/train.log"))
    return len(logs) >= jobs and all(" epoch 1 nu=" in log.read_text() for log in logs)


def _node() -> str:
    return subprocess.run(["sinfo", "-h", "-o", "%N"], capture_output=True, text=True).stdout.split()[0]


def _submitted_ids(phase_dir: Path) -> list[str]:
    """The Slurm jobs submitted from ``phase_dir``: submitit names its folders there by job id,
    ``<id>`` or ``<array>_<task>``."""
    folder = phase_dir / ".submitit"
    return sorted({p.name.split("_")[0] for p in folder.iterdir() if p.is_dir() and p.name.split("_")[0].isdigit()}) \
        if folder.is_dir() else []


def _left_in_queue(phase_dir: Path) -> str:
    ids = _submitted_ids(phase_dir)
    return subprocess.run(["squeue", "-h", "-j", ",".join(ids)], capture_output=True, text=True).stdout.strip() \
        if ids else ""


def _wait_running(proc, timeout=120):
    deadline = time.time() + timeout
    while not subprocess.run(["squeue", "-h", "-t", "RUNNING"], capture_output=True, text=True).stdout.strip():
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        assert time.time() < deadline, "no job started"
        time.sleep(0.5)


def test_jobs_whose_node_went_down_are_reported_and_none_is_left_behind(cifar_arrays, tmp_path):
    """A node downed under its running DAs: Slurm requeues them (JobRequeue=1), the node stays
    down (the test cluster's ReturnToService=1 brings back only a node that stopped answering),
    so after scheduler_wait_min the protocol cancels them, stops the launcher that still waits
    on them, reports them and fails; no job is left in the queue."""
    started = time.time()
    proc = _reproduce(tmp_path, cifar_arrays, "scale.da.epochs=5000", "scale.da.eval_every=2500", "table.raw=false",
                      "scale.finetune=null", "scheduler_wait_min=0.1", wait=False)
    try:
        _wait_running(proc)
        deadline = time.time() + 120
        while not list((tmp_path / "runs" / "da").glob("da_*/train.log")):
            assert proc.poll() is None and time.time() < deadline, "no DA started training"
            time.sleep(0.2)
        subprocess.run(["scontrol", "update", f"nodename={_node()}", "state=down", "reason=scheda-test"], check=True)
        downed = time.time()
        _, stderr = proc.communicate(timeout=300)
    finally:
        subprocess.run(["scontrol", "update", f"nodename={_node()}", "state=resume"], capture_output=True)
    print(f"node down: the command ended {time.time() - downed:.0f} s after the node went down "
          f"({time.time() - started:.0f} s in all)")
    assert not _left_in_queue(tmp_path / "runs" / "da")
    assert proc.returncode == 1, stderr[-3000:]
    line = stderr.strip().splitlines()[-1]  # both DAs ran on the one node: nothing to continue from
    assert line.startswith("error: no DA of phase 1 completed") and "Slurm job" in line, line
    states = json.loads((tmp_path / "runs" / "da" / "scheduler.json").read_text())
    assert len(states) == 2 and all("no node of partition debug could run it" in s or "NODE_FAIL" in s
                                    for s in states.values()), states
    assert time.time() - downed < 90  # not the launcher's own sacct polling (minutes)


def test_jobs_no_node_can_run_are_not_waited_on_for_ever(cifar_arrays, tmp_path):
    subprocess.run(["scontrol", "update", f"nodename={_node()}", "state=drain", "reason=scheda-test"], check=True)
    try:
        proc = _reproduce(tmp_path, cifar_arrays, "table.raw=false", "scale.finetune=null", "scheduler_wait_min=0.1")
    finally:
        subprocess.run(["scontrol", "update", f"nodename={_node()}", "state=resume"], capture_output=True)
    assert proc.returncode == 1
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("error: no DA of phase 1 completed") and "no node of partition debug could run it" in line
    assert "(waited" in proc.stdout + proc.stderr
    assert not _left_in_queue(tmp_path / "runs" / "da")


def test_a_job_at_its_time_limit_checkpoints_is_requeued_and_resumes_where_it_stopped(cifar_arrays, tmp_path):
    """Slurm's warning signal before a time limit (submitit: signal_delay_s, USR2). slurmctld
    checks time limits every 30 s and sends the warning at the first check with
    elapsed + delay + 30 s >= the limit. The job starts with a 10-minute limit (no warning in
    sight); once it has trained an epoch (its handlers in place: a warning during Python's start
    kills a job) the test lowers the limit to 2 minutes, and with a delay of 80 s the warning comes
    at slurmctld's next check, within 30 s. Until then the job is stopped (SIGSTOP) rather than
    training on a core the rest of the suite needs; the warning waits as a pending signal and is
    handled when the test lets the job continue. The run checkpoints where it stands, submitit
    requeues it, and the requeued job resumes from that checkpoint: its epochs follow the first run's
    without a gap or a repeat (the requeued job would get its own warning 10 s into its run at the
    earliest; the test has what it needs before). The job trains longer than the test, which
    stops it; that a resumed run ends with the uninterrupted run's weights is checked without
    Slurm (test_interrupts), with the same signal and requeue."""
    import re
    import signal

    epoch_line = re.compile(r"\] - epoch (\d+) nu=")  # the trainer's line at the end of each epoch
    sweep = tmp_path / "sweep"
    proc = start_train(["-m", "hydra/launcher=submitit_slurm", "hydra.launcher.timeout_min=10",
                        "hydra.launcher.signal_delay_s=80", "hydra.launcher.max_num_timeout=3",
                        "hydra.launcher.cpus_per_task=1", f"dataset.root={cifar_arrays}", *TINY, "schedule=constant",
                        "schedule.nu=0.3", "schedule.epochs=1000000", "logger=none", "evaluate.enabled=false",
                        "trainer.checkpoint_every=0", f"hydra.sweep.dir={sweep}"], tmp_path, new_session=True)
    train_log = sweep / "0" / "train.log"
    deadline = time.time() + 240
    limited = False
    stopped = None  # the job's process while it waits for the warning
    held: dict[str, float] = {}
    try:
        while True:
            log = train_log.read_text() if train_log.exists() else ""
            if "resumed from" in log and len(epoch_line.findall(log.split("resumed from", 1)[1])) >= 20:
                break
            assert proc.poll() is None, f"the sweep's command ended with its job requeued: {proc.stderr.read()[-2000:]}"
            assert time.time() < deadline, f"no requeued run trained on: {log[-2000:]}\n{proc.stderr.read()[-2000:]}"
            if not limited and epoch_line.search(log):
                stopped = _job_process(sweep)
                os.kill(stopped, signal.SIGSTOP)  # before the limit: no warning can come while it runs
                for job in _submitted_ids(sweep):
                    subprocess.run(["scontrol", "update", f"jobid={job}", "timelimit=2"], check=True)
                limited = True
            if stopped is not None and _pending(stopped, signal.SIGUSR2):
                os.kill(stopped, signal.SIGCONT)
                stopped = None
            _release_held_jobs(held)
            time.sleep(0.5)
    finally:
        _cancel_own_jobs(sweep)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert "requeued by Slurm (restart 1): " in log and "resuming from its newest checkpoint" in log, log[-2000:]
    assert [p.name for p in (sweep / "0" / "checkpoints").iterdir() if "_batch_" in p.name]  # mid-epoch, at the signal
    epochs = [int(e) for e in epoch_line.findall(log)]
    before = len(epoch_line.findall(log.split("resumed from", 1)[0]))
    assert before >= 1 and epochs == list(range(1, len(epochs) + 1)), epochs  # each epoch once, none lost


def _job_process(sweep: Path) -> int:
    """The process of the Slurm task (submitit's ``_submit``) that runs a job of ``sweep``."""
    folder = str(sweep / ".submitit").encode()
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:  # ended meanwhile
            continue
        if b"submitit.core._submit" in argv and any(arg.startswith(folder) for arg in argv) \
                and Path(argv[0].decode()).name.startswith("python"):  # not srun, whose arguments name it too
            return int(entry.name)
    raise AssertionError(f"no process runs a job of {sweep}")


def _pending(pid: int, signum: int) -> bool:
    """Whether the signal waits, undelivered, for the process (a stopped one gets it on SIGCONT)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return False
    return any(int(line.split()[1], 16) >> (signum - 1) & 1 for line in status if line.startswith(("SigPnd:", "ShdPnd:")))


def _release_held_jobs(held: dict[str, float]) -> None:
    """Start any job Slurm requeued and holds (its BeginTime, about two minutes later) once it
    has been held for 2 s (``held``: when each was first seen held): the tests check the requeue,
    not Slurm's back-off. Not at once: slurmd refuses to start a job in the same second as its
    previous run's credential was revoked ("Job credential revoked"), and that job then ends
    failed instead of resuming (seen once here)."""
    now = time.time()
    for line in subprocess.run(["squeue", "-h", "-o", "%i %T %r"], capture_output=True, text=True).stdout.splitlines():
        job, state, reason = line.split(maxsplit=2)
        if state == "PENDING" and reason == "BeginTime" and now - held.setdefault(job, now) >= 2:
            subprocess.run(["scontrol", "update", f"jobid={job}", "starttime=now"], check=False)


def _cancel_own_jobs(sweep: Path, timeout: float = 120) -> None:
    """Cancel the jobs submitted from ``sweep`` and wait until Slurm no longer has them."""
    ids = _submitted_ids(sweep)
    deadline = time.time() + timeout
    while ids and (left := subprocess.run(["squeue", "-h", "-o", "%i", "-j", ",".join(ids)],
                                          capture_output=True, text=True).stdout.split()):
        subprocess.run(["scancel", "--signal=KILL", "--full", *left], check=False)
        assert time.time() < deadline, f"jobs left in the queue: {left}"
        time.sleep(1)


def _long_sweep(cifar_arrays: Path, tmp_path: Path) -> tuple[list[str], Path, list[str]]:
    """A sweep of two jobs of 600 epochs through Slurm, checkpointed every 100: the config of one
    job (without the swept nu), the sweep's folder and its command line."""
    config = [f"dataset.root={cifar_arrays}", *TINY, "schedule=constant", "schedule.epochs=600", "logger=none",
              "evaluate.enabled=false", "trainer.checkpoint_every=100"]
    sweep = tmp_path / "sweep"
    return config, sweep, ["-m", *LAUNCHER, *config, "schedule.nu=0.3,0.5", f"hydra.sweep.dir={sweep}"]


def test_a_killed_slurm_sweep_run_again_resumes_its_jobs(cifar_arrays, tmp_path):
    """A sweep is one Slurm job array (a task per job, Slurm's logs in each task's folder). The
    launcher and its array killed (SIGKILL, scancel) once a job has checkpointed: the same
    command submits again, and each job resumes from its checkpoint (or is skipped when it had
    completed) to the weights of a run that was never stopped."""
    import signal

    import torch

    from scheda.training.checkpoint import load_checkpoint

    config, sweep, args = _long_sweep(cifar_arrays, tmp_path)
    first = start_train(args, tmp_path, new_session=True)
    deadline = time.time() + 300
    try:
        while not list(sweep.glob("*/checkpoints/epoch_00200.pt")):
            assert first.poll() is None, first.stderr.read()[-2000:]
            assert time.time() < deadline, "no job checkpointed"
            time.sleep(0.2)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        _cancel_own_jobs(sweep)
    statuses = [json.loads((sweep / str(k) / "results.json").read_text())["status"] for k in range(2)]
    # at least one stopped mid-run: killed (still "running") or, when Slurm's cancel reached it as a
    # signal first, checkpointed where it stood ("interrupted")
    assert set(statuses) <= {"running", "interrupted", "completed"} and set(statuses) != {"completed"}

    again = run_train(args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Submitit 'slurm' sweep output dir" in again.stdout and "sweep of 2 jobs" in again.stdout
    tasks = [p for p in (sweep / ".submitit").iterdir() if p.is_dir() and "_" in p.name]
    arrays = _submitted_ids(sweep)
    assert len(arrays) == 2 and sorted(p.name for p in tasks) == sorted(f"{a}_{k}" for a in arrays for k in (0, 1))
    assert all(list(task.glob("*_log.out")) for task in tasks)  # Slurm's logs
    for k, nu in enumerate((0.3, 0.5)):
        results = json.loads((sweep / str(k) / "results.json").read_text())
        assert results["status"] == "completed" and results["epochs"] == 600
        actions = [a["action"] for a in results["attempts"]]
        assert actions == ["ran", "skipped" if statuses[k] == "completed" else "resumed"]
        golden = run_train([*config, f"schedule.nu={nu}", f"hydra.run.dir={tmp_path / f'golden{k}'}"], cwd=tmp_path)
        assert golden.returncode == 0, golden.stderr[-2000:]
        assert torch.equal(load_checkpoint(sweep / str(k))["model"]["W"], load_checkpoint(tmp_path / f"golden{k}")["model"]["W"])


def test_a_slurm_sweep_stopped_by_a_signal_cancels_its_jobs_which_checkpoint_and_resume(cifar_arrays, tmp_path):
    """SIGTERM (or a Ctrl-C) to a sweep whose jobs run in Slurm's queue: its jobs are cancelled,
    each checkpointing where it stands, before the sweep ends in one line; they were left running
    with nobody to collect them, while the line said they had checkpointed, and the same command
    run again then collided with them. Run again, each job resumes to its end."""
    import signal

    _, sweep, args = _long_sweep(cifar_arrays, tmp_path)
    first = start_train(args, tmp_path, new_session=True)
    deadline = time.time() + 300
    try:
        while not all((sweep / str(k) / "checkpoints").is_dir() and list((sweep / str(k) / "checkpoints").iterdir())
                      for k in (0, 1)):
            assert first.poll() is None, first.stderr.read()[-2000:]
            assert time.time() < deadline, "no job checkpointed"
            time.sleep(0.2)
        first.send_signal(signal.SIGTERM)
        _, stderr = first.communicate(timeout=360)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
        left = _left_in_queue(sweep)
        _cancel_own_jobs(sweep)
    assert first.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    arrays = _submitted_ids(sweep)
    assert stderr.strip().splitlines()[-1] == (
        f"sweep interrupted by SIGTERM: its finished jobs are kept, its Slurm jobs cancelled ({arrays[0]}), each "
        f"running one checkpointed; run the same command again to continue"), stderr[-2000:]
    assert left == ""  # none left running when the sweep ended
    assert [json.loads((sweep / str(k) / "results.json").read_text())["status"] for k in (0, 1)] == ["interrupted"] * 2

    again = run_train(args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    for k in (0, 1):
        results = json.loads((sweep / str(k) / "results.json").read_text())
        assert results["status"] == "completed" and results["epochs"] == 600
        assert [a["action"] for a in results["attempts"]] == ["ran", "resumed"]
