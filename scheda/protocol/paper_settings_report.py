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
            a = [100 * x["test_error"] for x, y in pairs if x and y]
            b = [100 * y["test_error"] for x, y in pairs if x and y]
            out.append((what, compare(a, b, paired=True, margin=margin, better="lower"), used))
    return out


def section(cfg: DictConfig, s, found: dict[str, Any], path: Path) -> list[str]:
    """The report's section: the budget, the comparisons with their verdicts, each seed's readings."""
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
    lines += curves(s, found, path)
    lines += filters(cfg, s, found, path)
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
            if e and e.get("evaluations"):
                ax.plot([v["epoch"] for v in e["evaluations"]], [100 * v["val_error"] for v in e["evaluations"]],
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


def filters(cfg: DictConfig, s, found: dict[str, Any], path: Path) -> list[str]:
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
            source = _image(cfg, e["png"]) if e else None
            if source is not None:
                images.append(f"![{k}, seed {seed}]({os.path.relpath(source, path.parent)})")
        if images:
            lines += [f"Seed {seed} ({', '.join(keys)}): " + " ".join(images), ""]
    return lines


def _image(cfg: DictConfig, name: str) -> Path | None:
    """Where a filter image is: the run folder's (``<out_dir>/paper_filters/``), else a block record's."""
    from scheda.protocol.tables.paper_settings import FILTERS

    here = Path(cfg.out_dir) / FILTERS / name
    if here.exists():
        return here
    blocks = cfg.table.get("blocks")
    if blocks is not None:
        found = sorted(Path(blocks.records).glob(f"block_*/{name}"))
        if found:
            return found[0]
    return None
