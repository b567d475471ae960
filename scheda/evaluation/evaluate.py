"""The paper's measure of a representation: encode without noise, fit the classifier group's
model on the training split for each setting of the classifier's own grid (C of an
L2-regularised logistic regression by default, scheda.evaluation.classifiers), choose the setting by
validation error, report the test error there. This module decides when to evaluate and
records what each evaluation gave.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, List, Mapping, Sequence

import numpy as np

from scheda.training.callbacks import STAGE_EPOCH, Callback
from scheda.config import Component, register, typed
from scheda.data import Splits
from scheda.loggers.base import Loggers, MetricLogger
from scheda.utils.progress import bar
from scheda.runs.rundir import RunResults, pack_correct, params_text
from scheda.utils import environment
from scheda.utils.lazy import lazy

torch = lazy("torch", globals())

log = logging.getLogger(__name__)


@register("evaluate")
@dataclass
class EvaluateConfig(Component):
    """When to evaluate: encode train/val/test without noise, fit the classifier group's model
    (L2-regularised logistic regression by default) for every setting of its own grid (C for
    logistic regression, k for the kNN probe), choose on validation error, report test error. A
    warning says when the chosen setting is at the grid's edge."""

    enabled: bool = True
    every: int = 0  # also every N epochs (0: not periodically)
    at_stage_ends: bool = True  # after the last epoch at each level of noise
    # also after this many epochs of every level (the paper's Figure 2: [1, 3, 5] epochs after each change
    # of nu, a continuation's first level included); trainer.patience does not count these, only the
    # periodic and stage-end evaluations, so the rule's spacing stays evaluate.every
    stage_epochs: List[int] = field(default_factory=list)
    at_end: bool = True
    chunk_size: int = 8192  # rows encoded at once (no gradients)
    # A stacked run's features: top (its own codes) | all (every layer's, bottom first, concatenated)
    layers: str = "top"

    def check(self) -> None:
        if self.every < 0:
            raise self.invalid("every", "must be >= 0 (0: never periodically)")
        if any(not isinstance(e, int) or e < 1 for e in self.stage_epochs):
            raise self.invalid("stage_epochs", "must list epochs >= 1 into a level, e.g. [1, 3, 5]")
        if self.layers not in ("top", "all"):
            raise self.invalid("layers", "is unknown: use top (a stacked run's own codes) or all (every layer's, "
                                         "concatenated)")
        if self.chunk_size < 1:
            raise self.invalid("chunk_size", "must be >= 1")


def select(val_errors: Sequence[float]) -> int:
    """Index of the lowest validation error; ties go to the earlier setting of the grid (for C,
    the smaller: more regularised)."""
    return int(np.argmin(np.asarray(val_errors)))


def evaluate_features(
    features: Mapping[str, Any],
    labels: Mapping[str, np.ndarray],
    classifier_config: Mapping,
    device: torch.device | str = "cpu",
    keep_model: bool = False,
) -> dict[str, Any]:
    """The classifier's grid searched on train/val features, test error at the chosen setting,
    and the time it took; with ``keep_model`` the chosen model is returned under ``"model"`` too."""
    start = time.perf_counter()
    spec = typed("classifier", classifier_config)
    settings = spec.grid()
    solver = spec.build(features["train"], labels["train"], device)
    setup = time.perf_counter() - start
    val_x, test_x = features["val"], features["test"]  # a fitted model predicts on the device, any solver
    grid, models = [], []
    with bar(len(settings), f"eval ({spec.name})", "setting", leave=False) as ticks:
        for params in settings:
            t = time.perf_counter()
            model = solver.fit(**params)
            grid.append({"params": params, "val_error": model.error(val_x, labels["val"]),
                         "seconds": time.perf_counter() - t})
            models.append(model)
            best = grid[select([g["val_error"] for g in grid])]
            ticks.set_postfix(best=f"{params_text(best['params'])}: val {100 * best['val_error']:.2f}%", refresh=False)
            ticks.update(1)
    chosen = select([g["val_error"] for g in grid])
    at_edge = len(settings) > 1 and chosen in (0, len(settings) - 1)
    if at_edge:
        log.warning("chosen %s is at the edge of the grid (%s .. %s): %s", params_text(settings[chosen]),
                    params_text(settings[0]), params_text(settings[-1]), spec.edge_hint())
    best_model = models[chosen]
    test_y = np.asarray(labels["test"])
    test_correct = best_model.predict(test_x) == test_y
    result = {
        "classifier": spec.name,
        "grid": grid,
        "params": settings[chosen],
        **settings[chosen],  # C=..., k=...: a chosen value as its own field too
        "at_edge": at_edge,
        "val_error": grid[chosen]["val_error"],
        "val_n": int(np.asarray(labels["val"]).size),
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
    """Features of train/val/test without noise, encoded in large chunks without gradients; a
    stack's codes below first where the data keep them (``data.below``: evaluate.layers=all)."""
    model.eval()
    out = {}
    for split in ("train", "val", "test"):
        x = cache[split] if cache and split in cache else data.tensor(split, device)
        out[split] = model.encode_dataset(x, chunk_size)
        if data.below is not None:
            out[split] = torch.cat([data.below[split].to(out[split].device), out[split]], dim=1)
    model.train()
    return out


def raw_features(data: Splits, device: torch.device) -> dict[str, torch.Tensor]:
    return {split: data.tensor(split, device) for split in ("train", "val", "test")}


def labels_of(data: Splits) -> dict[str, np.ndarray]:
    return {"train": data.train_y, "val": data.val_y, "test": data.test_y}


class EvaluationCallback(Callback):
    """Evaluates every ``every`` epochs, after the last epoch at each noise level, ``stage_epochs``
    into each level, and at the end. It runs before the epoch's checkpoint is written, so a checkpoint carries every
    evaluation up to it and a resumed run's results.json is complete. ``inputs`` are the
    labelled splits, already on the device."""

    def __init__(self, config: EvaluateConfig, classifier_config: Mapping, data: Splits, inputs: dict[str, torch.Tensor],
                 results, loggers: MetricLogger | None = None):
        self.config, self.classifier_config, self.data, self.inputs = config, classifier_config, data, inputs
        self.results = results
        self.loggers = loggers if loggers is not None else Loggers()
        self.last_model = None

    def _due(self, state, metrics) -> str | None:
        every = self.config.every
        if metrics["stage_end"] and self.config.at_stage_ends:
            return "stage_end"
        if every > 0 and metrics["epoch"] % every == 0:
            return "every"
        if self.config.stage_epochs and state.schedule.epochs_into_stage(metrics["epoch"] - 1) in self.config.stage_epochs:
            return STAGE_EPOCH
        if self.config.at_end and metrics["epoch"] == state.schedule.total_epochs:
            return "end"
        return None

    def on_epoch_end(self, state, metrics):
        reason = self._due(state, metrics)
        if reason is not None:
            self.evaluate(state.model, state.device, metrics["epoch"], metrics["nu"], reason)

    def evaluate(self, model, device: torch.device, epoch: int, nu: float | None, reason: str) -> dict[str, Any]:
        """Evaluate ``model`` now; the chosen classifier is kept as ``last_model``."""
        start = time.perf_counter()
        features = encode_splits(model, self.data, device, self.config.chunk_size, cache=self.inputs)
        encode_seconds = time.perf_counter() - start
        result = evaluate_features(features, labels_of(self.data), self.classifier_config, device, keep_model=True)
        self.last_model = result.pop("model")
        entry = {"epoch": epoch, "nu": nu, "reason": reason, **result, "encode_seconds": encode_seconds}
        self.results.add_evaluation(entry)
        log.info("eval epoch %d nu=%s: %s val %.4f test %.4f (%.1fs)", epoch,  # a random schedule's: its epoch's mean
                 nu if nu is None else f"{nu:.4g}", params_text(result["params"]),
                 result["val_error"], result["test_error"], result["seconds"])
        scalars = {"eval/val_error": result["val_error"], "eval/test_error": result["test_error"]}
        for key, value in result["params"].items():  # eval/log2_C for logistic regression, eval/k for kNN
            name, value = (f"log2_{key}", math.log2(value)) if key == "C" else (key, value)
            scalars[f"eval/{name}"] = value
        if nu is not None:
            scalars["eval/nu"] = nu
        self.loggers.log_dict(scalars, epoch)
        return entry

    def state_dict(self):
        return {"evaluations": list(self.results.evaluations)}

    def load_state_dict(self, state):
        self.results.evaluations[:] = state.get("evaluations", [])


def evaluate_raw(data: Splits, classifier: Any, device: torch.device, results: RunResults) -> dict[str, Any]:
    """The raw-input baseline (``model=raw``): no training, the same evaluation on the inputs
    themselves (``data``: loaded and checked by the run, scheda.planning.rules.check_data)."""
    started = time.time()
    results.data.update(device=str(device), environment=environment.describe(device))
    result = evaluate_features(raw_features(data, device), labels_of(data), classifier, device)
    results.add_evaluation({"epoch": 0, "nu": None, "reason": "raw", **result})
    log.info("raw %s: %s val %.4f test %.4f", data.name, params_text(result["params"]), result["val_error"],
             result["test_error"])
    results.update(status="completed", epochs=0, seconds=time.time() - started)
    return results.data
