"""How alike two learnt representations are (the paper's Section 4.1.3, Table 2), measured three
ways over the same data points:

* ``cosine``: each hidden unit's activation vector against every unit of another model, as the
  paper does. Sigmoid activations are all positive, so two unrelated units can have a cosine near
  1 (their means dominate): the count can then follow the units' mean activations.
* ``correlation``: the same with each unit's activations centred (Pearson's correlation), which
  that does not affect.
* ``cka``: debiased linear CKA between whole representations (Kornblith et al. 2019, with the
  unbiased HSIC estimator of Song et al. 2012): one number per pair of models, invariant to
  rotations and isotropic scaling of either.

One chunked matrix product over the data points per pair of models (float64) gives all three:
the cosine and the correlation from ``XᵀY`` with each model's column sums and norms, CKA from
its Frobenius norm with each model's row norms (the N x N Gram matrices are never formed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from scheda.utils.lazy import lazy, no_grad

torch = lazy("torch", globals())

MEASURES = ("cosine", "correlation")  # unit by unit; CKA compares whole representations
# A unit whose two most similar candidates score within TIE of each other has no closest one: it
# is counted apart, not given to whichever candidate comes first. A sigmoid unit saturated at 1 on
# every input is 1 in float32 (trained CIFAR-10 DAs of 500 units have 1 to 9, and up to 14 within
# 1e-6 of constant): its cosine with any candidate's saturated unit is exactly the same, and its
# correlation is 0 with every unit. Float64 products of float32 activations round far below
# 1e-9; a real lead is far above.
TIE = 1e-9


@dataclass(frozen=True)
class Moments:
    """What one representation [N, H] brings to every pair it is in: its column sums and sums of
    squares (the unit measures), its row sums of squares and ``K̃1`` (CKA), and its own HSIC."""

    n: int
    col_sum: "torch.Tensor"  # [H]
    col_sq: "torch.Tensor"  # [H]
    row_sq: "torch.Tensor"  # [N]
    k1: "torch.Tensor"  # [N]: (K - diag K) 1, with K = X Xᵀ
    hsic: float  # unbiased HSIC of the representation with itself


def _chunks(n: int, chunk_size: int):
    return range(0, n, chunk_size)


@no_grad
def gram_product(x: "torch.Tensor", y: "torch.Tensor", chunk_size: int = 8192) -> "torch.Tensor":
    """``xᵀ y`` [Hx, Hy] in float64, accumulated over chunks of the N data points."""
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"activations must be over the same data points, not {x.shape[0]} and {y.shape[0]}")
    out = torch.zeros(x.shape[1], y.shape[1], dtype=torch.float64, device=x.device)
    for i in _chunks(x.shape[0], chunk_size):
        out += x[i:i + chunk_size].double().T @ y[i:i + chunk_size].double()
    return out


def _hsic(frobenius_sq: float, row_sq_x, row_sq_y, k1_x, k1_y, n: int) -> float:
    """The unbiased HSIC of two linear kernels from ``‖XᵀY‖²_F`` and each one's row quantities."""
    trace = frobenius_sq - float((row_sq_x * row_sq_y).sum())  # tr(K̃ L̃)
    sums = float(k1_x.sum()) * float(k1_y.sum()) / ((n - 1) * (n - 2))  # (1ᵀK̃1)(1ᵀL̃1) / ((n-1)(n-2))
    cross = 2.0 * float((k1_x * k1_y).sum()) / (n - 2)  # 2/(n-2) 1ᵀK̃L̃1
    return (trace + sums - cross) / (n * (n - 3))


@no_grad
def moments(x: "torch.Tensor", chunk_size: int = 8192) -> Moments:
    """The moments of ``x`` [N, H] (N >= 4: the unbiased estimator's)."""
    n = x.shape[0]
    if n < 4:
        raise ValueError(f"debiased CKA needs at least 4 data points, not {n}")
    col_sum = torch.zeros(x.shape[1], dtype=torch.float64, device=x.device)
    col_sq = torch.zeros_like(col_sum)
    row_sq = torch.empty(n, dtype=torch.float64, device=x.device)
    for i in _chunks(n, chunk_size):
        part = x[i:i + chunk_size].double()
        col_sum += part.sum(0)
        col_sq += (part * part).sum(0)
        row_sq[i:i + chunk_size] = (part * part).sum(1)
    k1 = torch.empty_like(row_sq)
    for i in _chunks(n, chunk_size):
        k1[i:i + chunk_size] = x[i:i + chunk_size].double() @ col_sum - row_sq[i:i + chunk_size]
    own = float((gram_product(x, x, chunk_size) ** 2).sum())
    return Moments(n, col_sum, col_sq, row_sq, k1, _hsic(own, row_sq, row_sq, k1, k1, n))


@dataclass(frozen=True)
class PairSimilarity:
    """Of a reference model against one candidate: each reference unit's largest cosine and
    largest correlation with a candidate unit, and the CKA of the two representations."""

    best: dict[str, np.ndarray]  # measure -> [H_ref]
    cka: float


@no_grad
def compare(x: "torch.Tensor", y: "torch.Tensor", mx: Moments | None = None, my: Moments | None = None,
            chunk_size: int = 8192) -> PairSimilarity:
    """``x`` (the reference, [N, Hx]) against ``y`` ([N, Hy]), over the same N data points. A unit
    that never varies has correlation 0 with every unit (it carries nothing to correlate)."""
    mx = mx or moments(x, chunk_size)
    my = my or moments(y, chunk_size)
    dots = gram_product(x, y, chunk_size)
    n = mx.n
    norms = mx.col_sq.sqrt()[:, None] * my.col_sq.sqrt()[None, :]
    cosine = dots / norms.clamp_min(1e-300)
    cov = dots - mx.col_sum[:, None] * my.col_sum[None, :] / n
    var_x = (mx.col_sq - mx.col_sum ** 2 / n).clamp_min(0)
    var_y = (my.col_sq - my.col_sum ** 2 / n).clamp_min(0)
    spread = var_x.sqrt()[:, None] * var_y.sqrt()[None, :]
    correlation = torch.where(spread > 0, cov / spread.clamp_min(1e-300), torch.zeros_like(cov))
    hsic = _hsic(float((dots ** 2).sum()), mx.row_sq, my.row_sq, mx.k1, my.k1, n)
    denominator = np.sqrt(max(mx.hsic, 0.0) * max(my.hsic, 0.0))
    cka = hsic / denominator if denominator > 0 else float("nan")
    return PairSimilarity({"cosine": cosine.max(1).values.cpu().numpy(),
                           "correlation": correlation.max(1).values.cpu().numpy()}, float(cka))


def compare_all(references: Mapping[str, "torch.Tensor"], candidates: Mapping[str, "torch.Tensor"],
                chunk_size: int = 8192, known: dict[int, Moments] | None = None,
                only: set[tuple[str, str]] | None = None) -> dict[tuple[str, str], PairSimilarity]:
    """Every reference against every candidate (``only``: just those pairs), over the same data
    points, each model's moments computed once (``known``: those of earlier calls, by the tensor's
    id, kept for the next): what Table 2 of one seed on one split takes."""
    found: dict[int, Moments] = {} if known is None else known

    def of(x):
        if id(x) not in found:
            found[id(x)] = moments(x, chunk_size)
        return found[id(x)]

    return {(r, c): compare(x, y, of(x), of(y), chunk_size) for r, x in references.items()
            for c, y in candidates.items() if only is None or (r, c) in only}


def flops(n: int, pairs: list[tuple[int, int]], models: list[int]) -> float:
    """The multiply-adds (x2) :func:`compare_all` cannot do without over ``n`` data points: one
    ``XᵀY`` per pair of (Hx, Hy) units and one ``XᵀX`` per distinct model of H units."""
    return 2.0 * n * (sum(a * b for a, b in pairs) + sum(h * h for h in models))


@dataclass(frozen=True)
class Closest:
    """Table 2 for one reference and one measure: how many of its units have their most similar
    unit in each candidate, how many have none (``tied``: see TIE), the mean of their best
    similarities, and the median margin between the winning candidate and the runner-up (how
    narrowly a count is decided)."""

    counts: dict[str, int]
    tied: int
    mean_best: float
    median_margin: float

    def share(self, labels: Sequence[str]) -> float:
        """The fraction of the reference's units with a closest candidate whose closest is one of ``labels``."""
        decided = sum(self.counts.values())
        return sum(self.counts[k] for k in labels) / decided if decided else float("nan")


def closest(best: Mapping[str, np.ndarray], tie: float = TIE) -> Closest:
    """``best[label]``: each reference unit's best similarity in candidate ``label`` (one measure)."""
    labels = list(best)
    stacked = np.stack([np.asarray(best[k], dtype=np.float64) for k in labels])  # [candidates, H_ref]
    winner = stacked.argmax(0)
    ordered = np.sort(stacked, axis=0)
    margin = ordered[-1] - ordered[-2] if len(labels) > 1 else np.full(stacked.shape[1], np.inf)
    decided = margin > tie
    return Closest({k: int(np.sum(decided & (winner == i))) for i, k in enumerate(labels)}, int(np.sum(~decided)),
                   float(ordered[-1].mean()), float(np.median(margin)) if len(labels) > 1 else float("nan"))
