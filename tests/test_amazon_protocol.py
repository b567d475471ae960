"""table=amazon: README's smoke command end to end on reviews the test writes in the processed_acl
release's own format (a number of reviews no split divides evenly), the scales it refuses, its
estimate, and the paper's diagnostic (scheda.protocol.sensitivity) on made-up selections."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from scheda.protocol.sensitivity import gains, reading, spread
from scheda.protocol.compare import compare
from fixture_data import write_amazon_processed
from helpers import User, check_stops, readme_commands


def test_readme_smoke_command_runs_the_amazon_table_and_reports_beside_the_paper(tmp_path):
    user = User(tmp_path)
    write_amazon_processed(tmp_path / "data" / "amazon", domains=("books", "dvd", "kitchen"), n=29)
    [command] = readme_commands("scheda-reproduce", "table=amazon", "scale=smoke")
    user.run(command, "scale.seeds=[0,1,2]", "report_dir=reports")
    runs = user.work / "outputs" / "reproduce" / "amazon_smoke"  # its own folder, not CIFAR-10's smoke runs
    selection = json.loads((runs / "selection.json").read_text())
    assert sorted(selection["hidden"]["16"]["by_nu"]) == ["0.3", "0.5"]
    # 3 domains x 2 labels x 29 reviews = 174: 104 / 35 / 35
    assert {e["val_n"] for e in selection["hidden"]["16"]["by_nu"].values()} == {35}
    da = json.loads((runs / "da" / "da_h16_nu0.5_lr0.1" / "results.json").read_text())
    assert da["config"]["dataset"]["name"] == "amazon" and da["config"]["dataset"]["vocab_size"] == 200
    assert da["evaluations"][-1]["test_n"] == 35
    raw = json.loads((runs / "da" / "raw" / "results.json").read_text())
    assert raw["evaluations"][-1]["test_n"] == 35
    report = (user.work / "reports" / "amazon_smoke.md").read_text()
    assert report.startswith("# Amazon reviews")
    results = report.split("## Results")[1].split("\n## ")[0]
    rows = {line.split(" | ")[0].lstrip("| "): line for line in results.splitlines() if line.startswith("| ")}
    assert rows["Raw words"].rstrip(" |").endswith("14.79")
    assert "2000: 13.61" in rows["DA"] and "2000: 13.41" in rows["ScheDA"]
    section = report.split("## Sensitivity to the noise level")[1].split("\n## ")[0]
    [row] = [line for line in section.splitlines() if line.startswith("| 16 |")]
    assert re.search(r"\| 2 \| 0\.\d / 0\.\d \| [\d.]+ \([+-][\d.]+\) \| [\d.]+ \(N = 35\) \| (yes|no) \|", row), row
    assert "(2 seeds" in row  # the gain over the further seeds 1 and 2, with its interval
    assert "a spread of 0.29 points, and ScheDA's gain 0.20 points" in section
    assert re.search(r"- 16 hidden units: (the rule decides|(does not )?agrees?)", section), section
    assert check_stops(runs, report, patience=1)  # the rule of training to convergence, as at CIFAR-10's smoke


def test_amazon_refuses_a_scale_it_has_not_and_plans_its_own_epochs(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "scheda.protocol.reproduce", "table=amazon", "scale=gpu",
                           "dry_run=true"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == ("error: table=amazon has no scale=gpu: use scale=smoke | cpu | "
                                                    "paper (configs/table_scale/amazon_<scale>.yaml)")


def test_the_estimate_counts_the_tables_own_examples_and_inputs():
    from hydra import compose, initialize_config_module

    from scheda.protocol.estimate import epoch_seconds, estimate, train_examples
    from scheda.protocol.reproduce import register_protocol_configs  # noqa: F401 (the schemas)

    bench = {"n": 45000, "rows": [{"hidden": 2000, "batch_size": 20, "eager_s": 90.0}],
             "lr_search": {"seconds": 3.0, "features": 1000}}
    with initialize_config_module("scheda.configs", version_base="1.3"):
        amazon = compose("reproduce", ["table=amazon", "scale=cpu"])
        table1 = compose("reproduce", ["table=table1", "scale=cpu", "scale.hidden=[2000]"])
    assert amazon.scale.hidden == [2000] and amazon.out_dir == "outputs/reproduce/amazon_cpu"
    assert "dataset=amazon" in amazon.scale.train and table1.out_dir == "outputs/reproduce/cpu"
    assert train_examples(amazon) == 4800 and train_examples(table1) == 45000
    assert epoch_seconds(bench, 2000, 20, examples=4800, inputs=3000) == pytest.approx(90 * 4800 / 45000 * 3000 / 3072)
    a, t = estimate(amazon, bench, 20), estimate(table1, bench, 20)
    per_epoch = lambda e: 3600 * e["train_hours"] / sum(e["model_epochs"].values())  # noqa: E731
    assert per_epoch(a) == pytest.approx(per_epoch(t) * 4800 / 45000 * 3000 / 3072)


def entry(val, test=0.3, n=1000):
    return {"val_error": val, "test_error": test, "val_n": n}


def test_the_spread_is_sensitive_only_beyond_validation_noise():
    noise = 100 * 1.96 * (2 * 0.2 * 0.8 / 1000) ** 0.5  # 3.51 points at 20 % on 1000 examples
    wide = spread({"0.7": entry(0.20), "0.3": entry(0.24), "0.1": entry(0.21)})
    assert (wide["best_nu"], wide["worst_nu"]) == ("0.7", "0.3") and wide["val"] == pytest.approx(4.0)
    assert wide["noise"] == pytest.approx(100 * 1.96 * ((0.2 * 0.8 + 0.24 * 0.76) / 1000) ** 0.5)
    assert wide["sensitive"] and wide["noise"] > noise
    assert spread({"0.7": entry(0.20), "0.3": entry(0.22)})["sensitive"] is False
    assert spread({"0.7": entry(0.20)}) is None  # one level: no spread
    old = spread({"0.7": {"val_error": 0.2, "test_error": 0.3}, "0.3": {"val_error": 0.3, "test_error": 0.3}})
    assert old["sensitive"] is None and old["noise"] is None  # runs from before val_n


def test_the_reading_in_each_case():
    better = compare([50.0, 51.0, 50.5], [48.0, 48.5, 48.2])  # DA minus ScheDA: resolved, ScheDA better
    unclear = compare([50.0, 49.0, 50.5], [49.0, 50.0, 50.0])
    worse = compare([48.0, 48.5, 48.2], [50.0, 51.0, 50.5])
    assert better.resolved and not unclear.resolved and worse.resolved
    assert reading(True, better).startswith("agrees")
    assert reading(False, unclear).startswith("agrees")
    assert reading(True, unclear).startswith("does not agree") and reading(True, worse).startswith("does not agree")
    assert reading(False, better).startswith("does not agree")
    assert reading(None, better).startswith("cannot be judged")
    assert reading(True, None).startswith("cannot be judged")
    assert reading(True, compare([50.0], [49.0])).startswith("cannot be judged")


def test_gains_pair_the_further_seeds_under_both_rules():
    def errs(*values):
        return {str(s): {"test_error": v} for s, v in enumerate(values)}

    seeded = {"selection_seed": 0, "seeds": [0, 1, 2, 3],
              "hidden": {"16": {"da": errs(0.5, 0.52, 0.51, 0.53), "scheda": errs(0.4, 0.5, 0.5, 0.5)}},
              "own_best": {"16": {"da": errs(0.5, 0.52, 0.51, 0.53), "scheda": errs(0.4, 0.51, 0.5)}}}
    found = gains(seeded, "16")
    assert found["hidden"].difference.diffs == pytest.approx((2.0, 1.0, 3.0))  # the selection seed's 10 points left out
    assert found["own_best"].difference.diffs == pytest.approx((1.0, 1.0))  # seed 3 has not finished under this rule
    assert gains(seeded, "32") == {}
