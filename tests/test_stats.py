"""scheda.utils.stats against scipy on hand-made numbers: n = 1, n = 2, zero variance, the exact
sign-flip distribution, the binomial standard error and McNemar's exact test."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from scheda.utils import stats
from scheda.runs.rundir import pack_correct, unpack_correct


@pytest.fixture
def sps():
    """scipy.stats for the tests that compare with it, imported when one runs: every xdist worker
    collects this module, and scipy.stats costs each about a second of CPU."""
    from scipy import stats as sps

    return sps


def test_summary_matches_scipy_t_interval(sps):
    x = [49.85, 50.55, 50.10, 51.02, 49.40]
    s = stats.summarize(x)
    assert s.n == 5 and s.mean == pytest.approx(np.mean(x)) and s.sd == pytest.approx(np.std(x, ddof=1))
    low, high = sps.t.interval(0.95, 4, loc=np.mean(x), scale=sps.sem(x))
    assert (s.low, s.high) == (pytest.approx(low), pytest.approx(high))
    # by hand: mean ± t_{0.975, 4} sd / sqrt(5), t = 2.776445
    assert s.high - s.mean == pytest.approx(2.7764451 * s.sd / math.sqrt(5), rel=1e-6)


def test_one_value_has_no_spread_and_no_interval():
    s = stats.summarize([0.5])
    assert (s.n, s.mean, s.sd, s.low, s.high) == (1, 0.5, None, None, None) and not s.has_interval
    d = stats.paired([0.4], [0.5])
    assert d.diffs == (pytest.approx(-0.1),) and not d.resolved and d.p_value == 1.0


def test_two_values_use_one_degree_of_freedom():
    s = stats.summarize([1.0, 3.0])
    assert s.sd == pytest.approx(math.sqrt(2))
    assert s.high - s.mean == pytest.approx(12.7062047 * math.sqrt(2) / math.sqrt(2), rel=1e-6)  # t_{0.975, 1}


def test_zero_variance_gives_a_point_interval():
    s = stats.summarize([2.0, 2.0, 2.0])
    assert (s.sd, s.low, s.high) == (0.0, 2.0, 2.0)
    same = stats.paired([1.0, 2.0], [1.0, 2.0])
    assert same.summary.mean == 0 and not same.resolved and same.p_value == 1.0


def test_paired_interval_is_scipys_paired_t(sps):
    a, b = [50.1, 49.8, 51.0, 50.4, 49.9], [54.2, 54.9, 53.8, 55.0, 54.1]
    d = stats.paired(a, b)
    ci = sps.ttest_rel(a, b).confidence_interval(0.95)
    assert (d.summary.low, d.summary.high) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert d.resolved and d.summary.mean < 0
    assert not stats.paired([1.0, 2.0, 3.0], [2.0, 1.0, 3.5]).resolved  # straddles 0


def test_sign_flip_p_is_exact_over_all_sign_patterns():
    d = np.array([0.5, 1.0, -0.2, 0.7, 0.9])
    flips = [abs(np.mean(d * s)) >= abs(d.mean()) - 1e-12 for s in itertools.product([1, -1], repeat=5)]
    assert stats.sign_flip_p(d) == pytest.approx(np.mean(flips))
    # all five of one sign: the smallest p five seeds allow, 2 / 2^5
    assert stats.sign_flip_p([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(2 / 32)


def test_binomial_standard_error():
    assert stats.binomial_se(0.5, 10000) == pytest.approx(0.005)
    assert stats.binomial_se(0.4985, 10000) == pytest.approx(math.sqrt(0.4985 * 0.5015 / 10000))
    with pytest.raises(ValueError):
        stats.binomial_se(0.5, 0)


def test_mcnemar_is_the_exact_binomial_test_on_discordant_images(sps):
    a = np.array([1, 1, 1, 1, 1, 1, 0, 0, 1, 0], dtype=bool)
    b = np.array([1, 0, 0, 0, 0, 1, 1, 0, 1, 0], dtype=bool)
    m = stats.mcnemar(a, b)
    assert (m.only_a, m.only_b) == (4, 1)
    assert m.p_value == pytest.approx(sps.binomtest(4, 5, 0.5).pvalue)
    assert stats.mcnemar(a, a).p_value == 1.0
    with pytest.raises(ValueError):
        stats.mcnemar(a, a[:5])


@pytest.mark.parametrize("n", [1, 7, 8, 9, 10000])
def test_packed_correctness_round_trips(n):
    bits = np.random.default_rng(n).random(n) < 0.5
    assert np.array_equal(unpack_correct(pack_correct(bits), n), bits)
    with pytest.raises(ValueError):
        unpack_correct(pack_correct(bits), n + 8)
