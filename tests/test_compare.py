"""scheda.protocol.compare, the one engine every report's verdict goes through: outcomes on
hand-made differences whose intervals are known (by scipy), against the paper's expectation, with
and without an equivalence margin, unpaired, and the n that would resolve a comparison."""

from __future__ import annotations

import math

import pytest

from scheda.protocol.compare import Comparison, compare
from scheda.utils import stats

# differences (a - b) of 4 seeds: mean -1.0, sd 0.2: interval about [-1.32, -0.68]
APART = ([49.0, 49.2, 48.8, 49.0], [50.0, 50.0, 50.0, 50.0])
# mean +0.05, sd 0.1: interval about [-0.11, +0.21], within ±0.5 but not excluding 0
CLOSE = ([50.0, 50.2, 50.0, 50.0], [50.0, 50.0, 50.0, 49.95])
# mean +0.5, sd 2.0: interval about [-2.7, +3.7], wide
WIDE = ([52.0, 48.0, 50.0, 52.0], [50.0, 50.0, 50.0, 50.0])


def interval(a, b):
    s = stats.paired(a, b).summary
    return s.low, s.high


def test_the_hand_made_differences_have_the_intervals_the_cases_need():
    low, high = interval(*APART)
    assert high < 0
    low, high = interval(*CLOSE)
    assert -0.5 < low < 0 < high < 0.5
    low, high = interval(*WIDE)
    assert low < -0.5 and high > 0.5


@pytest.mark.parametrize("values, better, outcome, verdict", [
    (APART, None, "lower", "resolved: the first is lower"),
    (APART, "lower", "lower", "resolved: the first is better"),
    (APART, "higher", "lower", "resolved: the first is worse"),
    (CLOSE, None, "not resolved", "not resolved"),
    (WIDE, "lower", "not resolved", "not resolved"),
])
def test_outcomes_without_a_margin(values, better, outcome, verdict):
    c = compare(*values, better=better)
    assert (c.outcome, c.verdict) == (outcome, verdict)
    assert c.resolved == (outcome != "not resolved") and c.n == 4


def test_an_interval_that_holds_0_is_never_parity_without_a_margin_fixed_before():
    c = compare(*CLOSE, expect="parity")
    assert c.outcome == "not resolved" and not c.on_par
    assert c.verdict == "not resolved: the interval holds 0, but no margin of parity was fixed before the runs"


@pytest.mark.parametrize("values, outcome, verdict", [
    (CLOSE, "on par", "on par within ±0.5"),
    (WIDE, "not resolved", "not resolved: neither within ±0.5 nor apart"),
    (APART, "lower", "resolved: the first is better"),
])
def test_a_margin_makes_parity_a_verdict_of_its_own(values, outcome, verdict):
    c = compare(*values, margin=0.5, better="lower")
    assert (c.outcome, c.verdict) == (outcome, verdict)


def test_an_interval_within_the_margin_that_also_excludes_0_says_both():
    c = compare(*APART, margin=2.0)  # [-1.32, -0.68] lies within ±2 and below 0
    assert c.outcome == "on par" and c.direction == "lower"
    assert c.verdict == "on par within ±2 (the first is lower, by less)"


@pytest.mark.parametrize("values, expect, verdict", [
    (APART, "lower", "resolved, as the paper says"),
    (APART, "higher", "resolved, the opposite of the paper (the first is lower)"),
    (APART, "not lower", "resolved, against the paper (the first is lower)"),
    ((APART[1], APART[0]), "not lower", "resolved: higher, as the paper says"),
    (APART, "parity", "resolved: not on par (the first is lower)"),
    (WIDE, "lower", "not resolved"),
])
def test_verdicts_against_the_paper(values, expect, verdict):
    assert compare(*values, expect=expect).verdict == verdict


def test_no_values_and_one_pair():
    none = compare([], [1.0])
    assert (none.outcome, none.verdict, none.n, none.text()) == ("not run", "not run yet", 0, "—")
    one = compare([1.0], [2.0])
    assert one.outcome == "no interval" and one.verdict == "not resolved: one pair gives no interval"
    assert one.text() == "-1.00 points" and not one.resolved


def test_unpaired_comparisons_use_welch_and_say_so():
    from scipy import stats as sp

    a, b = [47.0, 49.0], [51.0, 49.0]
    c = compare(a, b, paired=False)
    welch = sp.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert (c.summary.low, c.summary.high) == (pytest.approx(welch.low), pytest.approx(welch.high))
    assert c.n == "2 against 2" and c.text() == "-2.00 [-8.08, +4.08] points (unpaired)"
    assert c.p_value is None and compare([47.0], [51.0, 49.0], paired=False).verdict == (
        "not resolved: one value on a side gives no interval")


def test_the_n_that_would_resolve_a_comparison_is_the_least_n_whose_interval_would():
    from scipy import stats as sp

    c = compare(*WIDE)
    s = c.summary
    n = c.n_to_resolve()
    half = [sp.t.ppf(0.975, k - 1) * s.sd / math.sqrt(k) for k in (n - 1, n)]
    assert half[0] >= abs(s.mean) > half[1]
    # with a margin, parity needs |mean| + half-width within it: here the margin is the nearer goal
    near = compare(*WIDE, margin=3.0).n_to_resolve()
    assert near < n and sp.t.ppf(0.975, near - 1) * s.sd / math.sqrt(near) < 3.0 - abs(s.mean)
    assert compare([1.0, 1.0], [1.0, 1.0]).n_to_resolve() is None  # a mean of 0: no n excludes it
    assert compare([1.0], [2.0]).n_to_resolve() is None


@pytest.mark.parametrize("kwargs, message", [({"expect": "smaller"}, "expect must be one of"),
                                             ({"better": "up"}, "better must be one of"),
                                             ({"margin": 0.0}, "margin must be > 0")])
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Comparison(None, **kwargs)


def test_summaries_render_one_way():
    s = stats.summarize([1.0, 2.0, 3.0])
    assert s.mean_sd() == "2.00 ± 1.00" and s.mean_sd(1, with_n=True) == "2.0 ± 1.0 (3)"
    assert s.mean_sd(signed=True) == "+2.00 ± 1.00" and s.interval_text(signed=False).startswith("[-0.48, 4.48")
    one = stats.summarize([0.5])
    assert one.mean_sd(with_n=True) == "0.50 (1)" and one.interval_text() == "none (n = 1)"
