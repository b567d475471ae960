"""A stacked layer's epoch against a one-layer DA of the same shape, measured in ONE run, both
through ``scheda.train`` (the real run: plan, data on the device, the plan's step). Layer 1 (D -> H1)
trains first; then, alternately, layer 2 stacked on it (``stack_on``: H1 -> H2 on layer 1's codes,
encoded once before its first epoch) and a plain DA on those same codes handed as arrays (H1 -> H2).
Both train the same step on a tensor of the same shape, so the ratio's floor is 1: a ratio well under
it (``--floor``) fails the run, the benchmark (not the stack) would be wrong. The one-off encoding
of the data through the stack is timed beside it.

    python scripts/bench_stack.py                          # CPU, N 10000, 3072 -> 500 -> 500, b20
    python scripts/bench_stack.py --n 45000 --json docs/results/bench_stack_cpu.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import scheda


def epoch_seconds(run: "scheda.Run") -> float:
    """The median epoch of a run (its first, which warms the step up, left out where there are more)."""
    secs = [h["seconds"] for h in run.results["history"]]
    return statistics.median(secs[1:] if len(secs) > 1 else secs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10000, help="training rows")
    parser.add_argument("--inputs", type=int, default=3072, help="layer 1's inputs (CIFAR-10: 3072)")
    parser.add_argument("--hidden", type=int, nargs=2, default=[500, 500], metavar=("H1", "H2"))
    parser.add_argument("--batch-size", type=int, default=20)
    parser.add_argument("--epochs", type=int, default=4, help="epochs of each timed run")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs of each, alternating")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="trainer.num_threads (null: torch's default)")
    parser.add_argument("--floor", type=float, default=0.9, help="fail below this ratio (1: the same work)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    h1, h2 = args.hidden
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(args.n, args.inputs), dtype=np.uint8)
    common = ["logger=none", "evaluate.enabled=false", "trainer.progress_bar=false", f"trainer.device={args.device}",
              f"trainer.batch_size={args.batch_size}", "schedule=constant", "schedule.nu=0.3", "dataset.val_size=1"]
    if args.threads:
        common.append(f"trainer.num_threads={args.threads}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        layer1 = scheda.train([*common, f"model.hidden={h1}", "schedule.epochs=1"], data=(x,), output_dir=tmp / "l1")
        started = time.perf_counter()
        codes = layer1.encode(x)  # what the stacked layer trains on, as the plain DA gets it
        encode_s = time.perf_counter() - started
        timed = {"stacked": [], "plain": []}
        for k in range(args.repeats):
            for kind in ("stacked", "plain"):
                second = [*common, f"model.hidden={h2}", f"schedule.epochs={args.epochs}"]
                if kind == "stacked":
                    run = scheda.train([*second, f"stack_on={tmp / 'l1'}"], data=(x,), output_dir=tmp / f"s{k}")
                else:
                    run = scheda.train(second, data=(codes,), output_dir=tmp / f"p{k}")
                timed[kind].append(epoch_seconds(run))
    stacked, plain = min(timed["stacked"]), min(timed["plain"])
    row = {"n": args.n, "inputs": args.inputs, "hidden": [h1, h2], "batch_size": args.batch_size,
           "device": args.device, "epochs": args.epochs, "repeats": args.repeats,
           "stacked_epoch_s": stacked, "plain_epoch_s": plain, "ratio": stacked / plain,
           "encode_once_s": encode_s, "timed": timed, "floor": args.floor}
    print(f"layer 2 stacked on layer 1 ({args.inputs} -> {h1} -> {h2}, N {args.n}, b{args.batch_size}, "
          f"{args.device}): {stacked:.3f} s an epoch; a one-layer DA {h1} -> {h2} on the same codes "
          f"{plain:.3f} s: {row['ratio']:.3f}x (goal <= 1.1; floor {args.floor:g}); the stack's encoding, "
          f"once: {encode_s:.2f} s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(row, indent=2) + "\n")
    if row["ratio"] < args.floor:
        print(f"error: the stacked layer measured {row['ratio']:.3f}x a one-layer DA doing the same work, under "
              f"the floor {args.floor:g}: the benchmark measures different work", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
