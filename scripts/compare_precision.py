"""A precision against fp32, paired by seed: the same DA trained by one fused sweep over the seeds
in each precision (``trainer.parallel.seed``: the seeds share the data, each model keeps its own
initialisation, minibatches and masks, the same in both precisions), optionally continued per
seed (``--then``: a ScheDA from each seed's DA, ``init_from`` its final checkpoint, in the same
precision), then each model's test error at the end and its reconstruction error of the clean
training split (fp32 arithmetic for both: it measures the weights each precision trained).
Prints and writes (``--out``) the per-seed values, the paired differences' mean with its
t-interval and sign-flip p, each chain's wall time, and the verdict: a precision is called equal
to fp32 where the interval of the test error lies within +-``--margin`` points and that of the
reconstruction error within +-``--recon-margin`` % of fp32's mean, both fixed before a run.
``--report`` writes the Markdown report and ``--figure`` one seed's loss curves overlaid.

    python scripts/compare_precision.py --precision tf32 --seeds 1 2 3 4 5 --out precision.json -- \\
        model.hidden=1000 schedule=constant schedule.nu=0.5 schedule.epochs=100 trainer.batch_size=20
    python scripts/compare_precision.py --precision bf16 --side-by-side --runs outputs/precision_cpu \\
        --then "schedule=decreasing schedule.nu0=0.5 schedule.delta_nu=0.1 schedule.K=5 \\
                schedule.initial_epochs=0 schedule.nu_final=0.1" \\
        --out docs/results/precision_cpu.json --report docs/results/precision_cpu.md \\
        --figure docs/results/precision_cpu_loss.png -- model.hidden=500 schedule=constant schedule.nu=0.5 \\
        schedule.epochs=60 optim.lr=0.05 trainer.batch_size=20 classifier=torch_lr \\
        classifier.c_log2_min=-8 classifier.c_log2_max=6

A chain whose runs completed is read, not trained again: the same command resumes after a stop.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

from scheda.utils.io import atomic_write, atomic_write_json
from scheda.utils.stats import paired, summarize


# Where a precision is one step's own, both sides train with that step (fp32 against it there).
STEP_OF = {"tf32x3": ["trainer.step=two_pass"]}
COMMON = ["logger=none", "trainer.progress_bar=false", "evaluate.at_stage_ends=false"]


def _done(run: Path) -> bool:
    try:
        return json.loads((run / "results.json").read_text()).get("status") == "completed"
    except (OSError, ValueError):
        return False


def _train(precision: str, overrides: list[str], out: Path, threads: int | None) -> None:
    """One scheda run (a fused sweep or a single model) in its own process, unless it completed."""
    if _done(out):
        return
    cmd = [sys.executable, "-m", "scheda.cli", *overrides, *COMMON, f"trainer.precision={precision}",
           *([f"trainer.num_threads={threads}"] if threads else []), f"hydra.run.dir={out}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"the {precision} run {out} failed: {proc.stderr.strip().splitlines()[-1:]}")


def _model_record(run: Path, precision: str) -> dict:
    """A trained model's final test error (%), its loss per epoch and its step, checked to be the
    precision compared."""
    results = json.loads((run / "results.json").read_text())
    ran = results.get("step") or {}
    if ran.get("fallback") or ran.get("precision", precision) != precision:
        # the run trained with another step than the one compared: its errors are not this precision's
        raise SystemExit(f"{run} did not train in {precision}: {ran.get('fallback') or ran}")
    return {"test_error": 100 * results["evaluations"][-1]["test_error"], "epochs": results["epochs"],
            "loss": [h["loss"] for h in results["history"]], "seconds": results["seconds"], "step": ran}


def chain(precision: str, seeds: list[int], overrides: list[str], then: list[str], runs: Path,
          threads: int | None) -> dict:
    """The DA sweep over the seeds, then each seed's continuation: every model's record, and the
    chain's wall seconds."""
    start = time.perf_counter()
    sweep = runs / precision / "da"
    _train(precision, [*overrides, f"trainer.parallel.seed=[{','.join(map(str, seeds))}]"], sweep, threads)
    out = {"da": [_model_record(sweep / "models" / str(k), precision) for k in range(len(seeds))]}
    if then:
        out["then"] = []
        for k, seed in enumerate(seeds):
            run = runs / precision / f"then_seed{seed}"
            kept = [o for o in overrides if not o.split("=")[0].lstrip("+~").startswith("schedule")]  # --then's schedule
            _train(precision, [*kept, *then, f"seed={seed}", f"init_from={sweep / 'models' / str(k)}"], run, threads)
            out["then"].append(_model_record(run, precision))
    out["wall_seconds"] = time.perf_counter() - start
    return out


def reconstruction_error(run: Path) -> float:
    """The model's summed cross-entropy of the clean training split, mean per image (fp32)."""
    import torch

    from scheda.data import load_dataset
    from scheda.training.checkpoint import load_run_model

    cfg, model, _ = load_run_model(run)
    x = load_dataset(cfg.dataset).tensor("train", torch.device("cpu"))
    with torch.no_grad():
        total = sum(float(model.loss(x[i:i + 8192], x[i:i + 8192])) * x[i:i + 8192].shape[0]
                    for i in range(0, x.shape[0], 8192))
    return total / x.shape[0]


def compare(a: list[float], b: list[float], low: float, high: float) -> dict:
    """``a - b`` paired by seed, and whether its interval lies within [low, high]."""
    diff = paired(a, b)
    s = diff.summary
    return {"per_seed": list(diff.diffs), "mean": s.mean, "low": s.low, "high": s.high, "sign_flip_p": diff.p_value,
            "margin": [low, high], "within_margin": bool(s.has_interval and low <= s.low and s.high <= high)}


def figure(result: dict, precision: str, seed_index: int, path: Path) -> None:
    """One seed's training loss per epoch in both precisions, the continuation after the DA."""
    from scheda.analysis.core import pyplot, save_png

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, style in (("fp32", "-"), (precision, "--")):
        chain = result[name]
        loss = list(chain["models"]["da"][seed_index]["loss"])
        if "then" in chain["models"]:
            loss += chain["models"]["then"][seed_index]["loss"]
        ax.plot(range(1, len(loss) + 1), loss, style, label=name)
    da_epochs = result["fp32"]["models"]["da"][seed_index]["epochs"]
    if "then" in result["fp32"]["models"]:
        ax.axvline(da_epochs + 0.5, color="grey", lw=0.8)
        ax.text(da_epochs + 1, ax.get_ylim()[1], " continuation", va="top", fontsize=8, color="grey")
    ax.set_xlabel("epoch")
    ax.set_ylabel("training loss per image")
    ax.set_title(f"seed {result['seeds'][seed_index]}: {precision} against fp32")
    ax.legend()
    fig.tight_layout()
    save_png(fig, path)


def _interval(c: dict, unit: str) -> str:
    return f"{c['mean']:+.2f}{unit} [{c['low']:+.2f}, {c['high']:+.2f}]"


def report(result: dict, precision: str, figure_path: Path | None) -> str:
    """The comparison as Markdown: per-seed values, the paired intervals and the verdicts."""
    seeds, models = result["seeds"], [m for m in ("da", "then") if m in result["fp32"]["models"]]
    names = {"da": "DA", "then": "continuation"}
    lines = [f"# {precision} products against fp32, paired by seed", "",
             f"Written by `scripts/compare_precision.py` from `{result['out']}`.", "",
             f"- Runs: `{' '.join(result['overrides'])}`" + (f", then per seed `{' '.join(result['then'])}` "
                                                              f"from its DA's final checkpoint" if result["then"] else ""),
             f"- Seeds {', '.join(map(str, seeds))}; each pair shares its initialisation, minibatches and masks.",
             f"- Called equal, fixed before the runs: the 95 % t-interval of the paired test-error difference within "
             f"±{result['margin']:g} points, and that of the reconstruction error within ±{result['recon_margin']:g} % "
             f"of fp32's mean.",
             f"- Wall time of each chain ({'side by side, one thread each' if result['side_by_side'] else 'one after the other'}): "
             + ", ".join(f"{p} {result[p]['wall_seconds'] / 60:.1f} min" for p in ("fp32", precision)), ""]
    for m in models:
        lines += [f"## {names[m]}", "", f"| seed | fp32 test error % | {precision} | fp32 reconstruction | {precision} |",
                  "|---|---|---|---|---|"]
        for k, seed in enumerate(seeds):
            a, b = result["fp32"]["models"][m][k], result[precision]["models"][m][k]
            lines.append(f"| {seed} | {a['test_error']:.2f} | {b['test_error']:.2f} | {a['reconstruction']:.2f} | "
                         f"{b['reconstruction']:.2f} |")
        c = result["difference"][m]
        lines += ["", f"- test error {precision} − fp32: {_interval(c['test_error'], ' points')}, sign-flip p "
                      f"{c['test_error']['sign_flip_p']:.3g}: {'within' if c['test_error']['within_margin'] else 'NOT within'} "
                      f"±{result['margin']:g} points",
                  f"- reconstruction error {precision} − fp32: {_interval(c['reconstruction'], '')} (margin "
                  f"±{c['reconstruction']['margin'][1]:.2f}): {'within' if c['reconstruction']['within_margin'] else 'NOT within'}",
                  ""]
    verdict = "equal" if result["equal"] else "NOT shown equal"
    lines += ["## Verdict", "", f"{precision} and fp32 are **{verdict}** by the rule above "
              f"({', '.join(names[m] for m in models)}).", ""]
    if figure_path:
        lines += [f"![loss curves]({figure_path.name})", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precision", default="tf32", choices=["tf32", "tf32x3", "bf16"],
                        help="tf32: the torch products in TF32; tf32x3: the two-pass step's in three-pass TF32, "
                             "against the two-pass step in fp32; bf16: the torch step's products in bf16")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--margin", type=float, default=0.3, help="points of test error either side of fp32")
    parser.add_argument("--recon-margin", type=float, default=1.0,
                        help="the reconstruction error's margin, in %% of fp32's mean, either side")
    parser.add_argument("--then", default="", help="overrides of a continuation of each seed's DA (a ScheDA): its "
                                                   "schedule replaces the DA's, the other overrides are kept")
    parser.add_argument("--side-by-side", action="store_true",
                        help="both precisions at once, one thread each (as two protocol jobs share 2 cores)")
    parser.add_argument("--runs", type=Path, default=Path("outputs/precision"))
    parser.add_argument("--out", type=Path, default=None, help="the comparison as JSON")
    parser.add_argument("--report", type=Path, default=None, help="the comparison as Markdown")
    parser.add_argument("--figure", type=Path, default=None, help="the first seed's loss curves (PNG)")
    parser.add_argument("overrides", nargs="*", help="the run's overrides (after --)")
    args = parser.parse_args(argv)
    if len(args.seeds) < 2:
        parser.error("--seeds needs at least two seeds for an interval")
    overrides = [*args.overrides, *STEP_OF.get(args.precision, [])]
    then = shlex.split(args.then)
    precisions = ("fp32", args.precision)
    result = {"overrides": overrides, "then": then, "seeds": args.seeds, "margin": args.margin,
              "recon_margin": args.recon_margin, "side_by_side": args.side_by_side,
              "out": str(args.out) if args.out else None}
    chains: dict[str, dict] = {}
    errors: list[BaseException] = []

    def run_chain(precision: str) -> None:
        try:
            chains[precision] = chain(precision, args.seeds, overrides, then, args.runs,
                                      1 if args.side_by_side else None)
        except BaseException as exc:  # noqa: BLE001 - raised below, in the main thread
            errors.append(exc)

    if args.side_by_side:
        threads = [threading.Thread(target=run_chain, args=(p,)) for p in precisions]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for p in precisions:
            run_chain(p)
    if errors:
        raise errors[0]
    result["difference"] = {}
    for m in chains["fp32"]:
        if m == "wall_seconds":
            continue
        for p in precisions:
            folder = {"da": lambda k: args.runs / p / "da" / "models" / str(k),
                      "then": lambda k: args.runs / p / f"then_seed{args.seeds[k]}"}[m]
            for k, record in enumerate(chains[p][m]):
                record["reconstruction"] = reconstruction_error(folder(k))
        a = [r["test_error"] for r in chains[args.precision][m]]
        b = [r["test_error"] for r in chains["fp32"][m]]
        ra = [r["reconstruction"] for r in chains[args.precision][m]]
        rb = [r["reconstruction"] for r in chains["fp32"][m]]
        recon = args.recon_margin / 100 * summarize(rb).mean
        result["difference"][m] = {"of": f"{args.precision} - fp32",
                                   "test_error": compare(a, b, -args.margin, args.margin),
                                   "reconstruction": compare(ra, rb, -recon, recon)}
    for p in precisions:
        result[p] = {"wall_seconds": chains[p].pop("wall_seconds"), "models": chains[p]}
    result["equal"] = all(d[key]["within_margin"] for d in result["difference"].values()
                          for key in ("test_error", "reconstruction"))
    result["speedup"] = result["fp32"]["wall_seconds"] / result[args.precision]["wall_seconds"]
    for m, d in result["difference"].items():
        s, r = d["test_error"], d["reconstruction"]
        print(f"{m}: {args.precision} - fp32 test error over seeds {args.seeds}: {s['mean']:+.2f} points "
              f"[{s['low']:+.2f}, {s['high']:+.2f}] (95% t), sign-flip p {s['sign_flip_p']:.3g}; reconstruction "
              f"{r['mean']:+.2f} [{r['low']:+.2f}, {r['high']:+.2f}]")
    print(f"chains {result['fp32']['wall_seconds']:.0f} s (fp32) and {result[args.precision]['wall_seconds']:.0f} s; "
          f"{'equal' if result['equal'] else 'NOT shown equal'} (test error within +-{args.margin:g} points, "
          f"reconstruction within +-{args.recon_margin:g} %)")
    if args.out:
        atomic_write_json(args.out, result)
    if args.figure:
        figure(result, args.precision, 0, args.figure)
    if args.report:
        text = report(result, args.precision, args.figure).encode()
        atomic_write(args.report, lambda f: f.write(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
