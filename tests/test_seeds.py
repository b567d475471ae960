"""Seeds as a protocol axis: one seed says no interval exists, fused seed sweeps, bad seeds, the
plan's count (the smoke protocol with two seeds, stage by stage: test_smoke_protocol.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheda.utils.errors import ConfigError
from scheda.protocol import estimate
from scheda.protocol import phases
from helpers import smoke_cfg
from test_reproduce import reproduce


def results(path: Path) -> dict:
    return json.loads((path / "results.json").read_text())


def test_one_seed_says_no_interval_exists(tmp_path, cifar_arrays):
    proc = reproduce(tmp_path, cifar_arrays, "phases=[da,select,continue,report]", "scale.control=false",
                     "scale.finetune=null")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = (tmp_path / "reports" / "table1_smoke.md").read_text()
    assert "One seed (0): every number above is one training run, and no interval exists" in report
    assert not (tmp_path / "runs" / "seed_da").exists()


def test_fused_seeds_train_as_one_sweep_and_a_new_seed_as_another(tmp_path):
    cfg = smoke_cfg("scale.seeds=[0,1,2]", "scale.da.fused=true")
    selection = {"hidden": {"16": {"by_nu": {"0.5": {"nu": 0.5, "lr": 0.1, "epoch": 2, "run": "r", "checkpoint": "c"}},
                                   "best": {"nu": 0.5, "lr": 0.1, "epoch": 2, "run": "r"}}}}
    from scheda.protocol.seeds import Replicas
    plan = Replicas(cfg.scale, tmp_path, selection, {}, [])
    (job,) = plan.jobs["seed_da"]
    assert job.name == "da_h16_nu0.5_lr0.1_seeds1_2" and job.values["trainer.parallel.seed"] == [1, 2]
    (tmp_path / "seed_da" / job.name).mkdir(parents=True)
    more = Replicas(smoke_cfg("scale.seeds=[0,1,2,3]", "scale.da.fused=true").scale, tmp_path, selection, {}, [])
    assert [j.name for j in more.jobs["seed_da"]] == [job.name, "da_h16_nu0.5_lr0.1_seeds3"]
    assert more.rows[0].replicas[3][0] == tmp_path / "seed_da" / "da_h16_nu0.5_lr0.1_seeds3" / "models" / "0"


@pytest.mark.parametrize("seeds, message", [("[]", "at least one seed"), ("[0,1,1]", "each seed once"),
                                             ("[0,-1]", "each >= 0")])
def test_bad_seeds_are_refused_before_any_job(seeds, message):
    with pytest.raises(ConfigError, match=message):
        phases.check(smoke_cfg(f"scale.seeds={seeds}"))


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


def test_a_scale_saved_before_the_classifier_owned_its_grid_is_the_same_scale(tmp_path):
    from omegaconf import OmegaConf

    cfg = smoke_cfg()
    phases.check_scale_unchanged(cfg.scale, tmp_path)
    saved = OmegaConf.load(tmp_path / "scale.yaml")
    saved.train = [o.replace("classifier.c_log2_", "evaluate.c_log2_") for o in saved.train]
    del saved["seeds"]  # and from before seeds
    OmegaConf.save(saved, tmp_path / "scale.yaml")
    phases.check_scale_unchanged(smoke_cfg("scale.seeds=[0,4]").scale, tmp_path)  # not refused: the same scale
    kept = OmegaConf.load(tmp_path / "scale.yaml")  # and kept in today's words, with the seeds now asked for
    assert list(kept.seeds) == [0, 4] and list(kept.train) == list(cfg.scale.train)
    with pytest.raises(ConfigError, match="selected its hyper-parameters with seed 0"):
        phases.check_scale_unchanged(smoke_cfg("scale.seeds=[1,0]").scale, tmp_path)


def test_each_comparison_names_its_models_as_the_tables_do():
    """A comparison's second model keeps the names inside its label (only its first letter is
    lowered after the minus sign): the increasing schedule's controls say whose they are as the
    table of models does."""
    from scheda.protocol.seed_report import comparisons, seed_label

    rows = dict.fromkeys(["da", "increasing", "increasing.control", "increasing.jump", "scheda", "scheda.control",
                          "finetune_da", "finetune_scheda"])
    names = [c.name for c in comparisons(rows)]
    assert seed_label("increasing.control") == "Control: same start, constant nu (of Increasing schedule)"
    assert names == [
        "Increasing schedule − best DA", "Increasing schedule − ScheDA",
        "Increasing schedule − control: same start, constant nu (of Increasing schedule)",
        "Increasing schedule − control: same start, one jump to the final nu (of Increasing schedule)",
        "ScheDA − best DA", "ScheDA − control: same start, constant nu",
        "Fine-tuned ScheDA − fine-tuned DA"]
