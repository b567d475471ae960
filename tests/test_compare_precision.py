"""scripts/compare_precision.py's verdict, from per-seed records written by hand as the script
writes them: the paired intervals, the margins fixed before the runs, and no verdict before every
planned seed is in."""

from __future__ import annotations

import importlib.util
import json

import pytest

from helpers import REPO


@pytest.fixture
def compare():
    spec = importlib.util.spec_from_file_location("compare_precision", REPO / "scripts" / "compare_precision.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SETTINGS = {"precision": "bf16", "overrides": ["model.hidden=500"], "then": ["schedule=decreasing"], "margin": 0.5,
            "recon_margin": 1.0}


def _record(seed, fp32, bf16, recon=(2000.0, 2000.0)):
    def model(error, reconstruction):
        return {"test_error": error, "epochs": 60, "loss": [1900.0, 1850.0], "seconds": 60.0, "step": {},
                "reconstruction": reconstruction}

    return {"seed": seed, **SETTINGS, "side_by_side": True, "commit": "abc",
            "fp32": {"da": model(fp32, recon[0]), "then": model(fp32 - 2, recon[0]), "wall_seconds": 100.0},
            "bf16": {"da": model(bf16, recon[1]), "then": model(bf16 - 2, recon[1]), "wall_seconds": 80.0}}


def _write(folder, records):
    folder.mkdir(parents=True, exist_ok=True)
    for r in records:
        (folder / f"seed_{r['seed']}.json").write_text(json.dumps(r))


def test_recorded_seeds_are_read_not_trained_and_the_verdict_waits_for_every_planned_seed(compare, tmp_path, capsys):
    records = tmp_path / "records"
    _write(records, [_record(1, 52.0, 52.1), _record(2, 51.5, 51.4), _record(3, 52.3, 52.4)])
    args = ["--precision", "bf16", "--margin", "0.5", "--records", str(records), "--then", "schedule=decreasing",
            "--out", str(tmp_path / "s.json"), "--report", str(tmp_path / "r.md"), "--seeds"]
    # seeds 4 and 5 planned, none allowed to train now: the three recorded are summarised, unresolved
    assert compare.main([*args, "1", "2", "3", "4", "5", "--max-seeds", "0", "--", "model.hidden=500"]) == 0
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["seeds"] == [1, 2, 3] and summary["resolved"] is False and summary["equal"] is False
    assert "**not resolved**: n = 3 of the 5 seeds" in (tmp_path / "r.md").read_text()
    assert "seed 1: recorded in" in capsys.readouterr().out
    # the three planned are all in: the intervals decide
    assert compare.main([*args, "1", "2", "3", "--", "model.hidden=500"]) == 0
    summary = json.loads((tmp_path / "s.json").read_text())
    diff = summary["difference"]["da"]["test_error"]
    assert diff["per_seed"] == pytest.approx([0.1, -0.1, 0.1]) and diff["mean"] == pytest.approx(0.1 / 3)
    assert summary["resolved"] and summary["equal"] == (-0.5 <= diff["low"] and diff["high"] <= 0.5)
    assert summary["difference"]["then"]["reconstruction"]["margin"] == pytest.approx([-20.0, 20.0])
    assert "**equal** by the rule above, n = 3" in (tmp_path / "r.md").read_text()


def test_a_difference_beyond_its_margin_is_not_equal(compare):
    records = [_record(1, 52.0, 53.0), _record(2, 51.5, 52.6), _record(3, 52.3, 53.2)]
    result = compare.summary(records, "bf16", 0.5, 1.0, 3)
    assert result["resolved"] and not result["equal"]
    assert not result["difference"]["da"]["test_error"]["within_margin"]
    recon = compare.summary([_record(s, 52.0, 52.0, recon=(2000.0, 2030.0 + s)) for s in (1, 2, 3)], "bf16", 0.5, 1.0, 3)
    assert recon["difference"]["da"]["test_error"]["within_margin"] and not recon["equal"]  # 1.5 % worse


def test_records_of_other_settings_are_refused(compare, tmp_path):
    records = tmp_path / "records"
    _write(records, [_record(1, 52.0, 52.1), _record(2, 51.5, 51.4)])
    with pytest.raises(SystemExit, match="was recorded with other overrides"):
        compare.main(["--precision", "bf16", "--margin", "0.5", "--records", str(records), "--then",
                      "schedule=decreasing", "--seeds", "1", "2", "--max-seeds", "0", "--", "model.hidden=1000"])
