"""The CPU step, minibatch by minibatch, against its floors: fp32, bf16 with the eager update and bf16
with the update in one compiled pass (trainer.compile), measured in ONE run with interleaved repeats.

For each hidden size H and minibatch size n it builds the three steps as a run does
(scheda.training.step.StepChoice.build: one DA of CIFAR's 3072 inputs, masking noise, plain SGD), then
times ``--minibatches`` minibatches of each in turn, ``--repeats`` times, so a busy moment of the
machine falls on all three alike; it prints each step's median, min and max a minibatch and the
ratios of the medians. The floors, no step can beat them:

  products (a precision's): the step's four products (encode x~ W^T, decode h W, dh = dz W^T and the
      rank-2n update [dh; h]^T [x~; dz]) in that precision, each timed alone as the step calls it in
      ~10 ms bursts, the best burst kept;
  bf16 floor: bf16's products plus ONE pass over the fp32 weights, what any mixed-precision step must
      add (read W and the bf16 update, write W and its bf16 copy: 12 bytes a weight) at the memory rate
      measured by copying a buffer of W's size.

A step timed under its floor fails the run (the benchmark, not the machine, would be wrong), and so
does a step that fell back (a compiled update that could not be built would time the eager one
under its name). The compilation's cost is timed in fresh processes: with an empty cache ("cold", the
first run on a machine) and again with that cache ("warm", every later run).

    python scripts/bench_step.py --hidden 500 1000 --batch-sizes 20 128 --threads 1 \\
        --json docs/results/bench_step_cpu_2026-12-07.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from scheda.model.autoencoder import DenoisingAutoencoder
from scheda.model.noise import build_noise
from scheda.model.optim import SGD
from scheda.training.products import bf16_refusal
from scheda.training.steps import StepChoice
from scheda.utils.io import atomic_write_json

D, NU, LR, ROWS = 3072, 0.3, 0.01, 4000
STEPS = {"fp32": StepChoice("fused"), "bf16_eager": StepChoice("fused", precision="bf16"),
         "bf16_one_pass": StepChoice("fused", precision="bf16", compiled=True)}


class BelowFloor(RuntimeError):
    """A step timed faster than a floor it cannot beat."""


def build(choice: StepChoice, H: int, n: int, x: torch.Tensor):
    model = DenoisingAutoencoder(D, H, generator=torch.Generator().manual_seed(0))
    step = choice.build([model], [SGD(model.parameters(), lr=LR)], [build_noise({"name": "masking"})], n, x,
                        [torch.Generator().manual_seed(1)])
    if step.fallback:
        raise RuntimeError(f"{choice.describe()} fell back: {step.fallback}")
    return step


def best_seconds(run, seconds: float = 0.5) -> float:
    """The best time of one call of ``run`` over bursts of about 10 ms for ``seconds``."""
    for _ in range(3):
        run()
    best, end = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < end:
        calls, start = 0, time.perf_counter()
        while True:
            run()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed > 0.01:
                break
        best = min(best, elapsed / calls)
    return best


def product_floor(H: int, n: int, dtype: torch.dtype) -> dict:
    """Each of the four products alone, in ``dtype`` with the step's shapes and out= buffers."""
    g = torch.Generator().manual_seed(2)
    W = torch.rand(1, H, D, generator=g).to(dtype)
    x, h, A = (torch.rand(1, rows, cols, generator=g).to(dtype) for rows, cols in ((n, D), (n, H), (2 * n, H)))
    B = torch.rand(1, 2 * n, D, generator=g).to(dtype)
    out_h, out_d, out_w = torch.empty(1, n, H, dtype=dtype), torch.empty(1, n, D, dtype=dtype), torch.empty_like(W)
    products = {"encode": lambda: torch.bmm(x, W.transpose(1, 2), out=out_h),
                "decode": lambda: torch.bmm(h, W, out=out_d),
                "backward": lambda: torch.bmm(x, W.transpose(1, 2), out=out_h),
                "update": (lambda: W.baddbmm_(A.transpose(1, 2), B)) if dtype == torch.float32 else
                          (lambda: torch.bmm(A.transpose(1, 2), B, out=out_w))}
    each = {name: best_seconds(run) for name, run in products.items()}
    return {"each_ms": {k: 1e3 * v for k, v in each.items()}, "ms": 1e3 * sum(each.values())}


def memory_rate(H: int) -> float:
    """Bytes a second of a copy of an fp32 buffer of W's size (read and write counted)."""
    a, b = torch.rand(H * D), torch.empty(H * D)
    return 2 * 4 * H * D / best_seconds(lambda: b.copy_(a))


def time_steps(H: int, n: int, minibatches: int, repeats: int) -> dict:
    x = torch.rand(ROWS, D, generator=torch.Generator().manual_seed(3))
    steps = {name: build(choice, H, n, x) for name, choice in STEPS.items()}
    gens = {name: torch.Generator().manual_seed(4) for name in steps}
    order = torch.randperm(ROWS, generator=torch.Generator().manual_seed(5))
    idx = [order[(k * n) % (ROWS - n):][:n].unsqueeze(0) for k in range(minibatches)]
    times = {name: [] for name in steps}
    for name, step in steps.items():  # warm-up: every buffer touched, the compiled code loaded
        step.begin_epoch()
        for i in idx[:5]:
            step(x, i, [NU], [gens[name]])
    for _ in range(repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            for i in idx:
                step(x, i, [NU], [gens[name]])
            times[name].append(1e3 * (time.perf_counter() - start) / minibatches)
    return {name: {"median_ms": statistics.median(t), "min_ms": min(t), "max_ms": max(t), "repeats_ms": t}
            for name, t in times.items()}


def compile_seconds(H: int, n: int, cache: Path) -> float:
    """Seconds to build the one-pass step in a fresh process whose compilation cache is ``cache``."""
    code = (f"import time, torch; torch.set_num_threads(1); import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            f"import bench_step as b; x = torch.rand(64, b.D); t = time.perf_counter(); "
            f"b.build(b.STEPS['bf16_one_pass'], {H}, {n}, x); print(time.perf_counter() - t)")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, nargs="+", default=[500, 1000])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[20, 128])
    parser.add_argument("--minibatches", type=int, default=50, help="timed minibatches of each step, each repeat")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1, help="torch's CPU threads")
    parser.add_argument("--no-compile-time", action="store_true", help="skip the cold and warm compilations")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    refusal = bf16_refusal(torch.device("cpu"))
    if refusal:
        parser.exit(1, f"error: {refusal}: no bf16 step to time\n")
    torch.set_num_threads(args.threads)
    out = {"device": platform.processor() or platform.machine(), "torch": torch.__version__, "threads": args.threads,
           "minibatches": args.minibatches, "repeats": args.repeats, "date": time.strftime("%Y-%m-%d %H:%M"),
           "rows": []}
    for H in args.hidden:
        rate = memory_rate(H)
        for n in args.batch_sizes:
            row = {"hidden": H, "batch_size": n, "steps": time_steps(H, n, args.minibatches, args.repeats)}
            fp32, bf16 = product_floor(H, n, torch.float32), product_floor(H, n, torch.bfloat16)
            one_pass_ms = 1e3 * 12 * H * D / rate
            row["floors"] = {"fp32_products": fp32, "bf16_products": bf16, "memory_bytes_per_s": rate,
                             "one_pass_ms": one_pass_ms, "bf16_ms": bf16["ms"] + one_pass_ms}
            med = {name: s["median_ms"] for name, s in row["steps"].items()}
            row["ratios"] = {"bf16_one_pass/fp32": med["bf16_one_pass"] / med["fp32"],
                             "bf16_eager/fp32": med["bf16_eager"] / med["fp32"],
                             "bf16_one_pass/bf16_floor": med["bf16_one_pass"] / row["floors"]["bf16_ms"],
                             "fp32/fp32_products": med["fp32"] / fp32["ms"]}
            out["rows"].append(row)
            print(f"H {H}, minibatch {n}: " + ", ".join(
                f"{name} {s['median_ms']:.3f} ms [{s['min_ms']:.3f}, {s['max_ms']:.3f}]" for name, s in row["steps"].items()))
            print(f"  floors: fp32 products {fp32['ms']:.3f} ms; bf16 products {bf16['ms']:.3f} + one pass over W "
                  f"{one_pass_ms:.3f} ({rate / 1e9:.1f} GB/s) = {row['floors']['bf16_ms']:.3f} ms")
            print("  " + ", ".join(f"{k} {v:.3f}" for k, v in row["ratios"].items()))
            for name, floor in (("fp32", fp32["ms"]), ("bf16_eager", row["floors"]["bf16_ms"]),
                                ("bf16_one_pass", row["floors"]["bf16_ms"])):
                if row["steps"][name]["min_ms"] < floor:
                    raise BelowFloor(f"{name} took {row['steps'][name]['min_ms']:.3f} ms a minibatch at H {H}, "
                                     f"n {n}, under its floor of {floor:.3f} ms: the benchmark is wrong")
            if args.json:
                atomic_write_json(args.json, out)
    if not args.no_compile_time:
        with tempfile.TemporaryDirectory() as cache:
            H, n = args.hidden[0], args.batch_sizes[0]
            cold = compile_seconds(H, n, Path(cache))
            warm = compile_seconds(H, n, Path(cache))
        out["compile_s"] = {"hidden": H, "batch_size": n, "cold": cold, "warm": warm}
        print(f"building the one-pass step (H {H}, n {n}) in a fresh process: {cold:.1f} s with an empty compilation "
              f"cache, {warm:.1f} s with it")
    if args.json:
        atomic_write_json(args.json, out)
    return out


if __name__ == "__main__":
    main()
