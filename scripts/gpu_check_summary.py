"""The device check's summary (scripts/gpu_check.sh): the call's steps, the CUDA tests, the
benchmark's rows (the failed ones with their reason), the per-kernel times, tf32x3 against fp32,
call 2's plan, the estimates and the pair's results beside the paper's.

    python scripts/gpu_check_summary.py OUT WORK RESULTS DEVICE
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

COLUMNS = ["product_floor_s", "peak_floor_s", "bytes_floor_s", "launch_floor_s", "occupancy_floor_s", "eager_s",
           "graphed_s", "triton_s", "two_pass_s", "two_pass_tf32x3_s", "autograd_s", "finetune_s", "finetune_grid_s",
           "grid_s", "grid_two_pass_s", "default_over_floor", "two_pass_over_triton"]


def fmt(v) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3g}"


def main(argv=None) -> int:
    out, work, results, device = argv or sys.argv[1:]
    out, work, results = Path(out), Path(work), Path(results)
    print(f"# GPU check summary ({device})\n")
    print((work / "steps.md").read_text())
    tests = work / "cuda_tests.txt"
    if tests.exists():
        print(f"Tests: {tests.read_text().strip() or 'no result'}\n")
    bench = out / "bench_train.json"
    if bench.exists():
        b = json.loads(bench.read_text())
        print(f"Training, one epoch of {b['n']} examples on {b['device_name']} (s); one graph node "
              f"{fmt(b.get('node_us'))} us, Triton step kernels a minibatch {b.get('kernels_per_minibatch')}; the "
              f"two-pass step's occupancy floor for an {b.get('card')}:\n")
        print("| precision | H | batch | " + " | ".join(c.replace("_s", "").replace("_", " ") for c in COLUMNS) + " |")
        print("|---|---|---|" + "---|" * len(COLUMNS))
        for r in b["rows"]:
            if "error" in r:
                print(f"| {r['precision']} | {r['hidden']} | {r['batch_size']} | FAILED: {r['error']} |")
            else:
                print(f"| {r['precision']} | {r['hidden']} | {r['batch_size']} | "
                      + " | ".join(fmt(r.get(c)) for c in COLUMNS) + " |")
        for line in b.get("beaten_floors", []):
            print(f"\nFLOOR BEATEN (the benchmark is wrong): {line}")
        for r in b["rows"]:
            for step, times in (r.get("kernel_us") or {}).items():
                if times:
                    print(f"\nkernels of the {step} step, H {r['hidden']}, batch {r['batch_size']} (us a minibatch): "
                          + ", ".join(f"{k} {v:.1f}" for k, v in sorted(times.items(), key=lambda kv: -kv[1])[:8]))
        if "lr_search" in b:
            s = b["lr_search"]
            print(f"\ntorch_lr C search on {s['n']} x {s['features']} features: {s['seconds']:.1f} s")
    precision = results / "precision_tf32x3.json"
    if precision.exists():
        p = json.loads(precision.read_text())
        d = p["difference"]
        print(f"\n{d['of']} (two-pass step), test error over seeds {p['seeds']}: {d['mean']:+.2f} points "
              f"[{d['low']:+.2f}, {d['high']:+.2f}], sign-flip p {d['sign_flip_p']:.3g}: "
              f"{'within' if d['within_margin'] else 'NOT within'} +-{p['margin']} points; speed-up {p['speedup']:.2f}x")
    plan = results / "call2_plan.json"
    if plan.exists():
        p = json.loads(plan.read_text())
        print(f"\nCall 2's plan: the DA {p['da_epochs']} epochs ({'the paper' if p['whole'] else 'a part of the paper'}"
              f"'s 2000), planned {p['planned_s']:.0f} s of {p['budget_s']} s")
    plans = out / "plans.txt"
    if plans.exists():
        print("\nPlans:\n")
        for line in plans.read_text().splitlines():
            print("- " + line.split("plan for ", 1)[-1])
    for report in sorted(out.glob("table1_*.md")):
        table = report.read_text().split("## Results")[1].split("\n- ")[0].strip()
        print(f"\n{report.name} (the paper at 1000 hidden units: DA 45.34 %, ScheDA 43.01 %):\n\n{table}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
