"""The classifier group: the probes that measure a representation (scheda.evaluation.evaluate fits one
per evaluation), each with its own grid of settings chosen on validation error.

``torch_lr`` and ``liblinear``: L2-regularised logistic regression, as the paper evaluates. Both
minimise, for each class k against the rest (one-vs-rest),

    0.5 * ||w_k||^2 + C * sum_i log(1 + exp(-y_ik * w_k . [x_i, 1]))

with the bias as an extra feature of value 1 that is regularised (LIBLINEAR's ``-s 0 -B 1``).
``liblinear`` is the paper's tool; ``torch_lr`` solves the same objective with a batched
Newton-CG on the run's device, all classes at once, much faster on large feature sets.
A solver is built once per feature set and then fitted along a grid of C; with
``warm_start`` each fit starts from the previous C's solution, else from w = 0. Both stop
relative to the gradient at w = 0, so a warm start needs a tolerance tight enough not to stop
before it moves (see the eps of each schema below).

``knn``: a k-nearest-neighbour probe (cosine similarity, similarity-weighted votes) over a grid
of k; nothing is fitted, so it is cheap enough for a curve at every epoch.
"""

from __future__ import annotations

import abc
import math
from ctypes import POINTER, c_double
from dataclasses import dataclass, field
from typing import Any, ClassVar, List, Mapping

import numpy as np

from scheda.config import Component, register, typed
from scheda.utils.errors import ConfigError
from scheda.utils.lazy import lazy

torch = lazy("torch", globals())


@dataclass
class LinearModel:
    """Scores ``x @ W.T + b``; the predicted label is ``classes[argmax]``."""

    W: np.ndarray  # [n_classes, n_features]
    b: np.ndarray  # [n_classes]
    classes: np.ndarray

    def predict(self, x: np.ndarray | torch.Tensor) -> np.ndarray:
        if isinstance(x, torch.Tensor):
            W = torch.as_tensor(self.W, dtype=x.dtype, device=x.device)
            b = torch.as_tensor(self.b, dtype=x.dtype, device=x.device)
            return self.classes[torch.argmax(x @ W.T + b, dim=1).cpu().numpy()]
        return self.classes[np.argmax(x @ self.W.T.astype(x.dtype) + self.b.astype(x.dtype), axis=1)]

    def error(self, x, y: np.ndarray) -> float:
        return float(np.mean(self.predict(x) != np.asarray(y)))


def objective(model: LinearModel, x: np.ndarray, y: np.ndarray, C: float) -> float:
    """The one-vs-rest objective above, summed over classes, in float64 (for comparisons)."""
    x = np.asarray(x, dtype=np.float64)
    W, b = model.W.astype(np.float64), model.b.astype(np.float64)
    z = x @ W.T + b
    signs = np.where(np.asarray(y)[:, None] == model.classes[None, :], 1.0, -1.0)
    if len(model.classes) == 2:  # LIBLINEAR trains one vector for two classes
        z, signs, W, b = z[:, :1], signs[:, :1], W[:1], b[:1]
    return float(0.5 * (np.sum(W * W) + np.sum(b * b)) + C * np.sum(np.logaddexp(0.0, -signs * z)))


def dense_csr(x: np.ndarray):
    """A CSR view of a dense array without scanning for zeros (far faster than a list)."""
    from scipy import sparse

    n, d = x.shape
    x = np.ascontiguousarray(x, dtype=np.float64)
    indices = np.tile(np.arange(d, dtype=np.int32), n)
    indptr = np.arange(0, n * d + 1, d, dtype=np.int64)
    return sparse.csr_matrix((x.reshape(-1), indices, indptr), shape=(n, d))


class Liblinear:
    """LIBLINEAR ``-s 0 -B 1``: the problem is built once and reused across C."""

    name = "liblinear"

    def __init__(self, x: np.ndarray, y: np.ndarray, eps: float = 0.01, warm_start: bool = False):
        from liblinear.liblinearutil import problem

        self.n_features = x.shape[1]
        self.eps, self.warm_start = eps, warm_start
        self.problem = problem(np.asarray(y, dtype=np.float64), dense_csr(x))
        self._warm: np.ndarray | None = None

    def fit(self, C: float) -> LinearModel:
        from liblinear.liblinearutil import parameter, train

        param = parameter(f"-s 0 -c {C!r} -B 1 -e {self.eps!r} -q")
        if self.warm_start and self._warm is not None:
            param.init_sol = self._warm.ctypes.data_as(POINTER(c_double))
        model = train(self.problem, param)
        n_w = 1 if model.get_nr_class() == 2 else model.get_nr_class()
        w = np.ctypeslib.as_array(model.w, (self.n_features + 1, n_w)).copy()
        self._warm = w  # keeps the warm start alive while LIBLINEAR reads it
        classes = np.asarray(model.get_labels())
        W, b = w[:-1].T, w[-1]
        if n_w == 1:  # one vector: positive for classes[0]
            W, b = np.vstack([W, -W]), np.concatenate([b, -b])
        return LinearModel(W, b, classes)


class TorchLogReg:
    """The same objective by Newton-CG with a backtracking line search, one problem per class
    solved side by side as matrix products. Stops when every class's gradient norm is at most
    ``eps * min(pos, neg) / n`` times its norm at w = 0 (LIBLINEAR's rule, tighter default).

    Encoded features are strongly correlated (all in [0, 1], mostly one sign), which makes
    plain CG crawl at large C. The CG is preconditioned with ``I + C * mean(D_k) * X^T X``, the
    Hessian with each class's curvature weights replaced by their mean; it is applied through
    one eigendecomposition of ``X^T X`` (an SVD of X when there are fewer examples than
    features) per feature set, and cuts CG steps about tenfold.
    """

    name = "torch_lr"

    def __init__(self, x: np.ndarray | torch.Tensor, y: np.ndarray, eps: float = 1e-3,
                 max_newton: int = 100, max_cg: int = 200, device: str | torch.device = "cpu",
                 dtype: torch.dtype | str = "float32", warm_start: bool = False):
        dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        x = torch.as_tensor(x).to(device=device, dtype=dtype)
        n = x.shape[0]
        self.X = torch.cat([x, torch.ones(n, 1, dtype=dtype, device=device)], dim=1)
        self.classes = np.unique(np.asarray(y))
        labels = torch.as_tensor(np.asarray(y), device=device)
        classes = torch.as_tensor(self.classes, device=device)
        self.Y = torch.where(labels[:, None] == classes[None, :], 1.0, -1.0).to(dtype)
        self.eps, self.max_newton, self.max_cg, self.warm_start = eps, max_newton, max_cg, warm_start
        pos = (self.Y > 0).sum(0).to(torch.float64)
        self._stop_scale = (torch.minimum(pos, n - pos) / n).to(dtype)
        if n >= self.X.shape[1]:
            lam, Q = torch.linalg.eigh((self.X.T @ self.X).to(torch.float64))
        else:  # fewer examples than features: the Gram matrix has rank n, take it from an SVD
            _, sv, Vh = torch.linalg.svd(self.X.to(torch.float64), full_matrices=False)
            lam, Q = sv ** 2, Vh.T
        self._lam, self._Q = lam.clamp_min(0.0), Q.to(dtype)
        self.W = torch.zeros(len(self.classes), self.X.shape[1], dtype=dtype, device=device)
        self.newton_iterations = self.cg_iterations = 0
        self.stalled_classes = 0

    def _loss(self, C: float, W: torch.Tensor, Z: torch.Tensor) -> torch.Tensor:
        data = torch.nn.functional.softplus(-self.Y * Z).to(torch.float64).sum(0)
        return 0.5 * (W.to(torch.float64) ** 2).sum(1) + C * data

    def fit(self, C: float) -> LinearModel:
        X, Y = self.X, self.Y
        W = self.W.clone() if self.warm_start else torch.zeros_like(self.W)
        g0 = (C * 0.5 * (-Y).T @ X).norm(dim=1)  # gradient norm at w = 0
        tol = self.eps * self._stop_scale * g0
        Z = X @ W.T
        f = self._loss(C, W, Z)
        # A class whose line search cannot lower the objective (at the dtype's precision) is
        # as converged as it will get: iterating on would repeat the same step (as LIBLINEAR,
        # which stops when its line search fails).
        stalled = torch.zeros(W.shape[0], dtype=torch.bool, device=W.device)
        for _ in range(self.max_newton):
            S = torch.sigmoid(-Y * Z)
            G = W + C * ((-Y * S).T @ X)
            gnorm = G.norm(dim=1)
            active = (gnorm > tol) & ~stalled
            if not bool(active.any()):
                break
            self.newton_iterations += 1
            D = S * (1 - S)
            step = self._newton_step(C, G, D, gnorm, active)
            W, Z, f, progressed = self._line_search(C, W, Z, f, G, step, X @ step.T)
            stalled |= active & ~progressed
        self.stalled_classes = int(stalled.sum())
        self.W = W
        Wn = W.cpu().numpy()
        return LinearModel(Wn[:, :-1].copy(), Wn[:, -1].copy(), self.classes)

    def _newton_step(self, C, G, D, gnorm, active):
        """Solve (I + C X^T D_k X) s_k = -g_k for every class by preconditioned CG."""
        X, Q = self.X, self._Q
        inv = (1.0 / (1.0 + C * D.mean(0).to(torch.float64)[:, None] * self._lam[None, :])).to(X.dtype)

        def precondition(R):  # Q spans X^T X's range; its complement has eigenvalue 0 (factor 1)
            return R + ((R @ Q) * (inv - 1.0)) @ Q.T

        s = torch.zeros_like(G)
        r = torch.where(active[:, None], -G, torch.zeros_like(G))
        z = precondition(r)
        d = z.clone()
        rz = (r * z).sum(1)
        cg_tol = (0.1 * gnorm) ** 2
        for _ in range(self.max_cg):
            going = (r * r).sum(1) > cg_tol
            if not bool(going.any()):
                break
            self.cg_iterations += 1
            Hd = d + C * ((X @ d.T) * D).T @ X
            alpha = torch.where(going, rz / (d * Hd).sum(1).clamp_min(1e-30), torch.zeros_like(rz))
            s += alpha[:, None] * d
            r -= alpha[:, None] * Hd
            z = precondition(r)
            rz_new = (r * z).sum(1)
            beta = torch.where(going, rz_new / rz.clamp_min(1e-30), torch.zeros_like(rz))
            d = z + beta[:, None] * d
            rz = rz_new
        return s

    def _line_search(self, C, W, Z, f, G, step, XS):
        """Backtracking (Armijo) per class; Z = X W^T is updated without new products."""
        t = torch.ones(W.shape[0], dtype=W.dtype, device=W.device)
        slope = (G * step).sum(1).to(torch.float64)
        for _ in range(30):
            W_new = W + t[:, None] * step
            Z_new = Z + t[None, :] * XS
            f_new = self._loss(C, W_new, Z_new)
            ok = f_new <= f + 0.01 * t.to(torch.float64) * slope
            if bool(ok.all()):
                break
            t = torch.where(ok, t, t * 0.5)
        keep = ok | (f_new < f)
        W = torch.where(keep[:, None], W_new, W)
        Z = torch.where(keep[None, :], Z_new, Z)
        return W, Z, torch.where(keep, f_new, f), keep & (f_new < f)


DTYPES = ("float32", "float64")  # classifier.dtype: torch's of that name


class ClassifierConfig(Component, abc.ABC):
    """Base of the classifier group. A classifier owns its hyper-parameters: ``grid()`` lists the
    settings evaluation tries (each fitted on the training split and scored on validation, the
    lowest error chosen), and ``build`` sets up a solver on one feature set whose
    ``fit(**params)`` returns a model with ``predict``/``error``. ``linear``: its models are a
    ``LinearModel`` (fine-tuning can start its output layer from one)."""

    linear: ClassVar[bool] = True

    @abc.abstractmethod
    def grid(self) -> list[dict[str, float]]:
        """Every setting to try, in order; ties on validation go to the earliest."""

    @abc.abstractmethod
    def build(self, x, y, device: torch.device | str = "cpu"):
        """A solver fitted to ``x``, ``y`` by ``fit(**params)`` for each setting of the grid."""

    def edge_hint(self) -> str:
        """What to widen when the chosen setting is at an end of the grid."""
        return f"widen the {self.group} grid"


@dataclass
class LogisticRegressionConfig(ClassifierConfig):
    """L2-regularised logistic regression: the grid is C = 2^e, e = c_log2_min .. c_log2_max in
    steps of c_log2_step (the paper chose C on validation; it does not give its grid)."""

    c_log2_min: float = -10.0
    c_log2_max: float = 6.0
    c_log2_step: float = 1.0

    def check(self) -> None:
        self.c_values()

    def c_values(self) -> list[float]:
        lo, hi, step = self.c_log2_min, self.c_log2_max, self.c_log2_step
        if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
            raise ConfigError(f"classifier.c_log2_min={lo} must be <= classifier.c_log2_max={hi}")
        if not step > 0:
            raise ConfigError(f"classifier.c_log2_step={step} must be > 0")
        n = int(math.floor((hi - lo) / step + 1e-9)) + 1
        return [float(2.0 ** (lo + i * step)) for i in range(n)]

    def grid(self) -> list[dict[str, float]]:
        return [{"C": C} for C in self.c_values()]

    def edge_hint(self) -> str:
        return "widen classifier.c_log2_min/max"


@register("classifier")
@dataclass
class LiblinearConfig(LogisticRegressionConfig):
    """The paper's classifier: LIBLINEAR -s 0 (L2-regularised LR, primal), -B 1, one-vs-rest."""

    name: str = "liblinear"
    # LIBLINEAR's -e. Its default for -s 0, 0.01, stops 2-6 % (relative objective) short of the
    # optimum on DA features even from w = 0, and a warm start from the previous C meets it
    # before moving (the validation error froze over C = 2..64). Its rule is relative to the
    # gradient at w = 0, so at 1e-4 a warm start ends where a fresh, tight solve does.
    eps: float = 0.0001
    warm_start: bool = True  # start each C from the previous C's solution: about half the time of fresh solves

    def check(self) -> None:
        super().check()
        if not self.eps > 0:
            raise self.invalid("eps", "must be > 0")

    def build(self, x, y, device: torch.device | str = "cpu") -> "Liblinear":
        x = x.cpu().numpy() if isinstance(x, torch.Tensor) else x
        return Liblinear(x, y, eps=self.eps, warm_start=self.warm_start)


@register("classifier")
@dataclass
class TorchLRConfig(LogisticRegressionConfig):
    """The same objective as LIBLINEAR -s 0 -B 1, solved by batched Newton-CG on the run's device."""

    name: str = "torch_lr"
    # Stop when |grad| <= eps * min(pos, neg) / n * |grad at w = 0|: LIBLINEAR's rule, relative to
    # the fresh problem, so a warm start must reach the same point as a fresh solve. At 1e-4 the
    # warm-started grid matches a fresh float64 solve at every C (scripts/bench_eval.py
    # --warm-start-check); at 1e-3 a warm start met the tolerance before moving at C >= 16.
    eps: float = 0.0001
    max_newton: int = 100
    max_cg: int = 200
    dtype: str = "float32"  # float32 | float64
    warm_start: bool = True  # start each C from the previous C's solution (fresh float32 solves stall at large C)

    def check(self) -> None:
        super().check()
        if not self.eps > 0:
            raise self.invalid("eps", "must be > 0")
        if self.dtype not in DTYPES:
            raise self.invalid("dtype", "must be float32 or float64")
        for key in ("max_newton", "max_cg"):
            if not getattr(self, key) >= 1:
                raise self.invalid(key, "must be >= 1")

    def build(self, x, y, device: torch.device | str = "cpu") -> "TorchLogReg":
        return TorchLogReg(x, y, eps=self.eps, max_newton=self.max_newton, max_cg=self.max_cg,
                           device=device, dtype=self.dtype, warm_start=self.warm_start)


def build_classifier(config: Mapping, x, y, device: torch.device | str = "cpu"):
    """The solver that ``config`` (the ``classifier`` group) names, set up on one feature set."""
    return typed("classifier", config).build(x, y, device)


@register("classifier")
@dataclass
class KNNConfig(ClassifierConfig):
    """A k-nearest-neighbour probe (as solo-learn, VISSL and lightly offer): cosine similarity
    to every training example, the k most similar vote for their labels with their similarity,
    k chosen on validation. Nothing is trained, so it is cheap enough for every epoch
    (``evaluate.every=1 classifier=knn``: error curves in TensorBoard); the paper's tables and the
    protocol's selection keep logistic regression."""

    name: str = "knn"
    linear: ClassVar[bool] = False
    k: List[int] = field(default_factory=lambda: [1, 5, 10, 20, 50, 100, 200])
    chunk_size: int = 1024  # query rows compared with the whole training split at once

    def check(self) -> None:
        if not self.k or min(self.k) < 1:
            raise self.invalid("k", "must list at least one k, each >= 1")
        if self.chunk_size < 1:
            raise self.invalid("chunk_size", "must be >= 1")

    def grid(self) -> list[dict[str, float]]:
        return [{"k": k} for k in sorted(set(self.k))]

    def edge_hint(self) -> str:
        return "widen classifier.k"

    def build(self, x, y, device: torch.device | str = "cpu") -> "KNNProbe":
        return KNNProbe(x, y, max(self.k), self.chunk_size, device)


class KNNProbe:
    """The training split, L2-normalised, on the device. Each query set's ``k_max`` nearest
    neighbours are found once (in chunks of ``chunk_size`` rows: a chunk x n similarity matrix at
    a time, so 45000 x 5000 features fit on a CPU or a GPU) and every k of the grid reads them."""

    def __init__(self, x, y, k_max: int, chunk_size: int, device: torch.device | str = "cpu"):
        x = torch.as_tensor(x).to(device=device, dtype=torch.float32)
        self.train = torch.nn.functional.normalize(x, dim=1)
        self.classes = np.unique(np.asarray(y))
        self.labels = torch.as_tensor(np.searchsorted(self.classes, np.asarray(y)), device=self.train.device)
        self.k_max, self.chunk_size = min(k_max, x.shape[0]), chunk_size
        self._found: list[tuple[Any, torch.Tensor, torch.Tensor]] = []  # (query set, similarities, labels)

    def fit(self, k: int) -> "KNNModel":
        return KNNModel(self, min(int(k), self.k_max))

    def neighbours(self, x) -> tuple[torch.Tensor, torch.Tensor]:
        """Similarities and labels of the ``k_max`` nearest training examples of every row of ``x``,
        most similar first (kept per query set: the grid's k all read the same)."""
        for query, sims, labels in self._found:
            if query is x:
                return sims, labels
        q = torch.nn.functional.normalize(torch.as_tensor(x).to(self.train.device, torch.float32), dim=1)
        sims, idx = [], []
        for first in range(0, q.shape[0], self.chunk_size):
            top = torch.topk(q[first:first + self.chunk_size] @ self.train.T, self.k_max, dim=1)
            sims.append(top.values)
            idx.append(top.indices)
        found = (x, torch.cat(sims), self.labels[torch.cat(idx)])
        self._found.append(found)
        return found[1], found[2]


@dataclass
class KNNModel:
    probe: KNNProbe
    k: int

    def predict(self, x) -> np.ndarray:
        sims, labels = self.probe.neighbours(x)
        votes = torch.zeros(sims.shape[0], len(self.probe.classes), device=sims.device, dtype=sims.dtype)
        votes.scatter_add_(1, labels[:, :self.k], sims[:, :self.k])
        return self.probe.classes[votes.argmax(1).cpu().numpy()]

    def error(self, x, y: np.ndarray) -> float:
        return float(np.mean(self.predict(x) != np.asarray(y)))
