"""Selection on validation: the best DA per hidden size and nu (over lr and epochs), the best
run of each continuation kind (the paper's choice of T among the evaluations after each level),
the fine-tuning jobs' chosen results, and the controls put beside the runs they control."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, Iterable

from omegaconf import DictConfig

from scheda.utils.errors import SchedaError
from scheda.utils.io import atomic_write_json
from scheda.protocol.jobs import CONTROLS, FINETUNES, STEP_KINDS, JobSpec, Kind, fmt
from scheda.runs.rundir import FINAL_STATUSES, best_evaluation, checkpoint_name, read_results
from scheda.protocol.launch import job_statuses
from scheda.protocol.plan import controls_of
from scheda.runs.rundir import params_of

log = logging.getLogger(__name__)


def select_das(jobs: list[JobSpec], out_dir: Path) -> dict[str, Any]:
    """Per hidden size: the best DA(nu) over lr and epochs for every nu, and the best DA over
    nu. A candidate needs a completed run and the checkpoint of its selected epoch."""
    per_hidden: dict[int, dict[str, Any]] = {}
    raw = None
    for run_dir, meta in _da_runs(jobs, out_dir):
        results = read_results(run_dir)
        if results is None or results.get("status") not in FINAL_STATUSES:
            continue  # a DA that diverged keeps the evaluations (and checkpoints) from before it
        if meta["kind"] == Kind.RAW:
            if results.get("evaluations"):
                raw = {"run": str(run_dir), **_errors(results["evaluations"][-1])}
            continue
        best = best_evaluation(results)
        if best is None:
            continue
        ckpt = run_dir / "checkpoints" / checkpoint_name(best["epoch"])
        if not ckpt.exists():
            log.warning("%s: no checkpoint at the selected epoch %d; skipped", run_dir, best["epoch"])
            continue
        entry = {"run": str(run_dir), "checkpoint": str(ckpt), "nu": meta["nu"], "lr": meta["lr"],
                 "epoch": best["epoch"], "status": results["status"],
                 "last_of_grid": best["epoch"] >= meta.get("epochs", math.inf), **_errors(best)}
        by_nu = per_hidden.setdefault(meta["hidden"], {"by_nu": {}})["by_nu"]
        key = fmt(meta["nu"])
        if key not in by_nu or (entry["val_error"], entry["epoch"]) < (by_nu[key]["val_error"], by_nu[key]["epoch"]):
            by_nu[key] = entry
    for sel in per_hidden.values():
        sel["best"] = min(sel["by_nu"].values(), key=lambda e: e["val_error"])
    return {"raw": raw, "hidden": {str(h): sel for h, sel in sorted(per_hidden.items())}}


def _da_runs(jobs: list[JobSpec], out_dir: Path) -> Iterable[tuple[Path, dict[str, Any]]]:
    """Every DA's run directory with its (hidden, nu, lr); a fused job holds one per nu."""
    for job in jobs:
        run_dir = out_dir / job.stage / job.name
        if job.meta["kind"] == Kind.DA_FUSED:
            for k, nu in enumerate(job.meta["nus"]):
                yield run_dir / "models" / str(k), {**job.meta, "kind": Kind.DA, "nu": nu}
        else:
            yield run_dir, job.meta


def _errors(evaluation: dict[str, Any]) -> dict[str, Any]:
    return {"val_error": evaluation["val_error"], "test_error": evaluation["test_error"], "params": params_of(evaluation)}


def select_continuations(jobs: list[JobSpec], out_dir: Path) -> dict[str, Any]:
    """Per hidden size and kind: every run's best evaluation on validation (for a schedule,
    the paper's choice of T among the evaluations after each level; a run that diverged
    keeps those before it), and the best run; a fine-tuning job's chosen result."""
    out: dict[str, dict[str, Any]] = {}
    for job in jobs:
        run_dir = out_dir / job.stage / job.name
        results = read_results(run_dir)
        if results is None or results.get("status") not in FINAL_STATUSES:
            continue
        if job.meta["kind"] in FINETUNES:
            chosen = results.get("finetune", {}).get("chosen")
            if chosen:
                out.setdefault(str(job.meta["hidden"]), {})[job.meta["kind"]] = {
                    "run": str(run_dir), "from": job.meta["from"], **chosen,
                    "frozen": results["finetune"].get("frozen")}
            continue
        best = best_evaluation(results)
        if best is None:
            continue
        levels = [e for e in results["evaluations"] if e.get("reason") == "stage_end"]
        T = next((i + 1 for i, e in enumerate(levels) if e["epoch"] >= best["epoch"]), None)
        ckpt = run_dir / "checkpoints" / checkpoint_name(best["epoch"])
        entry = {"run": str(run_dir), **job.meta, "epoch": best["epoch"], "nu": best.get("nu"), "T": T,
                 "status": results["status"], "checkpoint": str(ckpt) if ckpt.exists() else None, **_errors(best)}
        runs = out.setdefault(str(job.meta["hidden"]), {}).setdefault(job.meta["kind"], {"runs": []})
        runs["runs"].append(entry)
    for by_kind in out.values():
        for kind, sel in by_kind.items():
            if kind not in FINETUNES:
                sel["best"] = min(sel["runs"], key=lambda e: (e["val_error"], e["epoch"]))
    return out


def attach_controls(scale: DictConfig, kinds: Iterable[str], continued: dict[str, Any],
                    controls: dict[str, Any]) -> None:
    """Put each finished control beside the run it controls: ``continued[h][kind]["controls"]``."""
    if not scale.control:
        return
    for hidden, by_kind in continued.items():
        runs = {Path(e["run"]).name: e for kind in CONTROLS
                for e in controls.get(hidden, {}).get(kind, {}).get("runs", [])}
        for kind in kinds:
            best = by_kind.get(kind, {}).get("best")
            if kind in STEP_KINDS and best is not None:
                found = {job.meta["kind"]: runs[job.name] for job in controls_of(scale[kind], int(hidden), best)
                         if job.name in runs}
                by_kind[kind]["controls"] = found


def save_selection(out_dir: Path, selection: dict[str, Any]) -> None:
    atomic_write_json(out_dir / "selection.json", selection)


def require_selection(selection: dict[str, Any], jobs: list[JobSpec], out_dir: Path) -> None:
    """Stop with the first DA job's own error when stage 1 left nothing to select from."""
    if selection["hidden"]:
        return
    errors = [row for row in job_statuses(jobs, out_dir) if row["error"]]
    cause = f"{errors[0]['name']} failed with {errors[0]['error']}" if errors else "no DA job has run"
    raise SchedaError(f"no DA of stage 1 completed with an evaluation ({cause}); "
                      f"the jobs' logs are in {out_dir / 'da'}")
