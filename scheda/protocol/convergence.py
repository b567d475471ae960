"""The report's account of the rule of training to convergence (``scale.patience``): for every
reported model and seed, its best epoch on validation and why it stopped (the rule, or its cap
before the rule stopped it), so that no model read at the edge of its budget passes as converged;
and of the models read with the classifier's C at the edge of its grid (:func:`classifier_edges`)."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from pathlib import Path

from scheda.protocol.kinds import CONTINUATION, FINETUNE, kind_of, of_role
from scheda.runs.rundir import CAP, PATIENCE, SCHEDULE, params_of, params_text, read_results
from scheda.protocol.kinds.da import DA


def stopped_text(e: dict[str, Any]) -> str:
    """One model's best epoch and why it stopped, as the report's cells print it."""
    why, trained = e.get("stopped_by"), e.get("epochs_trained")
    if why == PATIENCE:
        return f"{e['epoch']} (stopped by patience at {trained})"
    if why == CAP:
        return f"{e['epoch']} (**at the cap**, {trained})"
    if why == SCHEDULE:
        return f"{e['epoch']} (fixed length {trained})"
    return f"{e['epoch']}"


def finetuned(run: str | Path) -> dict[str, Any] | None:
    """A fine-tuning run's chosen rate as the section reads a model: its best epoch, and why that rate
    stopped (``finetune.patience``, or its ``finetune.max_epochs``: its cap)."""
    results = read_results(Path(run)) or {}
    ft = results.get("finetune") or {}
    chosen = ft.get("chosen")
    if not chosen:
        return None
    rate = next((r for r in ft.get("per_lr", []) if r["lr"] == chosen["lr"]), None)
    most = ((results.get("config") or {}).get("finetune") or {}).get("max_epochs")
    if rate is None or most is None:
        return None
    return {"epoch": chosen["best_epoch"], "epochs_trained": rate["epochs_run"],
            "stopped_by": PATIENCE if rate["epochs_run"] < most else CAP}


def _rows(hidden: str, sel: dict[str, Any], continued: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(key in the seeds' results, label, the selection seed's entry) of each reported model that trains."""
    rows = [(DA.name, "Best DA", sel["best"])]
    for name, found in continued.items():
        kind = kind_of(name)
        if kind.role != CONTINUATION or found.get("best") is None:
            continue
        rows.append((name, kind.label, found["best"]))
        for control_name, control in found.get("controls", {}).items():
            rows.append((f"{name}.{control_name}", kind_of(control_name).label, control))
    for kind in of_role(FINETUNE):  # its chosen rate, stopped by finetune.patience or at finetune.max_epochs
        chosen = continued.get(kind.name)
        entry = finetuned(chosen["run"]) if chosen else None
        if entry is not None:
            rows.append((kind.name, kind.label, entry))
    return rows


def section(scale: DictConfig, selection: dict[str, Any], continued: dict[str, Any],
            seeded: dict[str, Any]) -> list[str]:
    """The report's section on the rule; none for a scale without it."""
    if scale.get("patience") is None:
        return []
    caps = [f"a DA at most {scale.da.epochs} epochs (evaluated every {scale.da.eval_every})"]
    trained = dict.fromkeys(name for by_kind in continued.values() for name in by_kind)  # in the rows' order
    caps += [cap for name in trained if (cap := kind_of(name).cap(scale))]
    lines = ["", "## Training to convergence", "",
             f"Every trained model stopped once {scale.patience} evaluation{'s' if scale.patience != 1 else ''} in a "
             f"row (in a schedule's last level) "
             f"brought no new best validation error, or at its cap: {'; '.join(caps)}. A model **at the cap** "
             f"reached it before its patience ran out: it is reported, but not as converged. Each cell: the epoch the model is read "
             f"at under the seed's own best rule (its best validation epoch), then why and when it stopped; a "
             f"fine-tuned row, its chosen rate's best epoch, stopped by finetune.patience or at finetune.max_epochs "
             f"(its cap).", ""]
    at_cap: list[str] = []
    seeds = [str(s) for s in seeded.get("seeds", [])]
    for hidden, sel in selection["hidden"].items():
        by_seed = seeded.get("own_best", {}).get(hidden, {})
        lines += [f"| {hidden} hidden units | " + " | ".join(f"seed {s}" for s in seeds) + " |",
                  "|---|" + "---|" * len(seeds)]
        for key, label, entry in _rows(hidden, sel, continued.get(hidden, {})):
            cells = []
            for s in seeds:
                e = entry if s == seeds[0] else by_seed.get(key, {}).get(s)
                if e is not None and key.startswith("finetune") and s != seeds[0]:
                    e = finetuned(e["run"])
                cells.append(stopped_text(e) if e else "—")
                if e and e.get("stopped_by") == CAP:
                    at_cap.append(f"{label} ({hidden} hidden units, seed {s})")
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
    if at_cap:
        lines.append(f"- At the cap, not converged by the rule ({len(at_cap)}): {', '.join(at_cap)}. Their errors may fall "
                     f"with more epochs; a comparison with them is a comparison at that budget.")
    else:
        lines.append("- No reported model reached its cap: each stopped by the rule.")
    return lines


def edge_of(entry: dict[str, Any]) -> str | None:
    """The classifier's chosen setting where the evaluation a model is read at chose the edge of
    its grid (scheda.evaluation.evaluate: ``at_edge``), else None (a block's record keeps it: ``edge``)."""
    if "edge" in entry:
        return entry["edge"]
    results = read_results(Path(entry["run"])) if entry.get("run") else None
    evaluations = (results or {}).get("evaluations", [])
    found = next((e for e in evaluations if e["epoch"] == entry.get("epoch", evaluations[-1]["epoch"] if evaluations
                                                                   else None)), None)
    return params_text(params_of(found)) if found and found.get("at_edge") else None


def classifier_edges(selection: dict[str, Any], continued: dict[str, Any], seeded: dict[str, Any]) -> list[str]:
    """Every reported model (each seed, under both reading rules) whose evaluation chose the edge
    of the classifier's grid (``classifier.c_log2_min/max``): its error might be lower with a
    wider grid. Fine-tuned rows train their own output layer, and have no such choice."""
    seeds = [str(s) for s in seeded.get("seeds", [])]
    raw = selection.get("raw")
    edges = [f"the raw inputs ({chosen})"] if raw and (chosen := edge_of(raw)) else []
    for hidden, sel in selection["hidden"].items():
        for key, label, entry in _rows(hidden, sel, continued.get(hidden, {})):
            if key.startswith("finetune"):
                continue
            for s in seeds:
                read = {entry["epoch"]: entry} if s == seeds[0] else {
                    e["epoch"]: e for rule in ("hidden", "own_best")
                    if (e := seeded.get(rule, {}).get(hidden, {}).get(key, {}).get(s)) is not None}
                for epoch, e in sorted(read.items()):
                    chosen = edge_of(e)
                    if chosen:
                        edges.append(f"{label} ({hidden} hidden units, seed {s}, epoch {epoch}: {chosen})")
    return ["", edges_line(edges, "every reported model and seed")]


def edges_line(edges: list[str], every: str) -> str:
    """The report's line on the models read at the edge of the classifier's grid (``every``: what
    the line covers when there are none)."""
    if not edges:
        return f"- The classifier's chosen setting lies inside its grid for {every}."
    return (f"- Read with the classifier's setting at the edge of its grid ({len(edges)}): {', '.join(edges)}. "
            f"Their errors might be lower with a wider grid (classifier.c_log2_min/max).")
