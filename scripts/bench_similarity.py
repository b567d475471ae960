"""Table 2's similarity against the hardware, measured in ONE run: the features table's work for one
seed on one split (``R`` references against ``C`` candidate DAs, plus the ``C`` seed-to-seed CKA
ceilings, over ``N`` images at ``H`` units: scheda.analysis.similarity.compare_all, the code the
table runs), beside its floor: the float64 multiply-adds it cannot do without (one ``XᵀY`` per
pair, one ``XᵀX`` per model) over the best float64 product rate this device reaches, measured in
the same run on a product of the same shape. A time under the floor fails the run: the benchmark,
not the hardware, would be wrong.

    python scripts/bench_similarity.py                        # 5 references x 7 DAs, H 500, N 45000 (cpu)
    python scripts/bench_similarity.py --n 45000 --hidden 500 --references 5 --candidates 7 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from scheda.analysis.similarity import compare_all, flops


def activations(n: int, hidden: int, seed: int, device: str) -> torch.Tensor:
    """Sigmoid activations of a random tied-weight encoder on random [0, 1] inputs of 64 dims:
    all positive and correlated across units, as a DA's are (the products do not care)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 64, generator=g)
    return torch.sigmoid(x @ torch.randn(64, hidden, generator=g) * 0.5 - 1.0).to(device)


def product_rate(n: int, hidden: int, device: str, seconds: float = 1.0) -> float:
    """The best float64 ``XᵀY`` rate (FLOP/s) over bursts of the analysis' own shape and chunking."""
    x = torch.rand(min(n, 8192), hidden, dtype=torch.float64, device=device)
    best, end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        _ = x.T @ x
        if device != "cpu":
            torch.cuda.synchronize()
        best = max(best, 2.0 * x.shape[0] * hidden * hidden / (time.perf_counter() - t))
    return best


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=45000, help="images (CIFAR-10's training split: 45000)")
    parser.add_argument("--hidden", type=int, default=500, help="units of every model")
    parser.add_argument("--references", type=int, default=5, help="ScheDA, jump, same start, DA*(0.1), DA*(0.7)")
    parser.add_argument("--candidates", type=int, default=7, help="the DA(nu) of one seed (+1: the partner's start)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--burst-seconds", type=float, default=1.0, help="how long the float64 rate is measured")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    refs = {f"ref{i}": activations(args.n, args.hidden, i, args.device) for i in range(args.references)}
    cands = {f"da{i}": activations(args.n, args.hidden, 100 + i, args.device) for i in range(args.candidates + 1)}
    stars = {f"star{i}": activations(args.n, args.hidden, 200 + i, args.device) for i in range(args.candidates)}
    rate_before = product_rate(args.n, args.hidden, args.device, args.burst_seconds)
    t = time.perf_counter()
    known: dict = {}
    compare_all(refs, cands, known=known)
    ceilings = {(f"da{i}", f"star{i}") for i in range(args.candidates)}  # DA(nu) against DA*(nu)
    compare_all({a: cands[a] for a, _ in ceilings}, stars, known=known, only=ceilings)
    seconds = time.perf_counter() - t
    rate = max(rate_before, product_rate(args.n, args.hidden, args.device, args.burst_seconds))
    h = args.hidden
    work = flops(args.n, [(h, h)] * (len(refs) * len(cands) + len(ceilings)), [h] * (len(refs) + len(cands) + len(stars)))
    floor = work / rate
    pairs = args.references * (args.candidates + 1) + args.candidates
    row = {"device": args.device, "threads": torch.get_num_threads(), "n": args.n, "hidden": args.hidden,
           "references": args.references, "candidates": args.candidates, "pairs": pairs, "seconds": seconds,
           "floor_s": floor, "over_floor": seconds / floor, "gflops_done": work / seconds / 1e9,
           "float64_gflops": rate / 1e9}
    print(f"{args.references} references x {args.candidates} DAs (+ the partner's start) and {args.candidates} "
          f"ceilings, H {args.hidden}, N {args.n} on {args.device} ({row['threads']} threads): {seconds:.1f} s; "
          f"floor {floor:.1f} s (float64 products at {rate / 1e9:.1f} GFLOP/s); {seconds / floor:.2f} x the floor")
    if args.json:
        args.json.write_text(json.dumps(row, indent=1))
    if seconds < floor:
        print("error: faster than its floor: the benchmark is wrong", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
