"""The three similarity measures of Table 2 against their definitions written out the slow way
(N x N Gram matrices, unit-by-unit loops), with sizes that do not divide the chunks evenly."""

import numpy as np
import pytest
import torch

from scheda.analysis.similarity import MEASURES, TIE, closest, compare, moments


def hsic_unbiased(K: np.ndarray, L: np.ndarray) -> float:
    """Song et al. (2012), eq. 5, as written."""
    n = K.shape[0]
    K, L = K.copy(), L.copy()
    np.fill_diagonal(K, 0)
    np.fill_diagonal(L, 0)
    one = np.ones(n)
    return (np.trace(K @ L) + (one @ K @ one) * (one @ L @ one) / ((n - 1) * (n - 2))
            - 2 / (n - 2) * (one @ K @ L @ one)) / (n * (n - 3))


def cka_slow(x: np.ndarray, y: np.ndarray) -> float:
    K, L = x @ x.T, y @ y.T
    return hsic_unbiased(K, L) / np.sqrt(hsic_unbiased(K, K) * hsic_unbiased(L, L))


@pytest.fixture
def activations():
    g = torch.Generator().manual_seed(0)
    base = torch.rand(53, 4, generator=g, dtype=torch.float64)
    x = torch.sigmoid(base @ torch.randn(4, 7, generator=g, dtype=torch.float64) + 0.5)
    y = torch.sigmoid(base @ torch.randn(4, 5, generator=g, dtype=torch.float64)
                      + 0.3 * torch.randn(53, 5, generator=g, dtype=torch.float64))
    return x.float(), y.float()


def test_cosine_correlation_and_cka_match_their_definitions(activations):
    x, y = activations
    got = compare(x, y, chunk_size=10)  # 53 points: chunks of 10 and a last of 3
    xn, yn = x.double().numpy(), y.double().numpy()
    cos = np.array([[a @ b / np.linalg.norm(a) / np.linalg.norm(b) for b in yn.T] for a in xn.T])
    corr = np.array([[np.corrcoef(a, b)[0, 1] for b in yn.T] for a in xn.T])
    np.testing.assert_allclose(got.best["cosine"], cos.max(1), rtol=1e-6)
    np.testing.assert_allclose(got.best["correlation"], corr.max(1), rtol=1e-5)
    assert got.cka == pytest.approx(cka_slow(xn, yn), rel=1e-5)
    # the moments can be computed once per model and handed to every pair
    again = compare(x, y, moments(x, 7), moments(y, 11), chunk_size=13)
    assert again.cka == pytest.approx(got.cka, rel=1e-9)


def test_cka_is_one_for_a_rotated_and_scaled_copy_and_near_zero_for_noise(activations):
    x, _ = activations
    q, _ = torch.linalg.qr(torch.randn(7, 7, generator=torch.Generator().manual_seed(1), dtype=torch.float64))
    assert compare(x, (3.0 * x.double() @ q).float()).cka == pytest.approx(1.0, abs=1e-5)
    noise = torch.randn(x.shape[0], 6, generator=torch.Generator().manual_seed(2))
    assert abs(compare(x, noise).cka) < 0.2


def test_uncentred_cosine_is_high_for_unrelated_positive_units_where_correlation_is_not():
    """The issue's worry made concrete: independent all-positive activations."""
    g = torch.Generator().manual_seed(3)
    x, y = 0.8 + 0.1 * torch.rand(400, 3, generator=g), 0.8 + 0.1 * torch.rand(400, 3, generator=g)
    got = compare(x, y)
    assert got.best["cosine"].min() > 0.99
    assert got.best["correlation"].max() < 0.3


def test_a_unit_that_never_varies_correlates_with_nothing():
    x = torch.cat([torch.full((20, 1), 0.5), torch.rand(20, 1, generator=torch.Generator().manual_seed(4))], 1)
    got = compare(x, x)
    assert got.best["correlation"][0] == 0.0 and got.best["correlation"][1] == pytest.approx(1.0)


def test_closest_counts_winners_and_the_margin_by_which_they_win():
    best = {"0.1": np.array([0.9, 0.2, 0.5, 0.7]), "0.7": np.array([0.8, 0.6, 0.5, 0.1])}
    c = closest(best)
    assert c.counts == {"0.1": 2, "0.7": 1} and c.tied == 1  # a tie goes to neither candidate
    assert c.mean_best == pytest.approx((0.9 + 0.6 + 0.5 + 0.7) / 4)
    assert c.median_margin == pytest.approx(np.median([0.1, 0.4, 0.0, 0.6]))
    assert c.share(["0.7"]) == pytest.approx(1 / 3)  # of the units that have a closest candidate
    # a lead of a hair above TIE is a lead
    assert closest({"a": np.array([0.5 + 10 * TIE]), "b": np.array([0.5])}).counts == {"a": 1, "b": 0}


def test_every_unit_is_closest_to_itself():
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(500, 12, generator=g), torch.rand(500, 9, generator=g)
    for measure in MEASURES:
        for order in (("self", "other"), ("other", "self")):
            pairs = {"self": compare(a, a.clone(), chunk_size=64), "other": compare(a, b, chunk_size=64)}
            c = closest({k: pairs[k].best[measure] for k in order})
            assert (c.counts["self"], c.counts["other"], c.tied) == (12, 0, 0), (measure, order)


def test_a_unit_saturated_on_every_input_is_tied_not_given_to_the_first_candidate():
    """Trained sigmoid DAs have units that are 1 on every input. Such a unit of the reference has
    the same cosine with every candidate's saturated unit and correlation 0 with all: under either
    measure it has no closest DA. Before ties were counted apart, argmax gave it to the first
    candidate (DA(0.7) in Table 2), which pushes the share with high nu up."""
    g = torch.Generator().manual_seed(5)
    ones = torch.ones(300, 1)
    ref = torch.cat([ones, torch.rand(300, 3, generator=g)], 1)
    high = torch.cat([ones, torch.rand(300, 4, generator=g)], 1)  # first, as nu 0.7 is
    low = torch.cat([ones.clone(), ref[:, 1:].clone(), torch.rand(300, 2, generator=g)], 1)
    for measure in MEASURES:
        c = closest({"0.7": compare(ref, high).best[measure], "0.1": compare(ref, low).best[measure]})
        assert (c.counts, c.tied) == ({"0.7": 0, "0.1": 3}, 1), measure
        assert c.share(["0.7"]) == 0.0


@pytest.mark.cuda
def test_the_measures_on_cuda_are_the_cpus(activations):
    x, y = activations
    here, there = compare(x, y), compare(x.cuda(), y.cuda())
    for measure in ("cosine", "correlation"):
        np.testing.assert_allclose(there.best[measure], here.best[measure], rtol=1e-9)
    assert there.cka == pytest.approx(here.cka, rel=1e-9)
