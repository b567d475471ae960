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
from scheda.protocol import compare as comparison
from scheda.utils.stats import summarize


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
            "loss": [h["loss"] for h in results["history"]], "seconds": results["seconds"], "step": ran,
            "epoch_seconds": [h["seconds"] for h in results["history"]]}


def chain(precision: str, seed: int, overrides: list[str], then: list[str], runs: Path, threads: int | None) -> dict:
    """One seed's DA, then its continuation: each model's record (its reconstruction error too), and
    the chain's wall seconds."""
    start = time.perf_counter()
    da = runs / precision / f"da_seed{seed}"
    _train(precision, [*overrides, f"seed={seed}"], da, threads)
    out = {"da": _model_record(da, precision)}
    out["da"]["reconstruction"] = reconstruction_error(da)
    if then:
        run = runs / precision / f"then_seed{seed}"
        kept = [o for o in overrides if not o.split("=")[0].lstrip("+~").startswith("schedule")]  # --then's schedule
        _train(precision, [*kept, *then, f"seed={seed}", f"init_from={da}"], run, threads)
        out["then"] = _model_record(run, precision)
        out["then"]["reconstruction"] = reconstruction_error(run)
    out["wall_seconds"] = time.perf_counter() - start
    return out


def record_seed(seed: int, precisions: tuple[str, str], settings: dict, runs: Path, side_by_side: bool) -> dict:
    """Both precisions' chains of one seed (side by side, a thread each, or one after the other)."""
    chains: dict[str, dict] = {}
    errors: list[BaseException] = []

    def run_chain(precision: str) -> None:
        try:
            chains[precision] = chain(precision, seed, settings["overrides"], settings["then"], runs,
                                      1 if side_by_side else None)
        except BaseException as exc:  # noqa: BLE001 - raised below, in the main thread
            errors.append(exc)

    if side_by_side:
        workers = [threading.Thread(target=run_chain, args=(p,)) for p in precisions]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    else:
        for p in precisions:
            run_chain(p)
    if errors:
        raise errors[0]
    return {"seed": seed, **settings, "side_by_side": side_by_side, "commit": _commit(), **chains}


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent, check=True).stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None


def reconstruction_error(run: Path) -> float:
    """The model's summed cross-entropy of the clean training split, mean per image (fp32)."""
    import torch

    from scheda.analysis.core import clean_reconstruction_error
    from scheda.data import load_dataset
    from scheda.training.checkpoint import load_run_model

    cfg, model, _ = load_run_model(run)
    return clean_reconstruction_error(model, load_dataset(cfg.dataset).tensor("train", torch.device("cpu")))


def compare(a: list[float], b: list[float], margin: float) -> dict:
    """``a - b`` paired by seed, and whether its interval lies within ±margin (the report's engine:
    scheda.protocol.compare)."""
    c = comparison.compare(a, b, margin=margin)
    s = c.summary
    return {"per_seed": list(c.difference.diffs), "mean": s.mean, "low": s.low, "high": s.high,
            "sign_flip_p": c.p_value, "margin": [-margin, margin], "within_margin": c.on_par}


def figure(records: list[dict], precision: str, path: Path) -> None:
    """The first seed's training loss per epoch in both precisions, the continuation after the DA."""
    from scheda.analysis.core import pyplot, save_png

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    record = records[0]
    for name, style in (("fp32", "-"), (precision, "--")):
        loss = list(record[name]["da"]["loss"]) + list(record[name].get("then", {}).get("loss", []))
        ax.plot(range(1, len(loss) + 1), loss, style, label=name)
    if "then" in record["fp32"]:
        da_epochs = record["fp32"]["da"]["epochs"]
        ax.axvline(da_epochs + 0.5, color="grey", lw=0.8)
        ax.text(da_epochs + 1, ax.get_ylim()[1], " continuation", va="top", fontsize=8, color="grey")
    ax.set_xlabel("epoch")
    ax.set_ylabel("training loss per image")
    ax.set_title(f"seed {record['seed']}: {precision} against fp32")
    ax.legend()
    fig.tight_layout()
    save_png(fig, path)


def _interval(c: dict, unit: str) -> str:
    if c["low"] is None:
        return f"{c['mean']:+.2f}{unit} (one seed: no interval)"
    return f"{c['mean']:+.2f}{unit} [{c['low']:+.2f}, {c['high']:+.2f}]"


def summary(records: list[dict], precision: str, margin: float, recon_margin: float, planned: int) -> dict:
    """The paired differences over the seeds recorded, for each model, and the verdict: resolved only
    once every one of the ``planned`` seeds is in (the rule was fixed for them), then equal only
    where every interval lies within its margin."""
    out: dict = {"seeds": [r["seed"] for r in records], "difference": {}}
    for m in [m for m in ("da", "then") if m in records[0]["fp32"]]:
        test = {p: [r[p][m]["test_error"] for r in records] for p in ("fp32", precision)}
        recon = {p: [r[p][m]["reconstruction"] for r in records] for p in ("fp32", precision)}
        allowed = recon_margin / 100 * summarize(recon["fp32"]).mean
        out["difference"][m] = {"of": f"{precision} - fp32",
                                "test_error": compare(test[precision], test["fp32"], margin),
                                "reconstruction": compare(recon[precision], recon["fp32"], allowed)}
    out["resolved"] = len(records) >= max(2, planned)
    out["equal"] = out["resolved"] and all(d[k]["within_margin"] for d in out["difference"].values()
                                           for k in ("test_error", "reconstruction"))
    # a seed's chains stopped together for a while (``paused_seconds``, said in its record) ran that much less
    walls = {p: sum(r[p]["wall_seconds"] - r.get("paused_seconds", 0) for r in records) for p in ("fp32", precision)}
    out["wall_seconds"], out["speedup"] = walls, walls["fp32"] / walls[precision]
    # an epoch's time, the median over every epoch of every seed's DA: a pause or a busy minute weighs
    # one epoch, where it weighs the wall time whole (records from before epoch_seconds: none)
    epochs = {p: [t for r in records for t in r[p]["da"].get("epoch_seconds", [])] for p in ("fp32", precision)}
    if all(epochs.values()):
        from statistics import median

        out["da_epoch_seconds"] = {p: median(t) for p, t in epochs.items()}
    return out


def report(records: list[dict], result: dict, precision: str, records_dir: Path, figure_path: Path | None,
           wanted: int) -> str:
    """The comparison as Markdown: per-seed values, the paired intervals and the verdicts."""
    first = records[0]
    names = {"da": "DA", "then": "continuation"}
    seeds = result["seeds"]
    lines = [f"# {precision} products against fp32, paired by seed", "",
             f"Written by `scripts/compare_precision.py` from the per-seed records in `{records_dir}/` "
             f"({len(records)} of the {wanted} seeds planned: {', '.join(map(str, seeds))}).", "",
             f"- Runs: `{' '.join(first['overrides'])}`" + (f", then per seed `{' '.join(first['then'])}` from "
                                                            f"its DA's final checkpoint" if first["then"] else ""),
             "- Each pair shares its seed: its initialisation, minibatches and masks.",
             f"- Command (it trains the seeds not recorded yet, then rewrites this page): `{result['command']}`",
             f"- Called equal, fixed before the runs: the 95 % t-interval of the paired test-error difference within "
             f"±{first['margin']:g} points, and that of the reconstruction error of the clean training split within "
             f"±{first['recon_margin']:g} % of fp32's mean, for every model.",
             f"- Wall time over the seeds ({'side by side, one thread each' if first['side_by_side'] else 'one after the other'}): "
             + ", ".join(f"{p} {result['wall_seconds'][p] / 60:.1f} min" for p in ("fp32", precision))
             + f" ({result['speedup']:.2f}x, evaluations included)"
             + ("; a DA epoch at the median, " + ", ".join(f"{p} {t:.1f} s" for p, t in result["da_epoch_seconds"].items())
                + f" ({result['da_epoch_seconds'][precision] / result['da_epoch_seconds']['fp32']:.2f} of fp32's)"
                if "da_epoch_seconds" in result else ""), ""]
    for m, d in result["difference"].items():
        lines += [f"## {names[m]}", "", f"| seed | fp32 test error % | {precision} | fp32 reconstruction | {precision} "
                  f"| fp32 last epoch's training loss | {precision} | epochs |", "|---|---|---|---|---|---|---|---|"]
        for r in records:
            a, b = r["fp32"][m], r[precision][m]
            lines.append(f"| {r['seed']} | {a['test_error']:.2f} | {b['test_error']:.2f} | {a['reconstruction']:.2f} | "
                         f"{b['reconstruction']:.2f} | {a['loss'][-1]:.2f} | {b['loss'][-1]:.2f} | {a['epochs']} |")
        t, c = d["test_error"], d["reconstruction"]
        lines += ["", f"- test error {precision} − fp32: {_interval(t, ' points')}, sign-flip p {t['sign_flip_p']:.3g}: "
                      f"{'within' if t['within_margin'] else 'NOT within'} ±{first['margin']:g} points",
                  f"- reconstruction error {precision} − fp32: {_interval(c, '')} (margin ±{c['margin'][1]:.2f}): "
                  f"{'within' if c['within_margin'] else 'NOT within'}", ""]
    if not result["resolved"]:
        verdict = (f"**not resolved**: n = {len(records)} of the {wanted} seeds the rule was fixed for (the rest not "
                   f"run yet; the same command runs them and reads these records)")
    else:
        verdict = ("**equal**" if result["equal"] else "**not shown equal**") + f" by the rule above, n = {len(records)}"
    lines += ["## Verdict", "", f"{precision} against fp32: {verdict}.", ""]
    if figure_path:
        lines += [f"![loss curves of seed {first['seed']}]({figure_path.name})", ""]
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
    parser.add_argument("--records", type=Path, default=None,
                        help="a folder of one small JSON record per seed (default RUNS/records): a seed recorded "
                             "there is not trained again, and the summary reads every record in it")
    parser.add_argument("--max-seeds", type=int, default=None,
                        help="train at most this many seeds not yet recorded, then summarise (a block that fits)")
    parser.add_argument("--out", type=Path, default=None, help="the summary as JSON")
    parser.add_argument("--report", type=Path, default=None, help="the comparison as Markdown")
    parser.add_argument("--figure", type=Path, default=None, help="the first seed's loss curves (PNG)")
    parser.add_argument("overrides", nargs="*", help="the run's overrides (after --)")
    args = parser.parse_args(argv)
    if len(args.seeds) < 2:
        parser.error("--seeds needs at least two seeds for an interval")
    records_dir = args.records or args.runs / "records"
    settings = {"precision": args.precision, "overrides": [*args.overrides, *STEP_OF.get(args.precision, [])],
                "then": shlex.split(args.then), "margin": args.margin, "recon_margin": args.recon_margin}
    precisions = ("fp32", args.precision)
    trained = 0
    for seed in args.seeds:
        path = records_dir / f"seed_{seed}.json"
        if path.exists():
            print(f"seed {seed}: recorded in {path}, not trained again", flush=True)
            continue
        if args.max_seeds is not None and trained >= args.max_seeds:
            continue
        record = record_seed(seed, precisions, settings, args.runs, args.side_by_side)
        atomic_write_json(path, record)
        trained += 1
        print(f"seed {seed}: " + "; ".join(f"{m} fp32 {record['fp32'][m]['test_error']:.2f} %, {args.precision} "
                                           f"{record[args.precision][m]['test_error']:.2f} %"
                                           for m in ("da", "then") if m in record["fp32"])
              + f" (recorded in {path})", flush=True)
    records = []
    for seed in args.seeds:
        path = records_dir / f"seed_{seed}.json"
        if path.exists():
            record = json.loads(path.read_text())
            differs = [k for k in settings if record.get(k) != settings[k]]
            if differs:
                raise SystemExit(f"{path} was recorded with other {', '.join(differs)}: give the same settings, or "
                                 f"another --records folder")
            records.append(record)
    if not records:
        raise SystemExit(f"no seed recorded in {records_dir}")
    given = list(sys.argv[1:] if argv is None else argv)
    if "--max-seeds" in given:  # how much one invocation trains, not what the comparison is
        del given[given.index("--max-seeds"):given.index("--max-seeds") + 2]
    command = " ".join(shlex.quote(a) for a in ["python", "scripts/compare_precision.py", *given])
    result = {**settings, "records": str(records_dir), "command": command, **summary(records, args.precision, args.margin,
                                                                  args.recon_margin, len(args.seeds))}
    for m, d in result["difference"].items():
        t, r = d["test_error"], d["reconstruction"]
        print(f"{m}: {args.precision} - fp32 over seeds {result['seeds']}: test error {_interval(t, ' points')}, "
              f"reconstruction {_interval(r, '')}")
    print(f"{'not resolved' if not result['resolved'] else 'equal' if result['equal'] else 'NOT shown equal'}"
          f" (test error within +-{args.margin:g} points, reconstruction within +-{args.recon_margin:g} %); "
          f"n = {len(records)} of {len(args.seeds)}")
    if args.out:
        atomic_write_json(args.out, result)
    if args.figure:
        figure(records, args.precision, args.figure)
    if args.report:
        text = report(records, result, args.precision, records_dir, args.figure, len(args.seeds)).encode()
        atomic_write(args.report, lambda f: f.write(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
