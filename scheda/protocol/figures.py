"""The report's figures, in the style of the paper's: Figure 2 (test error and training
reconstruction error against epoch, dashed lines at noise switches) and Figure 5 (every
schedule's test error by starting nu, against the DAs); a series trained with several seeds is
its mean with a band (a bar in Figure 5) of one standard deviation."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from scheda.analysis.core import pyplot, save_png
from scheda.protocol.jobs import fmt
from scheda.protocol.kinds import CONTINUATION, kind_of, of_role
from scheda.runs.rundir import read_results
from scheda.utils.errors import SchedaError
from scheda.utils.io import shown_path


def _load(run: str) -> dict:
    """A drawn run's results (one a block's record keeps as well: scheda.runs.rundir.read_results)."""
    results = read_results(Path(run))
    if results is None:
        raise SchedaError(f"{shown_path(Path(run))} has no results.json: run its table again to draw its figures")
    return results


def figure2(sel: dict, continued: dict, seeded: dict, png: Path, hidden: int) -> bool:
    """Test error (left) and training reconstruction error (right) against epoch for the best
    DA, the best run of each schedule kind and the DA each of those continued, a continuation
    drawn from its start epoch and joined to its DA's selected evaluation. A series trained
    with several seeds is drawn as its mean over them with a band of one standard deviation
    (at the epochs every seed reached), its selection seed's whole run thin beside it."""
    plt = pyplot()
    palette = series_palette(continued)
    rows = seeded["hidden"].get(str(hidden), {})
    curves = [(f"DA({fmt(sel['best']['nu'])})", sel["best"]["run"], 0, None, da_grey(sel["best"]["nu"]), "da")]
    for name, found in continued.items():
        if kind_of(name).role != CONTINUATION:
            continue
        best = found["best"]
        parent = sel["by_nu"].get(fmt(best["nu0"])) if "nu0" in best else None
        if parent is not None and parent["run"] not in [c[1] for c in curves]:
            curves.append((f"DA({fmt(parent['nu'])})", parent["run"], 0, None, da_grey(parent["nu"]), None))
        keys = [name] + [f"{name}.{c}" for c in found.get("controls", {})]
        for e, key in zip([best, *found.get("controls", {}).values()], keys):
            kind = kind_of(e["kind"])
            curves.append((kind.legend(e), e["run"], e.get("start_epoch", 0), parent, palette[kind.series(e)], key))
    fig, (ax_err, ax_ce) = plt.subplots(1, 2, figsize=(11, 4))
    for label, run, offset, parent, color, key in curves:
        res = _load(run)
        points = [(offset + e["epoch"], 100 * e["test_error"]) for e in res.get("evaluations", [])]
        if parent is not None:
            points.insert(0, (parent["epoch"], 100 * parent["test_error"]))
        hist = res.get("history", [])
        losses = [(offset + h["epoch"], h["loss"]) for h in hist]
        runs = [v["run"] for v in rows.get(key, {}).values()] if key else []
        if len(runs) > 1:  # mean and band over the seeds; the selection seed's run thin
            ax_err.plot(*zip(*points), "-", lw=0.6, color=color, alpha=0.35)
            ax_ce.plot(*zip(*losses), lw=0.6, color=color, alpha=0.35)
            label = f"{label}, mean ± sd of {len(runs)} seeds"
            _band(ax_err, [{offset + e["epoch"]: 100 * e["test_error"] for e in _load(r).get("evaluations", [])}
                           for r in runs], color, label, "o-")
            _band(ax_ce, [{offset + h["epoch"]: h["loss"] for h in _load(r).get("history", [])} for r in runs],
                  color, label, "-")
        else:
            ax_err.plot(*zip(*points), "o-", ms=3, color=color, label=label)
            ax_ce.plot(*zip(*losses), color=color, label=label)
        switches = res.get("switches", [])
        for s in switches if offset else switches[1:]:
            if s["nu"] is None:
                continue
            for ax in (ax_err, ax_ce):
                ax.axvline(offset + s["epoch"], color=color, ls="--", lw=0.7, alpha=0.6)
            ax_err.annotate(f"{s['nu']:g}", (offset + s["epoch"], 1.0), xycoords=("data", "axes fraction"),
                            fontsize=6, color=color, ha="center", va="bottom")
    ax_err.set(xlabel="epoch", ylabel="test error (%)", title=f"Test error, {hidden} hidden units")
    ax_ce.set(xlabel="epoch", ylabel="training reconstruction cross-entropy",
              title="Training reconstruction error (at the current nu)")
    ax_err.legend(fontsize=7)
    fig.tight_layout()
    save_png(fig, png, dpi=110)
    return True


def _band(ax, curves: list[dict[int, float]], color: str, label: str, style: str) -> None:
    """Mean ± one standard deviation over ``curves`` (epoch -> value), at the epochs all have."""
    epochs = sorted(set.intersection(*(set(c) for c in curves)))
    if not epochs:
        return
    values = np.array([[c[e] for e in epochs] for c in curves])
    mean, sd = values.mean(axis=0), values.std(axis=0, ddof=1)
    ax.plot(epochs, mean, style, ms=3, color=color, label=label)
    ax.fill_between(epochs, mean - sd, mean + sd, color=color, alpha=0.2, lw=0)


def series_palette(continued: dict) -> dict[str, str]:
    """One colour per series in every figure of a report (the DAs are greys)."""
    keys = sorted({kind_of(e["kind"]).series(e) for name, found in continued.items()
                   if kind_of(name).role == CONTINUATION for e in [*found["runs"], *found.get("controls", {}).values()]})
    return {key: f"C{i % 10}" for i, key in enumerate(keys)}


def da_grey(nu: float) -> str:
    return str(round(0.1 + 0.6 * min(1.0, float(nu)), 3))


def figure5(sel: dict, continued: dict, seeded: dict, png: Path, hidden: int) -> bool:
    """Every schedule's test error (at its best level) by starting level, against the best DA
    per nu and the best DA overall; a model trained with several seeds is drawn as its mean
    over them with one standard deviation (a band for the best DA, a bar for a schedule)."""
    runs = [e for kind in of_role(CONTINUATION) if kind.in_figure5 for e in continued.get(kind.name, {}).get("runs", [])]
    if not runs:
        return False
    plt = pyplot()
    rows = seeded["hidden"].get(str(hidden), {})
    fig, ax = plt.subplots(figsize=(6, 4))
    das = sorted((float(nu), 100 * e["test_error"]) for nu, e in sel["by_nu"].items())
    ax.plot([d[0] for d in das], [d[1] for d in das], "k.-", label="DA(nu)")
    da_seeds = [100 * v["test_error"] for v in rows.get("da", {}).values()]
    if len(da_seeds) > 1:
        mean, sd = float(np.mean(da_seeds)), float(np.std(da_seeds, ddof=1))
        ax.axhline(mean, color="k", ls="--", lw=0.8,
                   label=f"best DA ({fmt(sel['best']['nu'])}), mean ± sd of {len(da_seeds)} seeds")
        ax.axhspan(mean - sd, mean + sd, color="k", alpha=0.1, lw=0)
    else:
        ax.axhline(100 * sel["best"]["test_error"], color="k", ls="--", lw=0.8,
                   label=f"best DA ({fmt(sel['best']['nu'])})")
    markers, palette = {}, series_palette(continued)
    for e in runs:
        kind = kind_of(e["kind"])
        key = kind.series(e)
        markers.setdefault(key, len(markers))
        m = markers[key]
        x = e["nu0"] + 0.006 * (m - 1)
        ax.plot(x, 100 * e["test_error"], "os^vD<>"[m % 7], color=palette[key], label=kind.figure5_legend(e))
        values = [100 * v["test_error"] for v in rows.get(e["kind"], {}).values()] \
            if e["run"] == continued[e["kind"]]["best"]["run"] else []
        if len(values) > 1:
            ax.errorbar(x + 0.012, np.mean(values), yerr=np.std(values, ddof=1), fmt="o", mfc="none", capsize=3,
                        color=palette[key], label=f"best {e['kind']}, mean ± sd of {len(values)} seeds")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), fontsize=7)
    ax.set(xlabel="nu (DA) / starting nu0 (schedules)", ylabel="test error (%)",
           title=f"Schedules vs DA, {hidden} hidden units")
    fig.tight_layout()
    save_png(fig, png, dpi=110)
    return True
