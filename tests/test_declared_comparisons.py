"""``table.comparisons``: the comparisons a table's YAML declares beside those every table makes,
checked before any job, and tested by the one engine (the real command over finished runs:
tests/test_smoke_protocol.py)."""

from __future__ import annotations

import re

import pytest
from omegaconf import OmegaConf

from helpers import smoke_cfg
from scheda.protocol import phases
from scheda.protocol.seed_report import comparisons, row_keys
from scheda.utils.errors import ConfigError


def declared(*items):
    return OmegaConf.create([{"a": None, "b": None, "question": None, "expect": None, "margin": None, "paper": None,
                              **item} for item in items])


def per_seed(*errors):
    return {str(seed): {"test_error": e} for seed, e in enumerate(errors)}


ROWS = {"da": per_seed(0.52, 0.53, 0.52), "scheda": per_seed(0.50, 0.51, 0.50),
        "scheda.control": per_seed(0.51, 0.52, 0.51), "scheda.jump": per_seed(0.50, 0.52, 0.50)}


def test_a_declared_comparison_is_added_and_one_of_the_table_s_own_is_given_its_expectation():
    asked = comparisons(ROWS, declared({"a": "scheda.jump", "b": "scheda.control", "margin": 0.5},
                                       {"a": "scheda", "b": "da", "expect": "lower", "paper": "43.01 against 45.34"}))
    assert [(c.a, c.b) for c in asked] == [("scheda", "da"), ("scheda", "scheda.control"), ("scheda", "scheda.jump"),
                                           ("scheda.jump", "scheda.control")]
    own = asked[0]
    assert own.name == "ScheDA − best DA" and own.expect == "lower" and own.question.startswith("does ScheDA beat")
    mine = asked[-1]
    assert mine.margin == 0.5 and mine.question.startswith("how control: same start, one jump")
    # further seeds 1 and 2: jump − control = (0.52 - 0.52, 0.50 - 0.51) -> (0, -1) points
    c = mine.between({0: 40.0, 1: 52.0, 2: 50.0}, {0: 41.0, 1: 52.0, 2: 51.0}, 0)
    assert c.first == pytest.approx(-1.0) and c.seeds == [1, 2]  # the selection seed apart, not pooled
    c = c.compared
    assert c.summary.mean == pytest.approx(-0.5) and c.margin == 0.5 and c.better == "lower"
    assert own.between({1: 51.0, 2: 50.0}, {1: 53.0, 2: 52.0}, 0).verdict == "resolved, as the paper says"


def test_a_declared_comparison_of_a_row_the_report_lacks_is_left_out():
    asked = comparisons({k: v for k, v in ROWS.items() if k != "scheda.jump"},
                        declared({"a": "scheda.jump", "b": "scheda.control"}))
    assert ("scheda.jump", "scheda.control") not in [(c.a, c.b) for c in asked]


def test_the_rows_a_table_can_compare_follow_its_scale():
    assert row_keys(smoke_cfg()) == ["da", "scheda", "scheda.control", "scheda.jump", "finetune_da", "finetune_scheda"]
    assert row_keys(smoke_cfg("scale.control=[control]", "scale.finetune=null")) == ["da", "scheda", "scheda.control"]


@pytest.mark.parametrize("comparison, message", [
    ("{a: scheda.jump, b: scheda.cosine}", "table.comparisons[0].b=scheda.cosine: table=table1 at scale=smoke has no "
                                           "such row: use one of da, scheda, scheda.control, scheda.jump, finetune_da, "
                                           "finetune_scheda"),
    ("{a: scheda, b: scheda}", "table.comparisons[0]: a and b are both scheda: compare two different rows"),
    ("{a: scheda, b: da, expect: smaller}", "table.comparisons[0].expect=smaller: use one of lower, higher, not lower, "
                                            "parity or null"),
    ("{a: scheda, b: da, margin: 0}", "table.comparisons[0].margin=0.0: an equivalence margin is > 0 points, or null"),
])
def test_a_bad_declared_comparison_is_refused_before_any_job(comparison, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        phases.check(smoke_cfg(f"table.comparisons=[{comparison}]"))


def test_a_comparison_without_one_side_is_one_line():
    with pytest.raises(ConfigError, match=re.escape("table.comparisons[0].b is missing: a comparison names two rows, "
                                                    "a and b (a - b), of da, scheda,")):
        phases.check(smoke_cfg("table.comparisons=[{a: scheda}]"))
