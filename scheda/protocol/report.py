"""The protocol's report: a markdown table of our errors beside the paper's, the selected
hyper-parameters and every job's status, plus figures in the style of the paper's Figure 2
(test error and training reconstruction error against epoch; dashed lines at noise
switches) and Figure 5 (test error of each schedule against the best DA's)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from scheda import stats
from scheda.evaluate import unpack_correct
from scheda.io import atomic_write
from scheda.protocol.analysis import pyplot, save_png
from scheda.protocol.jobs import CONTROLS, STEP_KINDS, Kind, fmt
from scheda.results import params_of, params_text

KIND_LABEL = {Kind.SCHEDA: "ScheDA", Kind.INCREASING: "Increasing schedule", Kind.RANDOM_UNIFORM: "Random nu, uniform",
              Kind.RANDOM_DISCRETE: "Random nu, discrete", Kind.CONTROL: "Control: same start, constant nu",
              Kind.JUMP: "Control: same start, one jump to the final nu"}
FINETUNED = {Kind.FINETUNE_DA: ("Fine-tuned best DA", "finetuned_da"),  # the label and the paper's row
             Kind.FINETUNE_SCHEDA: ("Fine-tuned best ScheDA", "finetuned")}


def chosen(entry: dict[str, Any]) -> str:
    """The classifier setting a selected evaluation chose (``C=0.125``)."""
    return params_text(params_of(entry))


def pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.2f}"


def paper_value(paper: DictConfig, row: str, hidden: int | None = None) -> str:
    value = paper.get(row) if paper else None
    if value is not None and hidden is not None:
        value = value.get(str(hidden))
        if value is None:
            known = "/".join(f"{h}: {v}" for h, v in paper[row].items())
            return f"— (paper, by hidden units: {known})"
    return "—" if value is None else f"{value}"


def _schedule_text(e: dict[str, Any]) -> str:
    if e["kind"] in STEP_KINDS:
        return (f"nu0={fmt(e['nu0'])}, dnu={fmt(e['delta_nu'])}, K={e['K']}, T={e['T']} (last nu {fmt(e['nu'])}), "
                f"from the DA's epoch {e['start_epoch']}, {e['epoch']} epochs more")
    if e["kind"] in CONTROLS:
        return (f"nu={fmt(e['nu'])} for {e['epochs']} epochs from the DA({fmt(e['nu0'])})'s epoch {e['start_epoch']}, "
                f"best at {e['epoch']} epochs more")
    if "settings" in e:  # a schedule from scale.schedules
        return (f"nu0={fmt(e['nu0'])}, {_settings(e)}, T={e['T']} (last nu {fmt(e['nu'])}), "
                f"from the DA's epoch {e['start_epoch']}, {e['epoch']} epochs more")
    return f"lr={fmt(e['lr'])}, {e['epoch']} epochs" if "lr" in e else f"{e['epoch']} epochs"


def _settings(e: dict[str, Any]) -> str:
    return ", ".join(f"{k}={fmt(v) if isinstance(v, float) else v}" for k, v in e["settings"].items())


def kind_label(kind: str) -> str:
    return KIND_LABEL.get(kind, f"Schedule {kind}")


def write_report(cfg: DictConfig, selection: dict[str, Any], continued: dict[str, Any], seeded: dict[str, Any],
                 statuses: list[dict], info: dict[str, Any], path: Path) -> Path:
    """``path`` (markdown) and its figures beside it; returns the report's path. ``seeded``:
    each reported model's errors per seed (scheda.protocol.seeds)."""
    table, scale, paper = cfg.table, cfg.scale, cfg.table.paper
    over_seeds = len(seeded["seeds"]) > 1
    seeds_head = " Further seeds: test % mean ± sd (n) |" if over_seeds else ""
    lines = [f"# {table.title} — scale={scale.name}", "",
             f"- Device: {info['device']}; launcher: {cfg.launcher}"
             f"{f' ({cfg.n_jobs} jobs at once)' if cfg.launcher == 'joblib' else ''}",
             f"- Wall time: {_wall_time(info['invocations'])}; training and evaluation time summed over all "
             f"jobs: {info['job_seconds'] / 60:.1f} min",
             f"- Runs: `{info['out_dir']}`; written {info['date']}; commit {info['commit']}",
             f"- Scale: {scale.description.strip()}", "",
             "## Results", "",
             f"| Model | Hidden units | Selected hyper-parameters | Val error % | Test error % |{seeds_head} "
             f"Paper test error % |",
             "|---|---|---|---|---|---|" + ("---|" if over_seeds else "")]
    if over_seeds:
        lines[-2:-2] = [f"Val and test error: the selection seed ({seeded['selection_seed']}), on which every "
                        f"hyper-parameter was chosen; the column beside them: the same models trained again with "
                        f"the further seeds {', '.join(map(str, seeded['seeds'][1:]))}, read at the selection seed's "
                        f"epochs (section Seeds reads them at their own best validation epochs too).", ""]

    def cell(hidden: str, key: str) -> str:
        return f" {_seed_cell(seeded, hidden, key)} |" if over_seeds else ""
    raw = selection.get("raw")
    if table.raw:
        none = " — (no training noise) |" if over_seeds else ""
        lines.append(f"| Raw pixels | — | {chosen(raw)} | {pct(raw['val_error'])} | {pct(raw['test_error'])} |{none} "
                     f"{paper_value(paper, 'raw')} |" if raw else
                     f"| Raw pixels | — | not completed | — | — |{none} {paper_value(paper, 'raw')} |")
    verdicts = []
    for hidden, sel in selection["hidden"].items():
        da = sel["best"]
        lines.append(f"| DA | {hidden} | nu={fmt(da['nu'])}, lr={fmt(da['lr'])}, {da['epoch']} epochs, {chosen(da)} "
                     f"| {pct(da['val_error'])} | {pct(da['test_error'])} |{cell(hidden, 'da')} "
                     f"{paper_value(paper, 'da', int(hidden))} |")
        if da.get("last_of_grid"):
            verdicts.append(f"The best DA ({hidden} hidden units, nu={fmt(da['nu'])}) was selected at epoch {da['epoch']}, "
                            f"the last of the grid (scale.da.epochs): it may be under-trained, and a longer grid "
                            f"could lower its error.")
        for kind, found in continued.get(hidden, {}).items():
            if kind in FINETUNED:
                continue
            best = found["best"]
            lines.append(f"| {kind_label(kind)} | {hidden} | {_schedule_text(best)}, {chosen(best)} | "
                         f"{pct(best['val_error'])} | {pct(best['test_error'])} |{cell(hidden, kind)} "
                         f"{paper_value(paper, kind, int(hidden))} |")
            verdicts.append(_verdict(kind_label(kind), hidden, best, da))
            for control_kind, control in found.get("controls", {}).items():
                lines.append(f"| {kind_label(control_kind)} | {hidden} | {_schedule_text(control)}, {chosen(control)} | "
                             f"{pct(control['val_error'])} | {pct(control['test_error'])} |"
                             f"{cell(hidden, f'{kind}.{control_kind}')} — |")
            if found.get("controls"):
                verdicts.append(_control_verdict(kind_label(kind), best, found["controls"]))
        for key, (label, paper_row) in FINETUNED.items():
            ft = continued.get(hidden, {}).get(key)
            if ft:
                frozen = f" (frozen features: {pct(ft['frozen']['test_error'])} % test)" if ft.get("frozen") else ""
                lines.append(f"| {label} | {hidden} | lr={fmt(ft['lr'])}, epoch {ft['best_epoch']}{frozen} | "
                             f"{pct(ft['val_error'])} | {pct(ft['test_error'])} |{cell(hidden, key)} "
                             f"{paper_value(paper, paper_row, int(hidden))} |")
            elif scale.finetune is None and paper and paper.get(paper_row):
                lines.append(f"| {label} | {hidden} | not run at this scale | — | — |{' — |' if over_seeds else ''} "
                             f"{paper_value(paper, paper_row, int(hidden))} |")
    lines += [""] + [f"- {'On the selection seed alone: ' if over_seeds else ''}{v}" for v in verdicts]
    lines += seeds_section(seeded)
    for hidden, sel in selection["hidden"].items():
        lines += _detail_tables(hidden, sel, continued.get(hidden, {}))
        for name, draw in (("figure2", figure2), ("figure5", figure5)):
            png = path.with_name(f"{path.stem}_{name}_h{hidden}.png")
            if draw(sel, continued.get(hidden, {}), seeded, png, int(hidden)):
                lines += ["", f"![{name}, {hidden} hidden units]({png.name})"]
    lines += ["", "## Jobs", "", "| Job | Stage | Status | Minutes | Error |", "|---|---|---|---|---|"]
    for row in statuses:
        minutes = f"{row['seconds'] / 60:.1f}" if row["seconds"] else "—"
        lines.append(f"| {row['name']} | {row['stage']} | {row['status']} | {minutes} | {row['error'] or ''} |")
    lines += ["", "## Configuration", "", "```yaml", OmegaConf.to_yaml(cfg.scale).strip(), "```", ""]
    atomic_write(path, lambda f: f.write("\n".join(lines).encode()))
    return path


def _wall_time(invocations: list[dict]) -> str:
    """The sum over the invocations that trained anything; runs shared with other tables of the
    scale (the DA grid, say) count where they ran."""
    working = [i for i in invocations if i["ran_jobs"]]
    if not working:
        return "no invocation ran jobs"
    by_table: dict[str, float] = {}
    for i in working:
        by_table[i.get("table", "?")] = by_table.get(i.get("table", "?"), 0.0) + i["seconds"] / 60
    parts = ", ".join(f"{t} {m:.1f} min" for t, m in by_table.items())
    return (f"{sum(by_table.values()):.1f} min over {len(working)} invocation{'s' if len(working) != 1 else ''} "
            f"that ran jobs in this scale's directory ({parts}; the first started {working[0]['started']})")


def _verdict(label: str, hidden: str, best: dict, da: dict) -> str:
    diff_test, diff_val = 100 * (da["test_error"] - best["test_error"]), 100 * (da["val_error"] - best["val_error"])
    word = "beat" if diff_test > 0 else "did not beat"
    return (f"{label} ({hidden} hidden units) {word} the best DA: test {pct(best['test_error'])} % vs "
            f"{pct(da['test_error'])} % ({diff_test:+.2f} points in its favour), validation {diff_val:+.2f} points.")


def _control_verdict(label: str, best: dict, controls: dict) -> str:
    """What the controls of one schedule show, in words."""
    parts = [f"Controls of the best {label} (nu0={fmt(best['nu0'])} -> {fmt(best['nu'])}, {best['epoch']} epochs "
             f"from the DA's epoch {best['start_epoch']}; same checkpoint and training stream):"]
    same, jump = controls.get(Kind.CONTROL), controls.get(Kind.JUMP)
    if same:
        gain = 100 * (same["test_error"] - best["test_error"])
        parts.append(f"the DA trained on at nu={fmt(same['nu'])} for the schedule's {same['epochs']} epochs reached "
                     f"{pct(same['test_error'])} % test at its best epoch on validation ({same['epoch']}), so the "
                     f"schedule is {gain:+.2f} points better on test than more epochs alone "
                     f"({100 * (same['val_error'] - best['val_error']):+.2f} on validation);")
    if jump:
        gain = 100 * (jump["test_error"] - best["test_error"])
        word = "better than" if gain > 0 else "no better than"
        parts.append(f"one jump straight to nu={fmt(jump['nu'])} for {jump['epochs']} epochs reached "
                     f"{pct(jump['test_error'])} % test (best on validation at epoch {jump['epoch']}): the gradual "
                     f"schedule is {word} a single switch ({gain:+.2f} points on test, "
                     f"{100 * (jump['val_error'] - best['val_error']):+.2f} on validation).")
    return " ".join(parts)


def _detail_tables(hidden: str, sel: dict, continued: dict) -> list[str]:
    lines = ["", f"## {hidden} hidden units: the best DA per noise level (over lr and epochs)", "",
             "| nu | lr | epochs | Classifier | Val error % | Test error % |", "|---|---|---|---|---|---|"]
    for nu, e in sorted(sel["by_nu"].items(), key=lambda kv: -float(kv[0])):
        epoch = f"{e['epoch']}{' (last of the grid)' if e.get('last_of_grid') else ''}" \
                f"{' (diverged later)' if e.get('status') == 'diverged' else ''}"
        lines.append(f"| {nu} | {fmt(e['lr'])} | {epoch} | {chosen(e)} | {pct(e['val_error'])} | "
                     f"{pct(e['test_error'])} |")
    for kind, found in continued.items():
        if kind in FINETUNED:
            continue
        lines += ["", f"### {hidden} hidden units: {kind_label(kind)} runs (each at its best evaluation on validation)", "",
                  "| Run | Selected | Val error % | Test error % |", "|---|---|---|---|"]
        for e in sorted(found["runs"], key=lambda e: e["val_error"]):
            lines.append(f"| {Path(e['run']).name} | {_schedule_text(e)} | {pct(e['val_error'])} | "
                         f"{pct(e['test_error'])} |")
    return lines


def _load(run: str) -> dict:
    return json.loads((Path(run) / "results.json").read_text())


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
    for kind, found in continued.items():
        if kind in FINETUNED:
            continue
        best = found["best"]
        parent = sel["by_nu"].get(fmt(best["nu0"])) if "nu0" in best else None
        if parent is not None and parent["run"] not in [c[1] for c in curves]:
            curves.append((f"DA({fmt(parent['nu'])})", parent["run"], 0, None, da_grey(parent["nu"]), None))
        keys = [kind] + [f"{kind}.{c}" for c in found.get("controls", {})]
        for e, key in zip([best, *found.get("controls", {}).values()], keys):
            curves.append((_schedule_label(e), e["run"], e.get("start_epoch", 0), parent, palette[series_key(e)], key))
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


def series_key(e: dict) -> str:
    """The series a run belongs to in the figures: a schedule's (kind, dnu, K), or its kind."""
    if e["kind"] in STEP_KINDS:
        return f"{e['kind']} dnu={fmt(e['delta_nu'])} K={e['K']}"
    if "settings" in e:
        return f"{e['kind']} {_settings(e)}"
    return e["kind"]


def series_palette(continued: dict) -> dict[str, str]:
    """One colour per series in every figure of a report (the DAs are greys)."""
    keys = sorted({series_key(e) for kind, found in continued.items() if kind not in FINETUNED
                   for e in [*found["runs"], *found.get("controls", {}).values()]})
    return {key: f"C{i % 10}" for i, key in enumerate(keys)}


def da_grey(nu: float) -> str:
    return str(round(0.1 + 0.6 * min(1.0, float(nu)), 3))


def _schedule_label(e: dict) -> str:
    if e["kind"] in STEP_KINDS:
        name = "ScheDA" if e["kind"] == Kind.SCHEDA else "Increasing"
        return f"{name}({fmt(e['nu0'])}, dnu {fmt(e['delta_nu'])}, K {e['K']})"
    if e["kind"] == Kind.CONTROL:
        return f"control: DA({fmt(e['nu0'])}) +{e['epochs']} epochs"
    if e["kind"] == Kind.JUMP:
        return f"control: DA({fmt(e['nu0'])}) -> {fmt(e['nu'])} at once"
    if "settings" in e:
        return f"{e['kind']}({fmt(e['nu0'])}, {_settings(e)})"
    return kind_label(e["kind"])


def figure5(sel: dict, continued: dict, seeded: dict, png: Path, hidden: int) -> bool:
    """Every schedule's test error (at its best level) by starting level, against the best DA
    per nu and the best DA overall; a model trained with several seeds is drawn as its mean
    over them with one standard deviation (a band for the best DA, a bar for a schedule)."""
    runs = [e for kind in STEP_KINDS for e in continued.get(kind, {}).get("runs", [])]
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
        key = (e["kind"], e["delta_nu"], e["K"])
        markers.setdefault(key, len(markers))
        m = markers[key]
        x = e["nu0"] + 0.006 * (m - 1)
        ax.plot(x, 100 * e["test_error"], "os^vD<>"[m % 7], color=palette[series_key(e)],
                label=f"{'ScheDA' if e['kind'] == 'scheda' else 'increasing'} dnu={fmt(e['delta_nu'])}, K={e['K']}")
        values = [100 * v["test_error"] for v in rows.get(e["kind"], {}).values()] \
            if e["run"] == continued[e["kind"]]["best"]["run"] else []
        if len(values) > 1:
            ax.errorbar(x + 0.012, np.mean(values), yerr=np.std(values, ddof=1), fmt="o", mfc="none", capsize=3,
                        color=palette[series_key(e)], label=f"best {e['kind']}, mean ± sd of {len(values)} seeds")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), fontsize=7)
    ax.set(xlabel="nu (DA) / starting nu0 (schedules)", ylabel="test error (%)",
           title=f"Schedules vs DA, {hidden} hidden units")
    fig.tight_layout()
    save_png(fig, png, dpi=110)
    return True


# --- seeds -------------------------------------------------------------------------------------
def seed_label(key: str) -> str:
    """A seeded row's name: ``da``, a continuation kind, ``<kind>.control`` / ``<kind>.jump``, a fine-tuned row."""
    if key == "da":
        return "Best DA"
    if key in FINETUNED:
        return FINETUNED[key][0]
    kind, _, control = key.partition(".")
    if control:
        return kind_label(control) + ("" if kind == "scheda" else f" (of {kind_label(kind)})")
    return kind_label(kind)


def further(per_seed: dict[str, dict], selection_seed: int) -> list[tuple[int, dict]]:
    """The seeds that took no part in selection, in order, with their outcomes."""
    return sorted((int(s), v) for s, v in per_seed.items() if int(s) != selection_seed)


def _seed_cell(seeded: dict[str, Any], hidden: str, key: str) -> str:
    per_seed = seeded["hidden"].get(hidden, {}).get(key)
    if not per_seed:
        return "—"
    values = [v["test_error"] for _, v in further(per_seed, seeded["selection_seed"])]
    if not values:
        return "not run yet"
    s = stats.summarize([100 * v for v in values])
    return f"{s.mean:.2f} ± {s.sd:.2f} ({s.n})" if s.sd is not None else f"{s.mean:.2f} (1)"


def comparisons(rows: dict[str, dict]) -> list[tuple[str, str, str]]:
    """The (name, a, b) pairs the report tests, a - b in test error: every continuation against
    the best DA, a step schedule against both its controls, fine-tuned ScheDA against fine-tuned DA."""
    out = []
    for key in rows:
        kind, _, control = key.partition(".")
        if key == "da" or key in FINETUNED:
            continue
        if control:
            out.append((f"{seed_label(kind)} − {seed_label(key).lower()}", kind, key))
        elif "da" in rows:
            out.append((f"{seed_label(kind)} − best DA", kind, "da"))
    if all(k in rows for k in FINETUNED):
        out.append(("Fine-tuned ScheDA − fine-tuned DA", Kind.FINETUNE_SCHEDA, Kind.FINETUNE_DA))
    return out


def _mcnemar(a: dict, b: dict) -> stats.McNemar | None:
    if not (a.get("test_correct") and b.get("test_correct") and a.get("test_n")) or a["test_n"] != b.get("test_n"):
        return None
    n = a["test_n"]
    return stats.mcnemar(unpack_correct(a["test_correct"], n), unpack_correct(b["test_correct"], n))


def _interval(s: stats.Summary) -> str:
    return f"[{s.low:+.2f}, {s.high:+.2f}]" if s.has_interval else "none (n = 1)"


RULES = {"hidden": "at the selection seed's epoch", "own_best": "at each seed's own best validation epoch"}


def seeds_section(seeded: dict[str, Any]) -> list[str]:
    """Training noise (rows over seeds, paired differences with intervals and verdicts) and
    test-set noise (binomial standard errors, McNemar's test), per hidden size, under both rules
    of reading a further seed (scheda.protocol.seeds): at the epoch selected on the selection
    seed, and at its own best validation epoch; then every comparison's two verdicts side by
    side, and in words where they differ."""
    seeds, s0 = seeded["seeds"], seeded["selection_seed"]
    lines = ["", "## Seeds", ""]
    if len(seeds) == 1:
        return lines + [f"One seed ({s0}): every number above is one training run, and no interval exists for "
                        f"any of them or for their differences. `scale.seeds=[{s0},1,2,3,4,5]` trains every reported "
                        f"model again with each further seed (the hyper-parameters stay those chosen on seed {s0})."]
    lines += [f"Hyper-parameters were chosen on seed {s0} (the selection seed); every reported model was then "
              f"trained again with the same hyper-parameters and seeds {', '.join(map(str, seeds[1:]))} "
              f"(initialisation, minibatch order, masks), as long as its selection run and evaluated as it was, each "
              f"continuation and control from that seed's own DA checkpoint at the selected epoch, so differences "
              f"pair by seed. Each further seed is read under two rules: **at the selection seed's epoch** (the "
              f"epochs chosen on seed {s0}) and **at its own best validation epoch** (as the paper chooses the epochs "
              f"on validation for every model it reports); seed {s0} is the same under both. Statistics use the "
              f"further seeds only: the selection seed won the selection and would bias them, so it is shown beside "
              f"them, not pooled. Intervals are 95 % t-intervals (paired for differences); the sign-flip p-value is "
              f"exact (all 2^n sign patterns; with n seeds it cannot go below 2/2^n). A difference is *resolved* only "
              f"when its interval excludes 0."]
    own = seeded.get("own_best") or {}
    for hidden, rows in seeded["hidden"].items():
        results = {}
        for rule, title in RULES.items():
            by_rule = rows if rule == "hidden" else own.get(hidden, {})
            if not by_rule:
                continue
            table, found = _rule_tables(hidden, by_rule, s0, title)
            lines += table
            results[rule] = found
        lines += _side_by_side(hidden, results)
    return lines


def _rule_tables(hidden: str, rows: dict[str, dict], s0: int, title: str) -> tuple[list[str], dict[str, Any]]:
    """Under one rule: each reported model over seeds, and each paired comparison with its verdict."""
    lines = ["", f"### {hidden} hidden units, {title}: each reported model over seeds (test error %)", "",
             f"| Model | Seed {s0} (selection) | Further seeds, each (epoch) | n | Mean ± sd | 95 % interval | "
             f"Test-set SE of one model |", "|---|---|---|---|---|---|---|"]
    for key, per_seed in rows.items():
        rest = further(per_seed, s0)
        first = per_seed.get(str(s0))
        sel = pct(first["test_error"]) if first else "—"
        if not rest:
            lines.append(f"| {seed_label(key)} | {sel} | not run yet | 0 | — | — | — |")
            continue
        s = stats.summarize([100 * v["test_error"] for _, v in rest])
        n_test = rest[0][1].get("test_n")
        se = f"{100 * stats.binomial_se(s.mean / 100, n_test):.2f} (N = {n_test})" if n_test else "—"
        spread = f"{s.mean:.2f} ± {s.sd:.2f}" if s.sd is not None else f"{s.mean:.2f}"
        each = ", ".join(pct(v["test_error"]) + (f" ({v['epoch']})" if v.get("epoch") is not None else "")
                         for _, v in rest)
        lines.append(f"| {seed_label(key)} | {sel} | {each} | {s.n} | {spread} | {_interval(s)} | {se} |")
    lines += ["", f"### {hidden} hidden units, {title}: paired differences (test error, points; negative: the "
                  f"first is better)", "",
              f"| Comparison | Seed {s0} (selection) | Further seeds, each | n | Mean ± sd | 95 % interval "
              f"(paired t) | Sign-flip p | McNemar p, each further seed (only first right / only second right) "
              f"| Verdict |", "|---|---|---|---|---|---|---|---|---|"]
    words, found = [], {}
    for name, a, b in comparisons(rows):
        pairs = [(seed, rows[a][str(seed)], rows[b][str(seed)]) for seed, _ in further(rows[a], s0)
                 if str(seed) in rows[b]]
        first = (rows[a].get(str(s0)), rows[b].get(str(s0)))
        sel = f"{100 * (first[0]['test_error'] - first[1]['test_error']):+.2f}" if all(first) else "—"
        if not pairs:
            lines.append(f"| {name} | {sel} | not run yet | 0 | — | — | — | — | not resolved: no further seed |")
            continue
        d = stats.paired([100 * x["test_error"] for _, x, _ in pairs], [100 * y["test_error"] for _, _, y in pairs])
        tests = [_mcnemar(x, y) for _, x, y in pairs]
        mc = ", ".join(f"{t.p_value:.3g} ({t.only_a}/{t.only_b})" if t else "—" for t in tests)
        verdict = _paired_verdict(d)
        found[name] = (d, verdict)
        s = d.summary
        spread = f"{s.mean:+.2f} ± {s.sd:.2f}" if s.sd is not None else f"{s.mean:+.2f}"
        lines.append(f"| {name} | {sel} | {', '.join(f'{x:+.2f}' for x in d.diffs)} | {s.n} | {spread} | "
                     f"{_interval(s)} | {d.p_value:.3g} | {mc} | {verdict} |")
        significant = sum(1 for t in tests if t and t.p_value < 0.05)
        words.append(f"{name}: {s.mean:+.2f} points on test over {s.n} further seed{'s' if s.n != 1 else ''} "
                     f"(95 % interval {_interval(s)}; sign-flip p = {d.p_value:.3g}); {verdict}. On the selection "
                     f"seed: {sel} points. Test-set noise: McNemar's test tells the two models apart at p < 0.05 "
                     f"on {significant} of {len(tests)} seeds.")
    return lines + [""] + [f"- {w}" for w in words], found


def _side_by_side(hidden: str, results: dict[str, dict[str, Any]]) -> list[str]:
    """Every comparison's verdict under both rules in one table, and a sentence where they differ."""
    if len(results) < 2:
        return []
    a, b = results["hidden"], results["own_best"]
    names = [n for n in a if n in b]
    if not names:
        return []

    def cell(d: stats.Paired, verdict: str) -> str:
        return f"{d.summary.mean:+.2f} {_interval(d.summary)}, p {d.p_value:.3g}: {verdict.split(':')[0]}"

    lines = ["", f"### {hidden} hidden units: both rules side by side", "",
             f"| Comparison | {RULES['hidden'].capitalize()} | {RULES['own_best'].capitalize()} |", "|---|---|---|"]
    lines += [f"| {n} | {cell(*a[n])} | {cell(*b[n])} |" for n in names]
    differ = [n for n in names if a[n][1].split(":")[0] != b[n][1].split(":")[0]
              or (a[n][0].resolved and b[n][0].resolved and (a[n][0].summary.mean < 0) != (b[n][0].summary.mean < 0))]
    lines.append("")
    if differ:
        lines += [f"- **The rule decides the verdict** for {n}: {RULES['hidden']} it is {a[n][1]}; "
                  f"{RULES['own_best']} it is {b[n][1]}." for n in differ]
    else:
        lines.append("- Every comparison has the same verdict under both rules.")
    signs = [n for n in names if (a[n][0].summary.mean < 0) != (b[n][0].summary.mean < 0)]
    lines += [f"- The mean difference of {n} changes sign with the rule ({a[n][0].summary.mean:+.2f} against "
              f"{b[n][0].summary.mean:+.2f} points)." for n in signs]
    return lines


def _paired_verdict(d: stats.Paired) -> str:
    s = d.summary
    if not s.has_interval:
        return "not resolved: one further seed gives no interval"
    if d.resolved:
        return f"resolved: the first is {'better' if s.mean < 0 else 'worse'} ({s.n} seeds)"
    return f"not resolved with {s.n} seeds"
