"""table=features (Sections 4.1.2-5): README's smoke command end to end on tiny arrays the test
writes, its report read for numbers (Table 2's counts add up to the units, the measures lie in
their ranges, Figure 6's table is the analysis' own evaluations), a rerun that trains and
computes nothing, an analysis that goes on from the cell it stood at, and its refusals."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from helpers import TINY_PROTOCOL, User, readme_commands, rows_of, smoke_cfg
from scheda.runs.rundir import FINAL_STATUSES, best_evaluation, read_results

HIDDEN = 16  # scale=smoke's
pytestmark = pytest.mark.xdist_group("features_protocol")  # one worker: the fixture runs once


def mean_of(cell: str) -> float:
    return float(cell.split(" ± ")[0])


@pytest.fixture(scope="module")
def features(tmp_path_factory):
    root = tmp_path_factory.mktemp("features")
    user = User(root)
    [command] = readme_commands("scheda-reproduce", "table=features", "scale=smoke")
    first = user.run(command, *TINY_PROTOCOL, "report_dir=reports")
    return user, first


def test_every_model_trains_and_the_grid_s_own_runs_are_shared(features):
    user, first = features
    runs = user.work / "outputs" / "reproduce" / "smoke"
    # seed 0's DAs at the grid's nu keep the grid's folder (table1 smoke reads them); the others are the table's
    assert sorted(p.name for p in (runs / "da").iterdir() if p.is_dir()) == ["da_h16_nu0.3_lr0.1", "da_h16_nu0.5_lr0.1"]
    assert (runs / "feature_da" / "da_h16_nu0.4_lr0.1_seed0" / "results.json").exists()
    assert (runs / "continue" / "scheda_h16_nu0.5_dnu0.1_K1" / "results.json").exists()
    report = (user.work / "reports" / "features_smoke.md").read_text()
    models = rows_of(report.split("## Every model")[1].split("\n## ")[0])
    assert {"DA(0.5)", "DA(0.4)", "DA(0.3)", "ScheDA", "One jump to 0.3", "Same start, trained on",
            "DA(0.5), twice the units", "ScheDA, twice the units", "Composite DA, joint",
            "Composite DA, alternating"} <= set(models)
    for name, cells in models.items():
        if name == "Model":
            continue
        assert cells[-1].endswith("(2)"), (name, cells)  # both seeds finished
        for cell in cells[:2]:
            assert 0 < float(cell.split(" (")[0]) < 100, (name, cell)
    assert re.search(r"plan for table=features scale=smoke: \d+ jobs \(feature_models 12, feature_continue 8\)",
                     first.output), first.output[-3000:]


def test_each_phase_started_its_twice_the_units_models_first(features):
    """A phase ends with its slowest job: the launcher got the double-size models first, as Hydra's
    job numbers (the order it started them in) say; the rest in the order planned."""
    user, _ = features
    runs = user.work / "outputs" / "reproduce" / "smoke"
    for folder, double in (("feature_da", "da_h32"), ("feature_continue", "scheda_h32")):
        num = {run.name: OmegaConf.load(run / ".hydra" / "hydra.yaml").hydra.job.num
               for run in (runs / folder).iterdir() if (run / ".hydra").is_dir()}
        first = sorted(num, key=num.get)[:2]
        assert all(name.startswith(double) for name in first) and len(num) > 2, (folder, num)


def test_table2_counts_add_up_to_the_units_under_every_measure_and_split(features):
    user, _ = features
    runs = user.work / "outputs" / "reproduce" / "smoke" / "feature_analysis"
    for split in ("train", "val"):
        for seed in (0, 1):
            doc = json.loads((runs / f"similarity_{split}_seed{seed}.json").read_text())
            assert doc["candidates"] == 1 - seed  # another initialisation's DAs
            for ref, found in doc["refs"].items():
                assert ("own_start" in found) == (ref in ("scheda", "jump", "same_start"))
                for start in [k for k in ("other", "own_start") if k in found]:
                    for measure in ("cosine", "correlation"):
                        m = found[start][measure]
                        assert sum(m["counts"].values()) + m["tied"] == HIDDEN, (split, seed, ref, start, measure)
                        assert -1 <= m["mean_best"] <= 1 and m["median_margin"] >= 0
                        assert m["share_high"] == pytest.approx((m["counts"]["0.4"] + m["counts"]["0.5"])
                                                                / (HIDDEN - m["tied"]))
                assert all(-1.5 < v <= 1 + 1e-9 for v in found["cka"].values())  # debiased CKA can dip below 0
            assert set(doc["ceiling"]) == {"0.3", "0.4", "0.5"}
    report = (user.work / "reports" / "features_smoke.md").read_text()
    table = report.split("### cosine, train split (2 reference seeds; candidates of another initialisation)")[1].split(
        "\n### ")[0]
    rows = rows_of(table)
    head = rows["nu"]
    assert head[:5] == ["ScheDA", "jump", "same start", "DA*(0.3)", "DA*(0.5)"] and "paper ScheDA" in head
    for column in range(5):  # every reference's mean counts and ties add up to its units
        assert sum(mean_of(rows[nu][column]) for nu in ("0.3", "0.4", "0.5", "tied")) == pytest.approx(HIDDEN)
    assert rows["0.3"][5:] == ["444", "167", "72"]  # the paper's counts beside ours, by nu
    assert "### Debiased linear CKA, val split (2 reference seeds)" in report


def test_figure6_and_the_claims_read_the_analysis_own_numbers(features):
    user, _ = features
    runs = user.work / "outputs" / "reproduce" / "smoke" / "feature_analysis"
    concat = json.loads((runs / "concat_0_1.json").read_text())
    assert len(concat["cells"]) == 6  # 3 levels: each unordered pair once
    report = (user.work / "reports" / "features_smoke.md").read_text()
    fig6 = rows_of(report.split("## Figure 6")[1].split("\n## ")[0])
    cells = {(c["low"], c["high"]): 100 * c["test_error"] for c in concat["cells"]}
    for lo, hi in cells:
        assert float(fig6[lo][["0.3", "0.4", "0.5"].index(hi)]) == pytest.approx(cells[(lo, hi)], abs=0.006)
        assert fig6[lo][["0.3", "0.4", "0.5"].index(hi)] == fig6[hi][["0.3", "0.4", "0.5"].index(lo)]  # the mirror
    claims = rows_of(report.split("## The paper's claims and our verdicts")[1].split("\n## ")[0])
    assert len(claims) == 1 + 10  # the header, then 10 claims: the width control is the 10th
    assert any(claim.startswith("(ours) twice the units alone") for claim in claims)
    for claim, cells in claims.items():
        if claim != "Claim":
            assert re.match(r"(not run yet|not resolved|resolved)", cells[-2]), (claim, cells)
            assert re.match(r"(continuations|DAs|composite DAs) ", cells[-1]), (claim, cells)  # its budget
    for png in ("features_smoke_figure6.png", "features_smoke_figure7.png", "features_smoke_filters.png",
                "features_smoke_filters_levels.png", "features_smoke_figure2_reconstruction.png"):
        assert (user.work / "reports" / png).stat().st_size > 1000, png
    recon = json.loads((runs / "reconstruction.json").read_text())["models"]
    assert {"0:da0.5", "1:scheda", "0:composite_alternating", "1:da2"} <= set(recon)
    # scale=smoke evaluates every epoch: its alternating runs' evaluations follow both groups' epochs
    assert "every epoch is a switch; an alternating run's evaluations follow each group's epochs in turn." in report


def test_figure7_says_which_groups_epochs_the_evaluations_follow():
    """Evaluated every 10 epochs, an alternating run of two groups is only ever seen after the second
    group's epoch (0-based epoch 9, 19, ...): the caption says so, by the model's own rule."""
    from scheda.model.network import CompositeDA, alternating_group
    from scheda.protocol.features_report import _evaluated_after

    model = CompositeDA(6, 4, [0.2, 0.4], "alternating")
    for epoch in range(5):
        model.set_epoch(epoch)
        assert model.active == alternating_group(epoch, 2) == epoch % 2
    followed = {alternating_group(e - 1, 2) for e in (10, 20, 30, 40, 50)}
    assert _evaluated_after(followed, [0.2, 0.4]) == (
        "; every evaluation of an alternating run follows an epoch of the group at nu 0.4 only (the curve shows "
        "the model as such an epoch left it)")
    assert _evaluated_after({0, 1}, [0.2, 0.4]).endswith("follow each group's epochs in turn")
    assert _evaluated_after(set(), [0.2, 0.4]) == ""


def test_a_rerun_trains_nothing_and_an_analysis_goes_on_from_where_it_stood(features):
    user, _ = features
    runs = user.work / "outputs" / "reproduce" / "smoke" / "feature_analysis"
    path = runs / "concat_0_1.json"
    concat = json.loads(path.read_text())
    concat["cells"] = concat["cells"][:4]  # as if stopped after its fourth cell
    path.write_text(json.dumps(concat))
    [command] = readme_commands("scheda-reproduce", "table=features", "scale=smoke")
    again = user.run(command, *TINY_PROTOCOL, "report_dir=reports")
    launches = re.findall(r"phase (\w+): (\d+) jobs, (\d+) already done, (\d+) to run", again.output)
    assert launches and all(todo == "0" for *_, todo in launches), launches
    assert "similarities on" not in again.output  # read, not computed again
    assert len(re.findall(r"feature analysis: DA\(\S+\) of seed 0 \+ DA\(\S+\) of seed 1", again.output)) == 2
    assert len(json.loads(path.read_text())["cells"]) == 6


@pytest.mark.parametrize("override, message", [
    ("table.features.seeds=[0,1,2]", "table.features.seeds=[0, 1, 2]: give an even number"),
    ("table.features.delta_nu=0.15", "must step from 0.5 down to 0.3 in whole steps"),
    ("table.features.composite_nus=[0.1,0.2,0.3]", "the 16 hidden units split equally among them"),
])
def test_bad_features_settings_are_refused_before_any_job(override, message):
    from scheda.protocol.tables.features import settings
    from scheda.utils.errors import ConfigError

    with pytest.raises(ConfigError, match=re.escape(message)):
        settings(smoke_cfg("table=features", override))


def test_a_phase_of_another_table_or_a_report_of_nothing_is_one_line(tmp_path):
    for args, message in ((["phases=[da]", "dry_run=true"],
                           "error: phases has ['da']: table=features has the phases feature_models, feature_continue, "
                           "feature_analysis (and report: the report)"),
                          (["phases=[report]"], "error: no model of table=features has finished in outputs/reproduce/"
                                                "smoke: nothing to report yet; run the table (the same command without "
                                                "phases=)")):
        proc = subprocess.run([sys.executable, "-m", "scheda.protocol.reproduce", "table=features", "scale=smoke",
                               *args], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == message, proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr


def test_scheda_results_on_the_protocol_folder_groups_its_runs_by_phase_and_model(features):
    """One table of every key that differs anywhere was 35 columns wide: each phase's models get a
    table of their own with the keys that vary inside it; csv stays one table for programs."""
    user, _ = features
    runs = user.work / "outputs" / "reproduce" / "smoke"
    text = user.run(["scheda-results", "outputs/reproduce/smoke"]).stdout
    heads = re.findall(r"^### (\S+): (.+) \((\d+) runs?\)$", text, flags=re.M)
    assert ("feature_da", "composite, constant", "4") in heads and ("da", "da, constant", "2") in heads, heads
    widths = [line.count("|") - 1 for line in text.splitlines() if line.startswith("| run |")]
    assert widths and max(widths) <= 12, widths
    listed = re.findall(r"^\| outputs/reproduce/smoke/(\S+) \|", text, flags=re.M)
    on_disk = sorted(str(p.parent.relative_to(runs)) for p in runs.glob("*/*/results.json"))
    assert sorted(listed) == on_disk
    csv_text = user.run(["scheda-results", "outputs/reproduce/smoke", "--format", "csv"]).stdout
    assert "###" not in csv_text and len(csv_text.strip().splitlines()) == 1 + len(on_disk)


def test_the_estimate_costs_the_composite_by_the_step_that_trains_it():
    """The composite DA trains by its own hand-written step under plain SGD, costed at the
    benchmark's composite_s (a DA's epoch where it has none), and by autograd with momentum, costed
    at autograd_s; the DAs at the default step's timing either way."""
    from scheda.protocol import estimate

    def train_hours(*overrides, **timings):
        bench = {"n": 1000, "rows": [{"hidden": 16, "batch_size": 50, "default_s": 1.0, "eager_s": 1.0, **timings}]}
        return estimate.estimate(smoke_cfg("table=features", *overrides), bench, 50)["train_hours"]

    composites = 2 * 2  # 2 seeds x 2 update rules, each at most scale.da.epochs = 3 of 1000 images
    assert train_hours(autograd_s=3.0) == train_hours()
    assert (train_hours(composite_s=1.5) - train_hours()) * 3600 == pytest.approx(composites * 3 * 0.5)
    momentum = "overrides=['optim.momentum=0.9']"
    assert (train_hours(momentum, autograd_s=3.0) - train_hours(momentum)) * 3600 == pytest.approx(composites * 3 * 2.0)


def test_the_report_names_every_model_and_cell_read_at_the_edge_of_the_c_grid(features):
    """A model or a concatenation whose chosen C lies at the grid's edge might do better with a
    wider grid: the report lists exactly those the runs' and the analysis' own records mark."""
    user, _ = features
    runs = user.work / "outputs" / "reproduce" / "smoke"
    report = (user.work / "reports" / "features_smoke.md").read_text()
    models = report.split("## Every model")[1].split("\n## ")[0]
    marked = 0  # the table's reported models (its folders hold no others) read at an evaluation at the edge
    for folder in ("da", "feature_da", "continue", "feature_continue"):
        for run in (runs / folder).iterdir():
            results = read_results(run) if run.is_dir() else None
            best = best_evaluation(results) if results and results.get("status") in FINAL_STATUSES else None
            marked += bool(best and best.get("at_edge"))
    [line] = [row for row in models.splitlines() if row.startswith("- ")]
    assert marked, "the smoke grid chooses an edge somewhere: the check below compares something"
    assert line.startswith(f"- Read with the classifier's setting at the edge of its grid ({marked}): "), line
    chosen = re.findall(r"\(seed \d+, epoch \d+: C=([\d.]+)\)", line)
    assert len(chosen) == marked and set(chosen) <= {"0.0625", "4"}  # the smoke grid's ends, 2^-4 and 2^2
    cells = {(c["low"], c["high"]) for c in json.loads((runs / "feature_analysis" / "concat_0_1.json").read_text())["cells"]
             if c["at_edge"]}
    figure6 = report.split("## Figure 6")[1].split("\n## ")[0]
    [line] = [row for row in figure6.splitlines() if row.startswith("- Cells read with the classifier's setting")]
    assert cells, "the smoke grid chooses an edge somewhere: the check below compares something"
    assert set(re.findall(r"DA\(([\d.]+)\) \+ DA\(([\d.]+)\)", line)) == cells
