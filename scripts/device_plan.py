"""The device check's two calls, planned before a device minute is spent (scripts/gpu_check.sh).

A lent device has 15 minutes in all, starts included, so the check is two calls, each sized with a
margin from measured times:

* ``call1`` (at most 300 s): install, CIFAR-10 from its tarball, the Triton probe, the CUDA tests of
  every step, the benchmark, three-pass TF32 against fp32 over five seeds. Its plan is the last
  measured check's step times (``CALL1_SECONDS``, an H100, docs/results/gpu_h100.md) with what was
  added since estimated, times ``MARGIN``.
* ``call2`` (at most 420 s, run at once while the device is warm, only if call 1 passed): the first
  paper-scale pair at H 1000, DA(nu 0.7) evaluated every 100 epochs and one ScheDA (nu0 0.7, dnu 0.1,
  K 50) from its best checkpoint, each under the rule of training to convergence. Its plan is
  scripts/size_row.py's on call 1's own benchmark: the DA's epochs that fit what is left of the
  budget after the ScheDA, the jobs' starts and the evaluations, at most the paper's 2000. Fewer than
  2000 is a *part* of the pair, and said so.

    python scripts/device_plan.py call1                       # the planned seconds; exit 1 over budget
    python scripts/device_plan.py call2 bench_train.json      # the DA's epochs and the planned seconds

A test (tests/test_gpu_check.py) fails when a call's plan exceeds its budget.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

BUDGET = {"call1": 300, "call2": 420}  # seconds a call may take (the device's per-call limit is 600)
MARGIN = 1.25  # every planned time is the measured (or estimated) one times this
# Call 1's steps, seconds on an H100 (docs/results/gpu_h100.md: install 4 + 5, cifar10 19, triton-probe 10,
# tests 50 for 11, bench-train 83 for 12 rows in two precisions), and what was added since: the tests of
# every step (about 20 more: the two-pass step's and the fused fine-tuning's), the benchmark's rows in
# fp32 only with the two-pass step, tf32x3 and the per-kernel profile (6 rows at about 11 s), and five
# seeds of 20 epochs in fp32 and tf32x3 (two fused sweeps of 5 models, about 25 s each with their start).
CALL1_SECONDS = {"install": 9, "cifar10": 19, "triton-probe": 10, "tests": 70, "bench-train": 66,
                 "precision-tf32x3": 50}
# Call 2: the pair's protocol overrides (scale=paper_h1000 narrowed to one DA and one ScheDA); the
# ScheDA's last level runs on under the rule to at most max_epochs in all (its 6 levels of K 50 are 300).
PAIR = ["table=table1", "scale=paper_h1000", "scale.da.nu=[0.7]", "scale.scheda.nu0=[0.7]",
        "scale.scheda.delta_nu=[0.1]", "scale.scheda.K=[50]", "scale.scheda.max_epochs=500", "scale.control=false",
        "scale.seeds=[0]"]
PAPER_EPOCHS = 2000
REPORT_S = 20  # the report, the summary and the estimates after the pair


def call1() -> dict:
    planned = MARGIN * sum(CALL1_SECONDS.values())
    return {"call": "call1", "planned_s": planned, "budget_s": BUDGET["call1"], "steps": CALL1_SECONDS}


def call2(bench: Path, overrides: list[str], unit: int = 100, most: int = PAPER_EPOCHS) -> dict:
    """The DA's epochs that fit call 2's budget with the margin (scripts/size_row.py on ``bench``: the
    jobs' starts, the ScheDA at its cap, the DA's epochs and evaluations), and the planned seconds."""
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("size_row.py")), str(bench), "--json",
                           "--unit", str(unit), "--most", str(most), "--budget",
                           str(BUDGET["call2"] / MARGIN - REPORT_S), *overrides], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"device_plan: sizing call 2 failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    sized = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"call": "call2", "da_epochs": sized["epochs"], "whole": sized["epochs"] >= PAPER_EPOCHS,
            "budget_s": BUDGET["call2"], "planned_s": MARGIN * (sized["planned_s"] + REPORT_S), "sizing": sized}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("call", choices=sorted(BUDGET))
    parser.add_argument("bench", type=Path, nargs="?", help="call 2: call 1's benchmark (bench_train.json)")
    parser.add_argument("--unit", type=int, default=100, help="call 2: the DA's epochs in multiples of this")
    parser.add_argument("--most", type=int, default=PAPER_EPOCHS)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("overrides", nargs="*", help="call 2: further scheda-reproduce overrides (after --)")
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []  # the overrides after --, for call 2
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    args.overrides = [*args.overrides, *extra]
    if args.call == "call2" and args.bench is None:
        parser.error("call2 needs call 1's benchmark: device_plan.py call2 bench_train.json")
    plan = call1() if args.call == "call1" else call2(args.bench, [*PAIR, *args.overrides], args.unit, args.most)
    if args.json:
        args.json.write_text(json.dumps(plan, indent=2))
    fits = plan["planned_s"] <= plan["budget_s"]
    extra = ""
    if args.call == "call2":
        whose = "the paper's" if plan["whole"] else "a part of the paper's"
        extra = f"; the DA {plan['da_epochs']} epochs ({whose} {PAPER_EPOCHS})"
    print(f"{args.call}: planned {plan['planned_s']:.0f} s of {plan['budget_s']} s{extra}"
          + ("" if fits else ": OVER BUDGET"))
    return 0 if fits else 1


if __name__ == "__main__":
    sys.exit(main())
