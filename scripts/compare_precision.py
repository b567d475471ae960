"""A precision against fp32, paired by seed: the same DA trained by one fused sweep over the seeds
in each precision (``trainer.parallel.seed``: the seeds share the data, each model keeps its own
initialisation, minibatches and masks, the same in both precisions), then each model's test
error at the end. Prints and writes (``--out``) the per-seed errors, the paired differences'
mean with its t-interval and sign-flip p, each sweep's wall time, and the verdict the GPU scales
follow: a precision is used where its interval lies within +-``--margin`` points of fp32.

    python scripts/compare_precision.py --precision tf32 --seeds 1 2 3 4 5 --out precision.json -- \\
        model.hidden=1000 schedule=constant schedule.nu=0.5 schedule.epochs=100 trainer.batch_size=20
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from scheda.utils.io import atomic_write_json
from scheda.utils.stats import paired, summarize


# Where a precision is one step's own, both sides train with that step (fp32 against it there).
STEP_OF = {"tf32x3": ["trainer.step=two_pass"]}


def sweep(precision: str, seeds: list[int], overrides: list[str], out: Path) -> tuple[list[float], float]:
    """Train the fused sweep in one process; its models' final test errors (%) and wall seconds."""
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "scheda.cli", *overrides, f"trainer.precision={precision}",
           f"trainer.parallel.seed=[{','.join(map(str, seeds))}]", "evaluate.at_stage_ends=false",
           "logger=none", "trainer.progress_bar=false", f"hydra.run.dir={out}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"the {precision} sweep failed: {proc.stderr.strip().splitlines()[-1:]}")
    seconds = time.perf_counter() - start
    errors = []
    for k in range(len(seeds)):
        results = json.loads((out / "models" / str(k) / "results.json").read_text())
        ran = results.get("step") or {}
        if ran.get("fallback") or ran.get("precision", precision) != precision:
            # the sweep trained with another step than the one compared: its errors are not this precision's
            raise SystemExit(f"the {precision} sweep did not train in {precision}: {ran.get('fallback') or ran}")
        errors.append(100 * results["evaluations"][-1]["test_error"])
    return errors, seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precision", default="tf32", choices=["tf32", "tf32x3"],
                        help="tf32: the torch products in TF32; tf32x3: the two-pass step's in three-pass TF32, "
                             "against the two-pass step in fp32")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--margin", type=float, default=0.3, help="points of test error either side of fp32")
    parser.add_argument("--runs", type=Path, default=Path("outputs/precision"))
    parser.add_argument("--out", type=Path, default=None, help="the comparison as JSON")
    parser.add_argument("overrides", nargs="*", help="the run's overrides (after --)")
    args = parser.parse_args(argv)
    if len(args.seeds) < 2:
        parser.error("--seeds needs at least two seeds for an interval")
    overrides = [*args.overrides, *STEP_OF.get(args.precision, [])]
    result = {"overrides": overrides, "seeds": args.seeds, "margin": args.margin}
    for precision in ("fp32", args.precision):
        errors, seconds = sweep(precision, args.seeds, overrides, args.runs / precision)
        result[precision] = {"test_error": errors, "seconds": seconds, "summary": summarize(errors).__dict__}
    diff = paired(result[args.precision]["test_error"], result["fp32"]["test_error"])
    s = diff.summary
    within = s.has_interval and -args.margin <= s.low and s.high <= args.margin
    result["difference"] = {"of": f"{args.precision} - fp32", "per_seed": list(diff.diffs), "mean": s.mean,
                            "low": s.low, "high": s.high, "sign_flip_p": diff.p_value,
                            "within_margin": within}
    result["speedup"] = result["fp32"]["seconds"] / result[args.precision]["seconds"]
    print(f"{args.precision} - fp32 test error over seeds {args.seeds}: {s.mean:+.2f} points "
          f"[{s.low:+.2f}, {s.high:+.2f}] (95% t), sign-flip p {diff.p_value:.3g}; sweeps "
          f"{result['fp32']['seconds']:.0f} s (fp32) and {result[args.precision]['seconds']:.0f} s; "
          f"{'within' if within else 'NOT within'} +-{args.margin:g} points of fp32")
    if args.out:
        atomic_write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
