"""The paper's diagnostic (supplementary material, on the Amazon reviews): ScheDA is likely to
help where the DA's validation error is sensitive to the noise level. Per hidden size, the
report prints the spread of the best validation error over the DA grid's noise levels beside
ScheDA's gain over the best DA, and says whether the two agree with that reading.

*Sensitive* means the spread is larger than validation-set noise alone would give two models:
the worst and the best level differ by more than 1.96 standard errors of a difference of two
independent error rates on ``val_n`` examples (conservative: both share one validation set).
ScheDA's *gain* is the best DA's test error minus the best ScheDA's, paired by seed over the
further seeds under both rules of reading them (scheda.protocol.seeds); it is resolved only
when its 95 % interval excludes 0, as every comparison of the report.
"""

from __future__ import annotations

import math
from typing import Any

from omegaconf import DictConfig

from scheda.protocol.compare import Comparison, compare
from scheda.protocol.jobs import fmt
from scheda.protocol.kinds.da import DA
from scheda.protocol.seed_report import RULES, further

SCHEDA = "scheda"  # the continuation kind whose gain the paper's reading is about
Z = 1.96


def spread(by_nu: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The best and the worst noise level of the grid by validation error, the spread between
    them (points, validation and test) and the least spread validation noise explains (None
    where the runs did not record their validation size)."""
    if len(by_nu) < 2:
        return None
    ranked = sorted(by_nu.items(), key=lambda kv: (kv[1]["val_error"], -float(kv[0])))
    (best_nu, best), (worst_nu, worst) = ranked[0], ranked[-1]
    n = best.get("val_n") if best.get("val_n") == worst.get("val_n") else None
    noise = None
    if n:
        noise = 100 * Z * math.sqrt(sum(e["val_error"] * (1 - e["val_error"]) / n for e in (best, worst)))
    val = 100 * (worst["val_error"] - best["val_error"])
    return {"best_nu": best_nu, "worst_nu": worst_nu, "val": val, "test": 100 * (worst["test_error"] - best["test_error"]),
            "levels": len(by_nu), "val_n": n, "noise": noise, "sensitive": None if noise is None else val > noise}


def gains(seeded: dict[str, Any], hidden: str) -> dict[str, Comparison]:
    """ScheDA's gain over the best DA (DA minus ScheDA, test points: positive, ScheDA better),
    paired over the further seeds, per rule of reading them; none without further seeds."""
    out = {}
    s0 = seeded.get("selection_seed")
    for rule in RULES:
        rows = (seeded.get(rule) or {}).get(hidden, {})  # seeds.collect: "hidden" and "own_best"
        if DA.name not in rows or SCHEDA not in rows:
            continue
        pairs = [(rows[DA.name][str(s)], v) for s, v in further(rows[SCHEDA], s0) if str(s) in rows[DA.name]]
        if pairs:
            out[rule] = compare([100 * a["test_error"] for a, _ in pairs], [100 * b["test_error"] for _, b in pairs],
                                better="higher")
    return out


def reading(sensitive: bool | None, gain: Comparison | None) -> str:
    """Whether a spread and a gain agree with the paper's reading, in words."""
    if sensitive is None:
        return "cannot be judged: the runs did not record their validation size"
    if gain is None or not gain.summary.has_interval:
        return "cannot be judged: ScheDA's gain has no interval (it needs two further seeds or more)"
    helps = gain.direction == "higher"
    varies = "the DA's validation error varies with nu beyond validation noise"
    within = "the DA's variation over nu is within validation noise"
    if sensitive and helps:
        return f"agrees with the paper's reading: {varies}, and ScheDA beats the DA"
    if not sensitive and not helps:
        return f"agrees with the paper's reading: {within}, and ScheDA's gain is not resolved"
    if sensitive:
        return f"does not agree with the paper's reading: {varies}, yet ScheDA does not beat the DA"
    return f"does not agree with the paper's reading: ScheDA beats the DA though {within}"


def section(paper: DictConfig | None, selection: dict[str, Any], continued: dict[str, Any],
            seeded: dict[str, Any]) -> list[str]:
    """The report's section: per hidden size the grid's spread, ScheDA's gain and the verdict;
    the paper's own spread and gain where the table gives its worst DA (``paper.da_worst``)."""
    lines = ["", "## Sensitivity to the noise level (the paper's diagnostic)", "",
             "The paper proposes that ScheDA is likely to help where the DA's validation error is sensitive to "
             "the noise level (on its Amazon reviews it varies little, and so does ScheDA's gain). The spread: the "
             "best validation error of the DA grid's worst noise level minus its best level's, on the selection "
             "seed (the further seeds train only the reported DAs, not the grid); *sensitive* when it exceeds what "
             "validation-set noise alone gives two models (1.96 standard errors of their difference). The gain: "
             "the best DA's test error minus the best ScheDA's (positive: ScheDA better), paired over the further "
             "seeds.", "",
             "| Hidden units | nu levels | Best / worst nu | Spread, val (test) points | Validation noise "
             "(points) | Sensitive | ScheDA's gain, selection seed (test points) | "
             + " | ".join(f"Gain over further seeds, {title}" for title in RULES.values()) + " |",
             "|---|---|---|---|---|---|---|" + "---|" * len(RULES)]
    words = []
    for hidden, sel in selection["hidden"].items():
        s = spread(sel["by_nu"])
        best = (continued.get(hidden, {}).get(SCHEDA) or {}).get("best")
        if s is None:
            words.append(f"{hidden} hidden units: the DA grid has one noise level, so no spread.")
            continue
        first = f"{100 * (sel['best']['test_error'] - best['test_error']):+.2f}" if best else "no ScheDA in this table"
        by_rule = gains(seeded, hidden)
        cells = []
        for rule in RULES:
            g = by_rule.get(rule)
            if g is None:
                cells.append("—")
            elif g.summary.has_interval:
                cells.append(f"{g.text(unit='')} ({g.n} seeds{'' if g.resolved else ', not resolved'})")
            else:
                cells.append(f"{g.summary.mean:+.2f} (1 seed, no interval)")
        noise = f"{s['noise']:.2f} (N = {s['val_n']})" if s["noise"] is not None else "not recorded"
        sensitive = {True: "yes", False: "no", None: "—"}[s["sensitive"]]
        lines.append(f"| {hidden} | {s['levels']} | {s['best_nu']} / {s['worst_nu']} | {s['val']:.2f} ({s['test']:+.2f}) "
                     f"| {noise} | {sensitive} | {first} | {' | '.join(cells)} |")
        if best is None:
            words.append(f"{hidden} hidden units: this table trains no ScheDA, so the reading cannot be checked.")
            continue
        verdicts = {rule: reading(s["sensitive"], by_rule.get(rule)) for rule in RULES}
        if len(set(verdicts.values())) == 1:
            words.append(f"{hidden} hidden units: {next(iter(verdicts.values()))}.")
        else:
            words.append(f"{hidden} hidden units: the rule decides: " + "; ".join(
                f"{RULES[rule]} it {v}" for rule, v in verdicts.items()) + ".")
    worst = (paper or {}).get("da_worst") or {}
    for hidden, value in worst.items():
        da, scheda = (paper.get("da") or {}).get(hidden), (paper.get(SCHEDA) or {}).get(hidden)
        if da is not None and scheda is not None:
            words.append(f"The paper ({hidden} hidden units, test error, one run each): its worst DA {fmt(value)} % "
                         f"against its best {fmt(da)} %, a spread of {value - da:.2f} points, and ScheDA's gain "
                         f"{da - scheda:.2f} points ({fmt(da)} -> {fmt(scheda)} %).")
    return lines + [""] + [f"- {w}" for w in words]
