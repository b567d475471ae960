"""Training to convergence (trainer.patience): the rule itself on evaluations written by hand, then
real runs where the outcome is forced: a learning rate too small to move the weights gives the same
validation error at every evaluation (so the rule must stop after exactly ``patience`` of them), and a
patience longer than the run leaves it at its cap. A run resumed mid-way stops where the
uninterrupted one did (the rule keeps no state beyond the evaluations a checkpoint carries)."""

from __future__ import annotations

import json

import pytest

from scheda.run import run
from scheda.training.callbacks import patience_spent
from scheda.utils.errors import ConfigError

from helpers import TINY, compose_cfg, run_train


def evals(*val_errors, start=1, every=1):
    return [{"epoch": start + i * every, "val_error": v} for i, v in enumerate(val_errors)]


@pytest.mark.parametrize("errors, patience, after, spent", [
    ((0.5, 0.4, 0.3), 1, 0, False),  # still improving
    ((0.5, 0.4, 0.45), 1, 0, True),  # one evaluation without a new best
    ((0.5, 0.4, 0.45, 0.41), 3, 0, False),  # two of three
    ((0.5, 0.4, 0.45, 0.41, 0.40), 3, 0, True),  # a tie is no new best (the earlier epoch stays best)
    ((0.3, 0.5, 0.5, 0.5), 2, 3, False),  # before the last stage (epoch 3) nothing counts: one left
    ((0.3, 0.5, 0.5, 0.5, 0.5), 2, 3, True),
    ((), 1, 0, False),
])
def test_the_rule_counts_evaluations_after_the_best_in_the_last_stage(errors, patience, after, spent):
    assert patience_spent(evals(*errors), patience, after) is spent


def _results(out):
    return json.loads((out / "results.json").read_text())


# lr so small that float32 weights do not move: every evaluation gives the same validation error
FROZEN = "optim.lr=1e-30"


def test_a_model_that_stops_improving_stops_by_patience(cifar_arrays, tmp_path):
    base = [f"dataset.root={cifar_arrays}", *TINY, FROZEN, "schedule=constant", "schedule.epochs=9",
            "evaluate.every=2", "trainer.patience=2", "trainer.checkpoint_every=0", "logger=none"]
    out = tmp_path / "run"
    summary = run(compose_cfg(base), out)
    # best at the first evaluation (epoch 2, ties keep it), two more without a new best: 4, 6
    assert summary["epochs"] == 6 and summary["stopped_by"] == "patience" and summary["status"] == "completed"
    assert [e["epoch"] for e in summary["evaluations"]] == [2, 4, 6]
    assert (out / "checkpoints" / "epoch_00006.pt").exists()  # the last epoch is checkpointed where it stopped


def test_a_run_under_the_rule_says_why_it_stopped_and_gives_the_model_the_rule_kept(cifar_arrays, tmp_path):
    """scheda-train's last lines: under the rule the errors are those of the best evaluation (its epoch
    named), not of the last, which is the patience past it; a fused sweep's models likewise."""
    base = [f"dataset.root={cifar_arrays}", *TINY, "schedule=constant", "schedule.epochs=9", "evaluate.every=2",
            "trainer.patience=2", "logger=none"]
    proc = run_train([*base, FROZEN, f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    best = _results(tmp_path / "run")["evaluations"][0]  # every evaluation ties: the first is the best
    assert "(6 epochs, stopped by patience)" in proc.stdout
    assert (f"best on validation at epoch 2: C={best['params']['C']:g}, val error {100 * best['val_error']:.2f} %, "
            f"test error {100 * best['test_error']:.2f} %") in proc.stdout, proc.stdout[-2000:]
    proc = run_train([*base, "trainer.parallel.lr=[1e-30,0.5]", f"hydra.run.dir={tmp_path / 'fused'}"],
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for entry in _results(tmp_path / "fused")["models"]:
        model = _results(tmp_path / "fused" / entry["dir"])
        best = min(model["evaluations"], key=lambda e: (e["val_error"], e["epoch"]))
        assert entry["stopped_by"] == model["stopped_by"] and entry["read_at"] == best["epoch"]
        assert entry["val_error"] == best["val_error"] and entry["test_error"] == best["test_error"]
        assert f"{entry['dir']} {entry['overrides']}: best on validation at epoch {best['epoch']}: " in proc.stdout


def test_a_model_still_improving_is_at_its_cap(cifar_arrays, tmp_path):
    base = [f"dataset.root={cifar_arrays}", *TINY, FROZEN, "schedule=constant", "schedule.epochs=3",
            "evaluate.every=1", "trainer.patience=5", "logger=none"]
    summary = run(compose_cfg(base), tmp_path / "run")
    assert summary["epochs"] == 3 and summary["stopped_by"] == "cap"
    without = run(compose_cfg([*base, "trainer.patience=null"]), tmp_path / "fixed")
    assert without["stopped_by"] == "schedule"


def test_a_schedule_runs_its_levels_and_the_rule_stops_its_last(cifar_arrays, tmp_path):
    """ScheDA's levels before the last are the method's: however flat the error, they run their K epochs."""
    base = [f"dataset.root={cifar_arrays}", *TINY, FROZEN, "schedule=decreasing", "schedule.nu0=0.5",
            "schedule.delta_nu=0.1", "schedule.K=2", "schedule.initial_epochs=0", "schedule.nu_final=0.3",
            "trainer.max_epochs=20", "evaluate.every=2", "trainer.patience=1", "logger=none"]
    summary = run(compose_cfg(base), tmp_path / "run")
    # levels 0.4 (epochs 1-2), 0.3 from epoch 3 to the cap; the first evaluation of the last level (4) ends it
    assert summary["epochs"] == 4 and summary["stopped_by"] == "patience"
    assert [s["nu"] for s in summary["switches"]] == [0.4, 0.3]


def test_min_epochs_keeps_a_model_training(cifar_arrays, tmp_path):
    base = [f"dataset.root={cifar_arrays}", *TINY, FROZEN, "schedule=constant", "schedule.epochs=9",
            "evaluate.every=1", "trainer.patience=1", "trainer.min_epochs=5", "logger=none"]
    summary = run(compose_cfg(base), tmp_path / "run")
    assert summary["epochs"] == 5 and summary["stopped_by"] == "patience"


def test_a_resumed_run_stops_where_the_uninterrupted_one_did(cifar_arrays, tmp_path):
    base = [f"dataset.root={cifar_arrays}", *TINY, "optim.lr=0.5", "schedule=constant", "schedule.epochs=12",
            "evaluate.every=1", "trainer.patience=2", "trainer.checkpoint_every=1", "logger=none"]
    golden = run(compose_cfg(base), tmp_path / "golden")
    assert golden["stopped_by"] == "patience" and 2 < golden["epochs"] < 12  # it stops after the cut, by the rule
    run(compose_cfg([*base, "trainer.max_epochs=2"]), tmp_path / "part")
    resumed = run(compose_cfg([*base, f"resume={tmp_path / 'part'}", "trainer.max_epochs=12"]), tmp_path / "part")
    for key in ("epochs", "stopped_by"):
        assert resumed[key] == golden[key], key
    assert [(e["epoch"], e["val_error"]) for e in resumed["evaluations"]] == \
        [(e["epoch"], e["val_error"]) for e in golden["evaluations"]]


def test_patience_needs_labels(tmp_path):
    """Unlabelled arrays give no validation error for the rule to read: one line before training."""
    import numpy as np

    root = tmp_path / "arrays"
    root.mkdir()
    np.save(root / "train_x.npy", np.random.default_rng(0).random((50, 12), dtype=np.float32))
    cfg = compose_cfg(["dataset=arrays", f"dataset.root={root}", *TINY, "trainer.patience=2", "evaluate.every=1",
                       "logger=none"])
    with pytest.raises(ConfigError, match="trainer.patience reads the validation error"):
        run(cfg, tmp_path / "run")


def test_a_run_resumed_with_the_rule_on_stops_by_it(cifar_arrays, tmp_path):
    """When training stops may change on resume, as its length may: a fixed-length run cut short and
    resumed with trainer.patience stops by the rule."""
    base = [f"dataset.root={cifar_arrays}", *TINY, FROZEN, "schedule=constant", "schedule.epochs=9",
            "evaluate.every=1", "trainer.checkpoint_every=1", "logger=none"]
    run(compose_cfg([*base, "trainer.max_epochs=2"]), tmp_path / "run")
    resumed = run(compose_cfg([*base, f"resume={tmp_path / 'run'}", "trainer.patience=2"]), tmp_path / "run")
    assert resumed["stopped_by"] == "patience" and resumed["epochs"] == 3  # best at 1 (ties), then 2 and 3


def test_a_finished_run_resumed_to_train_on_keeps_its_record_when_the_resume_fails(cifar_arrays, tmp_path):
    """A run stopped by patience, resumed with more patience: its finished results.json is copied
    to attempts/1/ first (a resume killed outright leaves it there), and a resume that fails before
    it trains (here its data are missing) gives the record back, its attempt saying how it ended:
    the run stays completed, so a sweep run again skips it instead of rerunning a failed job from
    the start; scheda-results reads the run, not the copy, as a run."""
    from scheda.runs.gather import find_results
    from scheda.runs.reentry import reentry
    from scheda.utils.errors import DataError

    base = [*TINY, FROZEN, "schedule=constant", "schedule.epochs=9", "evaluate.every=1", "logger=none",
            "trainer.patience=1"]
    first = run(compose_cfg([f"dataset.root={cifar_arrays}", *base]), tmp_path / "run")
    assert first["status"] == "completed" and first["stopped_by"] == "patience"
    again = [*base, f"resume={tmp_path / 'run'}", "trainer.patience=3"]
    with pytest.raises(DataError):
        run(compose_cfg([f"dataset.root={tmp_path / 'nowhere'}", "dataset.download=false", *again]), tmp_path / "run")
    after = json.loads((tmp_path / "run" / "results.json").read_text())
    kept = json.loads((tmp_path / "run" / "attempts" / "1" / "results.json").read_text())
    assert kept == first and {k: v for k, v in after.items() if k != "attempts"} == \
        {k: v for k, v in first.items() if k != "attempts"}
    assert after["attempts"][:-1] == first["attempts"]
    assert after["attempts"][-1]["action"] == "resumed" and after["attempts"][-1]["status"] == "failed"
    assert after["attempts"][-1]["error"].startswith("DataError: CIFAR-10 not found in ")
    assert reentry(after["status"], True)[0] == "skipped"  # a sweep run again: kept, not rerun from the start
    assert find_results([tmp_path]) == [tmp_path / "run" / "results.json"]
    resumed = run(compose_cfg([f"dataset.root={cifar_arrays}", *again]), tmp_path / "run")
    assert resumed["status"] == "completed" and resumed["epochs"] > first["epochs"]
    assert resumed["evaluations"][:len(first["evaluations"])] == first["evaluations"]


def test_a_sweep_and_its_search_read_each_job_at_the_model_the_rule_kept(tmp_path):
    """A job of a -m sweep under the rule, stopped by patience past its best: its summary line, the
    sweep's best job and kept() (which scheda-train returns to an Optuna search) are the best evaluation's."""
    from omegaconf import OmegaConf

    from scheda.runs.rundir import kept
    from scheda.runs.sweep_summary import job_line

    job = tmp_path / "0"
    (job / ".hydra").mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(["optim.lr=0.5"]), job / ".hydra" / "overrides.yaml")
    evaluations = [{"epoch": 2, "val_error": 0.40, "test_error": 0.41}, {"epoch": 4, "val_error": 0.45,
                                                                        "test_error": 0.44}]
    results = {"status": "completed", "stopped_by": "patience", "evaluations": evaluations}
    (job / "results.json").write_text(json.dumps(results))
    line, val, _ = job_line(job)
    assert val == 0.40 and line.endswith("completed, best on validation at epoch 2, val 40.00 %, test 41.00 %"), line
    assert kept(results)["epoch"] == 2 and kept({**results, "stopped_by": "schedule"})["epoch"] == 4  # no rule: last
    (job / "results.json").write_text(json.dumps({**results, "status": "interrupted"}))
    line, val, _ = job_line(job)  # stopped half way: its line says where it stood, the sweep's best is a finished job
    assert val is None and "interrupted, best on validation at epoch 2, val 40.00 %" in line, line


def test_evaluations_a_few_epochs_into_a_level_may_be_the_best_but_are_not_counted():
    """evaluate.stage_epochs (the paper's Figure 2 evaluations): a best among them counts as the best, but only
    the periodic evaluations after it count toward the rule."""
    es = [{"epoch": 1, "val_error": 0.4, "reason": "stage_epoch"}, {"epoch": 3, "val_error": 0.5, "reason": "stage_epoch"},
          {"epoch": 5, "val_error": 0.5, "reason": "stage_epoch"}, {"epoch": 10, "val_error": 0.5, "reason": "every"}]
    assert not patience_spent(es, 2, 0)  # one periodic evaluation since the best at epoch 1
    assert patience_spent([*es, {"epoch": 20, "val_error": 0.45, "reason": "every"}], 2, 0)


def test_a_run_evaluates_the_paper_s_epochs_into_each_level(cifar_arrays, tmp_path):
    """``evaluate.stage_epochs=[1,3]`` with ``every=5``: 1 and 3 epochs into each level of 4 (the first
    included), every 5 epochs, each evaluation naming why; a level shorter than 3 epochs gets its first."""
    base = [f"dataset.root={cifar_arrays}", *TINY, "schedule=stages", "logger=none", "trainer.checkpoint_every=0",
            "schedule.stages=[{nu:0.5,epochs:4},{nu:0.4,epochs:4},{nu:0.3,epochs:2}]", "evaluate.every=5",
            "evaluate.at_stage_ends=false", "evaluate.stage_epochs=[1,3]"]
    summary = run(compose_cfg(base), tmp_path / "run")
    got = [(e["epoch"], e["reason"]) for e in summary["evaluations"]]
    assert got == [(1, "stage_epoch"), (3, "stage_epoch"), (5, "every"), (7, "stage_epoch"), (9, "stage_epoch"),
                   (10, "every")], got


def test_bad_stage_epochs_are_one_line(cifar_arrays, tmp_path):
    with pytest.raises(ConfigError, match=r"evaluate.stage_epochs=\[0, 3\] must list epochs >= 1 into a level"):
        run(compose_cfg([f"dataset.root={cifar_arrays}", *TINY, "evaluate.stage_epochs=[0,3]"]), tmp_path / "bad")
