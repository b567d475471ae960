"""Seeds as a protocol axis at scale=smoke: the further seeds' jobs continue their own seed's
DA, the report carries the rows over seeds and the paired verdicts, and a rerun with one more
seed trains only that seed's jobs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheda import stats
from scheda.errors import ConfigError
from scheda.protocol import estimate
from scheda.protocol import plan
from helpers import smoke_cfg
from test_reproduce import reproduce


def results(path: Path) -> dict:
    return json.loads((path / "results.json").read_text())


def test_seeds_retrain_the_reported_models_paired_by_seed(tmp_path, cifar_arrays):
    proc = reproduce(tmp_path, cifar_arrays, "scale.seeds=[0,1]")
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = tmp_path / "runs"
    selection = json.loads((runs / "selection.json").read_text())["hidden"]["16"]
    continued = json.loads((runs / "continuations_table1.json").read_text())["16"]
    best_da, best = selection["best"], continued["scheda"]["best"]
    # The seed-1 DAs: the best DA and the ScheDA's DA(nu0), each at its selected lr, cut at its selected epoch.
    nus = {best_da["nu"], best["nu0"]}
    da_runs = sorted(p.name for p in (runs / "seed_da").iterdir() if p.is_dir())
    assert da_runs == sorted(f"da_h16_nu{nu:g}_lr0.1_e{selection['by_nu']['%g' % nu]['epoch']}_seed1" for nu in nus)
    start_epoch = selection["by_nu"]["%g" % best["nu0"]]["epoch"]
    start = runs / "seed_da" / f"da_h16_nu{best['nu0']:g}_lr0.1_e{start_epoch}_seed1"
    da = results(start)
    assert da["config"]["seed"] == 1 and da["status"] == "completed"
    assert da["evaluations"][-1]["epoch"] == start_epoch
    # The ScheDA and both controls continue seed 1's own DA(nu0), on seed 1's stream, cut at the selected epoch.
    seeded = sorted(p.name for p in (runs / "seed_continue").iterdir() if p.is_dir())
    assert len(seeded) == 3 and all(name.endswith("_seed1") for name in seeded)
    for name in seeded:
        res = results(runs / "seed_continue" / name)
        assert res["status"] == "completed" and res["config"]["seed"] == 1
        assert Path(res["config"]["init_from"]).parent.parent == start
        assert res["evaluations"][-1]["epoch"] == res["config"]["trainer"]["max_epochs"]
    scheda = results(runs / "seed_continue" / f"{Path(best['run']).name}_e{best['epoch']}_seed1")
    assert scheda["config"]["schedule"]["delta_nu"] == best["delta_nu"] and scheda["config"]["optim"]["lr"] == 0.1
    # Fine-tuning of seed 1's best DA and best ScheDA.
    ft = {p.name: results(p) for p in (runs / "seed_finetune").iterdir() if p.is_dir()}
    assert sorted(ft) == ["finetune_da_h16_seed1", "finetune_scheda_h16_seed1"]
    assert Path(ft["finetune_scheda_h16_seed1"]["config"]["init_from"]).parent.parent == \
        runs / "seed_continue" / f"{Path(best['run']).name}_e{best['epoch']}_seed1"
    # Per seed, every reported model's errors and per-image correctness.
    by_seed = json.loads((runs / "seeds_table1.json").read_text())
    rows = by_seed["hidden"]["16"]
    assert sorted(rows) == ["da", "finetune_da", "finetune_scheda", "scheda", "scheda.control", "scheda.jump"]
    assert all(sorted(per_seed) == ["0", "1"] for per_seed in rows.values())
    assert rows["da"]["0"]["test_error"] == best_da["test_error"]
    assert rows["scheda"]["1"]["test_error"] == scheda["evaluations"][-1]["test_error"]
    assert all(len(v["test_correct"]) > 0 for per_seed in rows.values() for v in per_seed.values())
    report = (tmp_path / "reports" / "table1_smoke.md").read_text()
    assert "Further seeds: test % mean" in report and "## Seeds" in report
    line = next(l for l in report.splitlines() if l.startswith("| ScheDA − best DA |"))
    assert "| 1 |" in line and "not resolved: one further seed gives no interval" in line
    assert "| Control: same start, one jump to the final nu | 16 |" in report
    for figure in ("figure2", "figure5"):
        assert (tmp_path / "reports" / f"table1_smoke_{figure}_h16.png").stat().st_size > 1000

    # One seed more: only its own jobs run; the first seeds' are read.
    mtimes = {p: p.stat().st_mtime for p in runs.glob("*/*/results.json")}
    again = reproduce(tmp_path, cifar_arrays, "scale.seeds=[0,1,2]")
    assert again.returncode == 0, again.stderr[-3000:]
    assert {p: p.stat().st_mtime for p in mtimes} == mtimes
    new = sorted(str(p.parent.relative_to(runs)) for p in runs.glob("*/*/results.json") if p not in mtimes)
    assert len(new) == len(da_runs) + 3 + 2 and all(name.endswith("_seed2") for name in new)
    rows = json.loads((runs / "seeds_table1.json").read_text())["hidden"]["16"]
    assert all(sorted(per_seed) == ["0", "1", "2"] for per_seed in rows.values())
    report = (tmp_path / "reports" / "table1_smoke.md").read_text()
    line = next(l for l in report.splitlines() if l.startswith("| ScheDA − best DA |"))
    d = stats.paired([100 * rows["scheda"][s]["test_error"] for s in "12"], [100 * rows["da"][s]["test_error"] for s in "12"])
    assert f"| 2 | {d.summary.mean:+.2f} ± {d.summary.sd:.2f} | [{d.summary.low:+.2f}, {d.summary.high:+.2f}] |" in line
    assert ("resolved: the first is" in line) == d.resolved and ("not resolved with 2 seeds" in line) != d.resolved

    # The selection seed is fixed with the runs it chose.
    moved = reproduce(tmp_path, cifar_arrays, "scale.seeds=[1,2]")
    assert moved.returncode == 1 and "selected its hyper-parameters with seed 0" in moved.stderr.splitlines()[-1]


def test_one_seed_says_no_interval_exists(tmp_path, cifar_arrays):
    proc = reproduce(tmp_path, cifar_arrays, "stages=[da,select,continue,report]", "scale.control=false",
                     "scale.finetune=null")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = (tmp_path / "reports" / "table1_smoke.md").read_text()
    assert "One seed (0): every number above is one training run, and no interval exists" in report
    assert not (tmp_path / "runs" / "seed_da").exists()


def test_fused_seeds_train_as_one_sweep_and_a_new_seed_as_another(tmp_path):
    cfg = smoke_cfg("scale.seeds=[0,1,2]", "scale.da.fused=true")
    selection = {"hidden": {"16": {"by_nu": {"0.5": {"nu": 0.5, "lr": 0.1, "epoch": 2, "run": "r", "checkpoint": "c"}},
                                   "best": {"nu": 0.5, "lr": 0.1, "epoch": 2, "run": "r"}}}}
    from scheda.protocol.seeds import SeedPlan
    plan = SeedPlan(cfg.scale, tmp_path, selection, {}, [])
    (job,) = plan.jobs["seed_da"]
    assert job.name == "da_h16_nu0.5_lr0.1_e2_seeds1_2" and job.values["trainer.parallel.seed"] == [1, 2]
    (tmp_path / "seed_da" / job.name).mkdir(parents=True)
    more = SeedPlan(smoke_cfg("scale.seeds=[0,1,2,3]", "scale.da.fused=true").scale, tmp_path, selection, {}, [])
    assert [j.name for j in more.jobs["seed_da"]] == [job.name, "da_h16_nu0.5_lr0.1_e2_seeds3"]
    assert more.rows[0].replicas[3][0] == tmp_path / "seed_da" / "da_h16_nu0.5_lr0.1_e2_seeds3" / "models" / "0"


@pytest.mark.parametrize("seeds, message", [("[]", "at least one seed"), ("[0,1,1]", "each seed once"),
                                             ("[0,-1]", "each >= 0")])
def test_bad_seeds_are_refused_before_any_job(seeds, message):
    with pytest.raises(ConfigError, match=message):
        plan.check(smoke_cfg(f"scale.seeds={seeds}"))


def test_the_plan_counts_the_seed_jobs():
    one = estimate.estimate(smoke_cfg(), None, 50)
    three = estimate.estimate(smoke_cfg("scale.seeds=[0,1,2]"), None, 50)
    assert "seeds" not in one["jobs"]
    # per further seed: the best DA and the ScheDA's DA(nu0) (at most), the ScheDA, two controls; two fine-tunings
    assert three["jobs"]["seeds"] == 2 * (2 + 1 + 2)
    assert three["finetune_jobs"] == one["finetune_jobs"] * 3
    fused = estimate.estimate(smoke_cfg("scale.seeds=[0,1,2]", "scale.da.fused=true"), None, 50)
    assert fused["jobs"]["seeds"] == 2 + 2 * 3  # a fused DA sweep over the seeds per nu
    assert fused["model_epochs"]["seeds"] == three["model_epochs"]["seeds"]
