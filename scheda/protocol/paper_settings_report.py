"""table=paper_settings' report: each seed's arms read under the rules fixed before any block ran,
and the pre-registered comparison (ScheDA as the paper reads it minus the jump at its best
validation epoch, test error, paired by seed) by scheda.protocol.compare. Each model is a row
(scheda.protocol.rows), read under the rules fixed before any block (``Row.read``: paper, best, last).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from scheda.protocol.compare import between, between_header, compare
from scheda.protocol.convergence import edges_line
from scheda.protocol.jobs import fmt, pct
from scheda.protocol.rows import Evaluation, Row, from_entry
from scheda.runs.rundir import params_text
from scheda.utils.errors import SchedaError


def reading(e: Row | None, rule: str) -> Evaluation | None:
    """The evaluation ``e`` is read at under ``rule`` (paper, best, last); None for a model not in."""
    return None if e is None else e.read(rule)


# (label, model key without K, reading): the arms of the per-seed table, in its order
ROWS = (("ScheDA, as the paper reads it (T on validation)", "scheda", "paper"),
        ("ScheDA, its best validation epoch", "scheda", "best"),
        ("ScheDA, its last epoch", "scheda", "last"),
        ("One jump, its best validation epoch", "jump", "best"),
        ("One jump, its last epoch", "jump", "last"),
        ("Same start, its best validation epoch", "same_start", "best"),
        ("Same start, its last epoch", "same_start", "last"))


def _key(model: str, K: int) -> str:
    return model if model == "same_start" else f"{model}_K{K}"


def _cell(r: Evaluation | None) -> str:
    if r is None:
        return "—"
    nu = f", nu {fmt(r.nu)}" if r.nu is not None else ""
    return f"{pct(r.test_error)} ({pct(r.val_error)} val; epoch {r.epoch}{nu})"


def _stopped(e: Row | None) -> str:
    if not e:
        return "—"
    why = {"patience": "stopped by the rule", "cap": "at the cap", "schedule": "ran its epochs out"}
    return f"{e.epochs_trained} epochs, {why.get(e.stopped_by, e.stopped_by or '?')}"


def edges(read: list[tuple[str, Evaluation | None]]) -> list[str]:
    """convergence.edges_line over the evaluations read (each named by its label), and how many of them
    a record did not keep the classifier's choice of."""
    known = [(label, r) for label, r in read if r is not None]
    recorded = [(label, r) for label, r in known if r.at_edge is not None]
    unknown = len(known) - len(recorded)
    if not known:
        return []
    if not recorded:
        return ["", "- Whether the classifier chose the edge of its grid at the evaluations read: not recorded (the "
                    "records were written before rows kept the classifier's choice)."]
    line = edges_line([f"{label} (epoch {r.epoch}: {params_text(r.params or {})})" for label, r in recorded if r.at_edge],
                      f"the {len(recorded)} evaluations read" + (" where it was recorded" if unknown else ""))
    if unknown:
        line += f" Not recorded for the other {unknown} (a record written before rows kept the classifier's choice)."
    return ["", line]


def comparison_rows(s, found: dict[str, Any]) -> list[tuple[str, Any, list[str]]]:
    """(what, Comparison, seeds) of every comparison the report makes, the pre-registered one first."""
    cont = found["paper_continue"]["runs"]
    seeds = sorted(cont, key=int)
    out = []
    for K in s.Ks:
        for what, (a_model, a_rule), (b_model, b_rule), margin in (
                (f"ScheDA as the paper reads it − the jump at its best validation epoch (K {K}; fixed before any "
                 f"block)", ("scheda", "paper"), ("jump", "best"), s.margin),
                (f"ScheDA − the jump, each at its last epoch (K {K})", ("scheda", "last"), ("jump", "last"), s.margin),
                (f"ScheDA at its best validation epoch − the jump at its (K {K})", ("scheda", "best"), ("jump", "best"),
                 s.margin),
                (f"ScheDA as the paper reads it − the same start at its best validation epoch (K {K})",
                 ("scheda", "paper"), ("same_start", "best"), None)):
            pairs = [(reading(cont[seed].get(_key(a_model, K)), a_rule), reading(cont[seed].get(_key(b_model, K)), b_rule))
                     for seed in seeds]
            used = [seed for seed, (a, b) in zip(seeds, pairs) if a and b]
            a = [100 * x.test_error for x, y in pairs if x and y]
            b = [100 * y.test_error for x, y in pairs if x and y]
            out.append((what, compare(a, b, paired=True, margin=margin, better="lower"), used))
    return out


def section(cfg: DictConfig, s, found: dict[str, Any], path: Path, drawn: Path) -> list[str]:
    """The report's section: the budget, the comparisons with their verdicts, each seed's readings, its
    curves and filters. ``drawn``: the folder where this invocation's runs keep their filter images (a block's report
    reads them there; the report from records, beside each record)."""
    start, cont = found["paper_start"], found["paper_continue"]["runs"]
    scale = cfg.scale
    lines = [
        "## The gradual schedule against one jump, at the paper's continuation settings", "",
        f"Budget: {s.hidden} hidden units; per seed DA({fmt(s.nu0)}) at lr {fmt(s.da_lr)} until its rule stopped it "
        f"(patience {scale.patience}, evaluated every {scale.da.eval_every}, at most {scale.da.epochs} epochs); from "
        f"its best validation checkpoint at lr {fmt(s.lr)}: ScheDA {fmt(s.nu0)} -> {fmt(s.nu_final)} by "
        f"{fmt(s.delta_nu)} with K {', '.join(map(str, s.Ks))} ({s.levels} levels), one jump to {fmt(s.nu_final)} for "
        f"as many epochs, both run out, and the same start at {fmt(s.nu0)} under the rule, at most "
        f"{s.same_start_epochs} epochs; each evaluated {', '.join(map(str, s.stage_epochs))} epochs after each "
        f"change of nu and every {s.eval_every} (the paper's Figure 2).", "",
        f"Fixed before any block ran: ScheDA read as the paper reads it (the last epoch of each level, T chosen on "
        f"validation) minus the jump at its best validation epoch, test error, paired by seed: on par if the 95 % "
        f"interval lies within ±{fmt(s.margin)} points (two one-sided tests), the gradual schedule better if it "
        f"lies below 0, the jump better if above; otherwise not resolved, with the n that would resolve it "
        f"(assuming further seeds behave as these). The paper: {(cfg.table.paper or {}).get('words', '—')}.", "",
        "| Comparison (test error, points; negative: ScheDA better) | Seeds | n | Mean [95 % interval] | Sign-flip p "
        "| Verdict |",
        "|---|---|---|---|---|---|"]
    for what, c, used in comparison_rows(s, found):
        p = "—" if c.p_value is None else f"{c.p_value:.3g}"
        verdict = c.verdict
        if c.outcome == "not resolved" and c.n_to_resolve():
            verdict += f" (n ≈ {c.n_to_resolve()} would resolve it at this mean and sd)"
        lines.append(f"| {what} | {', '.join(used) or '—'} | {c.n} | {c.text()} | {p} | {verdict} |")
    lines += ["", "### Each seed (test error %, validation in brackets, at the epoch read)", ""]
    seeds = sorted(set(start) | set(cont), key=int)
    header = ["DA start"] + [f"{label}{'' if model == 'same_start' or len(s.Ks) == 1 else f' K {K}'}"
                             for K in s.Ks for label, model, _ in ROWS if model != "same_start" or K == s.Ks[0]]
    lines += ["| Seed | " + " | ".join(header) + " |", "|---|" + "---|" * len(header)]
    for seed in seeds:
        da = (start.get(seed) or {}).get("da")
        da_text = "—" if not da else f"epoch {da.epoch} of {_stopped(da)}"
        cells = [da_text]
        for K in s.Ks:
            for _, model, rule in ROWS:
                if model == "same_start" and K != s.Ks[0]:
                    continue
                cells.append(_cell(reading((cont.get(seed) or {}).get(_key(model, K)), rule)))
        lines.append(f"| {seed} | " + " | ".join(cells) + " |")
    lines += ["", "How each continuation stopped: " + "; ".join(
        f"seed {seed}: " + ", ".join(f"{model} {_stopped(e)}" for model, e in (cont.get(seed) or {}).items())
        for seed in seeds) + "."]
    lines += edges([(f"seed {seed} DA start", reading((start.get(seed) or {}).get("da"), "best")) for seed in seeds]
                   + [(f"seed {seed} {_key(model, K)} ({rule})", reading((cont.get(seed) or {}).get(_key(model, K)), rule))
                      for seed in seeds for K in s.Ks for _, model, rule in ROWS])
    lines += curves(s, found, path)
    lines += filters(cfg, s, found, path, drawn)
    return lines


def curves(s, found: dict[str, Any], path: Path) -> list[str]:
    """The paper's Figure 2 for each seed: validation error of every arm against epochs since the start."""
    from scheda.analysis.core import pyplot, save_png

    cont = found["paper_continue"]["runs"]
    seeds = sorted(cont, key=int)
    if not seeds:
        return []
    plt = pyplot()
    fig, axes = plt.subplots(1, len(seeds), figsize=(5 * len(seeds), 4), squeeze=False, sharey=True)
    for ax, seed in zip(axes[0], seeds):
        for model, e in cont[seed].items():
            if e:
                ax.plot([v.epoch for v in e.evaluations], [100 * v.val_error for v in e.evaluations],
                        marker=".", label=model.replace("_", " "))
        for K in s.Ks:  # ScheDA's changes of nu
            for level in range(1, s.levels):
                ax.axvline(level * K, color="grey", lw=0.5, ls=":")
        ax.set_title(f"seed {seed}", fontsize=10)
        ax.set_xlabel("epochs after the DA's best checkpoint")
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("validation error %")
    fig.tight_layout()
    png = path.with_name(f"{path.stem}_figure2.png")
    save_png(fig, png)
    return ["", "### Validation error over the continuation (the paper's Figure 2)", "", f"![curves]({png.name})",
            "", "Dotted lines: ScheDA's changes of nu.", ""]


FILTER_MODELS = ("da", "scheda", "jump", "same_start")


def _filter_key(model: str, K: int) -> str:
    return "da" if model == "da" else _key(model, K)


def filters(cfg: DictConfig, s, found: dict[str, Any], path: Path, drawn: Path) -> list[str]:
    """Each seed's filters (images kept beside the block's record, or in the run folder) and the share
    of their energy at high spatial frequencies, compared over seeds."""
    import os

    by_seed = found["paper_continue"].get("filters") or {}
    if not by_seed:
        return []
    cutoff = next(iter(by_seed.values()))["cutoff"]
    lines = ["### Filters (the paper's Figures 3-4) and their share of high spatial frequencies", "",
             f"Per model, the share of each filter's power (each channel's mean removed) above {cutoff:g} of the "
             f"Nyquist frequency, median over its {s.hidden} units (white noise: about 0.8; a smooth blob: near 0); "
             f"the start at its best epoch, each continuation at its last. Images: each model's first filters, each "
             f"scaled to its own range.", ""]
    keys = [_filter_key(m, K) for K in s.Ks for m in FILTER_MODELS if m not in ("da", "same_start") or K == s.Ks[0]]
    seeds = sorted(by_seed, key=int)
    lines += ["| Model | " + " | ".join(f"seed {seed}" for seed in seeds) + " |", "|---|" + "---|" * len(seeds)]
    for k in keys:
        cells = [by_seed[seed]["models"].get(k) for seed in seeds]
        lines.append(f"| {k} | " + " | ".join("—" if not e else f"{e['median']:.3f} (epoch {e['epoch']})"
                                               for e in cells) + " |")
    lines += [""]
    for K in s.Ks:
        for a, b in (("scheda", "jump"), ("da", "scheda"), ("scheda", "same_start")):
            ka, kb = _filter_key(a, K), _filter_key(b, K)
            pairs = [(m[ka]["median"], m[kb]["median"]) for m in (by_seed[x]["models"] for x in by_seed)
                     if m.get(ka) and m.get(kb)]
            c = compare([x for x, _ in pairs], [y for _, y in pairs], paired=True)
            lines.append(f"- {ka} − {kb}: {c.text(unit='', digits=3)} (n {c.n}); {c.verdict}.")
    lines += ["", "The paper's words (DA(0.1)'s filters noisier than DA(0.7)'s, ScheDA's a mix of both) need a low-noise "
              "DA beside these; this table has none, so it gives the numbers and no verdict on them.", ""]
    for seed in sorted(by_seed, key=int):
        images = []
        for k in keys:
            e = by_seed[seed]["models"].get(k)
            source = _image(cfg, drawn, e["png"]) if e else None
            if source is not None:
                images.append(f"![{k}, seed {seed}]({os.path.relpath(source, path.parent)})")
        if images:
            lines += [f"Seed {seed} ({', '.join(keys)}): " + " ".join(images), ""]
    return lines


def _image(cfg: DictConfig, drawn: Path, name: str) -> Path | None:
    """Where a filter image is: the run folder's (``drawn``), else a block record's."""
    here = drawn / name
    if here.exists():
        return here
    blocks = cfg.table.get("blocks")
    if blocks is not None:
        found = sorted(Path(blocks.records).glob(f"block_*/{name}"))
        if found:
            return found[0]
    return None


# --- the nu grid filled, the composite DA and the declared comparisons ----------------------------

SELECTION = 0  # the grid's selection seed: table1's, whose validation errors table.paper_settings.beside holds

def _best_da(cfg: DictConfig, s, found: dict[str, Any]) -> tuple[str | None, list[str]]:
    """The row of the DA best on seed 0's validation among the other table's (``beside.val``) and the
    grid's (None where seed 0's grid DAs are not all in), and the line that says how it was chosen."""
    beside, seed0 = cfg.table.paper_settings.beside, found["paper_grid"].get("0") or {}
    if beside is None or not s.grid_nus:
        return None, []
    source = str(beside.source).split(",")[0].strip()
    low = min(float(v) for v in beside.val.values())
    vals = {f"DA({fmt(float(nu))}) ({source})": (float(v), str(beside.best) if float(v) == low else None)
            for nu, v in beside.val.items()}
    missing = [nu for nu in s.grid_nus if not seed0.get(fmt(nu))]
    if missing:
        return None, [f"The DA best on seed 0's validation: not chosen yet (seed 0's DA({', '.join(map(fmt, missing))}) "
                      f"has not run here)."]
    vals.update({f"DA({fmt(nu)}) (here)": (100 * seed0[fmt(nu)].val_error, f"da_{fmt(nu)}") for nu in s.grid_nus})
    order = sorted(vals.items(), key=lambda kv: kv[1][0])
    label, (_, row) = order[0]
    text = ", ".join(f"{name} {v:.2f} %" for name, (v, _) in order)
    return row, [f"The DA best on seed 0's validation, the grid filled: {label} (validation error, lowest first: {text})."]


def _chosen_switch(s, found: dict[str, Any]) -> tuple[int | None, str]:
    """switch_every chosen on the selection seed's validation (its best validation epoch), and in words."""
    own = found["paper_composite"].get(str(s.selection_seed)) or {}
    tried = {S: own.get(f"alternating_S{S}") for S in s.switch_every}
    if not s.switch_every or any(e is None for e in tried.values()):
        return None, f"switch_every: not chosen yet (seed {s.selection_seed}'s alternating runs have not all finished)."
    best = min(tried, key=lambda S: (tried[S].val_error, S))
    text = ", ".join(f"S {S}: {pct(e.val_error)} %" for S, e in tried.items())
    return best, f"switch_every chosen on seed {s.selection_seed}'s validation: {best} epochs ({text})."


def rows_of_table(cfg: DictConfig, s, found: dict[str, Any]) -> tuple[dict[str, dict[int, float]], dict[str, str | None]]:
    """Every row a declared comparison may name (seed -> test error %, each model at its own best
    validation epoch), and the rows chosen on seed 0 (best_da, composite_alternating: None until chosen)."""
    rows: dict[str, dict[int, float]] = {}
    for nu in s.grid_nus:
        rows[f"da_{fmt(nu)}"] = {int(seed): 100 * e[fmt(nu)].test_error for seed, e in found["paper_grid"].items()
                                 if e.get(fmt(nu))}
    for model in s.composite_models():
        rows[f"composite_{model}"] = {int(seed): 100 * e[model].test_error for seed, e in found["paper_composite"].items()
                                      if e.get(model)}
    beside = cfg.table.paper_settings.beside
    if beside is not None:
        rows.update({str(row): {int(k): float(v) for k, v in values.items()} for row, values in beside.rows.items()})
    S, _ = _chosen_switch(s, found)
    chosen = {"best_da": _best_da(cfg, s, found)[0], "composite_alternating": None if S is None else f"composite_alternating_S{S}"}
    return rows, chosen


def grid_section(cfg: DictConfig, s, found: dict[str, Any]) -> list[str]:
    """The DAs that fill the grid, each at its own best validation epoch, and the best DA chosen again."""
    grid = found["paper_grid"]
    if not grid:
        return []
    scale = cfg.scale
    lines = ["## The nu grid filled", "",
             f"DA(nu) for nu in {{{', '.join(map(fmt, s.grid_nus))}}} at the scale's DA settings ({s.hidden} units, lr "
             f"{fmt(s.da_lr)}, evaluated every {scale.da.eval_every}, until {scale.patience} evaluations in a row bring "
             f"no new best validation error, at most {scale.da.epochs} epochs), each read at its own best validation "
             f"epoch. Test error % (validation in brackets; the epoch read, of those it trained):", ""]
    lines += _by_seed_table(grid, [(f"DA({fmt(nu)})", fmt(nu)) for nu in s.grid_nus])
    return lines + [""] + _best_da(cfg, s, found)[1] + edges(_best_readings(grid)) + [""]


def _best_readings(found: dict[str, dict[str, Row]]) -> list[tuple[str, Evaluation | None]]:
    return [(f"seed {seed} {model}", reading(e, "best")) for seed in sorted(found, key=int)
            for model, e in found[seed].items()]


def _by_seed_table(found: dict[str, dict[str, Row]], models: list[tuple[str, str]]) -> list[str]:
    """Models as rows, seeds as columns: test error (validation; the epoch read, of those trained)."""
    seeds = sorted(found, key=int)
    lines = ["| Model | " + " | ".join(f"seed {seed}" for seed in seeds) + " |", "|---|" + "---|" * len(seeds)]
    for label, key in models:
        cells = [found[seed].get(key) for seed in seeds]
        lines.append(f"| {label} | " + " | ".join(
            "—" if not e else f"{pct(e.test_error)} ({pct(e.val_error)} val; epoch {e.epoch} of {_stopped(e)})"
            for e in cells) + " |")
    return lines


def composite_section(cfg: DictConfig, s, found: dict[str, Any]) -> list[str]:
    """The composite DAs, joint and alternating at each switch_every, and the switch chosen on validation."""
    composite = found["paper_composite"]
    if not composite:
        return []
    scale = cfg.scale
    turns = ", ".join(f"{s.composite_patience(scale.patience, scale.da.eval_every, S)} alternating every {S}"
                      for S in s.switch_every)
    lines = ["## The composite DA with a switching period (Section 5)", "",
             f"Groups at nu {', '.join(map(fmt, s.composite_nus))} ({s.hidden // len(s.composite_nus)} units each), lr "
             f"{fmt(s.da_lr)}, evaluated every {scale.da.eval_every}, until the rule stops it (patience {scale.patience} "
             f"joint, {turns}: a whole turn of the groups at least), at most {scale.da.epochs} epochs; each read at its "
             f"own best validation epoch. Test error % (validation in brackets):", ""]
    lines += _by_seed_table(composite, [(m.replace("_S", ", switch every "), m) for m in s.composite_models()])
    return lines + ["", _chosen_switch(s, found)[1]] + edges(_best_readings(composite)) + [""]


def comparisons_section(cfg: DictConfig, s, found: dict[str, Any]) -> list[str]:
    """``table.paper_settings.compare``: each a - b in test error over the further seeds (not seed 0's,
    shown apart), paired; the other table's numbers named with their source."""
    declared = cfg.table.paper_settings.compare
    if not declared or not (found["paper_grid"] or found["paper_composite"]):
        return []
    rows, chosen = rows_of_table(cfg, s, found)
    beside = cfg.table.paper_settings.beside
    lines = ["## The declared comparisons", "",
             "Each a − b in test error (points; negative: a better), each model at its own best validation epoch, "
             f"paired over the further seeds (seed {SELECTION} selects, shown apart)."
             + (f" Beside this table's models, from {beside.source}: {' '.join(str(beside.get('note') or '').split())}"
                if beside is not None else ""), "",
             "| Question | a − b | " + " | ".join(between_header(SELECTION)) + " |", "|---" * 9 + "|"]
    for c in declared:
        a, b = str(c["a"]), str(c["b"])
        question = c.get("question") or f"{a} − {b}"
        names = {name: chosen[name] if name in chosen else name for name in (a, b)}
        if any(v is None for v in names.values()):
            lines.append(f"| {question} | {a} − {b} | — | — | 0 | — | — | — | not run yet "
                         f"({', '.join(k for k, v in names.items() if v is None)} not chosen) |")
            continue
        unknown = [n for n in names.values() if n not in rows]
        if unknown:
            raise SchedaError(f"table.paper_settings.compare names {unknown}: a row is one of "
                              f"{', '.join(sorted([*rows, *chosen]))}")
        c = between(rows[names[a]], rows[names[b]], SELECTION)
        shown = f"{a} − {b}" + "".join(f" ({k} is {names[k]})" for k in (a, b) if k in chosen)
        lines.append(f"| {question} | {shown} | {' | '.join(c.cells())} |")
    return lines + [""]


# --- reconstruction at length ---------------------------------------------------------------------

def _against(cfg: DictConfig, s) -> dict[str, Row]:
    """Per seed, ScheDA's row from the records ``length.against`` names (another table's blocks:
    their feature_continue)."""
    import json

    folder = cfg.table.paper_settings.length.against
    out: dict[str, Row] = {}
    if not folder:
        return out
    for record in sorted(Path(folder).glob("block_*/record.json")):
        phases = json.loads(record.read_text()).get("phases", {})
        for seed, models in (phases.get("feature_continue") or {}).items():
            if isinstance(models, dict) and models.get("scheda"):
                out[seed] = from_entry(models["scheda"])
    return out


def length_section(cfg: DictConfig, s, found: dict[str, Any], path: Path) -> list[str]:
    """DA(nu) at length: its training loss against ScheDA's at the same nu (paired by seed), the epoch
    where the two cross if they do, and its filters' share of high spatial frequencies."""
    runs = found["paper_length"]["runs"]
    if not runs:
        return []
    against = _against(cfg, s)
    lines = ["## Reconstruction at length", "",
             f"DA({fmt(s.length_nu)}) at the scale's DA settings ({s.hidden} units, lr {fmt(s.da_lr)}) for "
             f"{s.length_epochs} epochs, no rule, its training loss (its own nu's corruption, summed over the inputs, "
             f"mean per image) every epoch; ScheDA's at its reported epoch (at nu {fmt(s.length_nu)}) from the same seed's "
             f"records in {cfg.table.paper_settings.length.against or '— (none named: length.against)'}.", "",
             "| Seed | DA's loss at its last epoch | at its best validation epoch | ScheDA's loss (its epoch, budget) | "
             "First epoch the DA's loss is at or below ScheDA's | DA's test error % (best validation epoch) |",
             "|---|---|---|---|---|---|"]
    last_pairs, best_pairs = [], []
    for seed in sorted(runs, key=int):
        e = runs[seed]["length"]
        last = e.history[-1]
        best = e.read("best")
        at_best = e.loss_at(best.epoch)
        other = against.get(seed)
        target = other.loss_at(other.epoch) if other else None
        nu = None if other is None else other.nu_at(other.epoch)
        if nu is not None and abs(nu - s.length_nu) > 1e-9:
            target = None  # ScheDA ended at another nu: not the same objective
        cross = next((h.epoch for h in e.history if target is not None and h.loss <= target), None)
        cross_text = "—" if target is None else (str(cross) if cross else f"not within {last.epoch} "
                                                                        f"(gap at the end {last.loss - target:+.2f})")
        other_text = "—" if target is None else f"{target:.2f} (epoch {other.epoch}, at most {other.epochs_trained})"
        lines.append(f"| seed {seed} | {last.loss:.2f} (epoch {last.epoch}) | "
                     f"{'—' if at_best is None else f'{at_best:.2f}'} (epoch {best.epoch}) | {other_text} | "
                     f"{cross_text} | {pct(best.test_error)} |")
        if target is not None:
            last_pairs.append((last.loss, target))
            if at_best is not None:
                best_pairs.append((at_best, target))
    lines += [""]
    for what, pairs in ((f"DA({fmt(s.length_nu)}) at its last epoch − ScheDA", last_pairs),
                        (f"DA({fmt(s.length_nu)}) at its best validation epoch − ScheDA", best_pairs)):
        c = compare([a for a, _ in pairs], [b for _, b in pairs], paired=True, expect="lower")
        lines.append(f"- {what}, training loss: {c.text(unit='(summed over inputs)')}, n {c.n}: {c.verdict} "
                     f"(the paper: DA({fmt(s.length_nu)}) reaches the lower reconstruction error).")
    lines += edges(_best_readings(runs))
    lines += length_curves(s, runs, against, path)
    lines += _filter_claim(s, found)
    return lines + [""]


def length_curves(s, runs: dict[str, dict[str, Row]], against: dict[str, Row], path: Path) -> list[str]:
    from scheda.analysis.core import pyplot, save_png

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for seed in sorted(runs, key=int):
        history = runs[seed]["length"].history
        line, = ax.plot([h.epoch for h in history], [h.loss for h in history], lw=1,
                        label=f"DA({fmt(s.length_nu)}), seed {seed}")
        other = against.get(seed)
        target = other.loss_at(other.epoch) if other else None
        if target is not None:
            ax.axhline(target, color=line.get_color(), ls="--", lw=0.8, label=f"ScheDA, seed {seed}")
    ax.set_xlabel("epoch")
    ax.set_ylabel("training loss")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    fig.tight_layout()
    png = path.with_name(f"{path.stem}_length.png")
    save_png(fig, png)
    return ["", f"![training loss at length]({png.name})", ""]


def _filter_claim(s, found: dict[str, Any]) -> list[str]:
    """The paper's words on filters (its Figures 3-4: DA at low noise noisier than at high noise, ScheDA a
    mix), as shares of high spatial frequencies over seeds (unpaired: the models share no seed)."""
    length = [kept["models"]["length"]["median"] for kept in found["paper_length"]["filters"].values()
              if kept["models"].get("length")]
    cont = found["paper_continue"].get("filters") or {}
    start = [kept["models"]["da"]["median"] for kept in cont.values() if kept["models"].get("da")]
    scheda = [kept["models"][f"scheda_K{s.Ks[0]}"]["median"] for kept in cont.values()
              if kept["models"].get(f"scheda_K{s.Ks[0]}")]
    if not length:
        return []
    lines = ["### Filters: the paper's words measured", "",
             f"Share of each filter's power at high spatial frequencies (median over units; "
             f"scheda/analysis/filter_stats.py), unpaired (Welch's interval): DA({fmt(s.length_nu)}) at length "
             f"(n {len(length)}), DA({fmt(s.nu0)}) (the starts, n {len(start)}), ScheDA {fmt(s.nu0)} -> "
             f"{fmt(s.nu_final)} at K {s.Ks[0]} (n {len(scheda)}"
             + (f"; it ends at {fmt(s.nu_final)}, not {fmt(s.length_nu)})." if s.nu_final != s.length_nu else ").")]
    lines += [""]
    for what, a, b, expect in ((f"DA({fmt(s.length_nu)}) − DA({fmt(s.nu0)}): the low-noise DA's filters noisier",
                                length, start, "higher"),
                               (f"ScheDA − DA({fmt(s.nu0)}): ScheDA's hold more detail than the start's", scheda, start,
                                "higher"),
                               (f"ScheDA − DA({fmt(s.length_nu)}): and less than the low-noise DA's", scheda, length,
                                "lower")):
        c = compare(a, b, paired=False, expect=expect)
        lines.append(f"- {what}: {c.text(unit='', digits=3)}, n {c.n}: {c.verdict}.")
    return lines + [""]
