"""Ctrl-C and SIGTERM on a real run: it finishes its minibatch, writes a checkpoint and
results.json, says how to resume, exits 128 + the signal; ``resume=RUN`` then continues the
same run, in its own directory, to the uninterrupted result."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from scheda.training.checkpoint import load_checkpoint

from helpers import REPO, TINY, faulty_workers, run_train, start_faulty_train, start_train

# 80 training images one at a time: 80 minibatches an epoch, long enough to be interrupted; the
# signal comes after epoch 3, and 57 epochs (two noise switches) are left for the resumed run.
EPOCHS = 60
ARGS = [*TINY, "trainer.batch_size=1", "schedule=decreasing", "schedule.nu0=0.5", "schedule.delta_nu=0.1",
        "schedule.K=20", "schedule.initial_epochs=20", "schedule.T=2", "evaluate.enabled=false",
        "logger=none"]


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    from helpers import write_cifar_arrays

    root = tmp_path_factory.mktemp("golden")
    data = write_cifar_arrays(root / "cifar10")
    proc = run_train([f"dataset.root={data}", *ARGS, f"hydra.run.dir={root / 'run'}"], cwd=root)
    assert proc.returncode == 0, proc.stderr
    return data, load_checkpoint(root / "run"), json.loads((root / "run" / "results.json").read_text())


def _wait_for_epoch(log, proc, epoch, timeout=120):
    deadline = time.time() + timeout
    while not (log.exists() and f"epoch {epoch} nu=" in log.read_text()):
        assert proc.poll() is None, f"run ended early: {proc.stderr.read()}"
        assert time.time() < deadline, "the run never got there"
        time.sleep(0.01)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_checkpoints_and_resume_gives_the_uninterrupted_run(golden, tmp_path, sig):
    data, golden_state, golden_results = golden
    run_dir = tmp_path / "run"
    proc = start_train([f"dataset.root={data}", *ARGS, f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    _wait_for_epoch(run_dir / "train.log", proc, 3)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"interrupted by {sig.name} in epoch ")
    assert lines[0].endswith("continue with python train.py resume=run")  # as typed where it ran
    results = json.loads((run_dir / "results.json").read_text())
    assert results["status"] == "interrupted" and results["epochs"] < EPOCHS
    first_seconds = results["seconds"]
    checkpoint = load_checkpoint(run_dir)
    assert "_batch_" in checkpoint["path"] and "partial_epoch" in checkpoint  # mid-epoch, where it stopped

    resumed = run_train([f"resume={run_dir}"], cwd=tmp_path)  # nothing else: the run's own config
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no new run directory
    final = load_checkpoint(run_dir)
    assert final["epoch"] == EPOCHS
    for key, value in golden_state["model"].items():
        assert torch.equal(final["model"][key], value), key
    results = json.loads((run_dir / "results.json").read_text())
    assert results["status"] == "completed" and results["switches"] == golden_results["switches"]
    assert [h["loss"] for h in results["history"]] == [h["loss"] for h in golden_results["history"]]
    assert "resumed from" in (run_dir / "train.log").read_text()
    # the run's record spans both attempts: its time (it once counted the last attempt's alone) and each attempt
    assert [a["action"] for a in results["attempts"]] == ["ran", "resumed"]
    assert results["seconds"] > first_seconds > 0


def test_a_run_started_with_ctrl_c_ignored_trains_on_through_it(golden, tmp_path):
    """``python train.py ... &`` in a script: the shell starts it with SIGINT ignored (a Ctrl-C
    meant for the script reaches its background jobs too). It keeps ignoring it, as Python itself
    and the protocol around it do, and trains to the uninterrupted result."""
    data, golden_state, _ = golden
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, str(REPO / "train.py"), f"dataset.root={data}", *ARGS,
                             f"hydra.run.dir={run_dir}"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    _wait_for_epoch(run_dir / "train.log", proc, 3, timeout=180)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    final = load_checkpoint(run_dir)
    assert final["epoch"] == EPOCHS and torch.equal(final["model"]["W"], golden_state["model"]["W"])


def test_a_forked_command_keeps_an_ignored_signal_ignored_and_drops_the_parents_handlers():
    """What a phase forked by the protocol starts with (scheda.utils.fork): the dispositions exec
    would give it."""
    from scheda.utils.fork import exec_signals

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, lambda *_: None)
        exec_signals()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        signal.signal(signal.SIGINT, lambda *_: None)
        exec_signals()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def test_resume_reuses_the_runs_config_and_refuses_changes(cifar_arrays, tmp_path):
    base = [f"dataset.root={cifar_arrays}", *TINY, "schedule=constant", "schedule.nu=0.3", "schedule.epochs=3",
            "trainer.checkpoint_every=1", "evaluate.enabled=false"]
    first = run_train([*base, "trainer.max_epochs=1", f"hydra.run.dir={tmp_path / 'a'}"], cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    # A left-out override is taken from the run itself: nu stays 0.3, in the same directory.
    again = run_train([f"resume={tmp_path / 'a'}", "trainer.max_epochs=3"], cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    results = json.loads((tmp_path / "a" / "results.json").read_text())
    assert [h["nu"] for h in results["history"]] == [0.3, 0.3, 0.3] and results["epochs"] == 3
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    curves = EventAccumulator(str(tmp_path / "a" / "tensorboard")).Reload()
    assert [e.step for e in curves.Scalars("train/nu")] == [1, 2, 3]  # one run's curve, read by TensorBoard
    assert not (tmp_path / "outputs").exists()
    # A change to what the run trains is refused with one line, unless forced.
    changed = run_train([f"resume={tmp_path / 'a'}", "schedule.nu=0.5"], cwd=tmp_path)
    assert changed.returncode == 1
    assert changed.stderr.strip().splitlines() == [
        "error: resume would change what the run trains (schedule.nu: 0.3 -> 0.5): drop those overrides, "
        "or add force_resume=true"]
    assert (tmp_path / "a" / "checkpoints").is_dir()  # the run's directory is never removed
    forced = run_train([f"resume={tmp_path / 'a'}", "schedule.nu=0.5", "force_resume=true"], cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    # The run last ran at nu 0.5: a resume is held against that, not against how the run began.
    back = run_train([f"resume={tmp_path / 'a'}"], cwd=tmp_path)
    assert back.returncode == 1 and "(schedule.nu: 0.5 -> 0.3)" in back.stderr, back.stderr
    on = run_train([f"resume={tmp_path / 'a'}", "schedule.nu=0.5"], cwd=tmp_path)
    assert on.returncode == 0, on.stderr
    # Fewer epochs than it trained: said, not done silently (the run stands where it is).
    shorter = run_train([f"resume={tmp_path / 'a'}", "schedule.nu=0.5", "trainer.max_epochs=2"], cwd=tmp_path)
    assert shorter.returncode == 0, shorter.stderr
    assert "the checkpoint has trained 3 epochs, more than the 2 configured now: nothing is trained, and the run " \
           "stands at epoch 3" in (tmp_path / "a" / "train.log").read_text()
    assert json.loads((tmp_path / "a" / "results.json").read_text())["epochs"] == 3


def test_a_schedulers_usr2_gets_the_signal_after_the_checkpoint_and_a_requeued_job_resumes(golden, tmp_path):
    """Under submitit, SIGUSR2 (before a time limit) is its own: it requeues the job and exits.
    The run checkpoints first and then hands the signal on; the requeued job (Slurm sets
    SLURM_RESTART_COUNT) resumes in its directory to the uninterrupted result."""
    data, golden_state, _ = golden
    run_dir, marker = tmp_path / "run", tmp_path / "requeued"
    args = [f"dataset.root={data}", *ARGS, f"hydra.run.dir={run_dir}"]
    proc = start_faulty_train(args, tmp_path, usr2_handler=marker)
    _wait_for_epoch(run_dir / "train.log", proc, 3)
    proc.send_signal(signal.SIGUSR2)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 3, stderr  # the scheduler's handler ended it
    assert "_batch_" in marker.read_text()  # ... after the run had checkpointed where it stood
    assert json.loads((run_dir / "results.json").read_text())["status"] == "interrupted"
    requeued = run_train(args, cwd=tmp_path, env_extra={"SLURM_RESTART_COUNT": "1"})
    assert requeued.returncode == 0, requeued.stderr
    log = (run_dir / "train.log").read_text()
    assert "requeued by Slurm (restart 1): run: interrupted before: resuming from its newest checkpoint" in log
    final = load_checkpoint(run_dir)
    for key, value in golden_state["model"].items():
        assert torch.equal(final["model"][key], value), key


# A short DA, then fine-tuning: a signal in its epochs, or in the evaluation before it.
FINETUNE = [*TINY, "schedule=constant", "schedule.epochs=2", "logger=none", "finetune=cpu", "finetune.enabled=true",
            "finetune.max_epochs=6", "finetune.patience=null", "finetune.lrs=[0.1,0.05]"]


def _one_line(proc, sig, starts):
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"interrupted by {sig.name} {starts}"), stderr
    assert lines[0].endswith("continue with python train.py resume=run")


@pytest.mark.parametrize("sig, standalone", [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGTERM, True)],
                         ids=["SIGINT", "SIGTERM", "SIGTERM-standalone"])
def test_a_signal_in_fine_tuning_checkpoints_and_the_resume_finishes_it(cifar_arrays, tmp_path, sig, standalone):
    """After a DA's training, or stand-alone from a trained DA (the protocol's fine-tuning jobs,
    whose resume once dropped the init_from their encoder comes from and was refused)."""
    run_dir = tmp_path / "run"
    args = [f"dataset.root={cifar_arrays}", *FINETUNE]
    if standalone:
        trained = run_train([*args, "finetune.enabled=false", f"hydra.run.dir={tmp_path / 'da'}"], cwd=tmp_path)
        assert trained.returncode == 0, trained.stderr
        args += ["finetune.standalone=true", f"init_from={tmp_path / 'da'}"]
    proc = start_faulty_train([*args, f"hydra.run.dir={run_dir}"], tmp_path, finetune_sleep=0.5)
    deadline = time.time() + 120
    while "finetune lr=0.1 epoch 2:" not in ((run_dir / "train.log").read_text() if (run_dir / "train.log").exists()
                                               else ""):
        assert proc.poll() is None and time.time() < deadline, proc.stderr.read() if proc.poll() is not None else ""
        time.sleep(0.02)
    proc.send_signal(sig)
    _one_line(proc, sig, "in fine-tuning epoch ")
    results = json.loads((run_dir / "results.json").read_text())
    assert results["status"] == "interrupted" and (run_dir / "checkpoints" / "finetune_last.pt").exists()
    evaluations = len(results["evaluations"])
    resumed = run_train([f"resume={run_dir}"], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    results = json.loads((run_dir / "results.json").read_text())
    assert results["status"] == "completed" and [r["epochs_run"] for r in results["finetune"]["per_lr"]] == [6, 6]
    assert len(results["evaluations"]) == evaluations  # the evaluation before fine-tuning is not repeated
    epoch = 0 if standalone else 2  # the frozen features' evaluation: of the DA as loaded, or after its 2 epochs
    assert f"fine-tuning starts from the classifier of epoch {epoch}'s evaluation" in (run_dir / "train.log").read_text()


def test_a_signal_in_the_evaluation_before_fine_tuning_keeps_it_and_the_resume_does_not_repeat_it(cifar_arrays,
                                                                                                  tmp_path):
    run_dir = tmp_path / "run"
    proc = start_faulty_train([f"dataset.root={cifar_arrays}", *FINETUNE, "evaluate.at_end=false",
                               "evaluate.at_stage_ends=false", f"hydra.run.dir={run_dir}"], tmp_path, eval_sleep=3)
    deadline = time.time() + 120
    while not (tmp_path / "evaluating").exists():  # the evaluation fine-tuning starts from, under way
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _one_line(proc, signal.SIGINT, "before fine-tuning")
    results = json.loads((run_dir / "results.json").read_text())
    assert results["status"] == "interrupted" and [e["reason"] for e in results["evaluations"]] == ["before_finetune"]
    resumed = run_train([f"resume={run_dir}"], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    results = json.loads((run_dir / "results.json").read_text())
    assert results["status"] == "completed" and [e["reason"] for e in results["evaluations"]] == ["before_finetune"]
    assert results["finetune"]["frozen"]["epoch"] == 2


def test_a_sigterm_while_raw_inputs_are_evaluated_records_the_run_interrupted(cifar_arrays, tmp_path, monkeypatch):
    """model=raw has nothing to checkpoint: a SIGTERM during its evaluation (a protocol stopping its
    DA phase, a scheduler) stops it as Ctrl-C does, its results.json `interrupted`, where it once
    killed the job and left it `running`."""
    import os

    import scheda.run
    from helpers import TINY_DATA, compose_cfg
    from scheda.utils.interrupt import Interrupted

    def evaluated_slowly(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)  # the signal arrives here
        raise AssertionError("the SIGTERM did not stop the evaluation")

    monkeypatch.setattr(scheda.run, "evaluate_raw", evaluated_slowly)
    cfg = compose_cfg([f"dataset.root={cifar_arrays}", *TINY_DATA, "model=raw", "logger=none"])
    with pytest.raises(Interrupted) as stopped:
        scheda.run.run(cfg, tmp_path / "raw")
    assert stopped.value.exit_code == 128 + signal.SIGTERM and "resume=" in stopped.value.message
    assert "; results.json written" in stopped.value.message  # no checkpoint to speak of
    assert json.loads((tmp_path / "raw" / "results.json").read_text())["status"] == "interrupted"
    assert signal.getsignal(signal.SIGTERM) is not None  # the handler is handed back


def test_a_sigterm_while_the_data_loads_under_submitits_handler_stops_the_run_at_its_first_minibatch(
        cifar_arrays, tmp_path, monkeypatch):
    """Submitit's SIGTERM handler logs "Bypassing signal SIGTERM" and does nothing: a scancel (or
    a preemption) that came while a Slurm job loaded its data was dropped, and the job trained on
    to its end or its SIGKILL. The run takes the signals from its build on: it answers this one at
    its first minibatch, with a checkpoint, and hands the handler back."""
    import scheda.planning.plan
    from helpers import TINY_DATA, compose_cfg
    from scheda.run import run
    from scheda.utils.interrupt import Interrupted

    bypassed = []
    load_data = scheda.planning.plan.Plan.load_data

    def loaded_with_a_sigterm(self):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)  # the signal arrives here
        return load_data(self)

    monkeypatch.setattr(scheda.planning.plan.Plan, "load_data", loaded_with_a_sigterm)
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: bypassed.append(signum))  # as submitit's
    try:
        cfg = compose_cfg([f"dataset.root={cifar_arrays}", *TINY_DATA, "schedule=constant", "schedule.epochs=3",
                           "trainer.batch_size=7", "logger=none"])
        with pytest.raises(Interrupted) as stopped:
            run(cfg, tmp_path / "run")
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL and not bypassed
        os.kill(os.getpid(), signal.SIGTERM)  # after the run: submitit's again
        assert bypassed == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert stopped.value.exit_code == 128 + signal.SIGTERM
    assert stopped.value.message.startswith("interrupted by SIGTERM in epoch 1, minibatch 1 of "), stopped.value.message
    assert json.loads((tmp_path / "run" / "results.json").read_text())["status"] == "interrupted"
    assert load_checkpoint(tmp_path / "run")["epoch"] == 0  # where it stood: mid-epoch 1


def test_a_ctrl_c_and_its_protocols_sigterm_together_stop_raw_evaluation_as_a_ctrl_c(cifar_arrays, tmp_path,
                                                                                    monkeypatch, capsys):
    """A Ctrl-C that finds the job inside a long torch call reaches Python with the SIGTERM its
    protocol sends after its grace: the run says the Ctrl-C (exit 130), as the user pressed it,
    and nothing more; it said SIGTERM."""
    import threading

    import scheda.run
    from helpers import TINY_DATA, compose_cfg
    from scheda.utils.interrupt import Interrupted

    def in_a_long_call(*args, **kwargs):
        # Both pending on this thread (sent to it alone: another thread of the process, xdist's,
        # would take a signal sent to the process), then let in together, as when a C call returns.
        # The mask is restored whatever happens: a process's children inherit it.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)
            signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        time.sleep(10)
        raise AssertionError("the signals did not stop the evaluation")

    monkeypatch.setattr(scheda.run, "evaluate_raw", in_a_long_call)
    cfg = compose_cfg([f"dataset.root={cifar_arrays}", *TINY_DATA, "model=raw", "logger=none"])
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as stopped:
        scheda.run.run(cfg, tmp_path / "raw")
    assert stopped.value.exit_code == 130 and stopped.value.message.startswith("interrupted by SIGINT;")
    assert json.loads((tmp_path / "raw" / "results.json").read_text())["status"] == "interrupted"
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before  # handed back
    assert "ignored due to race condition" not in capsys.readouterr().err
    assert not signal.pthread_sigmask(signal.SIG_BLOCK, set()) & {signal.SIGINT, signal.SIGTERM}


def test_a_signal_in_a_jobs_last_evaluation_stops_the_sweep_after_that_job(cifar_arrays, tmp_path):
    """A sweep's job that completes although a signal came during its last evaluation (nothing
    after it answers a stop): the sweep stops there in one line instead of going on to its next
    job as if no signal had come; the job stays completed."""
    proc = start_faulty_train(["-m", f"dataset.root={cifar_arrays}", *TINY, "trainer.max_epochs=1", "seed=1,2",
                               "evaluate.at_stage_ends=false", "hydra.sweep.dir=sweep"], tmp_path, eval_sleep=2)
    deadline = time.time() + 120
    while not (tmp_path / "evaluating").exists():  # the first job's last evaluation, under way
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert stderr.strip().splitlines() == ["interrupted by SIGTERM as sweep/0 ended: it completed; the same command "
                                           "goes on with the sweep's other jobs"]
    assert json.loads((tmp_path / "sweep" / "0" / "results.json").read_text())["status"] == "completed"
    assert not (tmp_path / "sweep" / "1").exists()


def test_slurms_time_limit_warning_stops_a_protocol_and_a_sweep_as_sigterm_does():
    """``sbatch --signal=USR1@60`` sends SIGUSR1 to every process of the job: the protocol and a
    sweep whose jobs run in workers took it with its default action (the process ended at once,
    leaving its workers); they stop as on SIGTERM now. In a process of its own: the sweep's
    handler signals this process's children."""
    script = ("import os, signal\n"
              "from scheda.utils.interrupt import Interrupted, terminate_as_interrupt\n"
              "from scheda.utils.sweep_signals import jobs_stop_first\n"
              "for stopping in (terminate_as_interrupt, jobs_stop_first):\n"
              "    try:\n"
              "        with stopping():\n"
              "            os.kill(os.getpid(), signal.SIGUSR1)\n"
              "            for _ in range(100): pass\n"
              "    except Interrupted as exc:\n"
              "        print(stopping.__name__, exc.exit_code, flush=True)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.stdout.splitlines() == ["terminate_as_interrupt 138", "jobs_stop_first 138"], proc.stderr


@pytest.mark.parametrize(("search", "group"), [(["seed=1,2"], True),
                                               (["hydra/sweeper=optuna", "hydra.sweeper.n_trials=2",
                                                 "hydra.sweeper.n_jobs=2", "optim.lr=interval(0.005,0.02)"], True),
                                               (["seed=1,2"], False)],
                         ids=["grid", "optuna", "grid-sweep-only"])
def test_slurms_warning_to_every_process_of_a_joblib_sweep_checkpoints_its_jobs_in_one_line_each(cifar_arrays,
                                                                                                 tmp_path, search,
                                                                                                 group):
    """SIGUSR1 to the whole process group, as ``sbatch --signal=USR1@60`` sends it: each job
    checkpoints and says so, the sweep says so, and nothing else is printed (joblib's resource
    trackers, which the signal ended, once printed tracebacks from their relaunched copies). The
    jobs evaluate after every epoch, slowly, and a third worker has no job: a worker that ended
    (the idle one at once, or the first job's after its checkpoint) once made joblib kill the
    others, a job in its evaluation before its checkpoint and its line. An Optuna search's jobs
    were killed with neither (its sweeper did not hand the signal on). To the sweep alone
    (``--signal=B:USR1``): the jobs take it from the sweep and name it too (handed on as SIGTERM,
    it was named so, and in CI once so by a job that took the sweep's before its own)."""
    # A process of its own (not a fork of the test's server, whose resource trackers run outside the group).
    proc = subprocess.Popen([sys.executable, str(REPO / "train.py"), "-m", f"dataset.root={cifar_arrays}", *TINY,
                             "trainer.max_epochs=50", *search, "evaluate.every=1", "hydra/launcher=joblib",
                             "hydra.launcher.n_jobs=3", "hydra.sweep.dir=sweep"], cwd=tmp_path, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                            env={**os.environ, **faulty_workers(eval_sleep=0.5)})
    deadline = time.time() + 120
    logs = [tmp_path / "sweep" / str(k) / "train.log" for k in (0, 1)]
    while not all(log.exists() and "epoch 2 " in log.read_text() for log in logs):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()[1]
        time.sleep(0.1)
    (os.killpg if group else os.kill)(proc.pid, signal.SIGUSR1)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGUSR1, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 3 and lines[-1].startswith("sweep interrupted by SIGUSR1"), stderr
    assert all(line.startswith("interrupted by SIGUSR1 in epoch ") for line in lines[:2]), stderr
    assert sorted(line.rsplit("=", 1)[-1] for line in lines[:2]) == ["sweep/0", "sweep/1"], stderr
    for k in (0, 1):
        assert json.loads((tmp_path / "sweep" / str(k) / "results.json").read_text())["status"] == "interrupted"


def test_the_resource_trackers_warnings_are_quiet_in_a_stopped_sweep():
    """A stopped joblib sweep's resource trackers (Python's, and loky's own, each a process started
    with the sweep's environment) clean up what the stopped workers left and warned about it in
    four lines after the sweep's one ("leaked semlock objects", seen in CI): both are quieted."""
    from scheda.utils.sweep_signals import QUIET_TRACKER

    code = ("import sys, warnings\n"
            "for name in sys.argv[1:]:\n"
            "    exec('import warnings; warnings.warn(\"resource_tracker: There appear to be 1 leaked semlock objects\")',"
            " {'__name__': name})\n")
    modules = ["multiprocessing.resource_tracker", "joblib.externals.loky.backend.resource_tracker"]
    loud = subprocess.run([sys.executable, "-c", code, *modules], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONWARNINGS": ""})
    assert loud.stderr.count("leaked semlock") == 2  # what the trackers print unquieted
    quiet = subprocess.run([sys.executable, "-c", code, *modules], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONWARNINGS": QUIET_TRACKER})
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_a_console_line_is_one_write_where_stderr_is_unbuffered(monkeypatch):
    """What two jobs of a sweep need to keep their lines apart on one console: the message and
    its newline in one write to the descriptor where stderr is unbuffered, as
    ``PYTHONUNBUFFERED=1`` makes it (a text layer writing through to the raw file). ``print``
    makes two there (the line, then its newline): the check below shows it."""
    import io

    from scheda.utils.io import print_line

    class Descriptor(io.RawIOBase):
        def __init__(self):
            self.writes = []

        def writable(self):
            return True

        def write(self, b):
            self.writes.append(bytes(b))
            return len(b)

    for line_out in (print_line, lambda message: print(message, file=sys.stderr)):
        fd = Descriptor()
        monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(fd, write_through=True))
        line_out("interrupted by SIGUSR1 in epoch 3")
        line_out(7)
        monkeypatch.undo()
        if line_out is print_line:
            assert fd.writes == [b"interrupted by SIGUSR1 in epoch 3\n", b"7\n"]
        else:  # the stderr above is the unbuffered one print split lines on
            assert len(fd.writes) == 4
