"""A table in blocks (scheda.protocol.blocks): each block run in its own invocation writes a small
record; a block with a record runs nothing; the table's report is built from the records alone,
with no run folder, and its numbers are the records' own; a test writes records by hand and reads
them back in the report; bad blocks and bad records are one line each; the committed cpu cut fits
its 2 hours by the committed benchmark."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest

from helpers import REPO, TINY_PROTOCOL, User, rows_of, smoke_cfg
from scheda.utils.errors import ConfigError

pytestmark = pytest.mark.xdist_group("blocks")  # one worker: the fixture runs once

# Three blocks at the smoke scale (levels 0.5, 0.4, 0.3): seed 1's references against seed 2's DAs; seed 3's
# composite DAs; seed 4's double-size ScheDA against concatenations with seed 5's DAs
BLOCKS = ("table.blocks={records: records, cut: 'by cost, for the test', hours: 2, list: ["
          "{name: t2, set: {table.features.groups: [{layout: table2, seeds: [1, 2]}]}}, "
          "{name: comp, set: {table.features.groups: [{layout: composite, seeds: [3]}]}}, "
          "{name: dbl, set: {table.features.groups: [{layout: double, seeds: [4, 5]}]}}]}")
COMMAND = ["scheda-reproduce", "table=features", "scale=smoke", BLOCKS, "report_dir=reports"]


def record_of(user: User, block: int) -> dict:
    return json.loads((user.work / "records" / f"block_{block}" / "record.json").read_text())


@pytest.fixture(scope="module")
def blocks(tmp_path_factory):
    user = User(tmp_path_factory.mktemp("blocks"))
    runs = [user.run(COMMAND, *TINY_PROTOCOL, f"block={b}") for b in range(3)]
    return user, runs


def test_each_block_trains_in_its_own_folder_and_writes_a_small_record(blocks):
    user, runs = blocks
    out = user.work / "outputs" / "reproduce" / "smoke"
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["features_block_0", "features_block_1", "features_block_2"]
    t2 = sorted(p.name for p in (out / "features_block_0" / "feature_da").iterdir() if (p / "results.json").exists())
    # the reference seed trains its DA(max nu) and DA(min nu) only; the candidates' seed every level
    assert t2 == ["da_h16_nu0.3_lr0.1_seed1", "da_h16_nu0.3_lr0.1_seed2", "da_h16_nu0.4_lr0.1_seed2",
                  "da_h16_nu0.5_lr0.1_seed1", "da_h16_nu0.5_lr0.1_seed2"]
    for b, run in enumerate(runs):
        assert f"block {b} (" in run.output and "its record is records/block_" in run.output
        path = user.work / "records" / f"block_{b}" / "record.json"
        assert path.stat().st_size < 200_000  # KB, not MB
        record = record_of(user, b)
        assert record["block"] == b and record["precisions"] == ["fp32"] and record["measured"]["seconds"] > 0
        assert record["commit"] and set(record["phases"]) == {"feature_models", "feature_continue", "feature_analysis"}
        assert all(job["status"] == "completed" for job in record["jobs"])
        text = path.read_text()
        assert str(user.work) not in text and "checkpoint\"" not in text  # no path of the machine it ran on
    models = record_of(user, 0)["phases"]["feature_models"]
    assert set(models) == {"1", "2"} and set(models["1"]["da"]) == {"0.5", "0.3"}
    seed1 = models["1"]["da"]["0.5"]
    results = json.loads((out / "features_block_0" / "feature_da" / "da_h16_nu0.5_lr0.1_seed1" / "results.json")
                         .read_text())
    assert [h["loss"] for h in seed1["results"]["history"]] == [h["loss"] for h in results["history"]]
    analysis = record_of(user, 0)["phases"]["feature_analysis"]
    assert set(analysis["similarity"]["train"]) == {"1"} and analysis["similarity"]["train"]["1"]["candidates"] == 2
    # Figure 6's cells that seed 1's DA(0.5) and DA(0.3) allow beside seed 2's every level: 5 of 6
    assert len(analysis["concat"]["1_2"]["cells"]) == 5


def test_a_block_with_a_record_runs_nothing_and_the_report_needs_no_run_folder(blocks):
    user, _ = blocks
    again = user.run(COMMAND, *TINY_PROTOCOL, "block=0")
    assert "block 0 (t2) has its record (records/block_0" in again.output and "nothing to run" in again.output
    assert "phase feature_da" not in again.output
    listed = user.run(COMMAND, "dry_run=true").output
    assert re.search(r"block 0 t2: .*; \d+ model-epochs planned .*; record of ", listed), listed
    shutil.rmtree(user.work / "outputs")  # a new machine: only the committed records are left
    user.run(COMMAND, "phases=[report]")
    report = (user.work / "reports" / "features_smoke.md").read_text()
    assert "Built from the records of 3 of 3 blocks (records)" in report
    every = rows_of(report.split("## Every model")[1].split("\n## ")[0])
    models = record_of(user, 0)["phases"]["feature_models"]
    cont = record_of(user, 0)["phases"]["feature_continue"]
    da = models["1"]["da"]["0.5"]
    assert every["DA(0.5)"][0].startswith(f"{100 * da['test_error']:.2f} ({da['epoch']}")
    assert every["DA(0.4)"][0] == "—"  # seed 1 trains no DA(0.4)
    assert every["ScheDA"][0].startswith(f"{100 * cont['1']['scheda']['test_error']:.2f}")
    assert every["Composite DA, joint"][2].startswith(
        f"{100 * record_of(user, 1)['phases']['feature_models']['3']['composite']['joint']['test_error']:.2f}")
    assert "ScheDA, twice the units" in every and "Not drawn: this report is built from the blocks' records" in report
    blocks_table = rows_of(report.split("- The cut:")[1].split("\n\n")[1])
    assert [row[3] for key, row in blocks_table.items() if key != "Block"] == ["fp32"] * 3


def _entry(test_error: float, epoch: int = 10) -> dict:
    return {"job": "j", "epoch": epoch, "nu": 0.5, "val_error": test_error - 0.01, "test_error": test_error,
            "params": {"C": 1.0}, "val_n": 20, "stopped_by": "patience", "epochs_trained": epoch + 4, "edge": None,
            "results": {"history": [{"epoch": e, "loss": 100.0 - e, "nu": 0.5} for e in range(1, epoch + 1)],
                        "evaluations": [{"epoch": epoch, "val_error": test_error - 0.01, "test_error": test_error}]}}


def _measures(share: float) -> dict:
    counts = {"0.5": 8 * share, "0.4": 0.0, "0.3": 16 - 8 * share}
    one = {"counts": counts, "tied": 0, "mean_best": 0.9, "median_margin": 0.01, "share_high": share}
    return {"cosine": one, "correlation": {**one, "share_high": share / 2}}


def _record(block: int, reference: int, candidate: int, shares: dict[str, float], errors: dict[str, float]) -> dict:
    """One table2 block's record as the code writes it, with chosen numbers."""
    nus = ("0.5", "0.4", "0.3")
    refs = {}
    for ref, share in shares.items():
        refs[ref] = {"cka": {f"da{nu}": 0.5 for nu in nus}, "cka_own_start": 0.9, "other": _measures(share)}
        if ref in ("scheda", "jump", "same_start"):
            refs[ref]["own_start"] = _measures(share)
    doc = {"key": {}, "seed": reference, "candidates": candidate, "n": 100, "refs": refs,
           "ceiling": {"0.5": 0.6, "0.3": 0.7}, "seconds": 1.0}
    cells = [{"low": lo, "high": hi, "seeds": [reference, candidate], "val_error": 0.5, "test_error": 0.5,
              "params": {"C": 1.0}, "at_edge": False, "seconds": 1.0}
             for lo, hi in (("0.3", "0.3"), ("0.3", "0.4"), ("0.3", "0.5"), ("0.4", "0.5"), ("0.5", "0.5"))]
    cells[2].update(val_error=0.45, test_error=errors.get("concat", 0.5))  # the pair's best on validation
    return {
        "version": 1, "table": "features", "scale": "smoke", "block": block, "name": f"t{block}",
        "values": {"table.features.groups": [{"layout": "table2", "seeds": [reference, candidate]}]},
        "commit": "abc1234", "date": "2026-12-02 10:00", "device": "jobs ran on cpu", "precisions": ["fp32"],
        "estimate": {"device_hours": 1.0}, "bench": None,
        "measured": {"seconds": 5400.0, "invocations": 1, "stopped_seconds": 0.0, "job_seconds": 10000.0,
                     "launchers": ["joblib n_jobs=2"]},
        "jobs": [],
        "phases": {
            "feature_models": {str(reference): {"da": {"0.5": _entry(0.55), "0.3": _entry(errors["da_low"])},
                                                "composite": {}},
                               str(candidate): {"da": {nu: _entry(0.56) for nu in nus}, "composite": {}}},
            "feature_continue": {str(reference): {"scheda": _entry(errors["scheda"]), "jump": _entry(0.52),
                                                  "same_start": _entry(0.54)}},
            "feature_analysis": {"similarity": {"train": {str(reference): doc}, "val": {str(reference): doc}},
                                 "concat": {f"{reference}_{candidate}": {"key": {}, "pair": [reference, candidate],
                                                                         "cells": cells}},
                                 "reconstruction": {}},
        }}


def _double_record(block: int, seeds: tuple[int, ...], errors: tuple[float, ...],
                   starts: tuple[float, ...]) -> dict:
    """One block's record of double_alone groups (each seed's double-size DA at ``starts``, its ScheDA at
    ``errors``), chosen numbers."""
    record = _record(block, 0, 1, {}, {"scheda": 0.5, "da_low": 0.5})
    record.update(name=f"t{block}", values={"table.features.groups": [{"layout": "double_alone", "seeds": [seed]}
                                                                      for seed in seeds]})
    record["phases"] = {
        "feature_models": {str(seed): {"da": {}, "composite": {}, "da2": _entry(start)}
                           for seed, start in zip(seeds, starts)},
        "feature_continue": {str(seed): {"scheda2": _entry(error)} for seed, error in zip(seeds, errors)},
        "feature_analysis": {"similarity": {"train": {}, "val": {}}, "concat": {}, "reconstruction": {}}}
    return record


def test_the_report_from_records_written_by_hand_gives_their_numbers(tmp_path):
    """Two table2 blocks' records (of four declared), nothing else: the report says which are in
    and pairs ScheDA's share against the jump's over the two reference seeds."""
    blocks = ("table.blocks={records: recs, cut: by hand, list: ["
              "{name: t0, set: {table.features.groups: [{layout: table2, seeds: [1, 2]}]}}, "
              "{name: t1, set: {table.features.groups: [{layout: table2, seeds: [3, 4]}]}}, "
              "{name: t2, set: {table.features.groups: [{layout: table2, seeds: [5, 6]}]}}, "
              "{name: t3, set: {table.features.groups: [{layout: table2, seeds: [7, 8]}]}}, "
              "{name: t4, set: {table.features.groups: [{layout: double_alone, seeds: [9]}, "
              "{layout: double_alone, seeds: [10]}]}}]}")
    shares = [{"scheda": 0.60, "jump": 0.50, "same_start": 0.70, "da_star_low": 0.20, "da_star_high": 0.90},
              {"scheda": 0.64, "jump": 0.58, "same_start": 0.72, "da_star_low": 0.30, "da_star_high": 0.80}]
    for block, (ref, cand), share, scheda, concat in ((0, (1, 2), shares[0], 0.50, 0.51),
                                                      (2, (5, 6), shares[1], 0.47, 0.49)):
        folder = tmp_path / "recs" / f"block_{block}"
        folder.mkdir(parents=True)
        record = _record(block, ref, cand, share, {"scheda": scheda, "da_low": 0.53, "concat": concat})
        if block == 0:  # planned by a benchmark; block 2 by none (its row says so)
            record["bench"] = "docs/results/bench_by_hand.json"
        (folder / "record.json").write_text(json.dumps(record))
    (tmp_path / "recs" / "block_4").mkdir()
    double = _double_record(4, (9, 10), (0.47, 0.49), (0.50, 0.52))
    (tmp_path / "recs" / "block_4" / "record.json").write_text(json.dumps(double))
    proc = subprocess.run([sys.executable, "-m", "scheda.protocol.reproduce", "table=features", "scale=smoke", blocks,
                           "report_dir=reports", "phases=[report]"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    report = (tmp_path / "reports" / "features_smoke.md").read_text()
    assert "Built from the records of 3 of 5 blocks (recs)" in report
    assert "Blocks without a record yet: 1 t1, 3 t3." in report
    head = rows_of(report.split("- The cut:")[1].split("\n\n")[1])
    assert head["0 t0"][4:] == ["1.50 h over 1 invocation(s)", "1.00 h", "bench_by_hand.json", "1.50"]  # 5400 s, 1 h
    assert head["2 t2"][6] == "—"
    summary = report.split("### The summary, paired by reference seed (train split)")[1].split("\n### ")[0]
    row = next(line for line in summary.splitlines() if "| cosine | another initialisation | ScheDA − jump |" in line)
    # (0.60 - 0.50, 0.64 - 0.58) in points of %: mean +8.00
    assert "+8.00 [" in row and "| 2 |" in row
    row = next(line for line in summary.splitlines() if "| correlation | another initialisation | ScheDA − DA*(0.3) |"
               in line)
    assert "+18.50 [" in row  # correlation's shares are half the cosine's here: (20, 17) points
    claims = rows_of(report.split("## The paper's claims and our verdicts")[1])
    recon = next(cells for claim, cells in claims.items() if claim.startswith("... yet a higher test error"))
    assert recon[1].startswith("+4.50 [") and recon[2] == "2"  # DA(0.3) − ScheDA: (3, 6) points
    # seeds 9 and 10's double-size ScheDA (47, 49 %) against the two pairs' best concatenations on validation
    # (51, 49 %), which share no seed with them: unpaired, Welch's interval -2 ± t(0.975, df 2) * sqrt(2)
    double = next(cells for claim, cells in claims.items() if claim.startswith("ScheDA of twice the units"))
    assert double[1:4] == ["-2.00 [-8.08, +4.08] points (unpaired)", "2 against 2", "not resolved"], double
    assert double[4].startswith("continuations ") and "; DAs ≤ " in double[4]  # the budget of the models compared
    # the width control: their double-size DAs (50, 52 %) against the same concatenations, Welch's again
    width = next(cells for claim, cells in claims.items() if claim.startswith("(ours) twice the units alone"))
    assert width[1:4] == ["+1.00 [-5.08, +7.08] points (unpaired)", "2 against 2",
                         "not resolved: the interval holds 0, but no margin of parity was fixed before the runs"], width
    every = rows_of(report.split("## Every model")[1].split("\n## ")[0])
    assert every["ScheDA, twice the units"][-3].startswith("47.00") and every["ScheDA, twice the units"][0] == "—"


@pytest.mark.parametrize("args, message", [
    (["block=0"], "error: block=0: table=features scale=smoke has no blocks (table.blocks): run it without block="),
    ([BLOCKS, "block=3"], "error: block=3: table=features scale=smoke has blocks 0 to 2; scheda-reproduce "
                          "table=features scale=smoke dry_run=true lists them with their records and estimates"),
    ([BLOCKS], "error: table=features scale=smoke runs in blocks, one per invocation: give block=N (0 to 2); "
               "scheda-reproduce table=features scale=smoke dry_run=true lists them with their records and estimates"),
    (["table.blocks={records: r, list: [{name: a, set: {table.features.seeds: [1, 2]}}]}", "phases=[report]"],
     "error: table.blocks: Missing mandatory value: cut: give records (a folder), cut (how the work was cut) and "
     "list (the blocks)"),
    (["table.blocks={records: r, cut: c, list: [{name: a, set: {table.features.sedes: [1, 2]}}]}", "block=0"],
     "error: table.blocks.list[0] (a) sets table.features.sedes, which is no key of the config: name a key of the "
     "table or scale"),
    (["table.blocks={records: r, cut: c, list: [{name: a, set: {table.features.seeds: [1, 2]}}]}",
      "phases=[report]"], "error: table=features scale=smoke has no block's record in r, a folder relative to where "
                          "you run (records are committed in the checkout: run from its root, or give "
                          "table.blocks.records=<checkout>/r): run a block first (block=N; scheda-reproduce table=features scale=smoke dry_run=true lists them with their "
                          "records and estimates)"),
])
def test_bad_blocks_are_one_line_before_any_job(tmp_path, args, message):
    proc = subprocess.run([sys.executable, "-m", "scheda.protocol.reproduce", "table=features", "scale=smoke", *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == message, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


def test_a_corrupt_or_stale_record_is_one_line_naming_the_fix(tmp_path):
    folder = tmp_path / "records" / "block_0"
    folder.mkdir(parents=True)
    for text, expected in (("{not json", "records/block_0/record.json is not a block's record ("),
                           (json.dumps({"phases": {}, "values": {"table.features.groups": [{"layout": "table2",
                                                                                           "seeds": [8, 9]}]}}),
                            "records/block_0/record.json was written for other values than block 0 (t2) sets now")):
        (folder / "record.json").write_text(text)
        proc = subprocess.run([sys.executable, "-m", "scheda.protocol.reproduce", "table=features", "scale=smoke",
                               BLOCKS, "block=0"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              check=False)
        last = proc.stderr.strip().splitlines()[-1]
        assert proc.returncode == 1 and last.startswith("error: " + expected) and "Traceback" not in proc.stderr, last


def test_joined_blocks_concatenate_their_lists_and_refuse_differing_values():
    from scheda.protocol.blocks import Block, joined
    from scheda.utils.errors import ConfigError

    cfg = smoke_cfg("table=features")
    both = joined(cfg, [Block(0, "a", {"table.features.groups": [{"layout": "table2", "seeds": [1, 2]}],
                                       "table.features.summary_nu": 0.4}),
                        Block(1, "b", {"table.features.groups": [{"layout": "composite", "seeds": [3]}],
                                       "table.features.summary_nu": 0.4})])
    assert [g["seeds"] for g in both.table.features.groups] == [[1, 2], [3]] and both.table.features.summary_nu == 0.4
    with pytest.raises(ConfigError, match="the blocks set table.features.summary_nu to different values"):
        joined(cfg, [Block(0, "a", {"table.features.summary_nu": 0.4}), Block(1, "b", {"table.features.summary_nu": 0.3})])


@pytest.mark.parametrize("table, blocks, bench, named", [
    ("features", 10, "bench_train_cpu_h500_side_by_side_2026-12-01.json", r"\S+"),
    ("features", 2, "bench_train_cpu_h500_side_by_side_alone_2026-12-03.json", r"double_\d+"),  # the re-cut
    ("stacked", 6, "bench_train_cpu_h500_side_by_side_alone_2026-12-03.json", r"\S+"),
    ("paper_settings", 10, "bench_train_cpu_h500_side_by_side_alone_2026-12-07.json", r"\S+"),
])
def test_every_committed_cpu_block_fits_its_hours_by_the_committed_benchmark(tmp_path, table, blocks, bench, named):
    """Each cpu cut in blocks is checked against the benchmark it was chosen by (its table.blocks.cut):
    the features' double blocks were cut again by the 12-03 one."""
    bench = REPO / "docs" / "results" / bench
    proc = subprocess.run([sys.executable, "-m", "scheda.protocol.reproduce", f"table={table}", "scale=cpu",
                           "dry_run=true", f"bench={bench}", f"table.blocks.records={tmp_path / 'none'}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    output = proc.stdout + proc.stderr
    planned = [float(h) for h in re.findall(rf"block \d+ {named}: .*; (\d+\.\d+) h planned", output)]
    assert len(planned) == blocks and max(planned) <= 2.0, output[-3000:]
    if named == r"\S+":
        assert "(over 2 h)" not in output, output[-3000:]


def test_a_records_folder_that_cannot_be_made_is_refused_before_any_job(tmp_path):
    (tmp_path / "afile").write_text("not a folder")
    blocks = BLOCKS.replace("records: records", "records: afile/records")
    proc = subprocess.run([sys.executable, "-m", "scheda.protocol.reproduce", "table=features", "scale=smoke", blocks,
                           "block=1"], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == (
        "error: table.blocks.records=afile/records cannot be made (afile is a file): give a folder you can write to")
    assert not (tmp_path / "outputs" / "reproduce" / "smoke" / "features_block_1").exists()


# --- blocks that read one block's selection (tests/test_stacked_protocol.py runs them) -------------
GRID = ["scheda-reproduce", "table=table1", "scale=smoke"]


@pytest.mark.parametrize("blocks_value, message", [
    ("{records: r, cut: c, selection: 0, list: [{name: a, set: {scale.seeds: [0]}}, {name: b, set: {scale.hidden: [8]}}]}",
     "error: table.blocks.list[1] (b) sets no scale.seeds: with table.blocks.selection every block names its seeds "
     "(the selection block's first selects; the others are further seeds)"),
    ("{records: r, cut: c, selection: 0, list: [{name: a, set: {scale.seeds: [0, 1]}}, {name: b, set: {scale.seeds: [1]}}]}",
     "error: table.blocks: seed 1 is in block 0 and in block 1 (b): give each seed to one block"),
    ("{records: r, cut: c, selection: 2, list: [{name: a, set: {scale.seeds: [0]}}, {name: b, set: {scale.seeds: [1]}}]}",
     "error: table.blocks.selection=2: give the index of the block that selects (0 to 1), or null for blocks that "
     "each select their own"),
])
def test_bad_selection_blocks_are_one_line(tmp_path, blocks_value, message):
    proc = subprocess.run([sys.executable, "-m", "scheda.protocol.reproduce", *GRID[1:], f"table.blocks={blocks_value}",
                           "block=1"], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == message, proc.stderr[-2000:]


def test_a_seed_block_is_estimated_by_what_its_seeds_add_to_the_selection_block():
    """Block 1's plan beyond block 0's: the further seed's replicas (table1's three seed launches and
    one fine-tuning per kind), none of the grid that block 0 trained."""
    from scheda.protocol import blocks, estimate

    cfg = smoke_cfg("table=table1", "table.blocks={records: r, cut: c, selection: 0, list: ["
                                     "{name: a, set: {scale.seeds: [0]}}, {name: b, set: {scale.seeds: [1, 2]}}]}")
    zero, one = blocks.declared(cfg)
    assert blocks.apply(cfg, one).scale.seeds == [0, 1, 2] and blocks.apply(cfg, zero).scale.seeds == [0]
    added = estimate.items(blocks.apply(cfg, one), blocks.beyond(cfg, one))
    assert {item["phase"] for item in added["items"]} == {"seeds"}
    whole = estimate.items(blocks.apply(cfg, one))
    alone = estimate.items(blocks.apply(cfg, zero))
    assert len(added["items"]) == len(whole["items"]) - len(alone["items"])
    assert added["finetune_jobs"] == whole["finetune_jobs"] - alone["finetune_jobs"] == 2 * 2  # two kinds, two seeds
    other = blocks.apply(cfg, zero)
    other.scale.da.epochs = 7  # a block that changes more than its seeds has no plan beyond the selection's
    with pytest.raises(ConfigError, match="sets only further seeds"):
        estimate.items(blocks.apply(cfg, one), other)
