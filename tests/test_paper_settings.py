"""table=paper_settings (the gradual schedule against one jump at the paper's continuation): two
blocks at the smoke scale run as a user runs them (one seed each), their records read back in the
report; each arm trains what the issue fixed (ScheDA and the jump run out, the same start under the
rule, all from the DA's best checkpoint, evaluated as Figure 2); the readings and the pre-registered
verdict are checked against numbers computed here from the records; bad values are one line."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

import pytest

from helpers import TINY_PROTOCOL, User, readme_commands, rows_of
from scheda.protocol.paper_settings_report import reading
from scheda.runs.rundir import checkpoint_name
from scheda.utils import stats

pytestmark = pytest.mark.xdist_group("paper_settings")  # one worker: the fixture runs once

BLOCKS = ("table.blocks={records: records, cut: 'one seed a block, for the test', hours: 2, list: ["
          "{name: s3, set: {table.paper_settings.seeds: [3]}}, {name: s5, set: {table.paper_settings.seeds: [5]}}]}")
COMMAND = ["scheda-reproduce", "table=paper_settings", "scale=smoke", BLOCKS, "report_dir=reports"]
# the smoke scale's arms: K 2 from nu 0.5 to 0.3 by 0.1 (two levels, 4 epochs), stage epoch 1, every 2


@pytest.fixture(scope="module")
def blocks(tmp_path_factory):
    user = User(tmp_path_factory.mktemp("paper_settings"))
    for b in range(2):
        user.run(COMMAND, *TINY_PROTOCOL, f"block={b}")
    report = user.run(COMMAND, "phases=[report]")
    records = [json.loads((user.work / "records" / f"block_{b}" / "record.json").read_text()) for b in range(2)]
    return user, records, report


def arms(record: dict) -> tuple[dict, dict]:
    """(the start's entry, the continuations by model) of a one-seed block's record."""
    (seed, start), = record["phases"]["paper_start"].items()
    return start["da"], record["phases"]["paper_continue"]["runs"][seed]


def test_each_block_trains_its_seeds_arms_as_fixed(blocks):
    user, records, _ = blocks
    for b, seed in ((0, 3), (1, 5)):
        da, cont = arms(records[b])
        assert set(cont) == {"scheda_K2", "jump_K2", "same_start"}
        scheda, jump, same = cont["scheda_K2"], cont["jump_K2"], cont["same_start"]
        # ScheDA runs its two levels out: 0.4 then 0.3, evaluated 1 epoch into each and at each level's end
        assert [(e["epoch"], e["nu"], e["reason"]) for e in scheda["evaluations"]] == [
            (1, 0.4, "stage_epoch"), (2, 0.4, "stage_end"), (3, 0.3, "stage_epoch"), (4, 0.3, "stage_end")]
        assert scheda["stopped_by"] == jump["stopped_by"] == "schedule" and scheda["epochs_trained"] == 4
        assert {e["nu"] for e in jump["evaluations"]} == {0.3} and jump["epochs_trained"] == 4
        assert [e["epoch"] for e in jump["evaluations"]][:2] == [1, 2]
        assert {e["nu"] for e in same["evaluations"]} == {0.5} and same["stopped_by"] in ("patience", "cap")
        assert [h["epoch"] for h in scheda["history"]] == [1, 2, 3, 4]
        # every continuation starts from the DA's best validation checkpoint, with the table's lr
        runs = user.work / "outputs" / "reproduce" / "smoke" / f"paper_settings_block_{b}"
        for name in (scheda["job"], jump["job"], same["job"]):
            config = json.loads((runs / "paper_continue" / name / "results.json").read_text())["config"]
            assert config["init_from"] == str(runs / "paper_da" / da["job"] / "checkpoints" / checkpoint_name(da["epoch"]))
            assert config["optim"]["lr"] == 0.1 and config["seed"] == seed
        text = (user.work / "records" / f"block_{b}" / "record.json").read_text()
        assert str(user.work) not in text and '"checkpoint"' not in text


def test_the_report_reads_the_records_by_the_rules_fixed_before_the_runs(blocks):
    _, records, report = blocks
    text = (blocks[0].work / "reports" / "paper_settings_smoke.md").read_text()
    assert "Built from the records of 2 of 2 blocks" in text
    rows = rows_of(text)
    # computed here from the records: ScheDA at its level end of lowest validation error, the jump at its best
    diffs = []
    for record in records:
        _, cont = arms(record)
        ends = [e for e in cont["scheda_K2"]["evaluations"] if e["reason"] == "stage_end"]
        paper = min(ends, key=lambda e: (e["val_error"], e["epoch"]))
        jump = min(cont["jump_K2"]["evaluations"], key=lambda e: (e["val_error"], e["epoch"]))
        diffs.append(100 * (paper["test_error"] - jump["test_error"]))
    d = stats.summarize(diffs)
    row = next(cells for key, cells in rows.items() if key.startswith("ScheDA as the paper reads it − the jump"))
    assert row[0] == "3, 5" and row[1] == "2"
    assert row[2] == f"{d.mean:+.2f} [{d.low:+.2f}, {d.high:+.2f}] points"
    assert "±0.5" in text and "fixed before any block" in text
    seed3 = rows["3"]
    _, cont = arms(records[0])
    assert seed3[1].startswith(f"{100 * reading(cont['scheda_K2'], 'paper')['test_error']:.2f} (")


def test_the_readings_follow_their_rules():
    e = {"evaluations": [
        {"epoch": 1, "reason": "stage_epoch", "val_error": 0.40, "test_error": 0.41},  # lowest, but no level's end
        {"epoch": 2, "reason": "stage_end", "val_error": 0.45, "test_error": 0.44},
        {"epoch": 3, "reason": "every", "val_error": 0.42, "test_error": 0.43},
        {"epoch": 4, "reason": "stage_end", "val_error": 0.45, "test_error": 0.46}]}
    assert reading(e, "paper")["epoch"] == 2  # a level's end; the earlier on a tie
    assert reading(e, "best")["epoch"] == 1 and reading(e, "last")["epoch"] == 4
    assert reading(None, "best") is None and reading({"evaluations": e["evaluations"][:1]}, "paper") is None
    with pytest.raises(ValueError):
        reading(e, "median")


def _found(diffs: list[float]) -> dict:
    """Records' founds whose ScheDA (paper reading) minus jump (best) differ by ``diffs`` points."""
    cont = {}
    for i, d in enumerate(diffs):
        jump = 0.50
        cont[str(i)] = {
            "scheda_K50": {"evaluations": [{"epoch": 50, "reason": "stage_end", "val_error": 0.3,
                                            "test_error": jump + d / 100}]},
            "jump_K50": {"evaluations": [{"epoch": 10, "reason": "every", "val_error": 0.3, "test_error": jump}]},
            "same_start": {"evaluations": [{"epoch": 10, "reason": "every", "val_error": 0.3, "test_error": 0.52}]}}
    return {"paper_start": {}, "paper_continue": {"runs": cont, "filters": {}}}


@pytest.mark.parametrize("diffs, verdict", [
    ([-0.1, 0.1, 0.0, 0.05, -0.05], "on par within ±0.5"),
    ([-1.5, -1.2, -1.8, -1.4, -1.6], "resolved: the first is better"),
    ([1.5, 1.2, 1.8, 1.4, 1.6], "resolved: the first is worse"),
    ([-1.0, 1.0, -0.5, 0.8, -0.2], "not resolved: neither within ±0.5 nor apart"),
])
def test_the_pre_registered_verdict_has_three_outcomes_and_not_resolved(diffs, verdict):
    from scheda.protocol.paper_settings_report import comparison_rows
    from scheda.protocol.tables.paper_settings import Settings

    s = Settings(0.7, 0.3, 0.1, (50,), 0.01, 10, (1, 3, 5), tuple(range(len(diffs))), 500, 0.05, 0.5)
    what, c, used = comparison_rows(s, _found(diffs))[0]
    assert what.startswith("ScheDA as the paper reads it − the jump at its best") and len(used) == 5
    assert c.verdict == verdict


@pytest.mark.parametrize("override, message", [
    ("table.paper_settings.K=[0]", "table.paper_settings.K=[0]: give one or more different K >= 1"),
    ("table.paper_settings.nu_final=0.5", "give 0 <= nu_final < nu0 < 1 and a delta_nu that steps"),
    ("table.paper_settings.delta_nu=0.15", "give 0 <= nu_final < nu0 < 1 and a delta_nu that steps"),
    ("table.paper_settings.margin=0", "table.paper_settings.margin=0.0: give the margin of parity in points, > 0"),
    ("table.paper_settings.seeds=[1,1]", "table.paper_settings.seeds=[1, 1]: give one or more different seeds"),
])
def test_bad_values_are_one_line_before_any_job(tmp_path, override, message):
    proc = subprocess.run([sys.executable, "-m", "scheda.protocol.reproduce", "table=paper_settings", "scale=smoke",
                           override], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1 and message in proc.stderr.strip().splitlines()[-1], proc.stderr[-2000:]
    assert len(proc.stderr.strip().splitlines()) == 1 or "Traceback" not in proc.stderr
    assert not list(tmp_path.glob("outputs/**/paper_da"))  # no job ran


def test_readmes_smoke_command_runs_the_table_as_one(tmp_path):
    """Without blocks (the smoke scale declares none) the table runs in one invocation, both seeds."""
    user = User(tmp_path)
    [command] = readme_commands("scheda-reproduce", "table=paper_settings", "scale=smoke")
    user.run(command, *TINY_PROTOCOL, "report_dir=reports")
    rows = rows_of((user.work / "reports" / "paper_settings_smoke.md").read_text())
    row = next(cells for key, cells in rows.items() if key.startswith("ScheDA as the paper reads it − the jump"))
    assert row[0] == "0, 1" and row[1] == "2" and rows["0"][1] != "—" and rows["1"][4] != "—"


def test_each_block_keeps_its_filters_small_with_a_number_and_the_report_shows_them(blocks):
    user, records, _ = blocks
    import numpy as np
    from PIL import Image

    from scheda.analysis.filter_stats import high_frequency_share
    from scheda.training.checkpoint import load_run_model

    for b, seed in ((0, "3"), (1, "5")):
        kept = records[b]["phases"]["paper_continue"]["filters"][seed]
        assert set(kept["models"]) == {"da", "scheda_K2", "jump_K2", "same_start"} and kept["cutoff"] == 0.5
        da, cont = arms(records[b])
        # the continuations at their last epoch; the share recomputed here from that checkpoint
        runs = user.work / "outputs" / "reproduce" / "smoke" / f"paper_settings_block_{b}" / "paper_continue"
        scheda = kept["models"]["scheda_K2"]
        assert scheda["epoch"] == cont["scheda_K2"]["epochs_trained"] == 4 and kept["models"]["da"]["epoch"] == da["epoch"]
        _, model, _ = load_run_model(runs / cont["scheda_K2"]["job"] / "checkpoints" / checkpoint_name(4))
        assert scheda["median"] == pytest.approx(float(np.median(high_frequency_share(model.W, (3, 32, 32)))))
        for e in kept["models"].values():
            png = user.work / "records" / f"block_{b}" / e["png"]
            assert png.stat().st_size <= 100_000 and Image.open(png).size[0] > 32
    text = (user.work / "reports" / "paper_settings_smoke.md").read_text()
    assert "![scheda_K2, seed 3](../records/block_0/filters_seed3_scheda_K2.png)" in text
    assert "- scheda_K2 − jump_K2: " in text and "(n 2)" in text
    assert (user.work / "reports" / "paper_settings_smoke_figure2.png").exists()


def test_the_shares_measure_detail():
    from scheda.analysis.filter_stats import high_frequency_share

    y, x = np.mgrid[:8, :8]
    blob = np.exp(-((y - 4) ** 2 + (x - 4) ** 2) / 8.0).ravel()
    checker = ((y + x) % 2).ravel().astype(float)
    flat = np.ones(64)
    share = high_frequency_share(np.stack([blob, checker, flat]), (1, 8, 8))
    assert share[0] < 0.01 and share[1] == pytest.approx(1.0) and share[2] == 0.0
    noise = np.random.default_rng(0).normal(size=(200, 3 * 16 * 16))
    assert 0.7 < high_frequency_share(noise, (3, 16, 16)).mean() < 0.9
    with pytest.raises(ValueError):
        high_frequency_share(noise, (3, 16, 16), cutoff=1.5)
