"""Statistics for results over seeds, with scipy's distributions (nothing hand-written).

Two kinds of noise are kept apart. *Training noise*: a model trained again with another seed
(initialisation, minibatch order, masks) lands elsewhere; over seeds, a row gets its mean,
standard deviation and a t-interval, and a comparison of two models trained on the same seed
(paired) gets the paired differences' mean, a paired t-interval and a sign-flip permutation
p-value; two sets of models that share no seed (unpaired) get Welch's interval. *Test-set
noise*: one model's error on N test images has a binomial standard error, and two models of the
same seed can be compared image by image (McNemar's exact test).

scipy.stats is imported where it is used: it costs about a second of CPU, and most importers of
this module (every sweep's summary table, through scheda.runs.gather) never call it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Summary:
    """Mean, sample standard deviation (ddof 1) and the t-interval of the mean of ``n`` values;
    ``sd`` and the interval are None for n = 1 (no spread can be estimated from one value)."""

    n: int
    mean: float
    sd: float | None
    low: float | None
    high: float | None

    @property
    def has_interval(self) -> bool:
        return self.low is not None

    def mean_sd(self, digits: int = 2, signed: bool = False, with_n: bool = False) -> str:
        """"mean ± sd" ("mean" alone where one value gives no sd), "(n)" after it with ``with_n``:
        the one way every table writes a row over seeds."""
        mean = f"{self.mean:{'+' if signed else ''}.{digits}f}"
        text = mean if self.sd is None else f"{mean} ± {self.sd:.{digits}f}"
        return f"{text} ({self.n})" if with_n else text

    def interval_text(self, digits: int = 2, signed: bool = True) -> str:
        """"[low, high]", or "none (n = 1)" where one value gives no interval."""
        if not self.has_interval:
            return f"none (n = {self.n})"
        sign = "+" if signed else ""
        return f"[{self.low:{sign}.{digits}f}, {self.high:{sign}.{digits}f}]"


def summarize(values: Sequence[float], confidence: float = CONFIDENCE) -> Summary:
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no values to summarise")
    mean = float(x.mean())
    if x.size == 1:
        return Summary(1, mean, None, None, None)
    sd = float(x.std(ddof=1))
    if sd == 0.0:  # scipy's interval is NaN at scale 0; the limit is the point itself
        return Summary(int(x.size), mean, 0.0, mean, mean)
    from scipy import stats

    low, high = stats.t.interval(confidence, df=x.size - 1, loc=mean, scale=sd / math.sqrt(x.size))
    return Summary(int(x.size), mean, sd, float(low), float(high))


@dataclass(frozen=True)
class Paired:
    """``a - b`` seed by seed: the differences, their summary (paired t-interval) and the
    two-sided sign-flip permutation p-value (exact: all 2^n sign patterns)."""

    diffs: tuple[float, ...]
    summary: Summary
    p_value: float | None

    @property
    def resolved(self) -> bool:
        """True only when the interval exists and excludes zero."""
        s = self.summary
        return s.has_interval and (s.low > 0 or s.high < 0)


def paired(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE) -> Paired:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"paired values need the same number of seeds, not {a.size} and {b.size}")
    d = a - b
    return Paired(tuple(float(v) for v in d), summarize(d, confidence), sign_flip_p(d))


@dataclass(frozen=True)
class Unpaired:
    """mean(a) - mean(b) of two independent samples (models that share no seed): Welch's
    t-interval, which does not assume the two spreads equal."""

    n_a: int
    n_b: int
    summary: Summary  # the difference's mean, low and high; n is n_a + n_b, sd None (no one sample's)

    @property
    def resolved(self) -> bool:
        s = self.summary
        return s.has_interval and (s.low > 0 or s.high < 0)


def unpaired(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE) -> Unpaired:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.size == 0 or b.size == 0:
        raise ValueError(f"unpaired values need at least one of each, not {a.size} and {b.size}")
    mean = float(a.mean() - b.mean())
    if a.size < 2 or b.size < 2:  # no spread from one value: no interval
        return Unpaired(int(a.size), int(b.size), Summary(int(a.size + b.size), mean, None, None, None))
    va, vb = float(a.var(ddof=1)) / a.size, float(b.var(ddof=1)) / b.size
    se = math.sqrt(va + vb)
    if se == 0.0:
        return Unpaired(int(a.size), int(b.size), Summary(int(a.size + b.size), mean, None, mean, mean))
    from scipy import stats

    df = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))  # Welch-Satterthwaite
    low, high = stats.t.interval(confidence, df=df, loc=mean, scale=se)
    return Unpaired(int(a.size), int(b.size), Summary(int(a.size + b.size), mean, None, float(low), float(high)))


def sign_flip_p(diffs: Sequence[float]) -> float | None:
    """Two-sided p-value of the mean difference under random signs (exact for n <= 20).
    With n paired values the smallest p it can give is 2 / 2^n (0.0625 for n = 5)."""
    d = np.asarray(diffs, dtype=np.float64)
    if d.size == 0:
        return None
    if not np.any(d) or d.size == 1:  # one difference: both signs are as extreme
        return 1.0
    from scipy import stats

    result = stats.permutation_test((d,), lambda x, axis: np.mean(x, axis=axis), permutation_type="samples",
                                    n_resamples=np.inf if d.size <= 20 else 100_000, alternative="two-sided",
                                    random_state=0)
    return float(result.pvalue)


def binomial_se(error: float, n: int) -> float:
    """Standard error of an error rate measured on ``n`` test images: sqrt(p (1 - p) / n)."""
    if n < 1:
        raise ValueError("n must be >= 1")
    return math.sqrt(error * (1.0 - error) / n)


@dataclass(frozen=True)
class McNemar:
    """Test images only ``a`` got right (``only_a``), only ``b`` (``only_b``), and the exact
    two-sided p-value of ``only_a`` among the discordant ones under p = 1/2."""

    only_a: int
    only_b: int
    p_value: float


def mcnemar(correct_a: np.ndarray, correct_b: np.ndarray) -> McNemar:
    a, b = np.asarray(correct_a, dtype=bool), np.asarray(correct_b, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"McNemar's test needs the same test images, not {a.shape} and {b.shape}")
    only_a, only_b = int(np.sum(a & ~b)), int(np.sum(~a & b))
    if only_a + only_b == 0:
        return McNemar(only_a, only_b, 1.0)
    from scipy import stats

    return McNemar(only_a, only_b, float(stats.binomtest(only_a, only_a + only_b, 0.5).pvalue))
