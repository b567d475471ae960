"""Selection on validation: the best DA per hidden size and nu (over lr and epochs), the best
run of each continuation kind (the paper's choice of T among the evaluations after each level),
the fine-tuning jobs' chosen results, and the controls put beside the runs they control. What
each run's entry holds and where it is filed is its kind's (scheda.protocol.kinds)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from omegaconf import DictConfig

from scheda.utils.errors import SchedaError
from scheda.utils.io import atomic_write_json, shown_path
from scheda.protocol.jobs import JobSpec
from scheda.protocol.kinds import FINETUNE, control_kinds, kind_of, of_role
from scheda.protocol.launch import job_statuses
from scheda.runs.rundir import FINAL_STATUSES, read_results, status_counts


def select_das(jobs: list[JobSpec], out_dir: Path) -> dict[str, Any]:
    """Per hidden size: the best DA(nu) over lr and epochs for every nu, and the best DA over
    nu; and the raw baseline. A candidate needs a completed run (one that diverged keeps the
    evaluations and checkpoints from before it) and, for a DA, the checkpoint of its epoch."""
    found: dict[str, Any] = {"raw": None, "hidden": {}}
    _select(jobs, out_dir, found)
    for sel in found["hidden"].values():
        sel["best"] = min(sel["by_nu"].values(), key=lambda e: e["val_error"])
    return {"raw": found["raw"], "hidden": {str(h): sel for h, sel in sorted(found["hidden"].items())}}


def select_continuations(jobs: list[JobSpec], out_dir: Path) -> dict[str, Any]:
    """Per hidden size and kind: every run's best evaluation on validation (for a schedule,
    the paper's choice of T among the evaluations after each level; a run that diverged
    keeps those before it), and the best run; a fine-tuning job's chosen result."""
    found: dict[str, dict[str, Any]] = {}
    _select(jobs, out_dir, found)
    for by_kind in found.values():
        for sel in by_kind.values():
            if "runs" in sel:
                sel["best"] = min(sel["runs"], key=lambda e: (e["val_error"], e["epoch"]))
    return found


def _select(jobs: list[JobSpec], out_dir: Path, found: dict[str, Any]) -> None:
    """Each finished model of ``jobs`` selected and filed into ``found`` by its own kind."""
    for job in jobs:
        for run_dir, meta in kind_of(job.meta["kind"]).models(job, out_dir / job.phase / job.name):
            results = read_results(run_dir)
            if results is None or results.get("status") not in FINAL_STATUSES:
                continue
            kind = kind_of(meta["kind"])
            entry = kind.select(run_dir, results, meta)
            if entry is not None:
                kind.file(found, entry, meta)


def attach_controls(scale: DictConfig, kinds: Iterable[str], continued: dict[str, Any],
                    controls: dict[str, Any], prefix: str = "") -> None:
    """Put each finished control beside the run it controls: ``continued[h][kind]["controls"]``
    (``prefix``: before its kind's name of each control job, as a stacked layer names its jobs)."""
    controls_run = control_kinds(scale)
    if not controls_run:
        return
    for hidden, by_kind in continued.items():
        runs = {Path(e["run"]).name: e for control in controls_run
                for e in controls.get(hidden, {}).get(control.name, {}).get("runs", [])}
        for name in kinds:
            best = by_kind.get(name, {}).get("best")
            kind = kind_of(name)
            if kind.controlled and best is not None:
                by_kind[name]["controls"] = {job.meta["kind"]: runs[prefix + job.name]
                                             for job in kind.controls(scale, int(hidden), best)
                                             if prefix + job.name in runs}


def continuations_of(continued: dict[str, Any]) -> dict[str, Any]:
    """``continued``'s continuation kinds, each its runs and best without its controls (a block's record
    keeps the three parts apart, each the phase's that found it)."""
    return {h: {name: {k: v for k, v in e.items() if k != "controls"} for name, e in by_kind.items() if "runs" in e}
            for h, by_kind in continued.items()}


def controls_of(continued: dict[str, Any]) -> dict[str, Any]:
    """``continued``'s controls, by hidden size and the kind they control."""
    return {h: {name: e["controls"] for name, e in by_kind.items() if "controls" in e}
            for h, by_kind in continued.items()}


def finetuned_of(continued: dict[str, Any]) -> dict[str, Any]:
    """``continued``'s fine-tuning kinds' chosen results."""
    names = {kind.name for kind in of_role(FINETUNE)}
    return {h: {name: e for name, e in by_kind.items() if name in names} for h, by_kind in continued.items()}


def put_controls(continued: dict[str, Any], controls: dict[str, Any]) -> None:
    """:func:`controls_of`'s output back beside the runs they control."""
    for h, by_kind in controls.items():
        for name, found in by_kind.items():
            continued[h][name]["controls"] = found


def save_selection(out_dir: Path, selection: dict[str, Any]) -> None:
    atomic_write_json(out_dir / "selection.json", selection)


def require_selection(selection: dict[str, Any], jobs: list[JobSpec], out_dir: Path) -> None:
    """Stop with the first DA job's own error when phase 1 left nothing to select from."""
    if selection["hidden"]:
        return
    statuses = job_statuses(jobs, out_dir)
    errors = [row for row in statuses if row["error"]]
    if errors:
        raise SchedaError(f"no DA of phase 1 completed with an evaluation ({errors[0]['name']} failed with "
                          f"{errors[0]['error']}); the jobs' logs are in {shown_path(out_dir / 'da')}")
    if all(row["status"] == "not run" for row in statuses):  # phases=[report] before the table ran
        raise SchedaError(f"no DA of phase 1 has run in {shown_path(out_dir)}: nothing to report yet; run the table "
                          f"(the same command without phases=, or with phases=[da,...])")
    counts = status_counts(row["status"] for row in statuses)
    raise SchedaError(f"no DA of phase 1 completed with an evaluation yet ({counts}): the same command without "
                      f"phases= goes on with them; their logs are in {shown_path(out_dir / 'da')}")
