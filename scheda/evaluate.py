"""The paper's measure of a representation: encode without noise, fit an L2-regularised
logistic regression on the training split for each C of a grid, choose C by validation
error, report the test error at that C.
"""

from __future__ import annotations

import base64
import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from scheda.callbacks import Callback
from scheda.classifiers import build_classifier
from scheda.config import Component, register, typed
from scheda.data import Splits
from scheda.errors import ConfigError
from scheda.progress import bar

log = logging.getLogger(__name__)


@register("evaluate")
@dataclass
class EvaluateConfig(Component):
    """Encode train/val/test without noise, fit L2-regularised logistic regression (the
    classifier group) for every C = 2^e, e = c_log2_min .. c_log2_max (step c_log2_step), choose C
    on validation error, report test error. A warning says when the chosen C is at the grid's edge."""

    enabled: bool = True
    every: int = 0  # also every N epochs (0: not periodically)
    at_stage_ends: bool = True  # after the last epoch at each level of noise
    at_end: bool = True
    c_log2_min: float = -10.0
    c_log2_max: float = 6.0
    c_log2_step: float = 1.0
    chunk_size: int = 8192  # rows encoded at once (no gradients)

    def check(self) -> None:
        self.c_grid()
        if self.every < 0:
            raise self.invalid("every", "must be >= 0 (0: never periodically)")
        if self.chunk_size < 1:
            raise self.invalid("chunk_size", "must be >= 1")

    def c_grid(self) -> list[float]:
        """C = 2^e for e from ``c_log2_min`` to ``c_log2_max`` in steps of ``c_log2_step``."""
        lo, hi, step = self.c_log2_min, self.c_log2_max, self.c_log2_step
        if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
            raise ConfigError(f"evaluate.c_log2_min={lo} must be <= evaluate.c_log2_max={hi}")
        if not step > 0:
            raise ConfigError(f"evaluate.c_log2_step={step} must be > 0")
        n = int(math.floor((hi - lo) / step + 1e-9)) + 1
        return [float(2.0 ** (lo + i * step)) for i in range(n)]


def c_grid(cfg: Mapping) -> list[float]:
    return typed("evaluate", cfg).c_grid()


def pack_correct(correct: np.ndarray | torch.Tensor) -> str:
    """Which test images a model got right, as base64 of the packed bits (1250 bytes for
    10000 images): kept with every evaluation so that two models of one seed can be compared
    image by image (McNemar's test, scheda.stats) long after the run."""
    bits = np.asarray(correct.cpu() if isinstance(correct, torch.Tensor) else correct, dtype=bool)
    return base64.b64encode(np.packbits(bits).tobytes()).decode("ascii")


def unpack_correct(packed: str, n: int) -> np.ndarray:
    """The boolean vector ``pack_correct`` stored (``n``: the number of test images)."""
    bits = np.unpackbits(np.frombuffer(base64.b64decode(packed), dtype=np.uint8))
    if bits.size < n or bits.size - n >= 8:
        raise ValueError(f"packed correctness holds {bits.size} bits, not {n} images")
    return bits[:n].astype(bool)


def select_c(Cs: Sequence[float], val_errors: Sequence[float]) -> int:
    """Index of the lowest validation error; ties go to the smaller C (more regularised)."""
    return int(np.argmin(np.asarray(val_errors)))


def evaluate_features(
    features: Mapping[str, Any],
    labels: Mapping[str, np.ndarray],
    classifier_cfg: Mapping,
    Cs: Sequence[float],
    device: torch.device | str = "cpu",
    keep_model: bool = False,
) -> dict[str, Any]:
    """C search on train/val features, test error at the chosen C, and the time it took;
    with ``keep_model`` the chosen classifier is returned under ``"model"`` too."""
    start = time.perf_counter()
    solver = build_classifier(classifier_cfg, features["train"], labels["train"], device)
    setup = time.perf_counter() - start
    val_x, test_x = features["val"], features["test"]  # a fitted model predicts on the device, any solver
    grid = []
    best_model, best_err, best_C = None, math.inf, None
    with bar(len(Cs), f"eval ({classifier_cfg['name']})", "C", leave=False) as ticks:
        for C in Cs:
            t = time.perf_counter()
            model = solver.fit(C)
            err = model.error(val_x, labels["val"])
            grid.append({"C": C, "val_error": err, "seconds": time.perf_counter() - t})
            if err < best_err:
                best_model, best_err, best_C = model, err, C
            ticks.set_postfix(C=f"2^{math.log2(C):g}", best=f"2^{math.log2(best_C):g}: val {100 * best_err:.2f}%",
                              refresh=False)
            ticks.update(1)
    chosen = select_c(Cs, [g["val_error"] for g in grid])
    at_edge = len(Cs) > 1 and chosen in (0, len(Cs) - 1)
    if at_edge:
        log.warning("chosen C=%g is at the edge of the grid [%g, %g]: widen evaluate.c_log2_min/max",
                    Cs[chosen], Cs[0], Cs[-1])
    test_y = np.asarray(labels["test"])
    test_correct = best_model.predict(test_x) == test_y
    result = {
        "classifier": classifier_cfg["name"],
        "C_grid": grid,
        "C": Cs[chosen],
        "C_at_edge": at_edge,
        "val_error": grid[chosen]["val_error"],
        "test_error": float(np.mean(~test_correct)),
        "test_n": int(test_y.size),
        "test_correct": pack_correct(test_correct),
        "setup_seconds": setup,
        "seconds": time.perf_counter() - start,
    }
    if keep_model:
        result["model"] = best_model
    return result


def encode_splits(model, data: Splits, device: torch.device, chunk_size: int,
                  cache: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """Features of train/val/test without noise, encoded in large chunks without gradients."""
    model.eval()
    out = {}
    for split in ("train", "val", "test"):
        x = cache[split] if cache and split in cache else data.tensor(split, device)
        out[split] = model.encode_dataset(x, chunk_size)
    model.train()
    return out


def raw_features(data: Splits, device: torch.device) -> dict[str, torch.Tensor]:
    return {split: data.tensor(split, device) for split in ("train", "val", "test")}


def labels_of(data: Splits) -> dict[str, np.ndarray]:
    return {"train": data.train_y, "val": data.val_y, "test": data.test_y}


class EvaluationCallback(Callback):
    """Evaluates every ``every`` epochs, after the last epoch at each noise level, and at the
    end. It runs before the epoch's checkpoint is written, so a checkpoint carries every
    evaluation up to it and a resumed run's results.json is complete. ``inputs`` are the
    labelled splits, already on the device."""

    def __init__(self, cfg: Mapping, classifier_cfg: Mapping, data: Splits, inputs: dict[str, torch.Tensor],
                 results, writer_cb=None):
        self.cfg, self.classifier_cfg, self.data, self.inputs = cfg, classifier_cfg, data, inputs
        self.Cs = c_grid(cfg)
        self.results = results
        self.writer_cb = writer_cb
        self.last_model = None

    def _due(self, trainer, metrics) -> str | None:
        every = self.cfg["every"]
        if metrics["stage_end"] and self.cfg["at_stage_ends"]:
            return "stage_end"
        if every > 0 and metrics["epoch"] % every == 0:
            return "every"
        if self.cfg["at_end"] and metrics["epoch"] == trainer.schedule.total_epochs:
            return "end"
        return None

    def on_epoch_end(self, trainer, metrics):
        reason = self._due(trainer, metrics)
        if reason is not None:
            self.evaluate(trainer.model, trainer.device, metrics["epoch"], metrics["nu"], reason)

    def evaluate(self, model, device: torch.device, epoch: int, nu: float | None, reason: str) -> dict[str, Any]:
        """Evaluate ``model`` now; the chosen classifier is kept as ``last_model``."""
        start = time.perf_counter()
        features = encode_splits(model, self.data, device, self.cfg["chunk_size"], cache=self.inputs)
        encode_seconds = time.perf_counter() - start
        result = evaluate_features(features, labels_of(self.data), self.classifier_cfg, self.Cs, device,
                                   keep_model=True)
        self.last_model = result.pop("model")
        entry = {"epoch": epoch, "nu": nu, "reason": reason, **result, "encode_seconds": encode_seconds}
        self.results.add_evaluation(entry)
        log.info("eval epoch %d nu=%s: C=%g val %.4f test %.4f (%.1fs)", epoch, nu, result["C"],
                 result["val_error"], result["test_error"], result["seconds"])
        writer = getattr(self.writer_cb, "writer", None)
        if writer is not None:
            writer.add_scalar("eval/val_error", result["val_error"], epoch)
            writer.add_scalar("eval/test_error", result["test_error"], epoch)
            writer.add_scalar("eval/log2_C", math.log2(result["C"]), epoch)
            if nu is not None:
                writer.add_scalar("eval/nu", nu, epoch)
        return entry

    def state_dict(self):
        return {"evaluations": list(self.results.evaluations)}

    def load_state_dict(self, state):
        self.results.evaluations[:] = state.get("evaluations", [])


def check_evaluate_config(cfg: Mapping, classifier_cfg: Mapping) -> None:
    typed("evaluate", cfg)
    typed("classifier", classifier_cfg)
