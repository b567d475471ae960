"""table=paper_settings' report: each seed's arms read under the rules fixed before any block ran,
and the pre-registered comparison (ScheDA as the paper reads it minus the jump at its best
validation epoch, test error, paired by seed) by scheda.protocol.compare.

The readings of a run (its evaluations, each with its epoch, nu, reason and errors):

* ``paper``: ScheDA as the paper reads it: the last epoch of each level (``stage_end``), the level
  (T) chosen on validation;
* ``best``: the evaluation of lowest validation error (the earliest on ties), any evaluation;
* ``last``: its last evaluation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from scheda.protocol.compare import compare
from scheda.protocol.jobs import fmt, pct

STAGE_END = "stage_end"


def reading(e: dict[str, Any] | None, rule: str) -> dict[str, Any] | None:
    """The evaluation ``e`` (a record's entry) is read at under ``rule`` (paper, best, last)."""
    if not e or not e.get("evaluations"):
        return None
    evals = e["evaluations"]
    if rule == "paper":
        evals = [v for v in evals if v.get("reason") == STAGE_END]
    elif rule == "last":
        evals = evals[-1:]
    elif rule != "best":
        raise ValueError(f"no reading {rule!r}: paper, best or last")
    return min(evals, key=lambda v: (v["val_error"], v["epoch"])) if evals else None


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


def _cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "—"
    nu = f", nu {fmt(r['nu'])}" if r.get("nu") is not None else ""
    return f"{pct(r['test_error'])} ({pct(r['val_error'])} val; epoch {r['epoch']}{nu})"


def _stopped(e: dict[str, Any] | None) -> str:
    if not e:
        return "—"
    why = {"patience": "stopped by the rule", "cap": "at the cap", "schedule": "ran its epochs out"}
    return f"{e.get('epochs_trained')} epochs, {why.get(e.get('stopped_by'), e.get('stopped_by') or '?')}"


def comparison_rows(s, found: dict[str, Any]) -> list[tuple[str, Any, list[str]]]:
    """(what, Comparison, seeds) of every comparison the report makes, the pre-registered one first."""
    cont = found["paper_continue"]
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
            a = [100 * x["test_error"] for x, y in pairs if x and y]
            b = [100 * y["test_error"] for x, y in pairs if x and y]
            out.append((what, compare(a, b, paired=True, margin=margin, better="lower"), used))
    return out


def section(cfg: DictConfig, s, found: dict[str, Any], path: Path) -> list[str]:
    """The report's section: the budget, the comparisons with their verdicts, each seed's readings."""
    start, cont = found["paper_start"], found["paper_continue"]
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
        da_text = "—" if not da else f"epoch {da['epoch']} of {_stopped(da)}"
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
    return lines
