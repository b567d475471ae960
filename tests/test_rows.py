"""The row type (scheda.protocol.rows): a committed record reads into rows and back to the same
JSON, a run folder gives the row its record keeps, and the grid tables' entries (the features
table's records) read into the same type through one converter."""

from __future__ import annotations

import json

import pytest

from helpers import REPO
from scheda.protocol import rows

RESULTS = REPO / "docs" / "results"


def test_a_committed_record_reads_into_rows_and_back_unchanged():
    phases = json.loads((RESULTS / "paper_settings_cpu" / "block_0" / "record.json").read_text())["phases"]
    for kept in (phases["paper_start"], phases["paper_continue"]["runs"]):
        found = rows.from_record(kept)
        assert rows.to_record(found) == kept
    da = rows.from_record(phases["paper_start"])["20"]["da"]
    assert (da.epoch, da.test_error, da.stopped_by) == (70, 0.5391, "patience")
    assert da.read("best").epoch == da.epoch and da.read("last").epoch == da.evaluations[-1].epoch
    assert rows.to_record({"20": {"da": da, "jump": None}}) is None  # a model not finished: no record yet


def test_a_run_folder_gives_its_row(tmp_path):
    run = tmp_path / "da_seed3"
    (run / "checkpoints").mkdir(parents=True)
    results = {"status": "completed", "stopped_by": "patience", "epochs": 7,
               "evaluations": [{"epoch": 3, "nu": 0.5, "reason": "every", "val_error": 0.41, "test_error": 0.43,
                                "params": {"C": 0.5}, "at_edge": False},
                               {"epoch": 5, "nu": 0.5, "reason": "every", "val_error": 0.40, "test_error": 0.44,
                                "params": {"C": 64.0}, "at_edge": True},
                               {"epoch": 7, "nu": 0.5, "reason": "every", "val_error": 0.40, "test_error": 0.42,
                                "C": 2.0}],  # an older run's: only C
               "history": [{"epoch": e, "loss": 100.0 - e, "nu": 0.5} for e in range(1, 8)]}
    (run / "results.json").write_text(json.dumps(results))
    row = rows.from_run(run)
    assert (row.job, row.epoch, row.test_error, row.epochs_trained) == ("da_seed3", 5, 0.44, 7)  # earliest of a tie
    assert row.checkpoint is None and row.loss_at(5) == 95.0 and row.nu_at(7) == 0.5
    assert row.read("best").params == {"C": 64.0} and row.read("best").at_edge is True
    assert row.read("last").params == {"C": 2.0} and row.read("last").at_edge is None  # not recorded
    assert "at_edge" not in row.to_json()["evaluations"][2] and rows.Row.from_json(row.to_json()) == row
    from scheda.runs.rundir import checkpoint_name

    (run / "checkpoints" / checkpoint_name(5)).write_bytes(b"")
    assert rows.from_run(run).checkpoint == run / "checkpoints" / checkpoint_name(5)
    assert "checkpoint" not in rows.from_run(run).to_json()
    (run / "results.json").write_text(json.dumps({**results, "status": "running"}))
    assert rows.from_run(run) is None  # not finished
    (run / "results.json").write_text("{")
    assert rows.from_run(run) is None  # cut short: read as a run without results


@pytest.mark.parametrize("block", range(10))
def test_the_features_records_entries_read_as_rows(block):
    phases = json.loads((RESULTS / "features_cpu" / f"block_{block}" / "record.json").read_text())["phases"]
    for seed, models in (phases.get("feature_continue") or {}).items():
        for model, e in models.items():
            if not isinstance(e, dict) or "job" not in e:
                continue
            row = rows.from_entry(e)
            history = e["results"]["history"]
            assert (row.job, row.epoch, row.test_error) == (e["job"], e["epoch"], e["test_error"])
            assert row.loss_at(history[-1]["epoch"]) == history[-1]["loss"]
            assert row.read("best").val_error == min(v["val_error"] for v in e["results"]["evaluations"])
            read = next(v for v in row.evaluations if v.epoch == row.epoch)
            assert read.params == e["params"] and read.at_edge == (e["edge"] is not None)  # the epoch read only
