"""hydra/sweeper=optuna (hydra_plugins/scheda_sweeper/optuna_sweeper.py): a search over a
schedule's noise level whose study lives in the sweep folder; the same command run again runs
only the trials n_trials still asks for, and a search with nothing to search is refused."""

from __future__ import annotations

import pytest

from helpers import TINY, run_train

optuna = pytest.importorskip("optuna")

SEARCH = ["hydra/sweeper=optuna", "schedule.nu=interval(0.1,0.7)", "optim.lr=choice(0.05,0.1)",
          "schedule=constant", "schedule.epochs=1", "model.hidden=8", "logger=none", "classifier.c_log2_min=-1",
          "classifier.c_log2_max=0"]


def _study(folder):
    return optuna.load_study(study_name="scheda", storage=f"sqlite:///{folder / 'optuna.db'}")


def test_a_search_continues_its_study_and_never_runs_a_completed_trial_again(cifar_arrays, tmp_path):
    folder = tmp_path / "search"
    common = ["-m", f"dataset.root={cifar_arrays}", *TINY, *SEARCH, f"hydra.sweep.dir={folder}"]
    first = run_train([*common, "hydra.sweeper.n_trials=3"], cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    study = _study(folder)
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 3
    assert all(0.1 <= t.params["schedule.nu"] <= 0.7 and t.params["optim.lr"] in (0.05, 0.1) for t in study.trials)
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["0", "1", "2"]  # a job folder per trial
    import json

    results = json.loads((folder / "0" / "results.json").read_text())
    assert study.trials[0].value == pytest.approx(results["evaluations"][-1]["val_error"])
    more = run_train([*common, "hydra.sweeper.n_trials=4"], cwd=tmp_path)  # one more trial, not four
    assert more.returncode == 0, more.stderr[-2000:]
    assert len(_study(folder).trials) == 4 and (folder / "3").is_dir() and not (folder / "4").exists()
    # the one it ran, said so; and new values, not a completed trial's again (the sampler's seed moved on)
    said = [line for line in (more.stdout + more.stderr).splitlines() if line.startswith("jobs:")]
    assert said == ["jobs: 1 ran, 0 skipped, 0 resumed, 0 reran, 3 not run by this invocation (skipped: completed or "
                    "diverged before with the same config; resumed: from its newest checkpoint; reran: failed before, "
                    "or rerun=true)"], said
    params = [tuple(sorted(t.params.items())) for t in _study(folder).trials]
    assert params[3] not in params[:3]
    again = run_train([*common, "hydra.sweeper.n_trials=4"], cwd=tmp_path)
    assert again.returncode == 0 and "4 trials completed, 0 stopped before to go on, 0 new to run" in again.stderr + again.stdout
    assert len(_study(folder).trials) == 4


def test_a_search_with_nothing_to_search_says_so_in_one_line(cifar_arrays, tmp_path):
    proc = run_train(["-m", f"dataset.root={cifar_arrays}", *TINY, "hydra/sweeper=optuna", "schedule=constant",
                      f"hydra.sweep.dir={tmp_path / 's'}"], cwd=tmp_path)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "hydra/sweeper=optuna has nothing to search" in proc.stderr


def test_a_search_whose_every_trial_failed_ends_with_its_summary_and_exit_1(cifar_arrays, tmp_path):
    """No trial completed (here every lr drawn is negative, refused by optim's check): the job lines
    say why, then one line, exit 1 (it ended with exit 0 and no word of a best trial)."""
    folder = tmp_path / "search"
    proc = run_train(["-m", f"dataset.root={cifar_arrays}", *TINY, "hydra/sweeper=optuna", "hydra.sweeper.n_trials=2",
                      "optim.lr=interval(-0.1,-0.05)", "schedule=constant", "schedule.epochs=1", "logger=none",
                      f"hydra.sweep.dir={folder}"], cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == (
        "error: no trial of the search completed (2 failed): the job lines above say why"), proc.stderr[-2000:]
    assert proc.stdout.count(": failed (ran): ConfigError: optim.lr=-") == 2 and (folder / "summary.md").is_file()


def test_a_stopped_search_goes_on_with_its_stopped_trial_from_its_checkpoint(cifar_arrays, tmp_path):
    """Ctrl-C during a trial, then the same command: that trial goes on first, with its own values
    in its own folder, from its checkpoint (it was marked failed and its epochs asked anew); then
    the trials n_trials still asks for."""
    import json
    import signal
    import time

    from helpers import start_faulty_train

    folder = tmp_path / "search"
    common = ["-m", f"dataset.root={cifar_arrays}", *TINY, *SEARCH, "schedule.epochs=5", "trainer.checkpoint_every=1",
              "hydra.sweeper.n_trials=2", f"hydra.sweep.dir={folder}"]
    proc = start_faulty_train(common, tmp_path, epoch_sleep=0.5)
    log, deadline = folder / "0" / "train.log", time.time() + 120
    while not (log.exists() and "epoch 2 " in log.read_text()):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    stopped = json.loads((folder / "0" / "results.json").read_text())
    assert stopped["status"] == "interrupted" and not (folder / "1").exists()
    values = _study(folder).trials[0].params
    again = run_train(common, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    study = _study(folder)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"] and study.trials[0].params == values
    results = json.loads((folder / "0" / "results.json").read_text())
    assert results["status"] == "completed" and results["epochs"] == 5
    assert "resuming from its newest checkpoint" in (folder / "0" / "train.log").read_text()
    assert study.trials[0].value == pytest.approx(results["evaluations"][-1]["val_error"])
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["0", "1"]
    assert "0 trials completed, 1 stopped before to go on, 1 new to run" in again.stdout + again.stderr


def test_a_search_sharing_its_study_leaves_the_other_sweeps_running_trials_alone(cifar_arrays, tmp_path):
    """``hydra.sweeper.storage``: several sweeps (folders) share one study. A trial another of them
    is running is not this sweep's to go on with or to fail."""
    storage = f"sqlite:///{tmp_path / 'shared.db'}"
    other = optuna.create_study(study_name="scheda", storage=storage)
    running = other.ask()
    running.suggest_float("schedule.nu", 0.1, 0.7)
    running.suggest_categorical("optim.lr", [0.05, 0.1])
    folder = tmp_path / "search"
    proc = run_train(["-m", f"dataset.root={cifar_arrays}", *TINY, *SEARCH, "hydra.sweeper.n_trials=1",
                      f"hydra.sweeper.storage={storage}", f"hydra.sweep.dir={folder}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    study = optuna.load_study(study_name="scheda", storage=storage)
    assert [t.state.name for t in study.trials] == ["RUNNING", "COMPLETE"]
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["1"]
