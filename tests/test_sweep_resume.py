"""A sweep run again into its folder continues it (scheda.runs.reentry.previous_attempt): a completed
job is skipped, a killed one resumes from its newest checkpoint and ends where it would have
without the kill, a failed one runs again with its old files kept, a job whose config changed is
refused with one line, and rerun=true runs everything again. Real ``train.py -m`` processes,
killed with SIGKILL, with the basic and the joblib launchers."""

import csv
import io
import json
import os
import signal
import time

import pytest
import torch

from scheda.training.checkpoint import load_checkpoint

from helpers import REPO, TINY, faulty_workers, run_module, run_train, start_command, start_train

EPOCHS = 250  # job 1 is killed at its epoch-50 checkpoint: 200 epochs to spare
SWEEP = ["-m", "schedule=constant", "schedule.nu=0.3,0.5,0.7", f"schedule.epochs={EPOCHS}",
         "trainer.checkpoint_every=25", "evaluate.enabled=false", "logger=csv"]


def _sweep(cifar_arrays, sweep_dir, *extra):
    return [*SWEEP[:1], f"dataset.root={cifar_arrays}", *TINY, *SWEEP[1:], f"hydra.sweep.dir={sweep_dir}", *extra]


def _results(job_dir):
    return json.loads((job_dir / "results.json").read_text())


def _actions(sweep_dir):
    return [[a["action"] for a in _results(sweep_dir / str(k))["attempts"]] for k in range(3)]


def _kill_during_job_1(proc, sweep_dir, group=False):
    """SIGKILL the sweep once job 1 has a checkpoint and has not finished."""
    deadline = time.time() + 240
    try:
        while not (sweep_dir / "1" / "checkpoints" / "epoch_00050.pt").exists():
            assert proc.poll() is None, f"the sweep ended before job 1 checkpointed: {proc.stderr.read()[-2000:]}"
            assert time.time() < deadline, "job 1 never checkpointed"
            time.sleep(0.05)
    finally:
        if group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert _results(sweep_dir / "0")["status"] == "completed"
    assert _results(sweep_dir / "1")["status"] == "running"  # killed: no chance to say so


@pytest.mark.parametrize("launcher", [[], ["hydra/launcher=joblib", "hydra.launcher.n_jobs=1"]],
                         ids=["basic", "joblib"])
def test_a_killed_sweep_run_again_ends_with_every_job_completed_once(cifar_arrays, tmp_path, launcher):
    sweep_dir = tmp_path / "sweep"
    args = _sweep(cifar_arrays, sweep_dir, *launcher)
    _kill_during_job_1(start_train(args, tmp_path, new_session=True), sweep_dir, group=True)
    done_before = (sweep_dir / "0" / "results.json").stat().st_mtime_ns, load_checkpoint(sweep_dir / "0")["model"]

    again = run_train(args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert _actions(sweep_dir) == [["ran", "skipped"], ["ran", "resumed"], ["ran"]]
    for k in range(3):
        assert _results(sweep_dir / str(k))["status"] == "completed" and _results(sweep_dir / str(k))["epochs"] == EPOCHS
    # The skipped job was not trained again; the resumed one ends where an uninterrupted run ends.
    assert torch.equal(load_checkpoint(sweep_dir / "0")["model"]["W"], done_before[1]["W"])
    golden = run_train([f"dataset.root={cifar_arrays}", *TINY, *SWEEP[1:2], "schedule.nu=0.5", *SWEEP[3:],
                        f"hydra.run.dir={tmp_path / 'golden'}"], cwd=tmp_path)
    assert golden.returncode == 0, golden.stderr[-2000:]
    assert torch.equal(load_checkpoint(sweep_dir / "1")["model"]["W"], load_checkpoint(tmp_path / "golden")["model"]["W"])
    log = again.stdout + again.stderr
    assert "completed before with the same config: skipped" in log and "killed before: resuming from its newest " \
                                                                         "checkpoint" in log
    assert "changed settings" not in log, [l for l in log.splitlines() if "changed" in l]  # its loggers named by its swept value, as when it began
    assert "jobs: 1 ran, 1 skipped, 1 resumed, 0 reran" in again.stdout
    if launcher:  # joblib's jobs share the console: each line says whose it is (Hydra's "#2 : ..." names it)
        ours = [line for line in again.stdout.splitlines() if "][scheda." in line]
        assert ours and all(line.startswith(("[#0][", "[#1][", "[#2][")) for line in ours), ours[:5]
        assert any(line.startswith("[#2][") and line.endswith("run directory: sweep/2") for line in ours), ours

    # A third time: nothing left to do.
    third = run_train(args, cwd=tmp_path)
    assert third.returncode == 0 and "jobs: 0 ran, 3 skipped, 0 resumed, 0 reran" in third.stdout


def test_a_joblib_worker_killed_outright_ends_the_sweep_in_one_line_and_every_job_resumes(cifar_arrays, tmp_path):
    """The OOM killer takes one joblib worker: joblib kills the other one too and raised loky's
    TerminatedWorkerError, a page of traceback. The sweep ends in one line saying what happened and
    how to go on, its job lines say both jobs were killed, and the same command resumes both."""
    sweep_dir = tmp_path / "sweep"
    args = _sweep(cifar_arrays, sweep_dir, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2")
    # slow epochs (the workers only: the run again is not): neither job ends before the other has
    # started, however late its worker comes up
    proc = start_command("scheda.cli", REPO / "train.py", args, tmp_path, new_session=True,
                         env_extra=faulty_workers(epoch_sleep=0.02))
    try:
        deadline = time.time() + 240
        while not all((sweep_dir / k / "checkpoints" / "epoch_00050.pt").exists() for k in "01"):
            assert proc.poll() is None, proc.stderr.read()[-2000:]
            assert time.time() < deadline, "the jobs never checkpointed"
            time.sleep(0.05)
        assert [_results(sweep_dir / k)["status"] for k in "01"] == ["running", "running"]
        os.kill(int((sweep_dir / "0" / ".lock").read_text().split()[1]), signal.SIGKILL)  # job 0's worker
        _, stderr = proc.communicate(timeout=120)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert proc.returncode == 1 and "Traceback" not in stderr, stderr[-3000:]
    assert stderr.strip().splitlines()[-1].startswith("error: a joblib worker was killed (exit SIGKILL(-9): the OOM "
                                                      "killer, or kill -9) and joblib stopped the sweep's other jobs")
    assert [_results(sweep_dir / k)["status"] for k in "01"] == ["running", "running"]  # neither could say so
    again = run_train(args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert _actions(sweep_dir) == [["ran", "resumed"], ["ran", "resumed"], ["ran"]]
    assert "jobs: 1 ran, 0 skipped, 2 resumed, 0 reran" in again.stdout


def test_failed_jobs_run_again_keeping_their_files_and_rerun_true_runs_everything(cifar_arrays, tmp_path):
    sweep_dir = tmp_path / "sweep"
    short = ["schedule.epochs=2", "trainer.checkpoint_every=1"]
    failing = run_train(_sweep(tmp_path / "no_data_here", sweep_dir, "dataset.download=false", *short), cwd=tmp_path)
    assert failing.returncode != 0
    assert _results(sweep_dir / "0")["status"] == "failed"
    # dataset.root may change between attempts (where the data are, not what is trained)
    again = run_train(_sweep(cifar_arrays, sweep_dir, *short), cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert _actions(sweep_dir) == [["ran", "reran"]] * 3
    kept = json.loads((sweep_dir / "0" / "attempts" / "1" / "results.json").read_text())
    assert kept["status"] == "failed" and "not found" in kept["error"]
    assert "jobs: 0 ran, 0 skipped, 0 resumed, 3 reran" in again.stdout

    forced = run_train(_sweep(cifar_arrays, sweep_dir, *short, "rerun=true"), cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr[-3000:]
    assert _actions(sweep_dir) == [["ran", "reran", "reran"]] * 3
    assert _results(sweep_dir / "0" / "attempts" / "2")["status"] == "completed"  # the completed run, set aside
    assert _results(sweep_dir / "0")["status"] == "completed"


def test_a_job_whose_config_changed_is_refused_with_one_line_and_keeps_its_results(cifar_arrays, tmp_path):
    sweep_dir = tmp_path / "sweep"
    short = ["schedule.epochs=2", "trainer.checkpoint_every=1"]
    first = run_train(_sweep(cifar_arrays, sweep_dir, *short), cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    before = (sweep_dir / "1" / "results.json").read_text()
    changed = run_train(_sweep(cifar_arrays, sweep_dir, *short, "optim.lr=0.02"), cwd=tmp_path)
    assert changed.returncode != 0
    lines = [line for line in changed.stderr.splitlines() if "holds a run of another config" in line]
    assert lines and "optim.lr: 0.01 -> 0.02" in lines[0] and "rerun=true" in lines[0]
    assert "sweep/0 holds" in lines[0] and "hydra.sweep.dir" in lines[0]
    assert (sweep_dir / "1" / "results.json").read_text() == before
    assert (sweep_dir / "0" / "checkpoints").is_dir()


def test_a_sweep_with_a_failed_job_still_ends_with_its_summary(cifar_arrays, tmp_path):
    """Hydra raises a failed job once every job has run, before its callbacks: the sweep's lines,
    best job and summary.md come all the same, each failed job with its error, then the one line
    naming the first failure, exit 1."""
    sweep_dir = tmp_path / "sweep"
    proc = run_train(["-m", f"dataset.root={cifar_arrays}", *TINY, "schedule=constant", "schedule.epochs=1",
                      "optim.lr=0.05,-1,0.1", f"hydra.sweep.dir={sweep_dir}"], cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == "error: optim.lr=-1.0 must be > 0"
    assert "sweep of 3 jobs in sweep:" in proc.stdout and "jobs: 3 ran" in proc.stdout, proc.stdout
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("  1: ")]
    assert "optim.lr=-1 " in line and line.endswith(": failed (ran): ConfigError: optim.lr=-1.0 must be > 0"), line
    assert "best on validation: 0: " in proc.stdout or "best on validation: 2: " in proc.stdout
    assert (sweep_dir / "summary.md").read_text().count("| failed |") == 1


def test_a_run_into_a_directory_that_holds_another_config_names_the_fix(cifar_arrays, tmp_path):
    """The same hydra.run.dir given twice with another config: one line naming the folder and
    the run's own fix, not only a sweep's."""
    from scheda.run import run
    from scheda.utils.errors import ConfigError

    from helpers import compose_cfg

    base = [f"dataset.root={cifar_arrays}", *TINY, "schedule=constant", "schedule.epochs=1", "logger=none"]
    run(compose_cfg(base), tmp_path / "out")
    with pytest.raises(ConfigError, match=r"out holds a run of another config \(optim.lr: .*hydra.run.dir"):
        run(compose_cfg([*base, "optim.lr=0.02"]), tmp_path / "out")


def test_a_run_refused_in_the_folder_of_a_failed_one_keeps_that_ones_files(cifar_arrays, tmp_path):
    """A run that failed (an init_from whose shape does not match), then the same folder with
    another config: refused in one line, and the failed run's record stays (it was removed with
    the refusal, as if the refused run had written it, and the folder the line named was gone)."""
    trained = run_train([f"dataset.root={cifar_arrays}", *TINY, "schedule=constant", "schedule.epochs=1", "logger=none",
                         "hydra.run.dir=da"], cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-2000:]
    common = [f"dataset.root={cifar_arrays}", *TINY, "finetune=standalone", "init_from=da", "logger=none",
              "hydra.run.dir=ft"]
    failed = run_train([*common, "model.hidden=9"], cwd=tmp_path)
    assert failed.returncode == 1 and "has W of shape" in failed.stderr.strip().splitlines()[-1], failed.stderr[-2000:]
    record = (tmp_path / "ft" / "results.json").read_text()
    assert json.loads(record)["status"] == "failed"
    refused = run_train([*common, "model.hidden=8"], cwd=tmp_path)
    assert refused.returncode == 1 and "ft holds a run of another config (model.hidden: 9 -> 8)" in refused.stderr
    assert (tmp_path / "ft" / "results.json").read_text() == record


def test_a_killed_fused_sweep_run_again_resumes_every_model(cifar_arrays, tmp_path):
    """A fused sweep (trainer.parallel) is one job: killed, the same command resumes all its
    models from their checkpoints, and each ends with the weights of an uninterrupted run."""
    sweep_dir = tmp_path / "sweep"
    args = ["-m", f"dataset.root={cifar_arrays}", *TINY, "schedule=constant", f"schedule.epochs={EPOCHS}",
            "trainer.checkpoint_every=25", "evaluate.enabled=false", "logger=none", "trainer.parallel.nu=[0.3,0.5]",
            "optim.lr=0.01,0.02", f"hydra.sweep.dir={sweep_dir}"]
    proc = start_train(args, tmp_path, new_session=True)
    deadline = time.time() + 240
    try:
        while not (sweep_dir / "1" / "models" / "1" / "checkpoints" / "epoch_00050.pt").exists():
            assert proc.poll() is None, proc.stderr.read()[-2000:]
            assert time.time() < deadline
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    # every model of the killed job reads "killed" (its results.json says running: nobody will say otherwise)
    table = run_module("scheda.runs.gather", [sweep_dir, "--format", "csv"], timeout=120)
    assert table.returncode == 0, table.stderr
    statuses = {row["run"].split("sweep/")[-1]: row["status"] for row in csv.DictReader(io.StringIO(table.stdout))}
    assert statuses == {"0/models/0": "completed", "0/models/1": "completed", "1/models/0": "killed",
                        "1/models/1": "killed"}, table.stdout
    again = run_train(args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "jobs: 0 ran, 1 skipped, 1 resumed, 0 reran" in again.stdout
    fixed = [a for a in args[1:-1] if not a.startswith("optim.lr=")]
    golden = run_train([*fixed, "optim.lr=0.02", f"hydra.run.dir={tmp_path / 'golden'}"], cwd=tmp_path)
    assert golden.returncode == 0, golden.stderr[-2000:]
    for k in range(2):
        assert torch.equal(load_checkpoint(sweep_dir / "1" / "models" / str(k))["model"]["W"],
                           load_checkpoint(tmp_path / "golden" / "models" / str(k))["model"]["W"])


def test_a_diverged_job_is_a_result_that_a_rerun_keeps(cifar_arrays, tmp_path):
    """Run again with its config and seed, a diverged job would diverge again: the sweep keeps
    it, as the protocol does (one policy: scheda.runs.reentry.reentry); rerun=true runs it anyway."""
    sweep_dir = tmp_path / "sweep"
    args = ["-m", f"dataset.root={cifar_arrays}", *TINY, "schedule=constant", "schedule.epochs=1",
            "optim.lr=0.01,1e38", "evaluate.enabled=false", "logger=none", f"hydra.sweep.dir={sweep_dir}"]
    first = run_train(args, cwd=tmp_path)
    assert [_results(sweep_dir / str(k))["status"] for k in range(2)] == ["completed", "diverged"], first.stderr[-2000:]
    again = run_train(args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "jobs: 0 ran, 2 skipped, 0 resumed, 0 reran" in again.stdout
    assert [[a["action"] for a in _results(sweep_dir / str(k))["attempts"]] for k in range(2)] == [["ran", "skipped"]] * 2
    assert _results(sweep_dir / "1")["status"] == "diverged"
    forced = run_train([*args, "rerun=true"], cwd=tmp_path)
    assert _results(sweep_dir / "1" / "attempts" / "1")["status"] == "diverged"
    assert _results(sweep_dir / "1")["attempts"][-1]["action"] == "reran", forced.stderr[-2000:]


@pytest.mark.parametrize("status, checkpoint, action", [
    (None, False, "ran"), (None, True, "resumed"), ("completed", True, "skipped"), ("diverged", True, "skipped"),
    ("failed", True, "reran"), ("failed", False, "reran"), ("interrupted", True, "resumed"),
    ("running", True, "resumed"), ("running", False, "reran"),
])
def test_the_sweep_and_the_protocol_follow_one_reentry_policy(tmp_path, status, checkpoint, action):
    """A sweep's job (previous_attempt, through reentry) and the protocol (job_action) decide alike."""
    from scheda.protocol.jobs import JobSpec
    from scheda.protocol.launch import job_action
    from scheda.runs.reentry import reentry

    assert reentry(status, checkpoint)[0] == action
    run_dir = tmp_path / "da" / "job"
    (run_dir / "checkpoints").mkdir(parents=True)
    if checkpoint:
        (run_dir / "checkpoints" / "epoch_00001.pt").write_bytes(b"")
    if status is not None:
        (run_dir / "results.json").write_text(json.dumps({"status": status, "config": {"seed": 0}}))
    assert job_action(run_dir, JobSpec("job", "da", values={"seed": 0})) == \
        {"skipped": "done", "resumed": "resume"}.get(action, "new")


def test_a_killed_continuation_resumes_from_its_own_checkpoint(cifar_arrays, tmp_path):
    """A job that continues another run (init_from, as a ScheDA continues its DA) and was killed
    resumes from its own checkpoint; where it started no longer counts (resume and init_from
    together are refused when a user gives both)."""
    common = [f"dataset.root={cifar_arrays}", *TINY, "schedule=constant", "schedule.epochs=2", "evaluate.enabled=false",
              "logger=none"]
    start = run_train([*common, f"hydra.run.dir={tmp_path / 'da'}"], cwd=tmp_path)
    assert start.returncode == 0, start.stderr[-2000:]
    sweep_dir = tmp_path / "sweep"
    args = ["-m", *common, "schedule.epochs=3", f"init_from={tmp_path / 'da'}", "trainer.checkpoint_every=1",
            f"hydra.sweep.dir={sweep_dir}"]
    first = run_train(args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    killed = _results(sweep_dir / "0")
    killed["status"] = "running"  # what a SIGKILL leaves
    (sweep_dir / "0" / "results.json").write_text(json.dumps(killed))
    again = run_train(args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "jobs: 0 ran, 0 skipped, 1 resumed, 0 reran" in again.stdout
    assert _results(sweep_dir / "0")["status"] == "completed"


def test_a_sweep_job_resumed_alone_keeps_its_records_one_run(cifar_arrays, tmp_path):
    """``scheda-train resume=<a sweep's job>`` (what the job's own line says after an interrupt): its
    loggers keep naming its records by its swept value, so TensorBoard reads one run, where the
    resume once wrote its curves to a second folder and warned that the folder had changed."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sweep = tmp_path / "sweep"
    first = run_train(["-m", f"dataset.root={cifar_arrays}", *TINY, "schedule=constant", "schedule.nu=0.3,0.5",
                       "schedule.epochs=2", "trainer.max_epochs=1", "evaluate.enabled=false", "logger=tensorboard",
                       f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    again = run_train([f"resume={sweep / '1'}", "trainer.max_epochs=null"], cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "changed settings: trainer.max_epochs\n" in again.stdout + again.stderr  # that alone
    assert [p.name for p in (sweep / "1" / "tensorboard").iterdir()] == ["schedule.nu=0.5"]
    curves = EventAccumulator(str(sweep / "1" / "tensorboard" / "schedule.nu=0.5")).Reload()
    assert [e.step for e in curves.Scalars("train/nu")] == [1, 2]
