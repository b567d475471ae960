"""The report's section on seeds: each reported model over the further seeds, every paired
comparison with its interval, sign-flip p, McNemar's test and verdict, under both rules of
reading a further seed (at the selection seed's epoch, at its own best validation epoch), and
the two verdicts side by side (the numbers come from scheda.protocol.seeds)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from omegaconf import DictConfig, OmegaConf

from scheda.utils import stats
from scheda.utils.errors import ConfigError
from scheda.protocol.compare import EXPECTS, Between, Comparison, between
from scheda.runs.rundir import unpack_correct
from scheda.protocol.jobs import count, fmt, pct
from scheda.protocol.kinds import CONTINUATION, FINETUNE, control_kinds, kind_of, of_role
from scheda.protocol.kinds.da import DA


def seed_label(key: str) -> str:
    """A seeded row's name: ``da``, a continuation kind, ``<kind>.control`` / ``<kind>.jump``, a fine-tuned row."""
    if key == DA.name:
        return "Best DA"
    name, _, control = key.partition(".")
    if control:
        return kind_of(control).label + kind_of(name).qualifies()
    return kind_of(name).label


def further(per_seed: dict[str, dict], selection_seed: int) -> list[tuple[int, dict]]:
    """The seeds that took no part in selection, in order, with their outcomes."""
    return sorted((int(s), v) for s, v in per_seed.items() if int(s) != selection_seed)


def seed_cell(seeded: dict[str, Any], hidden: str, key: str) -> str:
    per_seed = seeded["hidden"].get(hidden, {}).get(key)
    if not per_seed:
        return "—"
    values = [v["test_error"] for _, v in further(per_seed, seeded["selection_seed"])]
    if not values:
        return "not run yet"
    return stats.summarize([100 * v for v in values]).mean_sd(with_n=True)


def in_sentence(label: str) -> str:
    """A model's label after a minus sign: its first letter lowered, the names inside it (ScheDA,
    "of Increasing schedule") kept as they are, and a label that is a name itself (ScheDA, DA)."""
    first = label.split(" ", 1)[0]
    return label if any(c.isupper() for c in first[1:]) else label[:1].lower() + label[1:]


@dataclass(frozen=True)
class Asked:
    """One comparison of the seeds' tables: ``a - b`` in test error, what it asks, and what the
    table's config declared of it (the paper's expectation, an equivalence margin)."""

    name: str
    a: str
    b: str
    question: str
    expect: str | None = None
    margin: float | None = None
    paper: str | None = None

    def between(self, a: dict[int, float], b: dict[int, float], s0: int) -> Between:
        """``a - b`` of two rows (seed -> test error %), the selection seed ``s0`` apart, under what was declared."""
        return between(a, b, s0, expect=self.expect, margin=self.margin)


def row_keys(cfg: DictConfig) -> list[str]:
    """The rows the seeds' tables of ``cfg``'s table can have: the best DA, each continuation, each
    control of a controlled one, each fine-tuning (where the scale fine-tunes)."""
    keys = [DA.name]
    for name in cfg.table.continuations:
        keys.append(name)
        if kind_of(name).controlled:
            keys += [f"{name}.{control.name}" for control in control_kinds(cfg.scale)]
    if cfg.scale.get("finetune") is not None:
        keys += [kind.name for kind in of_role(FINETUNE)]
    return keys


def check_declared(cfg: DictConfig) -> None:
    """``table.comparisons``, before any job: rows the table has, an expectation the engine knows,
    a positive margin."""
    keys = row_keys(cfg)
    for i, c in enumerate(cfg.table.get("comparisons") or []):
        where = f"table.comparisons[{i}]"
        for side in ("a", "b"):
            if OmegaConf.is_missing(c, side):
                raise ConfigError(f"{where}.{side} is missing: a comparison names two rows, a and b (a - b), of "
                                  f"{', '.join(keys)}")
            if c[side] not in keys:
                raise ConfigError(f"{where}.{side}={c[side]}: table={cfg.table.name} at scale={cfg.scale.name} has "
                                  f"no such row: use one of {', '.join(keys)}")
        if c.a == c.b:
            raise ConfigError(f"{where}: a and b are both {c.a}: compare two different rows")
        if c.expect is not None and c.expect not in EXPECTS:
            raise ConfigError(f"{where}.expect={c.expect}: use one of {', '.join(EXPECTS)} or null")
        if c.margin is not None and not c.margin > 0:
            raise ConfigError(f"{where}.margin={c.margin}: an equivalence margin is > 0 points, or null (none)")


def comparisons(rows: dict[str, dict], declared: Sequence[Any] = ()) -> list[Asked]:
    """What the report tests, a - b in test error: every continuation against the best DA (and
    against the continuation its kind is ``compared_with``: the increasing schedule against
    ScheDA), a controlled schedule against each of its controls, and each fine-tuned row against
    the one its kind is ``compared_with`` (fine-tuned ScheDA against fine-tuned DA), each with what
    it asks (a control's or a fine-tuned kind's own); then the table's ``declared`` ones
    (``table.comparisons``), each in place of the same a and b above, of rows these ``rows`` have."""
    out = []
    for key in rows:
        name, _, control = key.partition(".")
        if control:
            out.append(Asked(_name(name, key), name, key, kind_of(control).question))
        elif (kind := kind_of(name)).role == CONTINUATION:
            if DA.name in rows:
                out.append(Asked(f"{seed_label(name)} − best DA", name, DA.name,
                                 f"does {seed_label(name)} beat the best DA of the grid (the lowest validation error "
                                 f"over noise level, learning rate and epochs)"))
            if kind.compared_with is not None and kind.compared_with in rows:
                out.append(Asked(_name(name, kind.compared_with), name, kind.compared_with, kind.question_against))
    for kind in of_role(FINETUNE):
        other = kind.compared_with
        if other is not None and kind.name in rows and other in rows:
            out.append(Asked(f"{kind.short} − {in_sentence(kind_of(other).short)}", kind.name, other, kind.question))
    for c in declared:
        if c.a in rows and c.b in rows:
            mine = Asked(_name(c.a, c.b), c.a, c.b, c.question or f"how {in_sentence(seed_label(c.a))} differs from "
                         f"{in_sentence(seed_label(c.b))}", c.expect, c.margin, c.paper)
            same = [i for i, o in enumerate(out) if (o.a, o.b) == (c.a, c.b)]
            if same:
                out[same[0]] = Asked(out[same[0]].name, c.a, c.b, c.question or out[same[0]].question, c.expect,
                                     c.margin, c.paper)
            else:
                out.append(mine)
    return out


def _name(a: str, b: str) -> str:
    """A comparison's name in the tables: "ScheDA − control: same start, constant nu"."""
    return f"{seed_label(a)} − {in_sentence(seed_label(b))}"


def _finetune_budget(f: DictConfig) -> str:
    """The fine-tuning's budget, and the paper's (FinetuneConfig's defaults) where it is another."""
    from scheda.training.finetune import FinetuneConfig

    def text(epochs: int, lrs: Sequence[float]) -> str:
        return f"at most {epochs} epochs at lr {', '.join(fmt(lr) for lr in lrs)}"

    paper = FinetuneConfig()
    own = text(f.max_epochs, f.lrs)
    if (int(f.max_epochs), [float(lr) for lr in f.lrs]) == (paper.max_epochs, paper.lrs):
        return f"fine-tuning {own} (the paper's)"
    return f"fine-tuning {own} (the paper's: {text(paper.max_epochs, paper.lrs)}: not tested at that budget)"


def budget(scale: DictConfig, continuations: Sequence[str], finetune: DictConfig | None = None) -> str:
    """What the models compared were trained for, which every verdict below holds at (and not beyond):
    the DA grid's cap, lr and evaluations, each schedule of levels' lr, K and cap, the fine-tuning's
    (``finetune``: the preset the runs composed), the rule's patience."""
    da = scale.da
    parts = [f"DAs at most {da.epochs} epochs at lr {', '.join(fmt(lr) for lr in da.lr)}, evaluated every "
             f"{da.eval_every}"]
    for name in continuations:
        grid = scale.get(name)
        if grid is not None and "K" in grid and "delta_nu" in grid:  # a schedule of levels (scheda, increasing)
            cap = grid.get("max_epochs")
            parts.append(f"{kind_of(name).label} at lr {fmt(grid.lr)}, K {', '.join(map(str, grid.K))}, delta nu "
                         f"{', '.join(fmt(d) for d in grid.delta_nu)}" + (f", at most {cap} epochs in all" if cap else ""))
        elif (cap := kind_of(name).cap(scale)) is not None:  # any other kind says its own
            parts.append(cap)
    if finetune is not None:  # the fine-tuning preset the runs composed (scale.finetune)
        parts.append(_finetune_budget(finetune))
    rule = scale.get("patience")
    return "; ".join(parts) + (f"; the rule's patience {count(rule, 'evaluation')}" if rule is not None else "")


def questions(seeded: dict[str, Any], ruled: bool, declared: Sequence[Any] = (), trained_for: str = "") -> list[str]:
    """What each comparison of the seeds' tables asks, once for every hidden size, and how long
    the models compared trained (``ruled``: under the rule of training to convergence; ``trained_for``:
    the budget, :func:`budget`)."""
    asked = {c.name: c for rows in seeded["hidden"].values() for c in comparisons(rows, declared)}
    if not asked:
        return []
    trained = ("Each model compared was trained until its validation error stopped improving, or to its cap "
               "(section Training to convergence names those at the cap)." if ruled else
               "Each model compared trained a fixed length (no rule of training to convergence): a gain over the DA "
               "may be only the DA's missing epochs, which the same-start control measures.")
    return ["", "What each comparison asks (negative: the first is better):", "",
            *[f"- **{name}**: {c.question}?" + _declared(c) for name, c in asked.items()], "",
            trained + (f" Every verdict below holds at this budget, not beyond it: {trained_for}." if trained_for else "")]


def _declared(c: Asked) -> str:
    """What the table's config fixed of a comparison before its runs, after its question."""
    said = ([f"the paper: {c.paper}"] if c.paper else []) + \
        ([f"the paper's sign: {c.expect}"] if c.expect else []) + \
        ([f"on par if its interval lies within ±{c.margin:g} points (fixed before the runs)"]
         if c.margin is not None else [])
    return f" ({'; '.join(said)})" if said else ""


def _mcnemar(a: dict, b: dict) -> stats.McNemar | None:
    if not (a.get("test_correct") and b.get("test_correct") and a.get("test_n")) or a["test_n"] != b.get("test_n"):
        return None
    n = a["test_n"]
    return stats.mcnemar(unpack_correct(a["test_correct"], n), unpack_correct(b["test_correct"], n))


RULES = {"hidden": "at the selection seed's epoch", "own_best": "at each seed's own best validation epoch"}


def seeds_section(seeded: dict[str, Any], ruled: bool, declared: Sequence[Any] = (), trained_for: str = "") -> list[str]:
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
    lines += questions(seeded, ruled, declared, trained_for)
    own = seeded.get("own_best") or {}
    for hidden, rows in seeded["hidden"].items():
        results = {}
        for rule, title in RULES.items():
            by_rule = rows if rule == "hidden" else own.get(hidden, {})
            if not by_rule:
                continue
            table, found = _rule_tables(hidden, by_rule, s0, title, declared)
            lines += table
            results[rule] = found
        lines += _side_by_side(hidden, results)
    return lines


def _rule_tables(hidden: str, rows: dict[str, dict], s0: int, title: str,
                 declared: Sequence[Any] = ()) -> tuple[list[str], dict[str, Any]]:
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
        each = ", ".join(pct(v["test_error"]) + (f" ({v['epoch']})" if v.get("epoch") is not None else "")
                         for _, v in rest)
        lines.append(f"| {seed_label(key)} | {sel} | {each} | {s.n} | {s.mean_sd()} | {s.interval_text()} | {se} |")
    lines += ["", f"### {hidden} hidden units, {title}: paired differences (test error, points; negative: the "
                  f"first is better)", "",
              f"| Comparison | Seed {s0} (selection) | Further seeds, each | n | Mean ± sd | 95 % interval "
              f"(paired t) | Sign-flip p | McNemar p, each further seed (only first right / only second right) "
              f"| Verdict |", "|---|---|---|---|---|---|---|---|---|"]
    words, found = [], {}

    def errors(key: str) -> dict[int, float]:
        return {int(seed): 100 * v["test_error"] for seed, v in rows[key].items()}

    for asked in comparisons(rows, declared):
        name, a, b = asked.name, asked.a, asked.b
        between_ = asked.between(errors(a), errors(b), s0)
        cells = between_.cells()
        sel = cells[0]
        if not between_.seeds:
            lines.append(f"| {name} | {sel} | not run yet | 0 | — | — | — | — | not resolved: no further seed |")
            continue
        tests = [_mcnemar(rows[a][str(x)], rows[b][str(x)]) for x in between_.seeds]
        mc = ", ".join(f"{t.p_value:.3g} ({t.only_a}/{t.only_b})" if t else "—" for t in tests)
        c = found[name] = between_.compared
        s, verdict = c.summary, c.verdict
        lines.append("| " + " | ".join([name, *cells[:-1], mc, verdict]) + " |")
        significant = sum(1 for t in tests if t and t.p_value < 0.05)
        words.append(f"{name}: {s.mean:+.2f} points on test over {s.n} further seed{'s' if s.n != 1 else ''} "
                     f"(95 % interval {s.interval_text()}; sign-flip p = {c.p_value:.3g}); {verdict}. On the selection "
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

    def cell(c: Comparison) -> str:
        return f"{c.text(unit='')}, p {c.p_value:.3g}: {'resolved' if c.resolved else 'not resolved'}"

    lines = ["", f"### {hidden} hidden units: both rules side by side", "",
             f"| Comparison | {RULES['hidden'].capitalize()} | {RULES['own_best'].capitalize()} |", "|---|---|---|"]
    lines += [f"| {n} | {cell(a[n])} | {cell(b[n])} |" for n in names]
    differ = [n for n in names if a[n].resolved != b[n].resolved or a[n].direction != b[n].direction]
    lines.append("")
    if differ:
        lines += [f"- **The rule decides the verdict** for {n}: {RULES['hidden']} it is {a[n].verdict}; "
                  f"{RULES['own_best']} it is {b[n].verdict}." for n in differ]
    else:
        lines.append("- Every comparison has the same verdict under both rules.")
    signs = [n for n in names if (a[n].summary.mean < 0) != (b[n].summary.mean < 0)]
    lines += [f"- The mean difference of {n} changes sign with the rule ({a[n].summary.mean:+.2f} against "
              f"{b[n].summary.mean:+.2f} points)." for n in signs]
    return lines

