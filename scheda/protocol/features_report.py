"""The features table's report (scheda.protocol.tables.features): every model's errors, Table 2
under three measures beside the paper's counts, Figure 6, the composite DA, reconstruction, the
filters, and each of the paper's claims beside our verdict. Every comparison is paired by seed
(or by initialisation pair) with its 95 % interval, except the double-size ScheDA of seeds in no
pair against the pairs' concatenations (unpaired, Welch's); "not resolved" where the interval holds 0."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from omegaconf import DictConfig

from scheda.analysis.similarity import TIE
from scheda.protocol.compare import compare
from scheda.protocol.convergence import edge_of, edges_line
from scheda.protocol.jobs import count, fmt, pct
from scheda.runs.rundir import checkpoint_name
from scheda.utils import stats

MODEL_ROWS = (("scheda", "ScheDA"), ("jump", "One jump to min nu"), ("same_start", "Same start, trained on"),
              ("da2", "DA(max nu), twice the units"), ("scheda2", "ScheDA, twice the units"))
REF_LABELS = {"scheda": "ScheDA", "jump": "jump", "same_start": "same start", "da_star_low": "DA*(min nu)",
              "da_star_high": "DA*(max nu)"}
PAPER_COLUMN = {"scheda": "scheda", "da_star_low": "da_star_low", "da_star_high": "da_star_high"}


def _named(s, label: str) -> str:
    """A label with the table's own extreme levels: "DA*(min nu)" -> "DA*(0.1)"."""
    return label.replace("min nu", fmt(s.nu_final)).replace("max nu", fmt(s.nu0))


def mean_sd(values: Sequence[float], digits: int = 2, scale: float = 1.0) -> str:
    values = [scale * v for v in values if v is not None and np.isfinite(v)]
    return stats.summarize(values).mean_sd(digits) if values else "—"


def paired_text(a: Sequence[float], b: Sequence[float], unit: str = "points",
                paired: bool = True) -> tuple[str, str, int | str]:
    """(difference with interval, verdict, n) of ``a - b``, paired by seed unless ``paired=False``."""
    c = compare(a, b, paired=paired)
    return c.text(unit), c.verdict, c.n


def claim_row(claim: str, paper: str, a: Sequence[float], b: Sequence[float], unit: str,
              expect: str, models: tuple[str, ...], paired: bool = True) -> tuple:
    """One row of the claims' table: ``a - b`` (paired unless ``paired=False``), against what the
    paper says of its sign (``expect``: lower, higher, not lower, or parity); ``models``: the kinds
    of model it compares (da, continuation, composite), whose budget the row names."""
    c = compare(a, b, paired=paired, expect=expect)
    return claim, paper, c.text(unit), c.n, c.verdict, models


def budgets(cfg: DictConfig, s) -> dict[str, str]:
    """What each kind of model was trained for, as a verdict names it: the caps, lr, K and levels
    (a verdict at a budget the paper never used may be the budget's, not the method's)."""
    cap = cfg.scale.scheda.max_epochs
    return {"da": f"DAs ≤ {cfg.scale.da.epochs} epochs, lr {fmt(s.lr)}",
            "continuation": f"continuations {f'≤ {cap}' if cap else 'the schedule'} epochs in all, lr "
                            f"{fmt(cfg.scale.scheda.lr)}, K {s.K}, {len(s.nus)} levels",
            "composite": f"composite DAs ≤ {cfg.scale.da.epochs} epochs, lr {fmt(s.lr)} (alternating: the groups "
                         f"switched every epoch)"}


def section(cfg: DictConfig, s, found: dict[str, Any], path: Path) -> list[str]:
    models, continued, analysis = found["feature_models"], found["feature_continue"], found["feature_analysis"]
    seeds = [str(seed) for seed in s.seeds]
    lines = ["## What was trained", "",
             f"{s.hidden} hidden units (and {2 * s.hidden} where said), DA lr {fmt(s.lr)}; ScheDA "
             f"{fmt(s.nu0)} -> {fmt(round(s.nu0 - s.delta_nu, 6))} -> ... -> {fmt(s.nu_final)} (delta nu {fmt(s.delta_nu)}, K {s.K}) from a seed's "
             f"DA({fmt(s.nu0)}) at its best validation epoch, at the scale's ScheDA lr "
             f"{fmt(cfg.scale.scheda.lr)}; from the same checkpoint one jump to nu {fmt(s.nu_final)} and the same start "
             f"trained on at {fmt(s.nu0)}; the composite DA with groups at nu "
             f"{' and '.join(fmt(nu) for nu in s.composite_nus)} ({s.hidden // len(s.composite_nus)} units each), "
             f"updated {' or '.join(s.updates)}. Every model trained to convergence under the scale's rule "
             f"(patience {cfg.scale.patience}, caps: DAs {cfg.scale.da.epochs} epochs, continuations "
             f"{cfg.scale.scheda.max_epochs}) and read at its best validation epoch. Seeds "
             f"{', '.join(seeds)}, each a new initialisation of every model it trains: "
             + s.says()
             + ". Table 2 compares "
             + ", ".join(f"seed {r}'s references with seed {c}'s DAs" for r, c in s.comparisons) + ".", ""]
    claims: list[tuple] = []  # (the paper's claim, its number, ours, n, the verdict, the kinds of model compared)
    lines += _models_table(s, models, continued, seeds)
    lines += _table2(cfg, s, analysis, seeds, claims)
    lines += _figure6(cfg, s, models, continued, analysis, path, claims)
    lines += _composite(s, models, continued, seeds, path, claims)
    lines += _reconstruction(s, models, continued, analysis, seeds, path, claims)
    lines += _filters(s, models, continued, seeds, path)
    lines += ["## The paper's claims and our verdicts", "",
              "Each difference is paired by seed (Figure 6's by initialisation pair), with its 95 % t-interval, "
              "unless it says unpaired (models that share no seed: Welch's interval, n as the two sides' counts); "
              "\"resolved\" where the interval excludes 0. A claim of parity is resolved only within a margin "
              "fixed before the runs (none was, for these). Each verdict holds at the budget it names (patience "
              f"{cfg.scale.patience} under every cap; a model at its cap is marked in the tables above), not "
              "beyond it.", "", "| Claim | Paper | Ours | n | Verdict | Budget |", "|---|---|---|---|---|---|"]
    budget = budgets(cfg, s)
    lines += [f"| {claim} | {paper} | {ours} | {n} | {verdict} | {'; '.join(budget[m] for m in models)} |"
              for claim, paper, ours, n, verdict, models in claims]
    return lines + [""]


# --- models -------------------------------------------------------------------------------------

def trains(s, seed: str, key: str) -> bool:
    """Whether ``seed`` trains the model the analysis calls ``key`` (da0.7, scheda, composite_joint, ...)."""
    seed_ = int(seed)
    if key == "da2":
        return s.has(seed_, "double")
    if key.startswith("da") and key[2:3].isdigit():
        return float(key[2:]) in s.da_levels(seed_)
    if key.startswith("composite_"):
        return s.has(seed_, "composite")
    return s.trains_continuation(seed_, key)


def _every_model(s, models, continued, seeds) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, name in the analysis' files, entry per seed that trains it) of every model the table trains."""
    rows = [(f"DA({fmt(nu)})", f"da{fmt(nu)}", {seed: models.get(seed, {}).get("da", {}).get(fmt(nu)) for seed in seeds})
            for nu in s.nus]
    for key, label in MODEL_ROWS:
        src = models if key == "da2" else continued
        rows.append((_named(s, label), key, {seed: src.get(seed, {}).get(key) for seed in seeds}))
    rows += [(f"Composite DA, {u}", f"composite_{u}",
              {seed: models.get(seed, {}).get("composite", {}).get(u) for seed in seeds}) for u in s.updates]
    rows = [(label, key, {seed: e for seed, e in by_seed.items() if trains(s, seed, key)}) for label, key, by_seed in rows]
    return [row for row in rows if row[2]]


def _stopped(e: dict[str, Any]) -> str:
    return {"patience": "", "cap": " cap", "schedule": " end"}.get(e.get("stopped_by") or "", "")


def _models_table(s, models, continued, seeds) -> list[str]:
    lines = ["## Every model", "", "Test error % at each model's best validation epoch (that epoch; \"cap\": not "
             "stopped by the rule at its cap, not converged), per seed (—: the seed does not train it), and the mean ± "
             "sd over seeds.", "",
             "| Model | " + " | ".join(f"seed {seed}" for seed in seeds) + " | mean ± sd (n) |",
             "|---|" + "---|" * (len(seeds) + 1)]
    edges = []
    for label, key, by_seed in _every_model(s, models, continued, seeds):
        entries = list(by_seed.values())
        cells = [("—" if seed not in by_seed else f"{pct(by_seed[seed]['test_error'])} ({by_seed[seed]['epoch']}"
                  f"{_stopped(by_seed[seed])})" if by_seed[seed] else "not finished") for seed in seeds]
        done = [e["test_error"] for e in entries if e]
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {mean_sd(done, scale=100)} ({len(done)}) |")
        edges += [f"{label} (seed {seed}, epoch {e['epoch']}: {chosen})" for seed, e in by_seed.items()
                  if e and (chosen := edge_of(e))]
    return lines + ["", edges_line(edges, "every finished model"), ""]


# --- Table 2 ------------------------------------------------------------------------------------

def _refs(analysis, split, seeds):
    return {seed: analysis["similarity"][split][seed]["refs"] for seed in seeds if seed in analysis["similarity"][split]}


def _table2(cfg, s, analysis, seeds, claims) -> list[str]:
    paper = (cfg.table.paper or {}).get("table2") or {}
    lines = ["## Table 2: which DA(nu) holds each unit's most similar unit (Section 4.1.3)", "",
             "For every hidden unit of a reference model, the candidate DA(nu) holding its most similar unit: "
             "by the **cosine** of raw activation vectors (the paper's measure; sigmoid activations are all positive, "
             "so unrelated units can score near 1), and by their **correlation** (the same, centred). Counts are "
             f"mean ± sd over reference seeds of {s.hidden} units; the paper's are of 2000. Every reference (ScheDA, "
             f"the jump and the same start, which continue the reference seed's DA({fmt(s.nu0)}), and DA*: the "
             "reference seed's own DAs) is matched against the candidate DAs of **another initialisation** (the seed it "
             "is compared with), so no candidate shares a reference's initial weights (the paper's DA(nu) shared "
             "ScheDA's, and its DA* did not). The tables after them give the counts with the continuation's own "
             f"starting DA({fmt(s.nu0)}) in place of the other's (its start among the candidates). A unit whose two "
             "most similar DAs score within "
             f"{TIE:g} of each other has no closest DA (a unit saturated on every input scores alike with "
             "every DA's saturated unit, and correlates with none): it is counted as tied, not given to the "
             "first DA, and the share below is of the units that have a closest DA.", ""]
    for split in ("train", "val"):
        refs = _refs(analysis, split, seeds)
        if not refs:
            lines += [f"Not computed yet on the {split} split (its models have not all finished, or the "
                      f"feature_analysis phase has not run).", ""]
            continue
        n = len(refs)
        for measure in ("cosine", "correlation"):
            for start in ("other", "own_start"):
                names = [r for r in REF_LABELS if start == "other" or r in ("scheda", "jump", "same_start")]
                head = [_named(s, REF_LABELS[r]) for r in names]
                title = ("candidates of another initialisation" if start == "other" else
                         f"the own starting DA({fmt(s.nu0)}) in place of the other's")
                lines += [f"### {measure}, {split} split ({count(n, 'reference seed')}; {title})", ""]
                paper_cols = [r for r in names if r in PAPER_COLUMN and paper and start == "other" and measure == "cosine"
                              and split == "train"]
                lines += ["| nu | " + " | ".join(head) + "".join(f" | paper {_named(s, REF_LABELS[r])}" for r in paper_cols)
                          + " |",
                          "|---|" + "---|" * (len(names) + len(paper_cols))]
                for i, nu in enumerate(s.nus[::-1]):  # 0.1 first, as the paper's table
                    cells = [mean_sd([refs[seed][r][start][measure]["counts"][fmt(nu)] for seed in refs], 1)
                             for r in names]
                    paper_cells = [_paper_count(paper, r, nu) for r in paper_cols]
                    lines.append(f"| {fmt(nu)} | " + " | ".join(cells) + "".join(f" | {c}" for c in paper_cells) + " |")
                cells = [mean_sd([refs[seed][r][start][measure]["tied"] for seed in refs], 1) for r in names]
                lines.append("| tied | " + " | ".join(cells) + " |" + " — |" * len(paper_cols))
                for label, field, digits in (("mean best similarity", "mean_best", 3),
                                             ("median margin, winner over runner-up", "median_margin", 4),
                                             (f"share with nu >= {fmt(s.summary_nu)}", "share_high", 3)):
                    cells = [mean_sd([refs[seed][r][start][measure][field] for seed in refs], digits) for r in names]
                    lines.append(f"| {label} | " + " | ".join(cells) + " |" + " |" * len(paper_cols))
                lines.append("")
        lines += _cka(s, refs, {seed: analysis["similarity"][split][seed]["ceiling"] for seed in refs}, split)
        lines += _summary_tests(s, refs, split)
        if split == "train":
            for other, claim, paper_diff in (
                    ("da_star_low", f"ScheDA keeps more units like a high-noise DA (nu >= {fmt(s.summary_nu)}) than a DA "
                     f"trained at its final nu (Table 2, cosine, train)", _paper_share_diff(paper, s, "da_star_low")),
                    ("jump", "(ours) if that mix is the mechanism, the jump (as good as ScheDA) holds the same mix: "
                     "ScheDA − jump near 0 (cosine, train)", "—")):
                a = [100 * refs[seed]["scheda"]["other"]["cosine"]["share_high"] for seed in refs]
                b = [100 * refs[seed][other]["other"]["cosine"]["share_high"] for seed in refs]
                claims.append(claim_row(claim, paper_diff, a, b, "points of %",
                                        "higher" if other == "da_star_low" else "parity",
                                        ("continuation", "da") if other == "da_star_low" else ("continuation",)))
    return lines


def _paper_count(paper, ref: str, nu: float) -> str:
    values = paper.get(PAPER_COLUMN[ref])
    if not values:
        return "—"
    value = values.get(fmt(nu)) if hasattr(values, "get") else None
    return "—" if value is None else str(value)


def _cka(s, refs, ceilings, split) -> list[str]:
    names = list(REF_LABELS)
    lines = [f"### Debiased linear CKA, {split} split ({count(len(refs), 'reference seed')})", "",
             "Between whole representations (1: the same up to rotation and scale), each reference against each "
             "candidate DA; the ceiling: the reference seed's DA(nu) against the candidate DA(nu), the same setting "
             "from another initialisation (at the levels both seeds train).", "",
             "| nu | " + " | ".join(_named(s, REF_LABELS[r]) for r in names) + " | ceiling |", "|---|" + "---|" * (len(names) + 1)]
    for nu in s.nus[::-1]:
        cells = [mean_sd([refs[seed][r]["cka"][f"da{fmt(nu)}"] for seed in refs], 3) for r in names]
        ceiling = mean_sd([c for c in (ceilings.get(seed, {}).get(fmt(nu)) for seed in refs) if c is not None], 3)
        lines.append(f"| {fmt(nu)} | " + " | ".join(cells) + f" | {ceiling} |")
    lines.append(f"| own start DA({fmt(s.nu0)}) | " + " | ".join(
        mean_sd([refs[seed][r]["cka_own_start"] for seed in refs], 3) if r in ("scheda", "jump", "same_start") else "—"
        for r in names) + " | — |")
    return lines + [""]


def _summary_tests(s, refs, split) -> list[str]:
    """The summary fixed before any run, paired by seed: ScheDA against the jump, DA*(min nu) and the same start."""
    seeds = list(refs)
    lines = [f"### The summary, paired by reference seed ({split} split): share of units whose closest DA has nu >= "
             f"{fmt(s.summary_nu)}", "", "| Measure | Candidates | Comparison | Difference [95 % interval] | n | "
             "Verdict |", "|---|---|---|---|---|---|"]
    for measure in ("cosine", "correlation"):
        for start in ("other", "own_start"):
            for other in ("jump", "da_star_low", "same_start"):
                if start == "own_start" and other == "da_star_low":
                    continue  # DA*(min nu) starts from no candidate
                a = [100 * refs[seed]["scheda"][start][measure]["share_high"] for seed in seeds]
                b_start = start if other != "da_star_low" else "other"
                b = [100 * refs[seed][other][b_start][measure]["share_high"] for seed in seeds]
                diff, verdict, n = paired_text(a, b, "points of %")
                label = _named(s, REF_LABELS[other])
                lines.append(f"| {measure} | {'another initialisation' if start == 'other' else 'own start among them'} "
                             f"| ScheDA − {label} | {diff} | {n} | {verdict} |")
    return lines + [""]


def _paper_share_diff(paper, s, other: str) -> str:
    """The paper's ScheDA share with nu >= summary_nu minus ``other``'s, from its Table 2 counts."""
    def share(ref):
        values = paper.get(ref) if paper else None
        if not values:
            return None
        total = sum(float(v) for v in values.values())
        return 100 * sum(float(v) for k, v in values.items() if float(k) >= s.summary_nu - 1e-9) / total
    a, b = share("scheda"), share(other)
    return "—" if a is None or b is None else f"{a - b:+.1f} points of % ({a:.1f} against {b:.1f})"


# --- Figure 6 -----------------------------------------------------------------------------------

def _figure6(cfg, s, models, continued, analysis, path, claims) -> list[str]:
    from scheda.analysis.core import heat_map

    paper = (cfg.table.paper or {}).get("figure6") or {}
    levels = sorted(s.nus)
    lines = ["## Figure 6: DAs of two initialisations side by side (Section 4.1.2)", "",
             f"For an initialisation pair (a, b): a DA(nu_i) of one seed concatenated with a DA(nu_j) of the other "
             f"({2 * s.hidden} features), evaluated as any representation (the runs' classifier, C chosen on "
             f"validation). Both orders of two levels are one pair: each unordered pair is evaluated once (the lower nu "
             f"from seed a where both seeds have the levels) and its mirror cell shows the same number; a pair whose "
             f"seeds do not both train a level has no cell there (—). Test error %, mean over the pairs that have the "
             f"cell.", ""]
    per_pair = {}
    for a, b in s.pairs:
        doc = analysis["concat"].get(f"{a}_{b}")
        if doc and len(doc["cells"]) == len(s.concat_cells(a, b)):
            per_pair[(a, b)] = {(c["low"], c["high"]): c for c in doc["cells"]}
    if not per_pair:
        return lines + ["Not computed yet (an initialisation pair's DAs have not all finished, or the "
                        "feature_analysis phase has not run).", ""]

    def cell(pair, x, y, field="test_error"):
        lo, hi = sorted((x, y))
        got = per_pair[pair].get((fmt(lo), fmt(hi)))
        return None if got is None else got[field]

    def mean_cell(x, y):
        values = [v for v in (cell(p, x, y) for p in per_pair) if v is not None]
        return 100 * float(np.mean(values)) if values else float("nan")

    matrix = [[mean_cell(x, y) for y in levels] for x in levels]
    png = path.with_name(f"{path.stem}_figure6.png")
    heat_map(matrix, levels, levels, f"test error (%) of two {s.hidden}-unit DAs concatenated", png,
             "nu of the second seed's DA", "nu of the first seed's DA")
    alone = {fmt(nu): [e["test_error"] for pair in per_pair for seed in pair
                       if (e := models.get(str(seed), {}).get("da", {}).get(fmt(nu)))] for nu in levels}
    lines += [f"![figure 6]({png.name})", "",
              "| nu | " + " | ".join(fmt(nu) for nu in levels) + f" | DA(nu) alone ({s.hidden} units) |",
              "|---|" + "---|" * (len(levels) + 1)]
    for i, x in enumerate(levels):
        lines.append(f"| {fmt(x)} | " + " | ".join("—" if np.isnan(matrix[i][j]) else f"{matrix[i][j]:.2f}"
                                                   for j in range(len(levels)))
                     + f" | {mean_sd(alone[fmt(x)], scale=100)} |")
    def mean_of(p, cells):
        values = [v for v in (cell(p, x, y) for x, y in cells) if v is not None]
        return 100 * float(np.mean(values)) if values else None

    off_cells = [(x, y) for i, x in enumerate(levels) for y in levels[i + 1:]]
    both = [(mean_of(p, off_cells), mean_of(p, [(x, x) for x in levels])) for p in per_pair]
    off = [o for o, d in both if o is not None and d is not None]
    diag = [d for o, d in both if o is not None and d is not None]
    edges = sorted({(c["low"], c["high"]) for cells in per_pair.values() for c in cells.values() if c.get("at_edge")})
    diff, verdict, n = paired_text(off, diag)
    lines += ["", "- Cells read with the classifier's setting at the edge of its grid: "
                  + (", ".join(f"DA({lo}) + DA({hi})" for lo, hi in edges) + " (in at least one pair; their errors "
                     "might be lower with a wider grid)" if edges else "none") + "."]
    lines += [f"- Pairs of different nu against pairs of the same nu (mean test error of each, per initialisation "
                  f"pair): {diff}, {count(n, 'pair')}: {verdict}."]
    claims.append(claim_row("Pairs of different nu beat pairs of the same nu (Figure 6; test error, different − same)",
                            "lower", off, diag, "points", "lower", ("da",)))
    # the double-size ScheDA against the best concatenation (chosen on validation): paired by
    # initialisation pair where a pair's seeds train it, else (seeds in no pair: layout double_alone)
    # every such ScheDA against every pair's best, unpaired
    best = {pair: 100 * min(per_pair[pair].values(), key=lambda c: c["val_error"])["test_error"] for pair in per_pair}
    twice = {seed: continued.get(str(seed), {}).get("scheda2") for seed in s.seeds if s.has(seed, "double")}
    in_pairs = {seed for pair in s.pairs for seed in pair}
    paired_double, paired_best = [], []
    for pair in per_pair:
        own = [twice[seed] for seed in pair if seed in twice]
        if own and all(own):
            paired_best.append(best[pair])
            paired_double.append(100 * float(np.mean([e["test_error"] for e in own])))
    alone = [100 * e["test_error"] for seed, e in twice.items() if e]
    paired = set(twice) <= in_pairs
    if any(seed in in_pairs for seed in twice):
        diff, verdict, n = paired_text(paired_double, paired_best)
        lines.append(f"- ScheDA of {2 * s.hidden} units (the mean of the pair's seeds that train it) against the pair's best "
                     f"concatenation of two {s.hidden}-unit DAs (chosen on validation): {diff}, {count(n, 'pair')}: {verdict}.")
    if twice and not paired:
        diff, verdict, n = paired_text(alone, list(best.values()), paired=False)
        lines.append(f"- ScheDA of {2 * s.hidden} units, every seed that trains it ({mean_sd(alone)}, {count(len(alone), 'seed')}), "
                     f"against every initialisation pair's best concatenation of two {s.hidden}-unit DAs (chosen on "
                     f"validation; {mean_sd(list(best.values()))}, {count(len(best), 'pair')}), unpaired: the "
                     f"double-size models share no seed with the pairs' DAs: {diff}: {verdict}.")
    paper_text = (f"{paper['scheda']} against {paper['best_concat']} %" if paper.get("scheda") else "lower")
    a, b = (paired_double, paired_best) if paired else (alone, list(best.values()))
    claims.append(claim_row("ScheDA of twice the units beats the best concatenation of two DAs (the paper's fair "
                            "comparison; test error, ScheDA − concatenation)", paper_text, a, b, "points",
                            "lower", ("continuation", "da"), paired=paired))
    # the control for width: the double-size DA(max nu) that ScheDA continues from, against the same
    # concatenations, so that ScheDA's margin is not read as what twice the units give by themselves
    da2 = {seed: models.get(str(seed), {}).get("da2") for seed in twice}
    width = [100 * e["test_error"] for e in da2.values() if e]
    width_pairs = [(100 * float(np.mean([da2[seed]["test_error"] for seed in pair if seed in da2])), best[pair])
                   for pair in per_pair if any(seed in da2 for seed in pair)
                   and all(da2[seed] for seed in pair if seed in da2)]
    a, b = ([w for w, _ in width_pairs], [c for _, c in width_pairs]) if paired else (width, list(best.values()))
    if twice:
        diff, verdict, n = paired_text(a, b, paired=paired)
        lines.append(f"- The control for width: the {2 * s.hidden}-unit DA({fmt(max(s.nus))}) that ScheDA continues "
                     f"from ({mean_sd(width)}, {count(len(width), 'seed')}) against the same concatenations: {diff}: "
                     f"{verdict}.")
    claims.append(claim_row(f"(ours) twice the units alone do not make that margin: the {2 * s.hidden}-unit "
                            f"DA({fmt(max(s.nus))}) ScheDA starts from against the best concatenation (test error, "
                            "DA − concatenation)", "—", a, b, "points", "parity", ("da",), paired=paired))
    return lines + [""]


# --- the composite DA ---------------------------------------------------------------------------

def _best_da(models, seed):
    das = [e for e in models.get(seed, {}).get("da", {}).values() if e]
    return min(das, key=lambda e: e["val_error"]) if das else None


def _evaluated_after(followed: set[int], nus) -> str:
    """Which groups' epochs the alternating runs' evaluations followed: with an evaluation every even
    number of epochs and two groups, all of them follow the same group's."""
    if not followed:
        return ""
    if len(followed) == len(nus):
        return "; an alternating run's evaluations follow each group's epochs in turn"
    named = " and ".join(f"nu {fmt(nus[g])}" for g in sorted(followed))
    which = "the group" if len(followed) == 1 else "the groups"
    return (f"; every evaluation of an alternating run follows an epoch of {which} at {named} only (the curve "
            f"shows the model as such an epoch left it)")


def _composite(s, models, continued, seeds, path, claims) -> list[str]:
    from scheda.analysis.core import pyplot, save_png
    from scheda.model.network import alternating_group

    lines = ["## The composite DA (Section 5)", "",
             f"Hidden units in {len(s.composite_nus)} equal groups trained at nu {', '.join(fmt(nu) for nu in s.composite_nus)}"
             f" ({s.hidden} units in all), every parameter each minibatch (joint) or one group per epoch in turn "
             f"(alternating), against the best DA of the same seed (over nu, on validation) and its ScheDA, both of "
             f"{s.hidden} units. Test error, points (negative: the first better).", "",
             "| Comparison | Difference [95 % interval] | n | Verdict |", "|---|---|---|---|"]
    for update in s.updates:
        for other, label in (("da", "the best DA"), ("scheda", "ScheDA")):
            a, b = [], []
            for seed in seeds:
                comp = models.get(seed, {}).get("composite", {}).get(update)
                ref = _best_da(models, seed) if other == "da" else continued.get(seed, {}).get("scheda")
                if comp and ref:
                    a.append(100 * comp["test_error"])
                    b.append(100 * ref["test_error"])
            diff, verdict, n = paired_text(a, b)
            lines.append(f"| composite ({update}) − {label} | {diff} | {n} | {verdict} |")
            expect = {("alternating", "da"): "lower", ("alternating", "scheda"): "parity",
                      ("joint", "da"): "not lower"}.get((update, other))
            if expect:
                words = {"lower": "better", "parity": "on par", "not lower": "not better"}[expect]
                claims.append(claim_row(f"The composite DA ({update}) against {label} (Section 5; test error, "
                                        f"composite − {label})", words, a, b, "points", expect,
                                        ("composite", "da" if other == "da" else "continuation")))
    if set(s.updates) == {"joint", "alternating"}:
        pairs = [(models[seed]["composite"]["alternating"], models[seed]["composite"]["joint"]) for seed in seeds
                 if models.get(seed, {}).get("composite", {}).get("alternating")
                 and models[seed]["composite"].get("joint")]
        diff, verdict, n = paired_text([100 * a["test_error"] for a, _ in pairs], [100 * b["test_error"] for _, b in pairs])
        lines.append(f"| alternating − joint | {diff} | {n} | {verdict} |")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    drawn = False
    followed: set[int] = set()  # the groups whose epoch an alternating run's evaluations came after
    for update, colour in zip(s.updates, ("tab:blue", "tab:orange")):
        labelled = False
        for seed in seeds:
            e = models.get(seed, {}).get("composite", {}).get(update)
            results = _results(e)
            if not results:
                continue
            points = [(v["epoch"], 100 * v["test_error"]) for v in results.get("evaluations", [])]
            if update == "alternating":
                # an evaluation at (1-based) epoch e follows 0-based epoch e - 1
                followed |= {alternating_group(epoch - 1, len(s.composite_nus)) for epoch, _ in points}
            if points:
                ax.plot(*zip(*points), color=colour, alpha=0.8, label=None if labelled else update)
                drawn = labelled = True
    if drawn:
        ax.set_xlabel("epoch")
        ax.set_ylabel("test error (%)")
        ax.set_title("composite DA: test error against epochs (alternating switches group every epoch)")
        ax.legend()
        png = path.with_name(f"{path.stem}_figure7.png")
        fig.tight_layout()
        save_png(fig, png)
        lines += ["", f"![figure 7]({png.name})", "", "Figure 7: each seed's curve; an alternating run trains one group "
                  "per epoch, so every epoch is a switch" + _evaluated_after(followed, s.composite_nus) + "."]
    else:
        plt.close(fig)
    return lines + [""]


def _results(e: dict[str, Any] | None) -> dict[str, Any] | None:
    """The model's results.json, or the curves a block's record keeps of it."""
    if not e:
        return None
    if "results" in e:
        return e["results"]
    try:
        return json.loads((Path(e["run"]) / "results.json").read_text())
    except (OSError, ValueError):
        return None


# --- reconstruction -----------------------------------------------------------------------------

def _training_loss(e) -> tuple[float, float] | None:
    """(training reconstruction error, its nu) at a model's reported epoch, from its history."""
    results = _results(e)
    row = next((h for h in (results or {}).get("history", []) if h["epoch"] == e["epoch"]), None)
    return (row["loss"], row["nu"]) if row else None


def _reconstruction(s, models, continued, analysis, seeds, path, claims) -> list[str]:
    from scheda.analysis.core import pyplot, save_png

    lines = ["## Reconstruction (Section 4.1, Figure 2)", "",
             "Per model at its reported epoch: the training loss of that epoch (its own nu's corruption, mean per "
             "image, summed over the inputs), the reconstruction error of the clean training images (the same input "
             "for every model), and the test error; mean ± sd over seeds. A model trained at nu saw about a "
             "fraction nu of each image zeroed, so clean images give its units inputs about 1 / (1 − nu) times "
             "larger than in training: its clean error measures that mismatch as well as its features. Compare it "
             f"between models that ended at the same nu (DA({fmt(s.nu_final)}), ScheDA, the jump).", "",
             "| Model | Training loss at its epoch (nu) | Clean reconstruction error | Test error % |", "|---|---|---|---|"]
    for label, key, entries in _every_model(s, models, continued, seeds):
        losses = [_training_loss(e) for e in entries.values() if e]
        clean = [analysis["reconstruction"].get(f"{seed}:{key}") for seed, e in entries.items() if e]
        nus = sorted({fmt(n) for _, n in filter(None, losses)})
        if key.startswith("composite_"):  # the schedule's nu is unused: each group has its own
            nus = ["groups at " + " and ".join(fmt(nu) for nu in s.composite_nus)]
        lines.append(f"| {label} | {mean_sd([l for l, _ in filter(None, losses)], 1)} ({', '.join(nus) or '—'}) | "
                     f"{mean_sd([c for c in clean if c is not None], 1)} | "
                     f"{mean_sd([e['test_error'] for e in entries.values() if e], scale=100)} |")
    lines.append("")
    low, sched, low_clean, sched_clean, low_test, sched_test = [], [], [], [], [], []
    for seed in seeds:
        da, sc = models.get(seed, {}).get("da", {}).get(fmt(s.nu_final)), continued.get(seed, {}).get("scheda")
        if not (da and sc):
            continue
        a, b = _training_loss(da), _training_loss(sc)
        if a and b:
            low.append(a[0])
            sched.append(b[0])
        ca, cb = (analysis["reconstruction"].get(f"{seed}:{k}") for k in (f"da{fmt(s.nu_final)}", "scheda"))
        if ca is not None and cb is not None:
            low_clean.append(ca)
            sched_clean.append(cb)
        low_test.append(100 * da["test_error"])
        sched_test.append(100 * sc["test_error"])
    name = f"DA({fmt(s.nu_final)}) − ScheDA"
    for what, a, b, unit, claim, paper, expect in (
            ("training loss at nu " + fmt(s.nu_final), low, sched, "", "DA(min nu) reaches a lower reconstruction error "
             "than ScheDA (training loss, both at the final nu; DA − ScheDA)", "lower", "lower"),
            ("clean reconstruction error", low_clean, sched_clean, "", None, None, None),
            ("test error", low_test, sched_test, "points", "... yet a higher test error (\"not solely better "
             "optimisation\"; DA − ScheDA)", "about +5 points", "higher")):
        diff, verdict, n = paired_text(a, b, unit or "(summed over inputs)")
        lines.append(f"- {name}, {what}: {diff}, n {n}: {verdict}.")
        if claim:
            claims.append(claim_row(_named(s, claim), paper, a, b, unit or "(summed over inputs)", expect,
                                    ("da", "continuation")))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    first = next((seed for seed in seeds if s.has(int(seed), "candidates")), seeds[0])  # a seed with every DA
    for nu in s.nus:
        results = _results(models.get(first, {}).get("da", {}).get(fmt(nu)))
        if results and results.get("history"):
            ax.plot([h["epoch"] for h in results["history"]], [h["loss"] for h in results["history"]],
                    color=str(0.85 - 0.75 * (nu - s.nus[-1]) / max(s.nus[0] - s.nus[-1], 1e-9)), label=f"DA({fmt(nu)})")
    if ax.lines:
        ax.set_xlabel("epoch")
        ax.set_ylabel("training reconstruction error (its own nu)")
        ax.set_yscale("log")
        ax.set_title(f"Figure 2 (right): DAs of seed {first} at lr {fmt(s.lr)}")
        ax.legend(fontsize=8)
        png = path.with_name(f"{path.stem}_figure2_reconstruction.png")
        fig.tight_layout()
        save_png(fig, png)
        lines += ["", f"![reconstruction against epochs]({png.name})"]
    else:
        plt.close(fig)
    return lines + [""]


# --- filters ------------------------------------------------------------------------------------

def _filters(s, models, continued, seeds, path) -> list[str]:
    """Figures 3-4: the first units' filters of DA(min nu), DA(max nu), ScheDA and the jump (ScheDA and
    the jump continue DA(max nu): their unit k is its unit k), and the same units across ScheDA's levels."""
    from scheda.analysis.core import pyplot, save_png
    from scheda.data import dataset_spec
    from scheda.loggers.base import filter_grid, normalised_filters
    from scheda.training.checkpoint import load_run_model

    first = next((seed for seed in seeds if s.has(int(seed), "reference")), None)
    if first is None:
        return []
    own, cont = models.get(first, {}), continued.get(first, {})
    panels = [(f"DA({fmt(s.nu_final)})", own.get("da", {}).get(fmt(s.nu_final))),
              (f"DA({fmt(s.nu0)})", own.get("da", {}).get(fmt(s.nu0))), ("ScheDA", cont.get("scheda")),
              (f"jump to {fmt(s.nu_final)}", cont.get("jump"))]
    if all(e and "run" not in e for _, e in panels):
        return ["## Filters (Figures 3-4)", "", "Not drawn: this report is built from the blocks' records, which keep "
                "no checkpoint (each block's own report, beside its run folder, draws them).", ""]
    if not all(e and e.get("checkpoint") for _, e in panels):
        return ["## Filters (Figures 3-4)", "", "Not drawn yet: the first seed's models have not all finished.", ""]
    cfg, _, _ = load_run_model(panels[0][1]["checkpoint"])
    shape = getattr(dataset_spec(cfg.dataset), "image_shape", None)
    if shape is None:
        return ["## Filters (Figures 3-4)", "", "Not drawn: the data set's inputs are not images.", ""]
    shape = tuple(shape)
    plt = pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 4.4), squeeze=False)
    for ax, (title, e) in zip(axes[0], panels):
        _, model, _ = load_run_model(e["checkpoint"])
        ax.imshow(filter_grid(model.W[:64], shape), interpolation="nearest")
        ax.set_title(f"{title}, epoch {e['epoch']}", fontsize=10)
        ax.axis("off")
    fig.tight_layout()
    png = path.with_name(f"{path.stem}_filters.png")
    save_png(fig, png)
    lines = ["## Filters (Figures 3-4)", "", f"![filters]({png.name})", "",
             f"Seed {first}'s first 64 units, each filter scaled to its own range (its smallest weight black, its "
             "largest white, per channel together), as scheda's loggers draw them."]
    run = Path(cont["scheda"]["run"])
    levels = [("start", own["da"][fmt(s.nu0)]["checkpoint"])]
    for i in range(1, round((s.nu0 - s.nu_final) / s.delta_nu) + 1):  # level i: nu0 - i delta_nu, K epochs
        ckpt = run / "checkpoints" / checkpoint_name(i * s.K)
        if ckpt.exists():
            levels.append((f"nu {fmt(round(s.nu0 - i * s.delta_nu, 6))}, epoch {i * s.K}", str(ckpt)))
    rows = []
    for label, ckpt in levels:
        _, model, _ = load_run_model(ckpt)
        rows.append((label, np.concatenate(list(normalised_filters(model.W[:16], shape)), axis=1)))
    fig, axes = plt.subplots(len(rows), 1, figsize=(12, 0.9 * len(rows) + 0.5), squeeze=False)
    for ax, (label, strip) in zip(axes[:, 0], rows):
        ax.imshow(strip, interpolation="nearest")
        ax.set_ylabel(label, rotation=0, ha="right", fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout()
    png = path.with_name(f"{path.stem}_filters_levels.png")
    save_png(fig, png)
    lines += ["", f"![the same units across ScheDA's levels]({png.name})", "",
              f"The same 16 units of seed {first}'s ScheDA at its start (DA({fmt(s.nu0)})) and at the end of each "
              f"level, each filter scaled to its own range."]
    return lines + [""]
