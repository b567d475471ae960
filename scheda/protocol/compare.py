"""Every comparison a report makes, and its verdict, in one place.

A comparison is ``a - b`` over two sets of values: paired (by seed, or by initialisation pair:
value i of ``a`` and of ``b`` share a seed) or unpaired (models that share no seed: Welch's
interval). The numbers come from scheda.utils.stats (t-intervals, the sign-flip p); this module
turns them into one vocabulary of verdicts, so that every report (the seeds' tables, the stacked
questions, the features table's claims, the precision rule) says the same thing of the same
interval:

* *resolved* where the 95 % interval excludes 0 ("the first lower" / "higher", or "better" /
  "worse" for a metric where lower is better, such as an error);
* *on par* only where an equivalence margin was fixed before the runs and the 95 % interval lies
  within it (two one-sided tests at 2.5 % each); an interval that merely holds 0 is "not resolved",
  never parity;
* against what the paper says (``expect``: lower, higher, not lower, parity), "as the paper says"
  or "the opposite of the paper".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from scheda.utils import stats

EXPECTS = ("lower", "higher", "not lower", "parity")
BETTER = ("lower", "higher")  # which way a metric improves; None: neither (a count, a share)


@dataclass(frozen=True)
class Comparison:
    """``a - b`` with what is known of it: the difference (None where a side has no value yet),
    what the paper expects of its sign, the equivalence margin fixed before the runs (in the
    difference's own unit), and which way the metric improves."""

    difference: stats.Paired | stats.Unpaired | None
    expect: str | None = None
    margin: float | None = None
    better: str | None = None

    def __post_init__(self):
        if self.expect is not None and self.expect not in EXPECTS:
            raise ValueError(f"expect must be one of {', '.join(EXPECTS)}, not {self.expect!r}")
        if self.better is not None and self.better not in BETTER:
            raise ValueError(f"better must be one of {', '.join(BETTER)}, not {self.better!r}")
        if self.margin is not None and not self.margin > 0:
            raise ValueError(f"an equivalence margin must be > 0, not {self.margin!r}")

    @property
    def paired(self) -> bool:
        return not isinstance(self.difference, stats.Unpaired)

    @property
    def summary(self) -> stats.Summary | None:
        return None if self.difference is None else self.difference.summary

    @property
    def n(self) -> int | str:
        """Pairs compared; for an unpaired comparison, the two sides' counts."""
        d = self.difference
        if d is None:
            return 0
        return f"{d.n_a} against {d.n_b}" if isinstance(d, stats.Unpaired) else d.summary.n

    @property
    def p_value(self) -> float | None:
        return self.difference.p_value if isinstance(self.difference, stats.Paired) else None

    @property
    def direction(self) -> str | None:
        """"lower" or "higher" where the interval excludes 0, else None."""
        s = self.summary
        if s is None or not s.has_interval or not (s.low > 0 or s.high < 0):
            return None
        return "lower" if s.mean < 0 else "higher"

    @property
    def on_par(self) -> bool:
        """The interval lies within ±margin (a margin fixed before the runs; without one, never)."""
        s = self.summary
        return (self.margin is not None and s is not None and s.has_interval
                and -self.margin <= s.low and s.high <= self.margin)

    @property
    def outcome(self) -> str:
        """One of: not run, no interval, on par, lower, higher, not resolved."""
        s = self.summary
        if s is None:
            return "not run"
        if not s.has_interval:
            return "no interval"
        if self.on_par:
            return "on par"
        return self.direction or "not resolved"

    @property
    def resolved(self) -> bool:
        return self.outcome in ("on par", "lower", "higher")

    def _first(self, direction: str) -> str:
        """"the first is lower", or for a metric with a better side, "the first is better"."""
        if self.better is None:
            return f"the first is {direction}"
        return f"the first is {'better' if direction == self.better else 'worse'}"

    @property
    def verdict(self) -> str:
        """The verdict in words, against the paper's expectation where one is given."""
        outcome, margin = self.outcome, f"±{self.margin:g}" if self.margin is not None else None
        if outcome == "not run":
            return "not run yet"
        if outcome == "no interval":
            return f"not resolved: {'one pair' if self.paired else 'one value on a side'} gives no interval"
        if self.expect is None:
            if outcome == "on par":
                return f"on par within {margin}" + (f" ({self._first(self.direction)}, by less)" if self.direction
                                                    else "")
            if outcome == "not resolved":
                return "not resolved" + (f": neither within {margin} nor apart" if margin else "")
            return f"resolved: {self._first(outcome)}"
        if self.expect == "parity":
            if outcome == "on par":
                return f"on par within {margin}, as the paper says"
            if self.direction:
                return f"resolved: not on par ({self._first(self.direction)})"
            return ("not resolved: neither within " + margin + " nor apart" if margin else
                    "not resolved: the interval holds 0, but no margin of parity was fixed before the runs")
        if self.direction is None:
            return "not resolved"
        if self.expect == "not lower":
            return ("resolved: higher, as the paper says" if self.direction == "higher"
                    else f"resolved, against the paper ({self._first('lower')})")
        if self.direction == self.expect:
            return "resolved, as the paper says"
        return f"resolved, the opposite of the paper ({self._first(self.direction)})"

    def text(self, unit: str = "points", digits: int = 2) -> str:
        """The difference with its interval: "+0.12 [-0.30, +0.54] points" ("—" with no value)."""
        s = self.summary
        if s is None:
            return "—"
        interval = f" {s.interval_text(digits)}" if s.has_interval else ""
        return f"{s.mean:+.{digits}f}{interval}" + (f" {unit}" if unit else "") + ("" if self.paired else " (unpaired)")

    def n_to_resolve(self, limit: int = 10_000) -> int | None:
        """The least number of pairs at which an interval with this mean and sd would resolve the
        comparison (exclude 0, or with a margin lie within it, whichever comes first): a planning
        figure that assumes the next seeds behave as these, not a promise. None where no n can
        (a mean of 0 without a margin, one pair, an unpaired comparison)."""
        s = self.summary
        if not isinstance(self.difference, stats.Paired) or s is None or s.sd is None or s.n < 2:
            return None
        room = [abs(s.mean)] + ([self.margin - abs(s.mean)] if self.margin is not None else [])
        room = [r for r in room if r > 0]
        if not room:
            return None
        if s.sd == 0.0:  # every difference the same: any two pairs resolve it
            return 2
        from scipy import stats as scipy_stats

        best = max(room)
        for n in range(2, limit + 1):
            if scipy_stats.t.ppf(0.5 + stats.CONFIDENCE / 2, n - 1) * s.sd / math.sqrt(n) < best:
                return n
        return None


def compare(a: Sequence[float], b: Sequence[float], *, paired: bool = True, expect: str | None = None,
            margin: float | None = None, better: str | None = None) -> Comparison:
    """``a - b``: paired (value i of each shares a seed) unless ``paired=False``; no difference
    where either side is empty."""
    if not len(a) or not len(b):
        return Comparison(None, expect, margin, better)
    return Comparison(stats.paired(a, b) if paired else stats.unpaired(a, b), expect, margin, better)


@dataclass(frozen=True)
class Between:
    """``a - b`` over seeds, the selection seed apart: its difference alone (``first``: it chose the
    hyper-parameters, so it is shown, not pooled), and the comparison paired over the further seeds
    both sides have (``seeds``)."""

    first: float | None
    seeds: list[int]
    compared: Comparison

    @property
    def verdict(self) -> str:
        return self.compared.verdict if self.seeds else "not resolved: no further seed has both"

    def cells(self, sign_flip: bool = True, verdict: str | None = None) -> list[str]:
        """Its cells in a report's table: the selection seed's difference, each further seed's, n,
        mean ± sd, the interval, the sign-flip p (``sign_flip``), the verdict (``verdict`` in place of
        its own)."""
        first = "—" if self.first is None else f"{self.first:+.2f}"
        d, verdict = self.compared.difference, verdict or self.verdict
        p = self.compared.p_value
        p_value = ([f"{p:.3g}" if p is not None else "—"] if sign_flip else [])
        if d is None:
            return [first, "—", "0", "—", "—", *p_value, verdict]
        m = d.summary
        return [first, ", ".join(f"{x:+.2f}" for x in d.diffs), str(m.n), m.mean_sd(signed=True), m.interval_text(),
                *p_value, verdict]


def between(a: Mapping[int, float], b: Mapping[int, float], s0: int, *, expect: str | None = None,
            margin: float | None = None, better: str | None = "lower") -> Between:
    """``a - b`` of two rows (seed -> value), ``s0`` the selection seed: see :class:`Between`."""
    first = a[s0] - b[s0] if s0 in a and s0 in b else None
    seeds = sorted(x for x in a if x in b and x != s0)
    return Between(first, seeds, compare([a[x] for x in seeds], [b[x] for x in seeds], expect=expect, margin=margin,
                                         better=better))


def between_header(s0: int, sign_flip: bool = True) -> list[str]:
    """The header of :meth:`Between.cells`."""
    return [f"Seed {s0} (selection)", "Further seeds, each", "n", "Mean ± sd", "95 % interval",
            *(["Sign-flip p"] if sign_flip else []), "Verdict"]
