"""Phase 1's kinds: raw pixels (the baseline, evaluated once), a DA of the grid, and a fused
sweep that trains every nu of one (hidden, lr) in one process (batched matmuls, on a GPU).
Their selection fills selection.json: the raw baseline and, per hidden size, the best DA of
each nu over lr and epochs."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, Iterable

from scheda.runs.rundir import best_evaluation, checkpoint_name
from scheda.protocol.jobs import JobSpec, count, fmt
from scheda.protocol.kinds.base import BASELINE, GRID, JobKind, errors, register_kind, stopping

log = logging.getLogger(__name__)


@register_kind
class Raw(JobKind):
    name, label, role = "raw", "Raw pixels", BASELINE

    def select(self, run_dir: Path, results: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any] | None:
        evaluations = results.get("evaluations")
        return {"run": str(run_dir), **errors(evaluations[-1])} if evaluations else None

    def file(self, found: dict[str, Any], entry: dict[str, Any], meta: dict[str, Any]) -> None:
        """Phase 1's selection holds one raw baseline."""
        found["raw"] = entry


@register_kind
class DA(JobKind):
    name, label, role = "da", "DA", GRID

    def select(self, run_dir: Path, results: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any] | None:
        """Its best evaluation on validation, where the checkpoint of that epoch exists (a
        continuation starts there)."""
        best = best_evaluation(results)
        if best is None:
            return None
        ckpt = run_dir / "checkpoints" / checkpoint_name(best["epoch"])
        if not ckpt.exists():
            log.warning("%s: no checkpoint at the selected epoch %d; skipped", run_dir, best["epoch"])
            return None
        return {"run": str(run_dir), "checkpoint": str(ckpt), "nu": meta["nu"], "lr": meta["lr"],
                "epoch": best["epoch"], "status": results["status"],
                "last_of_grid": best["epoch"] >= meta.get("epochs", math.inf), **errors(best, results), **stopping(results)}

    def file(self, found: dict[str, Any], entry: dict[str, Any], meta: dict[str, Any]) -> None:
        """The best DA(nu) of a hidden size over lr and epochs (the earlier epoch on a tie)."""
        by_nu = found["hidden"].setdefault(meta["hidden"], {"by_nu": {}})["by_nu"]
        key = fmt(entry["nu"])
        if key not in by_nu or (entry["val_error"], entry["epoch"]) < (by_nu[key]["val_error"], by_nu[key]["epoch"]):
            by_nu[key] = entry

    def describe(self, e: dict[str, Any]) -> str:
        return f"nu={fmt(e['nu'])}, lr={fmt(e['lr'])}, {count(e['epoch'], 'epoch')}"


@register_kind
class DAFused(DA):
    """Every nu of one (hidden, lr) in one process: each model's run under ``models/<k>``."""

    name = "da_fused"

    def models(self, job: JobSpec, run_dir: Path) -> Iterable[tuple[Path, dict[str, Any]]]:
        for k, nu in enumerate(job.meta["nus"]):
            yield run_dir / "models" / str(k), {**job.meta, "kind": DA.name, "nu": nu}
