"""The protocol script: selection, resuming, launchers, tables sharing runs, failures and the
experiment presets (scale=smoke end to end, phase by phase: test_smoke_protocol.py)."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from scheda.protocol import launch, phases
from scheda.protocol import selection as select
from scheda.protocol.jobs import fmt
from scheda.protocol.kinds import kind_of
from scheda.protocol.kinds.levels import LevelKind
from scheda.utils.errors import ConfigError
from scheda.model.schedule import build_schedule
from helpers import (N_VAL, REPO, check_stops, compose_cfg, faulty_workers, run_command, run_module, smoke_cfg,
                     start_command)

SCRIPT = REPO / "scripts" / "reproduce.py"


# The smoke scale without the rule of training to convergence: every run its fixed length (the DA 2
# epochs, the ScheDA its 2 levels, a control as long as the ScheDA), for the arithmetic of those lengths.
FIXED = ("scale.patience=null", "scale.da.epochs=2", "scale.random_nu.epochs=2")


def reproduce_args(tmp_path: Path, data_root: Path, *args: str) -> list[str]:
    """``scale=smoke`` on the fixture data, its runs in tmp_path (``out_dir`` relative to the
    user's directory, as a user would type it)."""
    return ["scale=smoke", "out_dir=runs", f"report_dir={tmp_path / 'reports'}",
            f"overrides=['dataset.root={data_root}','dataset.val_size={N_VAL}','trainer.device=cpu',"
            "'dataset.download=false']", *args]


def reproduce(tmp_path: Path, data_root: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python scripts/reproduce.py scale=smoke ...`` in tmp_path (helpers.run_command)."""
    return run_command("scheda.protocol.reproduce", SCRIPT, reproduce_args(tmp_path, data_root, *args), cwd=tmp_path,
                       timeout=timeout)


def start_reproduce(tmp_path: Path, data_root: Path, *args: str, new_session: bool = False,
                    env_extra: dict | None = None):
    """``reproduce`` started in the background (helpers.start_command)."""
    return start_command("scheda.protocol.reproduce", SCRIPT, reproduce_args(tmp_path, data_root, *args), tmp_path,
                         new_session, env_extra)


# A DA phase that trains until it is stopped (its first DA, da_h16_nu0.5_lr0.1, runs first).
ENDLESS_DAS = ("table.raw=false", "scale.da.epochs=100000", "scale.da.eval_every=50000")


def table_rows(report: str) -> list[str]:
    results = report.split("## Results")[1].split("\n- ")[0]
    return [line.split("|")[1].strip() for line in results.splitlines() if line.startswith("| ")][1:]


def test_fused_grid_selects_among_the_models_of_each_job(tmp_path, cifar_arrays):
    proc = reproduce(tmp_path, cifar_arrays, "scale.da.fused=true", "scale.finetune=null", "table.raw=false")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "runs" / "da").iterdir() if p.is_dir()) == ["da_h16_lr0.1_fused"]
    selection = json.loads((tmp_path / "runs" / "selection.json").read_text())
    by_nu = selection["hidden"]["16"]["by_nu"]
    assert sorted(by_nu) == ["0.3", "0.5"]
    assert by_nu["0.5"]["checkpoint"].startswith(str(tmp_path / "runs" / "da" / "da_h16_lr0.1_fused" / "models" / "0"))
    assert by_nu["0.3"]["run"].endswith("models/1")
    assert table_rows((tmp_path / "reports" / "table1_smoke.md").read_text())[:2] == ["DA", "ScheDA"]


def test_tables_of_a_scale_share_their_runs_and_each_trains_to_convergence(tmp_path, cifar_arrays):
    """table1, increasing and random_nu in one scale's directory, each reading what the one before
    trained; the DAs' cap of 1 epoch puts them at the cap, and the rule stops the continuations and
    controls, so every table's report says both stops (Amazon's: test_amazon_protocol)."""
    capped = ("scale.finetune=null", "scale.da.epochs=1")
    first = reproduce(tmp_path, cifar_arrays, *capped)
    assert first.returncode == 0, first.stderr[-3000:]
    second = reproduce(tmp_path, cifar_arrays, "table=increasing", *capped)
    assert second.returncode == 0, second.stderr[-3000:]
    # The DA grid, the ScheDA and the control are read; only the increasing schedule trains.
    assert "phase da: 2 jobs, 2 already done, 0 to run" in second.stdout
    assert "phase continue: 2 jobs, 1 already done, 1 to run" in second.stdout
    assert "+protocol_job=increasing_h16_nu0.3_dnu0.1_K1 " in second.stdout
    assert "phase control: 4 jobs, 2 already done, 2 to run" in second.stdout  # the ScheDA's were read
    report = (tmp_path / "reports" / "increasing_smoke.md").read_text()
    assert table_rows(report) == ["DA", "Increasing schedule", "Control: same start, constant nu",
                                  "Control: same start, one jump to the final nu", "ScheDA",
                                  "Control: same start, constant nu", "Control: same start, one jump to the final nu"]
    assert "over 2 invocations that ran jobs in this scale's directory (table1 " in report
    third = reproduce(tmp_path, cifar_arrays, "table=random_nu", *capped)
    assert third.returncode == 0, third.stderr[-3000:]
    assert "phase da: 2 jobs, 2 already done, 0 to run" in third.stdout
    assert table_rows((tmp_path / "reports" / "random_nu_smoke.md").read_text()) == [
        "DA", "Random nu, uniform", "Random nu, discrete"]
    for table in ("table1", "increasing", "random_nu"):
        report = (tmp_path / "reports" / f"{table}_smoke.md").read_text()
        assert "| Best DA | 1 (**at the cap**, 1) |" in report and "(stopped by patience at " in report, table
        assert check_stops(tmp_path / "runs", report, patience=1) == {"patience", "cap"}
    caps = (tmp_path / "reports" / "random_nu_smoke.md").read_text().split("## Training to convergence")[1]
    assert "Random nu, uniform at most 3 epochs (evaluated every 1)" in caps.split("\n\n")[1]


def fake_run(run_dir: Path, evaluations: list[dict], status: str = "completed", checkpoints=(), **config) -> None:
    (run_dir / "checkpoints").mkdir(parents=True)
    for epoch in checkpoints:
        (run_dir / "checkpoints" / f"epoch_{epoch:05d}.pt").write_bytes(b"x")
    (run_dir / "results.json").write_text(json.dumps({"status": status, "evaluations": evaluations,
                                                      "config": config}))


def ev(epoch, val, test=0.5, reason="every", nu=None):
    return {"epoch": epoch, "val_error": val, "test_error": test, "C": 1.0, "reason": reason, "nu": nu}


def test_selection_takes_the_lowest_validation_error_over_lr_and_epochs(tmp_path):
    cfg = smoke_cfg("scale.da.lr=[0.1,0.01]")
    jobs = phases.da_jobs(cfg.scale, raw=False)
    runs = tmp_path / "da"
    fake_run(runs / "da_h16_nu0.5_lr0.1", [ev(1, 0.40), ev(2, 0.30)], checkpoints=(1, 2))
    fake_run(runs / "da_h16_nu0.5_lr0.01", [ev(1, 0.30, 0.2), ev(2, 0.35)], checkpoints=(1, 2))  # tie: earlier
    fake_run(runs / "da_h16_nu0.3_lr0.1", [ev(1, 0.20)], status="failed", checkpoints=(1,))  # not a candidate
    fake_run(runs / "da_h16_nu0.3_lr0.01", [ev(1, 0.20), ev(2, 0.25)], checkpoints=(2,))  # epoch 1 has no checkpoint
    selection = select.select_das(jobs, tmp_path)
    by_nu = selection["hidden"]["16"]["by_nu"]
    assert (by_nu["0.5"]["lr"], by_nu["0.5"]["epoch"], by_nu["0.5"]["test_error"]) == (0.01, 1, 0.2)
    assert "0.3" not in by_nu  # its only selectable evaluation lacks a checkpoint
    assert selection["hidden"]["16"]["best"]["nu"] == 0.5 and not by_nu["0.5"]["last_of_grid"]


def test_a_run_from_before_the_recorded_validation_size_gives_it_from_its_config(tmp_path):
    """The sensitivity diagnostic needs the validation size: runs whose evaluations predate val_n give
    their own config's split (dataset.val_size) where it is a count, and nothing where it is a fraction."""
    jobs = phases.da_jobs(smoke_cfg("scale.da.nu=[0.5,0.3]").scale, raw=False)
    fake_run(tmp_path / "da" / "da_h16_nu0.5_lr0.1", [ev(1, 0.30)], checkpoints=(1,), dataset={"val_size": 5000})
    fake_run(tmp_path / "da" / "da_h16_nu0.3_lr0.1", [ev(1, 0.35)], checkpoints=(1,), dataset={"val_size": 0.2})
    by_nu = select.select_das(jobs, tmp_path)["hidden"]["16"]["by_nu"]
    assert (by_nu["0.5"]["val_n"], by_nu["0.3"]["val_n"]) == (5000, None)


def test_a_da_that_diverged_late_keeps_its_earlier_evaluations(tmp_path):
    jobs = phases.da_jobs(smoke_cfg("scale.da.nu=[0.5]", "scale.da.epochs=3").scale, raw=False)
    fake_run(tmp_path / "da" / "da_h16_nu0.5_lr0.1", [ev(1, 0.30), ev(2, 0.2)], status="diverged", checkpoints=(1, 2))
    best = select.select_das(jobs, tmp_path)["hidden"]["16"]["best"]
    assert (best["epoch"], best["val_error"], best["status"]) == (2, 0.2, "diverged")
    assert not best["last_of_grid"]  # epoch 2 of 3
    jobs = phases.da_jobs(smoke_cfg("scale.da.nu=[0.5]", "scale.da.epochs=2").scale, raw=False)
    assert select.select_das(jobs, tmp_path)["hidden"]["16"]["best"]["last_of_grid"]  # epoch 2 of 2


def test_continuations_start_from_the_selected_checkpoints_and_choose_T(tmp_path):
    cfg = smoke_cfg(*FIXED, "scale.scheda.nu0=[0.5,0.7]", "scale.scheda.K=[1,2]")
    selection = {"hidden": {"16": {"by_nu": {"0.5": {"checkpoint": "/ck/5.pt", "epoch": 2, "nu": 0.5}},
                                   "best": {"checkpoint": "/ck/5.pt", "epoch": 2, "nu": 0.5, "run": "r"}}}}
    jobs = phases.continuation_jobs(cfg.scale, ["scheda"], selection)
    names = [j.name for j in jobs]
    # No DA(0.7) was selected: its continuations are skipped, not failed.
    assert names == ["scheda_h16_nu0.5_dnu0.1_K1", "scheda_h16_nu0.5_dnu0.1_K2"]
    assert all(j.values["init_from"] == "/ck/5.pt" for j in jobs)
    assert jobs[0].values["schedule.initial_epochs"] == 0 and jobs[0].groups == {"schedule": "decreasing"}
    assert [j.meta["epochs"] for j in jobs] == [2, 4]  # (0.5 - 0.3) / 0.1 levels of K epochs
    out = tmp_path / "continue"
    fake_run(out / names[0], [ev(1, 0.3, reason="stage_end", nu=0.4), ev(2, 0.2, reason="stage_end", nu=0.3)],
             checkpoints=(1, 2))
    fake_run(out / names[1], [ev(2, 0.25, reason="stage_end", nu=0.4), ev(4, 0.26, reason="stage_end", nu=0.3)],
             checkpoints=(2, 4))
    continued = select.select_continuations(jobs, tmp_path)["16"]
    best = continued["scheda"]["best"]
    assert (best["K"], best["T"], best["nu"], best["val_error"]) == (1, 2, 0.3, 0.2)
    assert best["checkpoint"].endswith("epoch_00002.pt")
    # The controls of the best ScheDA: its checkpoint, its whole length at nu0; one jump to its last nu.
    controls = phases.control_jobs(cfg.scale, ["scheda"], {"16": continued})
    assert [(j.name, j.values["schedule.nu"], j.values["schedule.epochs"], j.values["evaluate.every"])
            for j in controls] == [("control_h16_nu0.5_2ep", 0.5, 2, 1), ("jump_h16_nu0.5_to0.3_2ep", 0.3, 2, 1)]
    assert all(j.values["init_from"] == "/ck/5.pt" and j.phase == "control" for j in controls)
    fake_run(tmp_path / "control" / controls[1].name, [ev(1, 0.4), ev(2, 0.1)], checkpoints=())
    select.attach_controls(cfg.scale, ["scheda"], {"16": continued},
                           select.select_continuations(controls, tmp_path))
    assert list(continued["scheda"]["controls"]) == ["jump"]  # the other control has not run
    assert continued["scheda"]["controls"]["jump"]["val_error"] == 0.1


def test_under_the_rule_every_job_trains_to_convergence_up_to_its_cap(tmp_path):
    """scale.patience: the DA grid stops by the rule within da.epochs; a ScheDA runs its levels and its
    last one on, evaluated and checkpointed every K, to at most max_epochs; its controls train to
    convergence under the same cap; a best evaluation past the last level's end is that level (T)."""
    cfg = smoke_cfg("scale.patience=3", "scale.scheda.max_epochs=9")
    da = {j.name: j for j in phases.da_jobs(cfg.scale, raw=False)}["da_h16_nu0.5_lr0.1"]
    assert (da.values["trainer.patience"], da.values["schedule.epochs"], da.values["evaluate.every"]) == (3, 3, 1)
    selection = {"hidden": {"16": {"by_nu": {"0.5": {"checkpoint": "/ck/5.pt", "epoch": 2, "nu": 0.5}},
                                   "best": {"checkpoint": "/ck/5.pt", "epoch": 2, "nu": 0.5, "run": "r"}}}}
    job, = phases.continuation_jobs(cfg.scale, ["scheda"], selection)
    assert {k: job.values[k] for k in ("trainer.patience", "trainer.max_epochs", "evaluate.every",
                                       "trainer.checkpoint_every")} == {
        "trainer.patience": 3, "trainer.max_epochs": 9, "evaluate.every": 1, "trainer.checkpoint_every": 1}
    assert job.meta["epochs"] == 9 and job.meta["levels"] == 2
    # levels 0.4 (epoch 1) and 0.3 (from 2, on to the cap); the best at epoch 4 is past the last stage end
    fake_run(tmp_path / "continue" / job.name, [ev(1, 0.3, reason="stage_end", nu=0.4), ev(2, 0.25, nu=0.3),
                                                ev(4, 0.2, nu=0.3), ev(7, 0.21, nu=0.3)], checkpoints=(1, 2, 4, 7))
    continued = select.select_continuations([job], tmp_path)["16"]
    best = continued["scheda"]["best"]
    assert (best["T"], best["epoch"], best["checkpoint"].endswith("epoch_00004.pt")) == (2, 4, True)
    controls = phases.control_jobs(cfg.scale, ["scheda"], {"16": continued})
    assert [(j.name, j.values["schedule.epochs"], j.values["trainer.patience"]) for j in controls] == [
        ("control_h16_nu0.5_9ep", 9, 3), ("jump_h16_nu0.5_to0.3_9ep", 9, 3)]
    with pytest.raises(ConfigError, match="scale.scheda.max_epochs=1 would cut a schedule of 2 epochs"):
        phases.check(smoke_cfg("scale.scheda.max_epochs=1"))
    with pytest.raises(ConfigError, match="scale.patience=0 must be >= 1"):
        phases.check(smoke_cfg("scale.patience=0"))
    # seeds continue from each seed's DA at the selection seed's best epoch, which pruning would remove
    with pytest.raises(ConfigError, match=r"trainer.keep_checkpoints=1: scheda-reproduce .* keeps every one: drop it"):
        phases.check(smoke_cfg("overrides=['trainer.keep_checkpoints=1']"))


def test_a_scale_runs_the_controls_it_names_each_keeping_its_best_epoch(tmp_path):
    """scale.control: true (every kind), false, or a list of kinds; each control keeps its newest
    checkpoint and its best epoch's (a stacked layer stands on the same start). A control finished
    before controls kept checkpoints is the same result (what a run keeps on disk is not what it trains)."""
    from scheda.protocol import estimate

    cfg = smoke_cfg("scale.patience=3", "scale.scheda.max_epochs=9")
    best = {"nu0": 0.5, "nu": 0.3, "K": 1, "epochs": 2, "epoch": 2, "start_checkpoint": "/ck/2.pt", "start_epoch": 2,
            "run": "r"}
    continued = {"16": {"scheda": {"best": best}}}
    both = phases.control_jobs(cfg.scale, ["scheda"], continued)
    assert [job.meta["kind"] for job in both] == ["control", "jump"]
    assert all((job.values["trainer.checkpoint_every"], job.values["trainer.keep_checkpoints"]) == (1, 1) for job in both)
    one = smoke_cfg("scale.patience=3", "scale.scheda.max_epochs=9", "scale.control=[control]")
    assert [job.name for job in phases.control_jobs(one.scale, ["scheda"], continued)] == [both[0].name]
    assert phases.control_jobs(smoke_cfg("scale.control=[]").scale, ["scheda"], continued) == []
    counted = {c: sum(item["phase"] == "control" for item in estimate.items(smoke_cfg(f"scale.control={c}"))["items"])
               for c in ("true", "[jump]", "false")}
    assert counted["true"] == 2 * counted["[jump]"] > 0 == counted["false"]
    for bad in ("[jmp]", "jump", "[control,3]"):
        proc = subprocess.run([sys.executable, "-m", "scheda.protocol.reproduce", "scale=smoke", f"scale.control={bad}",
                               "dry_run=true"], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
        last = proc.stderr.strip().splitlines()[-1]
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        assert last.startswith("error: scale.control=") and last.endswith(
            ": give true (every control), false (none) or a list of control kinds, e.g. scale.control=[control] "
            "(of control, jump)"), last
    job = both[0]
    config = OmegaConf.create()
    for key, value in {**job.values, "trainer.checkpoint_every": 0, "trainer.keep_checkpoints": None}.items():
        OmegaConf.update(config, key, value)
    fake_run(tmp_path / "control" / job.name, [ev(1, 0.3), ev(2, 0.2)], checkpoints=(2,),
             **OmegaConf.to_container(config))
    assert launch.job_action(tmp_path / "control" / job.name, job) == "done"
    config.schedule.nu = 0.4  # what it trains is held to the job's values still
    fake_run(tmp_path / "other" / job.name, [ev(1, 0.3)], checkpoints=(1,), **OmegaConf.to_container(config))
    with pytest.raises(ConfigError, match="was run with schedule.nu=0.4, this scale says 0.5"):
        launch.job_action(tmp_path / "other" / job.name, job)


def test_unfinished_jobs_resume_and_finished_ones_are_kept(tmp_path, monkeypatch):
    cfg = smoke_cfg(*FIXED)
    jobs = {j.name: j for j in phases.da_jobs(cfg.scale, raw=False)}
    done, killed = jobs["da_h16_nu0.5_lr0.1"], jobs["da_h16_nu0.3_lr0.1"]
    config = {"schedule": {"nu": 0.5, "epochs": 2}, "model": {"hidden": 16}, "optim": {"lr": 0.1},
              "evaluate": {"every": 1}, "trainer": {"checkpoint_every": 1}}
    fake_run(tmp_path / "da" / done.name, [ev(2, 0.3)], checkpoints=(2,), **config)
    fake_run(tmp_path / "da" / killed.name, [ev(1, 0.3)], status="running", checkpoints=(1,),
             **{**config, "schedule": {"nu": 0.3, "epochs": 2}})
    assert launch.job_action(tmp_path / "da" / done.name, done) == "done"
    assert launch.job_action(tmp_path / "da" / killed.name, killed) == "resume"
    launched = []

    class Launched:  # the phase's multirun, recorded instead of run
        returncode = 0

        def __init__(self, module, argv0, args):
            launched.append(args)

        def poll(self):
            return 0

        def wait(self, timeout=None):
            return 0

    monkeypatch.setattr(launch, "ForkedCommand", Launched)
    counts = launch.run_phase(cfg, tmp_path, "da", list(jobs.values()))
    assert counts == {"skipped": 1, "run": 1}
    assert f"+protocol_job={killed.name}" in launched[0]
    job_file = OmegaConf.load(tmp_path / "jobs" / "protocol_job" / f"{killed.name}.yaml")
    assert job_file.resume == str((tmp_path / "da" / killed.name).resolve())
    assert job_file.schedule.nu == 0.3 and job_file.defaults[0] == {"override /schedule": "constant"}


def test_a_phase_starts_the_jobs_with_the_most_work_left_first(tmp_path):
    """A phase ends with its slowest job: on fewer workers than jobs, the launcher is given the most
    work left first (units x models x epochs to the cap, less the newest checkpoint a job resumes
    from: a fused grid's per model too), equals in the order planned; a fine-tuning counts one epoch."""
    from scheda.protocol.jobs import JobSpec

    def job(name, hidden, epochs=None, **values):
        return JobSpec(name, "p", values={"model.hidden": hidden, **values}, meta={"epochs": epochs} if epochs else {})

    jobs = [job("small", 10, 7), job("big", 20, 7), job("fused", 10, 4, **{"trainer.parallel.nu": [0.1, 0.2, 0.3]}),
            job("resumed", 20, 10), job("equal", 10, **{"schedule.epochs": 7}), job("finetune", 30),
            job("fused_resumed", 10, 9, **{"trainer.parallel.seed": [1, 2]})]
    for name, files in (("resumed", ("epoch_00003.pt", "epoch_00006.pt", "epoch_00009.pt.tmp")),
                        ("fused_resumed", ("epoch_00005_batch_000007.pt",))):
        folder = tmp_path / "p" / name / ("checkpoints" if name == "resumed" else "models/nu0.1/checkpoints")
        folder.mkdir(parents=True)
        for f in files:
            (folder / f).write_bytes(b"")
    work = {j.name: launch.work_left(j, tmp_path / "p" / j.name) for j in jobs}
    assert work == {"small": 70, "big": 140, "fused": 120, "resumed": 80, "equal": 70, "finetune": 30,
                    "fused_resumed": 80}
    assert [j.name for j in launch.longest_first(jobs, tmp_path / "p")] == [
        "big", "fused", "resumed", "fused_resumed", "small", "equal", "finetune"]


def test_a_continuation_of_another_checkpoint_is_refused(tmp_path):
    cfg = smoke_cfg(*FIXED)
    selection = {"hidden": {"16": {"by_nu": {"0.5": {"checkpoint": str(tmp_path / "da" / "a" / "epoch_00002.pt"),
                                                     "epoch": 2, "nu": 0.5}},
                                   "best": {"checkpoint": "c", "epoch": 2, "nu": 0.5, "run": "r"}}}}
    job = phases.continuation_jobs(cfg.scale, ["scheda"], selection)[0]
    config = {"model": {"hidden": 16}, "schedule": {"nu0": 0.5, "delta_nu": 0.1, "K": 1, "initial_epochs": 0,
                                                    "nu_final": 0.3}, "optim": {"lr": 0.1},
              "trainer": {"checkpoint_every": 0}}
    moved = "/old/place/da/a/epoch_00002.pt"  # the same run, its out_dir since moved: still the same start
    fake_run(tmp_path / "continue" / job.name, [ev(1, 0.3)], checkpoints=(1,), init_from=moved, **config)
    assert launch.job_action(tmp_path / "continue" / job.name, job) == "done"
    other = tmp_path / "other"
    fake_run(other / "continue" / job.name, [ev(1, 0.3)], checkpoints=(1,), init_from="/x/da/b/epoch_00001.pt",
             **config)
    with pytest.raises(ConfigError, match="continued /x/da/b/epoch_00001.pt, the selection now says"):
        launch.job_action(other / "continue" / job.name, job)
    # Stopped and resumed: its record keeps the start it continued (the resume drops init_from), and is held to it.
    resumed = tmp_path / "resumed"
    fake_run(resumed / "continue" / job.name, [ev(1, 0.3)], status="interrupted", checkpoints=(1,),
             init_from="/x/da/b/epoch_00001.pt", resume=str(resumed / "continue" / job.name), **config)
    with pytest.raises(ConfigError, match="continued /x/da/b/epoch_00001.pt, the selection now says"):
        launch.job_action(resumed / "continue" / job.name, job)
    # One resumed by a scheda whose record lost it: taken as it is.
    lost = tmp_path / "lost"
    fake_run(lost / "continue" / job.name, [ev(1, 0.3)], status="interrupted", checkpoints=(1,), init_from=None,
             resume=str(lost / "continue" / job.name), **config)
    assert launch.job_action(lost / "continue" / job.name, job) == "resume"


def test_launchers(monkeypatch):
    monkeypatch.setattr(launch.os, "cpu_count", lambda: 8)
    assert launch.launcher_overrides(smoke_cfg("launcher=joblib", "n_jobs=4")) == [
        "hydra/launcher=joblib", "hydra.launcher.n_jobs=4", "trainer.num_threads=2"]
    # a launch of fewer jobs than n_jobs shares the cores among its own: one job gets all 8, three get 2 each
    assert launch.launcher_overrides(smoke_cfg("launcher=joblib", "n_jobs=4"), jobs=1)[-1] == "trainer.num_threads=8"
    assert launch.launcher_overrides(smoke_cfg("launcher=joblib", "n_jobs=4"), jobs=3)[-1] == "trainer.num_threads=2"
    assert launch.launcher_overrides(smoke_cfg("launcher=joblib", "n_jobs=2"), jobs=9)[-1] == "trainer.num_threads=4"
    assert launch.launcher_overrides(smoke_cfg("launcher=submitit_slurm",
                                                 "launcher_overrides=['hydra.launcher.partition=gpu']")) == [
        "hydra/launcher=submitit_slurm", "hydra.launcher.partition=gpu"]
    with pytest.raises(ConfigError, match="launcher='slurm' is unknown"):
        launch.launcher_overrides(smoke_cfg("launcher=slurm"))


@pytest.mark.parametrize("launcher", ["submitit_slurm", "submitit_local", "joblib"])
def test_launcher_configs_compose_with_the_training_config(launcher):
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[f"hydra/launcher={launcher}", "+experiment=table1_da"],
                      return_hydra_config=True)
    assert launcher.split("_")[-1].lower() in cfg.hydra.launcher._target_.lower()
    assert cfg.hydra.sweeper.params["schedule.nu"] == "0.7,0.6,0.5,0.4,0.3,0.2,0.1,0.05"


@pytest.mark.parametrize("experiment", sorted(p.stem for p in (REPO / "configs" / "experiment").glob("*.yaml")))
def test_every_experiment_preset_composes(experiment):
    overrides = [f"+experiment={experiment}"]
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides, return_hydra_config=True)
    if experiment in ("table1_scheda", "increasing"):  # they continue a DA: init_from is required
        assert list(cfg.requires) == ["init_from"] and cfg.schedule.initial_epochs == 0
    params = cfg.hydra.sweeper.params or {}
    assert all(isinstance(v, str) for v in params.values())


def table_scales() -> list[tuple[str, str]]:
    """Every table of configs/table/ at every scale of configs/scale/ it runs at (``scales``)."""
    import yaml

    scales = sorted(p.stem for p in (REPO / "configs" / "scale").glob("*.yaml"))
    pairs = []
    for path in sorted((REPO / "configs" / "table").glob("*.yaml")):
        allowed = yaml.safe_load(path.read_text()).get("scales") or scales
        pairs += [(path.stem, scale) for scale in scales if scale in allowed]
    return pairs


@pytest.mark.parametrize("table, scale", table_scales())
def test_every_table_and_scale_plans_its_jobs(table, scale):
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        cfg = compose(config_name="reproduce", overrides=[f"table={table}", f"scale={scale}"])
    if "paper_start" in cfg.table.phases:
        return paper_settings_plans_its_jobs(cfg)
    if "da" not in cfg.table.phases:  # a table of phases of its own
        return features_plans_its_jobs(cfg)
    da = phases.da_jobs(cfg.scale, cfg.table.raw)
    selection = {"hidden": {str(h): {"by_nu": {fmt(nu): {"checkpoint": "c", "epoch": 1, "nu": nu}
                                               for nu in cfg.scale.da.nu},
                                     "best": {"checkpoint": "c", "epoch": 1, "nu": 0.3, "run": "r"}}
                            for h in cfg.scale.hidden}}
    cont = phases.continuation_jobs(cfg.scale, cfg.table.continuations, selection)
    assert len({j.name for j in da + cont}) == len(da + cont) and cont
    bases = {}
    for job in cont:  # every planned continuation has a schedule with at least one level
        values = {k.split(".", 1)[1]: v for k, v in job.values.items() if k.startswith("schedule.")}
        name = job.groups["schedule"]
        if name not in bases:  # the schedule option as a run composes it
            bases[name] = OmegaConf.to_container(compose_cfg([f"schedule={name}"]).schedule)
        T = {"T": None} if "T" in bases[name] else {}  # the protocol sets nu_final, not T
        # under the rule (scale.patience) its last level may run on to the cap: trainer.max_epochs
        schedule = build_schedule({**bases[name], **T, **values}, job.values.get("trainer.max_epochs"))
        assert schedule.total_epochs >= 1
        if isinstance(kind_of(job.meta["kind"]), LevelKind):
            assert schedule.total_epochs == job.meta["epochs"]
    if scale == "paper" and "scheda" in cfg.table.continuations:
        h = cfg.scale.hidden[0]
        assert f"scheda_h{h}_nu0.1_dnu0.05_K50" in {j.name for j in cont}
        assert f"scheda_h{h}_nu0.1_dnu0.1_K50" not in {j.name for j in cont}  # no level from 0.1 to 0.05
    if table == "amazon":  # every job of its scales reads the reviews
        assert cfg.scale.train[0] == "dataset=amazon" and cfg.out_dir == f"outputs/reproduce/amazon_{scale}"
    if "random_uniform" in cfg.table.continuations:  # one per lr of the DA grid
        assert {j.values["optim.lr"] for j in cont if j.meta["kind"] == "random_uniform"} == set(cfg.scale.da.lr)
    if (table, scale) == ("table1", "paper"):
        assert len(da) == 1 + 3 * 3 and all(len(j.meta["nus"]) == 8 for j in da[1:])
        assert len([j for j in cont if j.meta["kind"] == "scheda"]) == 3 * (7 * 2 - 1) * 2


def features_plans_its_jobs(cfg):
    """table=features at a scale: every seed's models and continuations, each name once in its
    folder, each schedule with its levels, and the estimate counting every one of them."""
    from scheda.protocol import estimate
    from scheda.protocol.tables.features import continuation_jobs, model_jobs, settings

    s = settings(cfg)
    models, cont = model_jobs(cfg), continuation_jobs(cfg, None)
    assert len({(j.phase, j.name) for j in models + cont}) == len(models + cont)
    per_seed = len(s.nus) + s.double + len(s.updates)
    assert len(models) == per_seed * len(s.seeds) and len(cont) == (3 + s.double) * len(s.seeds)
    for job in cont:
        if job.groups["schedule"] == "decreasing":
            values = {k.split(".", 1)[1]: v for k, v in job.values.items() if k.startswith("schedule.")}
            base = OmegaConf.to_container(compose_cfg(["schedule=decreasing"]).schedule)
            schedule = build_schedule({**base, "T": None, **values}, job.values.get("trainer.max_epochs"))
            assert schedule.stages[0].nu == round(s.nu0 - s.delta_nu, 6) and schedule.stages[-1].nu == s.nu_final
            assert schedule.total_epochs == job.meta["epochs"]
    est = estimate.estimate(cfg, None, 20)
    assert est["jobs"] == {"feature_models": len(models), "feature_continue": len(cont)}


def paper_settings_plans_its_jobs(cfg):
    """table=paper_settings at a scale: every part's jobs, each name once in its folder, ScheDA with its
    levels as long as the jump, and the estimate counting every one of them."""
    from scheda.protocol import estimate
    from scheda.protocol.tables import paper_settings as ps

    s = ps.settings(cfg)
    start, cont = ps.start_jobs(cfg), ps.continuation_jobs(cfg, None)
    grid, length, composite = ps.grid_jobs(cfg), ps.length_jobs(cfg), ps.composite_jobs(cfg)
    jobs = start + cont + grid + length + composite
    assert len({(j.phase, j.name) for j in jobs}) == len(jobs) and jobs
    assert len(start) == len(s.seeds) and len(cont) == (2 * len(s.Ks) + 1) * len(s.seeds)
    assert len(grid) == len(s.grid_nus) * len(s.grid_seeds) and len(composite) == 3 * len(s.composite_seeds)
    for job in cont:
        if job.groups["schedule"] == "decreasing":
            values = {k.split(".", 1)[1]: v for k, v in job.values.items() if k.startswith("schedule.")}
            base = OmegaConf.to_container(compose_cfg(["schedule=decreasing"]).schedule)
            schedule = build_schedule({**base, "T": None, **values})
            assert schedule.stages[0].nu == round(s.nu0 - s.delta_nu, 6) and schedule.stages[-1].nu == s.nu_final
            assert schedule.total_epochs == job.meta["epochs"] == s.epochs(job.meta["K"])
    est = estimate.estimate(cfg, None, 20)
    assert sum(est["jobs"].values()) == len(jobs)


def test_bad_protocol_values_fail_with_one_line(tmp_path, cifar_arrays):
    proc = reproduce(tmp_path, cifar_arrays, "phases=[report]")  # before the table has run
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == (
        "error: no DA of phase 1 has run in runs: nothing to report yet; run the table (the same command without "
        "phases=, or with phases=[da,...])"), proc.stderr[-2000:]
    (tmp_path / "a_file").write_text("")  # the report comes after the jobs: a report_dir it cannot go to is said first
    proc = reproduce(tmp_path, cifar_arrays, f"report_dir={tmp_path / 'a_file' / 'reports'}")
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == (
        f"error: report_dir={tmp_path / 'a_file' / 'reports'} cannot be made (a_file is a file): give a "
        f"folder you can write to") and not (tmp_path / "runs" / "da").exists(), proc.stderr[-2000:]
    proc = reproduce(tmp_path, cifar_arrays, "scale.da.eval_every=0")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == ["error: scale.da.epochs=3 and scale.da.eval_every=0 must be >= 1"]
    proc = reproduce(tmp_path, tmp_path / "nowhere", "stages=[da,select]")  # 0.2's name of phases=, read until 0.4
    assert proc.returncode == 1
    assert "stages= is called phases= now: read as phases=['da', 'select']" in proc.stdout + proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: no DA of phase 1 completed") and "DataError" in last and "nowhere" in last
    proc = reproduce(tmp_path, cifar_arrays, "table.continuations=[sheda]")
    assert proc.returncode == 1 and "table.continuations has 'sheda'" in proc.stderr.strip().splitlines()[-1]


def test_a_table_killed_outright_reads_killed_and_says_how_to_go_on(tmp_path, cifar_arrays):
    """SIGKILL to the whole table (the OOM killer, a lost machine) while its first DA trains: the
    DA's results.json still says running, the invocation's time is on record (cut off), and the
    report asked for next says the DA was killed (its lock's holder is gone), how the jobs stand
    and how to go on, in one line."""
    import signal
    import time

    proc = start_reproduce(tmp_path, cifar_arrays, *ENDLESS_DAS, new_session=True)
    job = tmp_path / "runs" / "da" / "da_h16_nu0.5_lr0.1"
    try:
        deadline = time.time() + 120
        while not (job / "train.log").exists() or "epoch" not in (job / "train.log").read_text():
            assert proc.poll() is None and time.time() < deadline, "the DA did not start training"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert json.loads((job / "results.json").read_text())["status"] == "running"
    # its time is on record though no handler ran (a session's end kills a table so, each time)
    [invocation] = json.loads((tmp_path / "runs" / "invocations.json").read_text())
    assert invocation["ran_jobs"] and not invocation["ended"] and invocation["table"] == "table1"
    report = reproduce(tmp_path, cifar_arrays, *ENDLESS_DAS, "phases=[report]")
    assert report.returncode == 1 and report.stderr.strip().splitlines()[-1] == (
        "error: no DA of phase 1 completed with an evaluation yet (killed 1, not run 1): the same command without "
        "phases= goes on with them; their logs are in runs/da"), report.stderr[-2000:]


@pytest.mark.parametrize("whom, signame, launcher", [("group", "SIGINT", "basic"), ("protocol", "SIGINT", "basic"),
                                                     ("protocol", "SIGTERM", "basic"), ("protocol", "SIGTERM", "joblib")])
def test_ctrl_c_stops_the_phase_with_a_checkpoint_and_says_so_in_one_line(tmp_path, cifar_arrays, whom, signame,
                                                                           launcher):
    """Ctrl-C at a terminal reaches the protocol and its phase (the process group); a SIGINT to
    the protocol alone reaches the phase as a SIGTERM; so does a SIGTERM to the protocol alone (a
    ``kill``, a scheduler's stop), which once ended the protocol and left its phase training.
    Each way the running job checkpoints where it stands, nothing is left running, the
    invocation's time is recorded for the report's wall time, and the command says how to go on
    in one line. With joblib's workers (two DAs at once, a third worker idle) the phase hands the
    signal on to them and waits for their checkpoints: it once stopped at once with a traceback,
    its workers killed mid-epoch and their results.json left 'running'. The DAs evaluate after
    every epoch, slowly: a worker that ended while another still evaluated (or an idle one that a
    kill of the group ended) once made joblib kill the others before their checkpoints (a signal to
    every process of a sweep: tests/test_interrupts.py)."""
    import signal
    import time

    signum = getattr(signal, signame)
    parallel = ("launcher=joblib", "n_jobs=3") if launcher == "joblib" else ()
    endless = [*ENDLESS_DAS[:-1], "scale.da.eval_every=1", "scale.patience=100000"] if parallel else ENDLESS_DAS
    proc = start_reproduce(tmp_path, cifar_arrays, *endless, *parallel, new_session=True,
                           env_extra=faulty_workers(eval_sleep=1.5) if parallel else None)
    try:
        deadline = time.time() + 120
        running = ["da_h16_nu0.5_lr0.1"] + (["da_h16_nu0.3_lr0.1"] if parallel else [])  # under joblib both at once

        def training(name):
            log = tmp_path / "runs" / "da" / name / "train.log"
            return log.exists() and "epoch" in log.read_text()

        while not all(training(name) for name in running):
            assert proc.poll() is None and time.time() < deadline, "the DAs did not start training"
            time.sleep(0.2)
        time.sleep(0.5)
        if whom == "group":
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signum, stderr[-3000:]
        assert stderr.strip().splitlines()[-1] == ("interrupted: finished jobs are kept and a stopped one resumes from "
                                                   "its checkpoint: run the same command again")
        assert "Traceback" not in stderr and "leaked semaphore" not in stderr, stderr[-3000:]
        for name in running:
            results = json.loads((tmp_path / "runs" / "da" / name / "results.json").read_text())
            assert results["status"] == "interrupted", stderr[-3000:]
            assert any(line.startswith("interrupted by") and line.endswith(name) for line in stderr.splitlines())
            assert list((tmp_path / "runs" / "da" / name / "checkpoints").glob("epoch_*_batch_*.pt"))
        if not parallel:  # the sweep stopped (the smoke grid's two DAs both run at once under joblib)
            assert not (tmp_path / "runs" / "da" / "da_h16_nu0.3_lr0.1").exists()
        invocations = json.loads((tmp_path / "runs" / "invocations.json").read_text())
        assert len(invocations) == 1 and invocations[0]["ran_jobs"] and invocations[0]["seconds"] > 0.5
        if (whom, signame, launcher) == ("protocol", "SIGTERM", "basic"):
            # What the job's own line says works too: the job resumed alone, its config from the protocol's
            # jobs/ folder (once "protocol_job is not a setting of the run"), up to the end of its epoch.
            job = tmp_path / "runs" / "da" / running[0]
            assert f"resume={job.relative_to(tmp_path)}" in stderr
            epoch = int(min(job.glob("checkpoints/epoch_*_batch_*.pt")).name.split("_")[1])
            alone = run_command("scheda.cli", REPO / "train.py", [f"resume={job}", f"trainer.max_epochs={epoch + 1}"],
                                cwd=tmp_path)
            assert alone.returncode == 0, alone.stderr[-3000:]
            assert json.loads((job / "results.json").read_text())["epochs"] == epoch + 1
            assert "changed settings: trainer.max_epochs\n" in alone.stdout + alone.stderr
        left = time.time() + 10  # nothing of the group is left (its fork server ends on the protocol's exit)
        while True:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            assert time.time() < left, subprocess.run(["ps", "-o", "pid,args", "-g", str(proc.pid)],
                                                      capture_output=True, text=True).stdout
            time.sleep(0.1)
    finally:  # a failed check leaves no endless DA behind
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)


def test_a_failed_job_makes_the_command_fail_and_names_the_retry(tmp_path, cifar_arrays):
    proc = reproduce(tmp_path, cifar_arrays, "scale.scheda.lr=-1", "scale.finetune=null")
    assert proc.returncode == 1
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("error: 1 job did not finish: scheda_h16_nu0.5_dnu0.1_K1 (failed: ConfigError: optim.lr=-1.0")
    assert "rerun to retry them (finished jobs are kept): python scripts/reproduce.py scale=smoke" in line
    # the phase says which job failed and why in scheda's line, without Hydra's advice on stack traces
    assert "\nerror: optim.lr=-1.0 must be > 0" in proc.stderr and "HYDRA_FULL_ERROR" not in proc.stderr
    report = (tmp_path / "reports" / "table1_smoke.md").read_text()
    assert "| scheda_h16_nu0.5_dnu0.1_K1 | continue | failed |" in report and "| DA | 16 |" in report


GENERIC = "+scale.schedules.decreasing={nu0:[0.5],grid:{delta_nu:[0.1],K:[1],nu_final:[0.3],initial_epochs:[0]},lr:0.1}"


def test_any_registered_schedule_continues_the_selected_das(tmp_path, cifar_arrays):
    """A table may continue with any schedule that has a noise-level key: its grid in
    scale.schedules.<name>, nu0 from the selected DA, the same selection, report and figures."""
    proc = reproduce(tmp_path, cifar_arrays, GENERIC, "table.continuations=[decreasing]", "table.raw=false",
                     "scale.finetune=null", "scale.control=false")
    assert proc.returncode == 0, proc.stderr[-3000:]
    name = "decreasing_h16_nu0.5_delta_nu0.1_K1_nu_final0.3_initial_epochs0"
    results = json.loads((tmp_path / "runs" / "continue" / name / "results.json").read_text())
    selection = json.loads((tmp_path / "runs" / "selection.json").read_text())
    assert results["status"] == "completed" and [s["nu"] for s in results["switches"]] == [0.4, 0.3]
    assert results["config"]["init_from"] == selection["hidden"]["16"]["by_nu"]["0.5"]["checkpoint"]
    assert results["config"]["optim"]["lr"] == 0.1
    report = (tmp_path / "reports" / "table1_smoke.md").read_text()
    assert table_rows(report)[:2] == ["DA", "Schedule decreasing"]  # then the paper's fine-tuned row, not run
    assert "delta_nu=0.1, K=1, nu_final=0.3, initial_epochs=0, T=" in report


@pytest.mark.parametrize("overrides, message", [
    (["table.continuations=[cosine]"], "table.continuations has 'cosine': use any of scheda, increasing, "
                                       "random_uniform, random_discrete, or a schedule with its grid in "
                                       "scale.schedules.cosine"),
    (["+scale.schedules.stages={nu0:[0.5]}", "table.continuations=[stages]"],
     "scale.schedules.stages: a continuation starts at its DA's nu, and schedule stages has no single one: use one of"),
    ([GENERIC.replace("K:[1]", "K:[0]"), "table.continuations=[decreasing]"], "schedule.K=0 must be an integer >= 1"),
])
def test_a_bad_schedule_continuation_is_refused_before_any_job(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        phases.check(smoke_cfg(*overrides))


def test_the_plan_and_its_device_hours_are_printed_first(tmp_path, cifar_arrays):
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"device_name": "Fake GPU", "n": 1000,  # as many as the smoke's epoch
                                 "rows": [{"hidden": 16, "batch_size": 50, "eager_s": 2.0, "graphed_s": float("nan")},
                                          {"hidden": 64, "batch_size": 50, "eager_s": 8.0, "graphed_s": 4.0}],
                                 "lr_search": {"n": 45000, "features": 5000, "seconds": 10.0}}))
    proc = reproduce(tmp_path, cifar_arrays, *FIXED, f"bench={bench}", "dry_run=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(line for line in proc.stdout.splitlines() if "plan for table=table1 scale=smoke" in line)
    # DA: raw + 2 runs of 2 epochs; ScheDA 0.5 -> 0.4 -> 0.3 (K 1); two controls of 2 epochs; 2 fine-tunings
    assert "8 jobs (da 3, continue 1, control 2, finetune 2), 10 model-epochs (da 4, continue 2, control 4)" in line
    assert "11 evaluations" in line
    # 10 model-epochs x 2.0 s (the 16-unit row) = 20 s; 10 evaluations x 10 s x 16/5000 = 0.32 s
    assert "about 0.01 device-hours on Fake GPU (training 0.01, evaluation 0.00" in line
    assert not (tmp_path / "runs" / "da").exists()
    plain = reproduce(tmp_path, cifar_arrays, "dry_run=true")
    assert "give bench=<scripts/bench_train.py --json output>" in plain.stdout
    # Under the rule (smoke: patience 1) every count is its cap's, and the line says so: DA 2 x 3 epochs,
    # the ScheDA and two controls 4 each; the ScheDA and controls evaluated every K (1) to their caps.
    line = next(line for line in plain.stdout.splitlines() if "plan for table=table1 scale=smoke" in line)
    assert "at most 18 model-epochs (da 6, continue 4, control 8), 19 evaluations (every model at its cap; " \
           "scale.patience=1 stops them earlier)" in line


def test_device_hours_scale_with_the_hidden_units_and_the_fused_grid():
    from scheda.protocol import estimate

    cfg = smoke_cfg(*FIXED, "scale.hidden=[32]", "scale.da.fused=true", "scale.control=false", "scale.finetune=null")
    bench = {"device_name": "X", "n": 1000, "rows": [{"hidden": 16, "batch_size": 20, "eager_s": 3.0}],
             "grid": {"models": 2, "grid_over_one": 1.5}}
    est = estimate.estimate(cfg, bench, 20)
    # fused DA job: 2 epochs x (3.0 s x 32/16) x 1.5 (two models at once); ScheDA: 2 epochs x 6.0 s
    assert est["train_hours"] * 3600 == pytest.approx(2 * 6.0 * 1.5 + 2 * 6.0)
    assert est["model_epochs"] == {"da": 4, "continue": 2} and est["jobs"] == {"da": 2, "continue": 1}


def test_a_launch_of_fewer_jobs_than_the_benchmark_ran_side_by_side_is_charged_its_jobs_whole_time():
    """Timed as two jobs side by side, the device does two jobs' work in that time only while two
    run: the DA launch's two DAs share it (the raw baseline's evaluation is free here), the lone
    ScheDA of the continue launch takes its whole time with a slot idle."""
    from scheda.protocol import estimate

    cfg = smoke_cfg(*FIXED, "scale.hidden=[32]", "scale.control=false", "scale.finetune=null")
    bench = {"device_name": "X", "n": 1000, "rows": [{"hidden": 16, "batch_size": 20, "eager_s": 3.0}],
             "side_by_side": {"jobs": 2, "threads": 1}}
    est = estimate.estimate(cfg, bench, 20)
    one = 2 * 3.0 * 32 / 16  # a job's 2 epochs at 32 units
    assert est["train_hours"] * 3600 == pytest.approx(3 * one / 2)  # the work: 3 jobs on 2 slots
    assert est["device_hours"] * 3600 == pytest.approx(one + one)  # DA launch: 2 at once; continue: 1 alone
    assert est["idle_hours"] * 3600 == pytest.approx(one / 2)
    assert "slots idle" not in estimate.describe(cfg, est, "b.json")  # 6 s: under the line's 0.01 h
    assert "slots idle while a launch has fewer jobs than 2 or waits on its longest 0.25" in \
        estimate.describe(cfg, {**est, "idle_hours": 0.25}, "b.json")
    assert estimate.makespan([3.0, 1.0, 1.0, 1.0], 2) == 3.0 and estimate.makespan([1.0] * 3, 2) == 2.0
    assert estimate.makespan([], 2) == 0.0 and estimate.makespan([2.0, 5.0], 1) == 7.0
    assert estimate.makespan([1.0, 1.0, 2.0], 2) == 2.0  # the longest first, as the launcher orders them


def test_a_lone_job_is_charged_as_the_benchmark_timed_one_alone_on_every_core():
    """scheda.protocol.launch gives a launch of one job every core; a benchmark with a copy timed
    alone (bench_train.py --side-by-side 2 --alone) charges it at that copy's epoch and evaluation,
    holding the whole device (no slot idle); the DA launch's two jobs keep the side-by-side timings."""
    from scheda.protocol import estimate

    cfg = smoke_cfg(*FIXED, "scale.hidden=[32]", "scale.control=false", "scale.finetune=null")
    side = {"device_name": "X", "n": 1000, "rows": [{"hidden": 16, "batch_size": 20, "eager_s": 3.0, "default_s": 3.0}],
            "lr_search": {"n": 1000, "features": 16, "seconds": 4.0}, "side_by_side": {"jobs": 2, "threads": 1}}
    both = {**side, "alone": {"threads": 2, "hidden": 16, "batch_size": 20, "default_s": 1.8, "lr_search_s": 1.0}}
    before, after = estimate.estimate(cfg, side, 20), estimate.estimate(cfg, both, 20)
    assert estimate.alone_factors(both, 20) == pytest.approx({"train": 0.6, "eval": 0.25, "finetune": 0.6})
    assert estimate.alone_factors(side, 20) is None and not before["alone_measured"] and after["alone_measured"]
    da, lone = before["launches"]["da"], before["launches"]["continue"]
    assert after["launches"]["da"] == da and lone["jobs"] == 1
    train, evals = 2 * 3.0 * 32 / 16, 4.0 / 16 * 32 * 4 / 17  # the ScheDA's 2 epochs, an evaluation's C search
    evaluations = (lone["hours"] * 3600 - train) / evals  # as many as the plan gives it
    assert after["launches"]["continue"]["hours"] * 3600 == pytest.approx(0.6 * train + 0.25 * evals * evaluations)
    assert after["idle_hours"] < before["idle_hours"] and after["device_hours"] < before["device_hours"]
    assert "2 jobs side by side as timed (a launch of one job as timed alone on every core)" in \
        estimate.describe(cfg, after, "b.json")
    assert "as timed alone" not in estimate.describe(cfg, before, "b.json")
    line = estimate.by_launch(after)
    assert line.startswith("by launch, on 2 slots, the longest first: da ") and "continue" in line and "(1 job)" in line


def test_the_seeds_phase_is_charged_as_its_three_launches_run_in_turn():
    """The further seeds' DAs, then their continuations, then their fine-tuning: each a launch of its
    own, so a seed's one DA is not charged as if it ran beside its own continuations."""
    from scheda.protocol import estimate

    p = estimate.items(smoke_cfg(*FIXED, "scale.seeds=[0, 1, 2]"))
    assert {estimate.stage_of(i) for i in p["items"] if i["phase"] == "seeds"} == {"seed_da", "seed_continue"}
    assert sorted(p["finetune_stages"]) == ["finetune"] * 2 + ["seed_finetune"] * 4  # 2 kinds x seeds 0 | 1, 2


def test_device_hours_count_everything_a_run_pays_each_from_its_measured_cost():
    """Fine-tuning (every learning rate of the preset, its epochs as the scale sets them), each
    job's data load and step build, each phase's process start and the protocol's own, the C
    search scaled by the grid's values and the features (raw pixels: 3072), an epoch by the
    examples the runs train on (the smoke's train_limit of 1000, against the benchmark's 500)."""
    from scheda.protocol import estimate

    bench = {"device_name": "X", "n": 500, "rows": [{"hidden": 16, "batch_size": 50, "eager_s": 2.0, "default_s": 1.0,
                                                     "finetune_s": 3.0}],
             "lr_search": {"n": 500, "features": 16, "seconds": 1.7},
             "job_start_s": 2.0, "data_load_s": 0.25, "build_s": 0.1}
    cfg = smoke_cfg(*FIXED)  # 8 jobs in 4 phases, finetune=cpu (3 lrs) for 2 epochs, C over 4 values of 17
    est = estimate.estimate(cfg, bench, 50)
    assert est["train_hours"] * 3600 == pytest.approx(10 * 1.0 * 2)  # 10 model-epochs, twice the examples
    evals = 10 * 1.7 / 16 * 16 + 1 * 1.7 / 16 * 3072  # 10 of 16 features, raw pixels' one of 3072
    assert est["eval_hours"] * 3600 == pytest.approx(evals * 4 / 17)
    assert est["finetune_hours"] * 3600 == pytest.approx(2 * 3 * 2 * 3.0 * 2)  # 2 jobs x 3 lrs x 2 epochs
    assert est["job_hours"] * 3600 == pytest.approx(8 * (0.25 * 2 + 0.1) + 2.0 * (1 + 4))
    assert est["device_hours"] == pytest.approx(est["train_hours"] + est["eval_hours"] + est["finetune_hours"]
                                                + est["job_hours"])
    joblib = estimate.estimate(smoke_cfg(*FIXED, "launcher=joblib"), bench, 50)  # a process per job
    assert joblib["job_hours"] * 3600 == pytest.approx(8 * (0.25 * 2 + 0.1) + 2.0 * (1 + 8))
    line = estimate.describe(cfg, est, "b.json")
    assert "jobs' start" in line and "fine-tuning" in line and "not measured" not in line
    bench["rows"][0]["finetune_grid_s"] = 5.0  # the paper's five rates fused in one step: 1.0 s a rate
    fused_est = estimate.estimate(cfg, bench, 50)
    fused = fused_est["finetune_hours"] * 3600
    assert fused == pytest.approx(2 * 3 * 2 * 1.0 * 2)
    alone = estimate.estimate(smoke_cfg(*FIXED, "overrides=['finetune.fused=false']"), bench, 50)["finetune_hours"] * 3600
    assert alone == pytest.approx(2 * 3 * 2 * 3.0 * 2)
    # timed as two jobs side by side on one device (each time one job's while both run): the device does
    # two jobs' work in that time
    shared = estimate.estimate(cfg, {**bench, "side_by_side": {"jobs": 2, "threads": 1}}, 50)
    assert shared["train_hours"] == pytest.approx(fused_est["train_hours"] / 2)
    assert shared["device_hours"] == pytest.approx(fused_est["device_hours"] / 2 + shared["idle_hours"])
    assert fused_est["device_hours"] / 2 < shared["device_hours"] < fused_est["device_hours"]
    assert "2 jobs side by side as timed" in estimate.describe(cfg, shared, "b.json")


@pytest.mark.parametrize("override", ["trainer.cuda_graph=false", "trainer.step=fused", "trainer.step=autograd",
                                      "trainer.fused=false"])
def test_device_hours_use_the_fast_step_unless_the_runs_cannot_use_it(override):
    from scheda.protocol import estimate

    bench = {"device_name": "X", "n": 1000, "rows": [{"hidden": 16, "batch_size": 20, "eager_s": 4.0, "graphed_s": 1.0}]}
    graphed = estimate.estimate(smoke_cfg(*FIXED, "scale.control=false", "scale.finetune=null"), bench, 20)
    eager = estimate.estimate(smoke_cfg(*FIXED, "scale.control=false", "scale.finetune=null",
                                        f"overrides=['{override}']"), bench, 20)
    assert eager["train_hours"] * 3600 == pytest.approx(6 * 4.0)  # 4 DA + 2 ScheDA model-epochs
    assert graphed["train_hours"] * 3600 == pytest.approx(6 * 1.0)
    cpu = {"device_name": "CPU", "n": 1000, "rows": [{"hidden": 16, "batch_size": 20, "eager_s": 4.0,
                                                        "graphed_s": float("nan")}]}
    assert estimate.estimate(smoke_cfg(*FIXED, "scale.control=false", "scale.finetune=null"), cpu, 20)["train_hours"] \
        * 3600 == pytest.approx(6 * 4.0)  # measured without a graph: eager


def test_device_hours_of_bf16_runs_are_charged_the_bf16_rows(tmp_path, cifar_arrays):
    """Runs that train in bf16 (``scale.train`` or ``overrides`` may say so) are charged the
    benchmark's bf16 rows, the step that will run, and the plan says so; a benchmark without bf16
    rows is one line naming the command that measures them, before anything runs."""
    from scheda.protocol import estimate

    rows = [{"precision": "fp32", "hidden": 16, "batch_size": 20, "eager_s": 4.0, "default_s": 4.0},
            {"precision": "bf16", "hidden": 16, "batch_size": 20, "eager_s": 2.5, "default_s": 2.5}]
    bench = {"device_name": "CPU", "n": 1000, "rows": rows}
    base = [*FIXED, "scale.control=false", "scale.finetune=null"]
    assert estimate.estimate(smoke_cfg(*base), bench, 20)["train_hours"] * 3600 == pytest.approx(6 * 4.0)
    named_by_the_scale = smoke_cfg(*base)
    named_by_the_scale.scale.train.append("trainer.precision=bf16")
    for cfg in (smoke_cfg(*base, "overrides=['trainer.precision=bf16']"), named_by_the_scale):
        est = estimate.estimate(cfg, bench, 20)
        assert est["train_hours"] * 3600 == pytest.approx(6 * 2.5) and est["precision"] == "bf16"
        assert "device-hours in bf16 on CPU" in estimate.describe(cfg, est, "b.json")
    fp32_only = tmp_path / "fp32.json"
    fp32_only.write_text(json.dumps({**bench, "rows": rows[:1]}))
    proc = reproduce(tmp_path, cifar_arrays, *base, f"bench={fp32_only}", "dry_run=true",
                     "overrides=['trainer.precision=bf16']")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert f"bench={fp32_only} has no bf16 rows, and the runs train in bf16: run python scripts/bench_train.py " \
           "--precisions fp32 bf16" in proc.stderr


def test_device_hours_of_runs_trained_by_autograd_use_its_timing():
    """``trainer.step=autograd`` trains every model by autograd: costed at the benchmark's autograd
    timing where it measured one (about twice the fused step on a CPU), not the fused step's."""
    from scheda.protocol import estimate

    bench = {"device_name": "CPU", "n": 1000, "rows": [{"hidden": 16, "batch_size": 20, "eager_s": 4.0,
                                                        "autograd_s": 9.0}]}
    cfg = smoke_cfg(*FIXED, "scale.control=false", "scale.finetune=null", "overrides=['trainer.step=autograd']")
    assert estimate.estimate(cfg, bench, 20)["train_hours"] * 3600 == pytest.approx(6 * 9.0)


def test_device_hours_of_random_nu_runs_use_eager_times():
    """A schedule that draws nu per minibatch runs eager even where graphs apply (scheda.planning.rules)."""
    from scheda.protocol import estimate

    bench = {"device_name": "X", "n": 1000, "rows": [{"hidden": 16, "batch_size": 20, "eager_s": 4.0, "graphed_s": 1.0}]}
    cfg = smoke_cfg("table=random_nu", "scale.control=false", "scale.finetune=null")
    est = estimate.estimate(cfg, bench, 20)
    p = estimate.items(cfg)
    graphed_epochs = sum(i["epochs"] * i["models"] for i in p["items"] if i["hidden"] and not i.get("eager"))
    eager_epochs = sum(i["epochs"] * i["models"] for i in p["items"] if i["hidden"] and i.get("eager"))
    assert eager_epochs > 0 and graphed_epochs > 0
    assert est["train_hours"] * 3600 == pytest.approx(graphed_epochs * 1.0 + eager_epochs * 4.0)


def test_a_job_kind_is_registered_once_and_any_other_name_is_a_schedule_of_scale_schedules():
    from scheda.protocol.kinds import register_kind
    from scheda.protocol.kinds.schedule import ScheduleKind
    from scheda.protocol.kinds.levels import ScheDA

    with pytest.raises(ValueError, match="job kind 'scheda' is registered twice"):
        register_kind(type("ScheDAAgain", (ScheDA,), {}))
    assert kind_of("scheda").label == "ScheDA"
    other = kind_of("cosine")
    assert isinstance(other, ScheduleKind) and other.label == "Schedule cosine"


def test_a_report_never_overwrites_another_protocol_folders_report(tmp_path):
    """Two out_dirs of one table and scale: the second report takes its folder's name; each
    rewrites its own; a report from before the owner line is rewritten as before."""
    from omegaconf import OmegaConf

    from scheda.protocol.report import OWNER, folder_id, report_path

    cfg = OmegaConf.create({"table": {"name": "table1"}, "scale": {"name": "smoke"}, "report_dir": str(tmp_path)})
    first, second = tmp_path / "a" / "runs", tmp_path / "b" / "runs"
    first.mkdir(parents=True), second.mkdir(parents=True), (tmp_path / "c" / "runs").mkdir(parents=True)
    assert report_path(cfg, first) == tmp_path / "table1_smoke.md"
    (tmp_path / "table1_smoke.md").write_text("# report\n\n" + OWNER.format(folder_id(first)) + "\n")
    assert report_path(cfg, first) == tmp_path / "table1_smoke.md"
    assert report_path(cfg, second) == tmp_path / "table1_smoke_runs.md"
    (tmp_path / "table1_smoke_runs.md").write_text("# report\n" + OWNER.format(folder_id(second)) + "\n")
    assert report_path(cfg, second) == tmp_path / "table1_smoke_runs.md"
    assert report_path(cfg, tmp_path / "c" / "runs") == tmp_path / "table1_smoke_runs_2.md"
    (tmp_path / "a").rename(tmp_path / "moved")  # a moved folder is still the same one
    assert report_path(cfg, tmp_path / "moved" / "runs") == tmp_path / "table1_smoke.md"
    (tmp_path / "table1_smoke.md").write_text("# a report written before the owner line\n")
    assert report_path(cfg, second) == tmp_path / "table1_smoke.md"


@pytest.mark.parametrize("control_test, words", [(0.52, "better than"), (0.49, "no better than")])
def test_each_control_says_in_words_which_way_its_difference_goes(control_test, words):
    """A control's clause of the report: the word and the signed difference agree (a schedule worse
    than its control once read "-0.18 points better"), and one epoch is "1 epoch"."""
    best = {"test_error": 0.50, "val_error": 0.49, "nu": 0.2, "nu0": 0.5, "epoch": 1, "start_epoch": 40}
    control = {"test_error": control_test, "val_error": 0.50, "nu": 0.5, "nu0": 0.5, "epoch": 1, "epochs": 10,
               "start_epoch": 40, "stopped_by": "patience", "epochs_trained": 2}
    clause = kind_of("control").verdict(best, control)
    diff = f"{100 * (control_test - 0.50):+.2f} points on test"
    assert f"the schedule is {words} more epochs alone ({diff}, +1.00 on validation" in clause, clause
    clause = kind_of("jump").verdict(best, {**control, "nu": 0.2})
    assert f"the gradual schedule is {words} a single switch" in clause, clause
    assert kind_of("control").describe(control) == "nu=0.5 for 10 epochs from the DA(0.5)'s epoch 40, best at 1 epoch more"


@pytest.mark.parametrize("args, line", [
    (["overrides=['model.hiden=3']"], "error: model.hiden is not a setting of model (DAConfig): did you mean "
                                      "model.hidden? (in overrides=[...], given to every job)"),
    (["overrides=['dataset=nope']"], "error: dataset=nope is not an option of dataset: use amazon, arrays or cifar10 "
                                     "(in overrides=[...], given to every job)"),
    (["overrides=['optim.momentum=-1']"], "error: optim.momentum=-1.0 must be in [0, 1) (in overrides=[...], given "
                                          "to every job)"),
    (["scale.train=['model.hiden=1']"], "error: model.hiden is not a setting of model (DAConfig): did you mean "
                                        "model.hidden? (in scale=smoke's train list, given to every job)"),
])
def test_what_every_job_is_given_is_checked_before_any_job_and_in_a_dry_run(tmp_path, args, line):
    """A misspelt override was found only when the first job failed (on a cluster, after its wait
    in the queue), and never by dry_run=true: now composed with a DA job's own values first."""
    proc = run_module("scheda.protocol.reproduce", ["scale=smoke", "dry_run=true", f"out_dir={tmp_path / 'runs'}",
                                                    *args], cwd=tmp_path)
    assert (proc.returncode, proc.stderr.strip().splitlines()[-1]) == (1, line)
    assert "plan for" not in proc.stdout + proc.stderr


def test_an_invocations_record_counts_its_time_but_not_a_stop(tmp_path, monkeypatch):
    """The protocol's record of itself: written as it starts, again when it first launches jobs
    and then each minute as it waits (so a kill loses a minute at most), its time stopped
    (``kill -STOP`` while something else is timed) left out of its seconds, and ended at its end;
    the report's wall time says what was cut off and what stopped. A record from before these
    keys reads as ended."""
    from omegaconf import OmegaConf

    from scheda.protocol import launch
    from scheda.protocol.report import _wall_time

    clock = [1000.0]
    monkeypatch.setattr(launch.time, "monotonic", lambda: clock[0])
    path = tmp_path / "invocations.json"
    older = {"started": "2026-01-01T00:00:00", "seconds": 600.0, "table": "table1", "ran_jobs": True,
             "launcher": "basic", "n_jobs": 1}
    path.write_text(json.dumps([older]))
    cfg = OmegaConf.create({"table": {"name": "features"}, "launcher": "joblib", "n_jobs": 2})
    record = lambda: json.loads(path.read_text())[-1]  # noqa: E731
    invocation = launch.Invocation(tmp_path, cfg, started=launch.time.time())
    assert record()["ended"] is False and record()["ran_jobs"] is False and len(json.loads(path.read_text())) == 2
    clock[0] += 5
    invocation.tick(poll=5, ran_jobs=True)  # the first launch: written at once
    assert record()["ran_jobs"] and record()["seconds"] == pytest.approx(5, abs=0.5)
    for _ in range(11):  # 55 s of polls: not yet a minute since the last write
        clock[0] += 5
        invocation.tick(poll=5, ran_jobs=True)
    assert record()["seconds"] == pytest.approx(5, abs=0.5)
    clock[0] += 5
    invocation.tick(poll=5, ran_jobs=True)
    assert record()["seconds"] == pytest.approx(65, abs=0.5)
    clock[0] += 605  # stopped for 10 minutes in a wait of 5 s
    invocation.tick(poll=5, ran_jobs=True)
    assert record()["seconds"] == pytest.approx(70, abs=0.5) and record()["stopped_seconds"] == pytest.approx(600)
    clock[0] += 50  # the report's own work after the last phase: no poll, all of it counts
    history = invocation.end(ran_jobs=True)
    assert history[-1] == record() and record()["ended"] and record()["seconds"] == pytest.approx(120, abs=0.5)
    assert _wall_time(history) == ("12.0 min over 2 invocations that ran jobs in this scale's directory (table1 10.0 "
                                   "min, features 2.0 min; the first started 2026-01-01T00:00:00; 10.0 min stopped, "
                                   "not counted)")
    cut = [*history, {**history[-1], "ended": False, "stopped_seconds": 0.0}]
    assert "; 1 of them cut off or still running, counted to their last record;" in _wall_time(cut)
    reader = launch.Invocation(tmp_path, cfg, started=launch.time.time(), keep=False)  # an interim report
    assert reader.end(ran_jobs=False) == history and json.loads(path.read_text()) == history


def test_a_full_disk_while_a_phase_runs_does_not_end_the_protocol(tmp_path, monkeypatch, caplog):
    """The record's minutely rewrite fails (ENOSPC): one warning, the wait goes on (an exception
    there would leave the phase running with nobody waiting on it); the end's write still raises,
    as any write of a result does."""
    from omegaconf import OmegaConf

    from scheda.protocol import launch
    from scheda.utils.errors import CheckpointError

    clock = [0.0]
    monkeypatch.setattr(launch.time, "monotonic", lambda: clock[0])
    cfg = OmegaConf.create({"table": {"name": "table1"}, "launcher": "basic", "n_jobs": 1})
    invocation = launch.Invocation(tmp_path, cfg, started=launch.time.time())

    def full(path, obj):
        raise CheckpointError(f"cannot write {path}: No space left on device")

    monkeypatch.setattr(launch, "atomic_write_json", full)
    for _ in range(30):  # 10 minutes of polls, a write due every minute
        clock[0] += 20
        invocation.tick(poll=25, ran_jobs=True)
    warnings = [r for r in caplog.records if "No space left on device" in r.getMessage()]
    assert len(warnings) == 1 and "written again at the invocation's end" in warnings[0].getMessage()
    assert invocation.entry["seconds"] == pytest.approx(600, abs=1)
    with pytest.raises(CheckpointError):
        invocation.end(ran_jobs=True)


def test_the_benchmark_is_set_beside_the_epochs_the_runs_logged(tmp_path):
    """Per size, inputs and step: the median epoch and evaluation of the runs (a paused epoch
    weighs nothing) beside the benchmark's charge; a stacked layer's inputs are its layer
    below's units, an autograd run is charged the benchmark's autograd time, a composite DA its
    own step's (a DA's, said, where the benchmark has none), and fine-tuning jobs and runs with
    no epochs logged are left out."""
    from scheda.protocol import estimate

    cfg = smoke_cfg(*FIXED)
    bench = {"device_name": "X", "n": 1000, "rows": [{"hidden": 16, "batch_size": 50, "eager_s": 2.0,
                                                      "autograd_s": 6.0}],
             "lr_search": {"n": 45000, "features": 5000, "seconds": 10.0}}
    below = tmp_path / "layer1"
    below.mkdir()
    (below / "results.json").write_text(json.dumps({"config": {"model": {"hidden": 8}}}))

    def run(hidden, epochs, evals, kind="fused", **config):
        return {"config": {"model": {"hidden": hidden}, **config}, "step": {"kind": kind},
                "history": [{"epoch": i + 1, "seconds": s} for i, s in enumerate(epochs)],
                "evaluations": [{"epoch": i + 1, "seconds": s} for i, s in enumerate(evals)]}

    runs = [run(16, [3.0, 5.0, 900.0], [1.0]), run(16, [4.0], [2.0, 3.0]),  # medians 4.5 and 2.0
            run(16, [12.0, 12.0], [], kind="autograd"),
            run(16, [7.0], [], model={"hidden": 16, "name": "composite"}),
            run(16, [1.0], [1.0], stack_on=str(below)),
            run(16, [99.0], [99.0], finetune={"enabled": True}), run(16, [], []), run(0, [1.0], [5.0])]
    line, total = estimate.against_runs(cfg, bench, 50, runs, "bench.json")
    per_eval = estimate.search_share(cfg) * 10.0 / 5000 * 16
    epoch_16 = 2.0 * estimate.train_examples(cfg) / 1000
    # every epoch and evaluation at its group's median (the 900 s one weighs as 4.5), against its charge
    typical = 1.0 + 1.0 + 2 * 12.0 + 7.0 + 4 * 4.5 + 3 * 2.0
    charged = epoch_16 * 8 / 3072 + per_eval + 2 * 3 * epoch_16 + epoch_16 + 4 * epoch_16 + 3 * per_eval
    assert total == (f"- In all, the 8 epochs and 4 evaluations the runs logged, each at its group's median, come to "
                     f"{typical / 3600:.2f} job-hours against {charged / 3600:.2f} charged ({typical / charged:.2f}x)")
    _, total = estimate.against_runs(cfg, {**bench, "side_by_side": {"jobs": 2}}, 50, runs, "bench.json")
    assert total.endswith(f"; 2 jobs at once, as the benchmark timed them, make that about {typical / 2 / 3600:.2f} "
                          f"hours of wall time")
    assert line.startswith("- The benchmark against the runs (bench.json; measured over charged: above 1, ")
    parts = line.split("): ", 1)[1].split("; ")
    assert parts == [
        f"16 units on 8 inputs, fused step: an epoch 1.0 s (median of 1) against {epoch_16 * 8 / 3072:.2g} s charged "
        f"({1.0 / (epoch_16 * 8 / 3072):.2f}x), an evaluation 1.0 s (median of 1) against {per_eval:.2g} s "
        f"({1.0 / per_eval:.2f}x)",
        f"16 units on 3072 inputs, autograd step: an epoch 12.0 s (median of 2) against "
        f"{3 * epoch_16:.1f} s charged ({12.0 / (3 * epoch_16):.2f}x)",
        f"16 units on 3072 inputs, composite step: an epoch 7.0 s (median of 1) against {epoch_16:.1f} s charged "
        f"as a DA's: the benchmark has no composite_s ({7.0 / epoch_16:.2f}x)",
        f"16 units on 3072 inputs, fused step: an epoch 4.5 s (median of 4) against {epoch_16:.1f} s charged "
        f"({4.5 / epoch_16:.2f}x), an evaluation 2.0 s (median of 3) against {per_eval:.2g} s ({2.0 / per_eval:.2f}x)"]
    assert estimate.against_runs(cfg, bench, 50, [runs[-2]], "bench.json") == []
    # a composite is charged its own step where the benchmark timed it
    bench["rows"][0]["composite_s"] = 2.5
    line, _ = estimate.against_runs(cfg, bench, 50, [runs[3]], "bench.json")
    assert line.endswith(f"composite step: an epoch 7.0 s (median of 1) against {2.5 * epoch_16 / 2.0:.1f} s charged "
                         f"({7.0 / (2.5 * epoch_16 / 2.0):.2f}x)")
