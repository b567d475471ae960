"""table=paper_settings (the gradual schedule against one jump at the paper's continuation): two
blocks at the smoke scale run as a user runs them (one seed each), their records read back in the
report; each arm trains what the issue fixed (ScheDA and the jump run out, the same start under the
rule, all from the DA's best checkpoint, evaluated as Figure 2); the readings and the pre-registered
verdict are checked against numbers computed here from the records; bad values are one line."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np

import pytest

from helpers import TINY_PROTOCOL, User, readme_commands, rows_of, smoke_cfg
from scheda.protocol.paper_settings_report import reading
from scheda.protocol.rows import Evaluation, Row
from scheda.runs.rundir import checkpoint_name
from scheda.utils import stats

pytestmark = pytest.mark.xdist_group("paper_settings")  # one worker: the fixture runs once

def _block(name: str, seeds="[]", grid="[]", length="[]", composite="[]") -> str:
    return (f"{{name: {name}, set: {{table.paper_settings.seeds: {seeds}, table.paper_settings.grid.seeds: {grid}, "
            f"table.paper_settings.length.seeds: {length}, table.paper_settings.composite.seeds: {composite}}}}}")


# A block of the gradual-against-jump arms (seeds 3 and 5), one of the other parts: the grid's DAs (seeds 0-2),
# a DA at length (seed 1) and the composite DAs (seeds 0-2)
BLOCKS = ("table.blocks={records: records, cut: 'two blocks, for the test', hours: 2, list: ["
          + ", ".join([_block("s35", seeds="[3, 5]"),
                       _block("glc", grid="[0, 1, 2]", length="[1]", composite="[0, 1, 2]")]) + "]}")
# Table 1's numbers as the cpu scale sets them beside the grid (here made up: seed 0's DA(0.5) best on validation)
BESIDE = ("table.paper_settings.beside={source: other.md, note: 'made up', val: {0.5: 10.0}, best: da, "
          "rows: {da: {0: 90.0, 1: 91.0, 2: 92.0}}}")
COMPARE = ("table.paper_settings.compare=[{a: da_0.4, b: da, question: new against old}, {a: da_0.4, b: best_da}, "
           "{a: composite_alternating, b: composite_joint}]")
COMMAND = ["scheda-reproduce", "table=paper_settings", "scale=smoke", BLOCKS, BESIDE, COMPARE,
           "table.paper_settings.length.against=against", "report_dir=reports"]
# the smoke scale's arms: K 2 from nu 0.5 to 0.3 by 0.1 (two levels, 4 epochs), stage epoch 1, every 2;
# the grid's DA(0.4); DA(0.3) at a length of 4 epochs
SCHEDA_LOSS = 2500.0  # the made-up ScheDA of seed 1 that the DA at length is read against


@pytest.fixture(scope="module")
def blocks(tmp_path_factory):
    user = User(tmp_path_factory.mktemp("paper_settings"))
    # another table's block record in the real format: seed 1's ScheDA, its reported epoch's loss at nu 0.3
    against = user.work / "against" / "block_0"
    against.mkdir(parents=True)
    scheda = {"job": "scheda_h16_nu0.5_dnu0.1_K2_seed1", "epoch": 4, "nu": 0.3, "epochs_trained": 4, "stopped_by": "cap",
              "val_error": 0.5, "test_error": 0.5, "params": {"C": 1.0}, "edge": None, "val_n": 20,
              "results": {"evaluations": [{"epoch": e, "val_error": 0.5 + (4 - e) / 100, "test_error": 0.5} for e in (2, 4)],
                          "history": [{"epoch": e, "loss": SCHEDA_LOSS + 10 * (4 - e), "nu": 0.3} for e in (1, 2, 3, 4)]}}
    (against / "record.json").write_text(json.dumps({"phases": {"feature_continue": {"1": {"scheda": scheda}}}}))
    for b in range(2):
        user.run(COMMAND, *TINY_PROTOCOL, f"block={b}")
    report = user.run(COMMAND, "phases=[report]")
    records = [json.loads((user.work / "records" / f"block_{b}" / "record.json").read_text()) for b in range(2)]
    return user, records, report


def arms(record: dict, seed: str) -> tuple[dict, dict]:
    """(the start's entry, the continuations by model) of ``seed`` in a block's record."""
    return record["phases"]["paper_start"][seed]["da"], record["phases"]["paper_continue"]["runs"][seed]


def test_each_block_trains_its_seeds_arms_as_fixed(blocks):
    user, records, _ = blocks
    for seed in (3, 5):
        da, cont = arms(records[0], str(seed))
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
        runs = user.work / "outputs" / "reproduce" / "smoke" / "paper_settings_block_0"
        for name in (scheda["job"], jump["job"], same["job"]):
            config = json.loads((runs / "paper_continue" / name / "results.json").read_text())["config"]
            assert config["init_from"] == str(runs / "paper_da" / da["job"] / "checkpoints" / checkpoint_name(da["epoch"]))
            assert config["optim"]["lr"] == 0.1 and config["seed"] == seed
    for b in range(2):
        text = (user.work / "records" / f"block_{b}" / "record.json").read_text()
        assert str(user.work) not in text and '"checkpoint"' not in text


def test_the_report_reads_the_records_by_the_rules_fixed_before_the_runs(blocks):
    _, records, report = blocks
    text = (blocks[0].work / "reports" / "paper_settings_smoke.md").read_text()
    assert "Built from the records of 2 of 2 blocks" in text
    rows = rows_of(text)
    # computed here from the records: ScheDA at its level end of lowest validation error, the jump at its best
    diffs = []
    for seed in ("3", "5"):
        _, cont = arms(records[0], seed)
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
    _, cont = arms(records[0], "3")
    assert seed3[1].startswith(f"{100 * reading(Row.from_json(cont['scheda_K2']), 'paper').test_error:.2f} (")
    # the classifier's choice is kept with every evaluation; the report names the readings at its grid's edge
    evals = []
    for seed in ("3", "5"):
        da, cont = arms(records[0], seed)
        evals += da["evaluations"] + [v for m in cont.values() for v in m["evaluations"]]
    assert evals and all(set(v["params"]) == {"C"} and isinstance(v["at_edge"], bool) for v in evals)
    assert ("- The classifier's chosen setting lies inside its grid for the 16 evaluations read." in text
            or "- Read with the classifier's setting at the edge of its grid (" in text)


def test_the_edges_of_the_classifiers_grid_are_named_and_what_was_not_recorded_is_said():
    from scheda.protocol.paper_settings_report import edges

    at = lambda edge: Evaluation(5, 0.3, "every", 0.4, 0.41, None if edge is None else {"C": 64.0}, edge)  # noqa: E731
    named = edges([("a", at(True)), ("b", at(False)), ("c", None)])
    assert named[0] == "" and "at the edge of its grid (1): a (epoch 5: C=64)." in named[1]
    assert edges([("a", at(False))])[1].endswith("inside its grid for the 1 evaluations read.")
    mixed = edges([("a", at(None)), ("b", at(True))])[1]
    assert "(1): b (epoch 5: C=64)." in mixed and mixed.endswith(
        "Not recorded for the other 1 (a record written before rows kept the classifier's choice).")
    assert edges([("a", at(None)), ("b", at(False))])[1].endswith(
        "inside its grid for the 1 evaluations read where it was recorded. Not recorded for the other 1 (a record "
        "written before rows kept the classifier's choice).")
    assert "not recorded" in edges([("a", at(None))])[1] and edges([("a", None)]) == []


def _row(*evaluations: tuple[int, str, float, float]) -> Row:
    """A finished run with these (epoch, reason, val, test) evaluations, read at its best."""
    evals = tuple(Evaluation(epoch, None, reason, val, test) for epoch, reason, val, test in evaluations)
    best = min(evals, key=lambda v: (v.val_error, v.epoch))
    return Row("job", best.epoch, best.val_error, best.test_error, "schedule", evals[-1].epoch, evals)


def test_the_readings_follow_their_rules():
    e = _row((1, "stage_epoch", 0.40, 0.41),  # lowest, but no level's end
             (2, "stage_end", 0.45, 0.44), (3, "every", 0.42, 0.43), (4, "stage_end", 0.45, 0.46))
    assert reading(e, "paper").epoch == 2  # a level's end; the earlier on a tie
    assert reading(e, "best").epoch == 1 and reading(e, "last").epoch == 4
    assert reading(None, "best") is None and reading(_row((1, "stage_epoch", 0.4, 0.4)), "paper") is None
    with pytest.raises(ValueError):
        reading(e, "median")
    assert Row.from_json(e.to_json()) == e and "checkpoint" not in e.to_json()


def _found(diffs: list[float]) -> dict:
    """Records' founds whose ScheDA (paper reading) minus jump (best) differ by ``diffs`` points."""
    cont = {}
    for i, d in enumerate(diffs):
        jump = 0.50
        cont[str(i)] = {"scheda_K50": _row((50, "stage_end", 0.3, jump + d / 100)),
                        "jump_K50": _row((10, "every", 0.3, jump)), "same_start": _row((10, "every", 0.3, 0.52))}
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
    ("table.paper_settings.seeds=[1,1]", "table.paper_settings.seeds=[1, 1]: give different seeds >= 0"),
    ("table.paper_settings.grid.nu=[0.4,1.2]", "table.paper_settings.grid.nu=[0.4, 1.2]: give one or more different"),
    ("table.paper_settings.length.eval_every=9", "table.paper_settings.length: nu=0.3, epochs=4, eval_every=9: give"),
    ("table.paper_settings.length.seeds=[-1]", "table.paper_settings.length.seeds=[-1]: give different seeds >= 0"),
    ("table.paper_settings.composite.nus=[0.2,0.3,0.4]", "table.paper_settings.composite: nus=[0.2, 0.3, 0.4]"),
    ("table.paper_settings.composite.switch_every=[2,2]", "and different switch_every >= 1"),
])
def test_bad_values_are_refused_before_any_job(override, message):
    from scheda.protocol.tables.paper_settings import settings
    from scheda.utils.errors import ConfigError

    with pytest.raises(ConfigError, match=re.escape(message)):
        settings(smoke_cfg("table=paper_settings", override))


def test_a_table_with_nothing_to_train_is_one_line_and_runs_no_job(tmp_path):
    empty = [f"table.paper_settings.{part}seeds=[]" for part in ("", "grid.", "length.", "composite.")]
    proc = subprocess.run([sys.executable, "-m", "scheda.protocol.reproduce", "table=paper_settings", "scale=smoke",
                           *empty], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == (
        "error: table.paper_settings: seeds, grid.seeds, length.seeds and composite.seeds are all empty: give one of "
        "them seeds to train")
    assert "Traceback" not in proc.stderr and not list(tmp_path.glob("outputs/**/paper_*"))  # no job ran


def test_readmes_smoke_command_runs_the_table_as_one(tmp_path):
    """Without blocks (the smoke scale declares none) the table runs in one invocation, both seeds, on
    a user's threads (torch's default, 2 here): the filters computed in the protocol's process between
    two launches start its thread pool, and the launch after them must not fork that process (its child
    would wait for ever: scheda.utils.fork)."""
    user = User(tmp_path)
    [command] = readme_commands("scheda-reproduce", "table=paper_settings", "scale=smoke")
    user.run(command, *TINY_PROTOCOL, "report_dir=reports", "table.paper_settings.grid.seeds=[]",
             "table.paper_settings.composite.seeds=[]",  # those parts' blocks are the fixture's
             env={"OMP_NUM_THREADS": "2"}, timeout=180)
    rows = rows_of((user.work / "reports" / "paper_settings_smoke.md").read_text())
    row = next(cells for key, cells in rows.items() if key.startswith("ScheDA as the paper reads it − the jump"))
    assert row[0] == "0, 1" and row[1] == "2" and rows["0"][1] != "—" and rows["1"][4] != "—"


def test_each_block_keeps_its_filters_small_with_a_number_and_the_report_shows_them(blocks):
    user, records, _ = blocks
    import numpy as np
    from PIL import Image

    from scheda.analysis.filter_stats import high_frequency_share
    from scheda.training.checkpoint import load_run_model

    for seed in ("3", "5"):
        kept = records[0]["phases"]["paper_continue"]["filters"][seed]
        assert set(kept["models"]) == {"da", "scheda_K2", "jump_K2", "same_start"} and kept["cutoff"] == 0.5
        da, cont = arms(records[0], seed)
        # the continuations at their last epoch; the share recomputed here from that checkpoint
        runs = user.work / "outputs" / "reproduce" / "smoke" / "paper_settings_block_0" / "paper_continue"
        scheda = kept["models"]["scheda_K2"]
        assert scheda["epoch"] == cont["scheda_K2"]["epochs_trained"] == 4 and kept["models"]["da"]["epoch"] == da["epoch"]
        _, model, _ = load_run_model(runs / cont["scheda_K2"]["job"] / "checkpoints" / checkpoint_name(4))
        assert scheda["median"] == pytest.approx(float(np.median(high_frequency_share(model.W, (3, 32, 32)))))
        for e in kept["models"].values():
            png = user.work / "records" / "block_0" / e["png"]
            assert png.stat().st_size <= 100_000 and Image.open(png).size[0] > 32
    text = (user.work / "reports" / "paper_settings_smoke.md").read_text()
    assert "![scheda_K2, seed 5](../records/block_0/filters_seed5_scheda_K2.png)" in text
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


def test_the_grid_block_trains_each_nu_and_seed_and_reads_it_beside_the_others(blocks):
    user, records, _ = blocks
    grid = records[1]["phases"]["paper_grid"]
    assert sorted(grid) == ["0", "1", "2"] and all(set(by_nu) == {"0.4"} for by_nu in grid.values())
    assert records[1]["phases"]["paper_continue"] == {"runs": {}, "filters": {}} and records[1]["phases"]["paper_start"] == {}
    for seed, by_nu in grid.items():
        e = by_nu["0.4"]
        assert e["stopped_by"] in ("patience", "cap") and {v["nu"] for v in e["evaluations"]} == {0.4}
        assert e["test_error"] == min(e["evaluations"], key=lambda v: (v["val_error"], v["epoch"]))["test_error"]
    text = (user.work / "reports" / "paper_settings_smoke.md").read_text()
    rows = rows_of(text)
    # made-up DA(0.5) best on seed 0's validation (10 %): best_da is the other table's row
    assert "The DA best on seed 0's validation, the grid filled: DA(0.5) (other.md)" in text
    new = [100 * grid[s]["0.4"]["test_error"] for s in ("1", "2")]
    d = stats.paired(new, [91.0, 92.0])
    row = rows["new against old"]
    assert row[0] == "da_0.4 − da" and row[1] == f"{100 * grid['0']['0.4']['test_error'] - 90.0:+.2f}"
    assert row[2] == ", ".join(f"{x:+.2f}" for x in d.diffs) and row[3] == "2"
    assert row[4] == d.summary.mean_sd(signed=True) and row[5] == f"[{d.summary.low:+.2f}, {d.summary.high:+.2f}]"
    assert rows["da_0.4 − best_da"][0] == "da_0.4 − best_da (best_da is da)" and rows["da_0.4 − best_da"][1:] == row[1:]


def test_the_da_at_length_is_read_against_the_other_tables_scheda(blocks):
    user, records, _ = blocks
    length = records[1]["phases"]["paper_length"]
    e = length["runs"]["1"]["length"]
    assert e["stopped_by"] == "schedule" and [h["epoch"] for h in e["history"]] == [1, 2, 3, 4]
    assert [v["epoch"] for v in e["evaluations"]] == [2, 4]
    assert length["filters"]["1"]["models"]["length"]["epoch"] == 4
    assert (user.work / "records" / "block_1" / length["filters"]["1"]["models"]["length"]["png"]).exists()
    text = (user.work / "reports" / "paper_settings_smoke.md").read_text()
    rows = rows_of(text)
    cross = next((h["epoch"] for h in e["history"] if h["loss"] <= SCHEDA_LOSS), None)
    assert rows["seed 1"][2] == f"{SCHEDA_LOSS:.2f} (epoch 4, at most 4)"
    assert rows["seed 1"][3] == (str(cross) if cross else f"not within 4 (gap at the end {e['history'][-1]['loss'] - SCHEDA_LOSS:+.2f})")
    assert f"DA(0.3) at its last epoch − ScheDA, training loss: {e['history'][-1]['loss'] - SCHEDA_LOSS:+.2f} (summed" in text
    assert "### Filters: the paper's words measured" in text and "n 1 against 2" in text


def test_the_best_da_is_the_grids_where_it_wins_on_seed_0():
    from omegaconf import OmegaConf

    from scheda.protocol.paper_settings_report import rows_of_table
    from scheda.protocol.tables.paper_settings import Settings

    s = Settings(0.7, 0.3, 0.1, (50,), 0.01, 10, (1, 3, 5), (), 500, 0.05, 0.5, (0.2, 0.4), (0, 1))
    cfg = OmegaConf.create({"table": {"paper_settings": {"beside": {
        "source": "t1.md", "val": {"0.5": 50.56, "0.3": 50.68}, "best": "da", "rows": {"da": {0: 51.7, 1: 52.2}}}}}})
    e = lambda val, test: _row((10, "every", val, test))  # noqa: E731
    found = {"paper_grid": {"0": {"0.2": e(0.51, 0.52), "0.4": e(0.5012, 0.515)}, "1": {"0.2": e(0.5, 0.5)}},
             "paper_composite": {}}
    rows, chosen = rows_of_table(cfg, s, found)
    assert chosen == {"best_da": "da_0.4", "composite_alternating": None}
    assert rows["da_0.4"] == {0: pytest.approx(51.5)} and rows["da"] == {0: 51.7, 1: 52.2}
    found["paper_grid"]["0"]["0.4"] = e(0.51, 0.5)
    assert rows_of_table(cfg, s, found)[1]["best_da"] == "da"  # the other table's DA(0.5) lower on validation
    found["paper_grid"]["0"].pop("0.4")
    assert rows_of_table(cfg, s, found)[1]["best_da"] is None  # seed 0's DA(0.4) has not run: not chosen yet


def test_the_cpu_grids_numbers_beside_are_the_committed_reports():
    """The cpu scale's beside transcribes table1_cpu.md and increasing_cpu.md: each number is theirs."""
    from omegaconf import OmegaConf

    from helpers import REPO

    beside = OmegaConf.load(REPO / "configs" / "table_scale" / "paper_settings_cpu.yaml").table.paper_settings.beside
    results = REPO / "docs" / "results"

    def own_best(report: str, model: str) -> dict[int, float]:
        text = (results / report).read_text()
        section = text.split("at each seed's own best validation epoch: each reported model over seeds")[1]
        cells = rows_of(section.split("###")[0])[model]
        further = [float(v) for v in re.findall(r"(\d+\.\d+) \(\d+\)", cells[1])]
        return {0: float(cells[0]), **{i + 1: v for i, v in enumerate(further)}}

    assert dict(beside.rows.da) == own_best("table1_cpu.md", "Best DA")
    assert dict(beside.rows.scheda) == own_best("table1_cpu.md", "ScheDA")
    assert dict(beside.rows.increasing) == own_best("increasing_cpu.md", "Increasing schedule")
    assert dict(beside.rows["increasing.jump"]) == own_best(
        "increasing_cpu.md", "Control: same start, one jump to the final nu (of Increasing schedule)")
    per_nu = rows_of((results / "table1_cpu.md").read_text().split("the best DA per noise level")[1].split("###")[0])
    assert {k: float(v) for k, v in beside.val.items()} == {nu: float(per_nu[nu][3]) for nu in ("0.7", "0.5", "0.3", "0.1")}
    assert min(beside.val, key=lambda nu: beside.val[nu]) == "0.5" and beside.best == "da"  # table1's best DA: DA(0.5)


def test_the_composite_block_chooses_its_switch_on_seed_0_and_compares_it_over_the_others(blocks):
    user, records, _ = blocks
    composite = records[1]["phases"]["paper_composite"]
    assert sorted(composite) == ["0", "1", "2"]
    assert all(set(m) == {"joint", "alternating_S1", "alternating_S2"} for m in composite.values())
    runs = user.work / "outputs" / "reproduce" / "smoke" / "paper_settings_block_1" / "paper_composite"
    config = json.loads((runs / composite["1"]["alternating_S2"]["job"] / "results.json").read_text())["config"]
    assert config["model"]["update"] == "alternating" and config["model"]["switch_every"] == 2
    assert config["model"]["group_nus"] == [0.2, 0.4] and config["trainer"]["patience"] == 4  # a whole turn: 2 x 2
    joint = json.loads((runs / composite["1"]["joint"]["job"] / "results.json").read_text())["config"]
    assert joint["model"]["update"] == "joint" and joint["trainer"]["patience"] == 1  # the smoke scale's
    chosen = min((1, 2), key=lambda S: (composite["0"][f"alternating_S{S}"]["val_error"], S))
    text = (user.work / "reports" / "paper_settings_smoke.md").read_text()
    assert f"switch_every chosen on seed 0's validation: {chosen} epochs" in text
    row = rows_of(text)["composite_alternating − composite_joint"]
    a = [100 * composite[x][f"alternating_S{chosen}"]["test_error"] for x in ("1", "2")]
    b = [100 * composite[x]["joint"]["test_error"] for x in ("1", "2")]
    d = stats.paired(a, b).summary
    assert row[0] == f"composite_alternating − composite_joint (composite_alternating is composite_alternating_S{chosen})"
    assert row[3] == "2" and row[4] == d.mean_sd(signed=True) and row[5] == f"[{d.low:+.2f}, {d.high:+.2f}]"
