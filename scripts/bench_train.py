"""Training speed against the hardware: one DA epoch on CIFAR-shaped data, measured in ONE run.

For each hidden size H and minibatch size it prints
  (a) the floor: the larger of the epoch's FLOPs (10 N d H) over the best float32 matrix-product
      rate among the step's own shapes (each timed on its own in 10 ms bursts, before and after
      every timing below, the best burst kept), and its bytes (about five passes over W per
      minibatch: three products read it, the update reads and writes it) over the measured
      memory bandwidth of a copy of W's own size (a small W stays in cache, and its passes run
      at the cache's rate, not memory's);
  (b) scheda's trainer (scheda.trainer.Trainer, the real code path): the fused step (eager), the
      same step captured in a CUDA graph (CUDA only), and the autograd step (trainer.fused=false),
      timed over a fixed number of minibatches (at most one epoch's) after a warm-up and
      extrapolated to N examples;
  (c) a naive PyTorch loop: per-sample DataLoader, torch.bernoulli masks, sigmoid +
      binary_cross_entropy, autograd;
and the ratios eager/floor, eager/graphed and naive/best. ``--grid K`` also times a fused sweep
of K models (the paper's 8 noise levels) against one model, and ``--lr-search N F`` the
torch_lr C search (the evaluation's default grid) on N x F features.

    python scripts/bench_train.py                       # H 1000,2000; batch 128,512; CPU
    python scripts/bench_train.py --device cuda --hidden 1000 2000 5000 --batch-sizes 20 128 \\
        --grid 8 --lr-search 45000 5000 --json bench_train.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F


from scheda.model import DenoisingAutoencoder
from scheda.noise import Masking, masking
from scheda.optim import SGD
from scheda.schedule import NoiseSchedule, Stage
from scheda.step import BatchedStep, GraphedStep, StepBuilder
from scheda.trainer import Trainer

D, NU, LR = 3072, 0.3, 0.01
N = 45000  # examples per epoch (--n)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def best_rate(run, work: float, device, seconds: float) -> float:
    """The best rate (``work`` per second) of ``run`` over bursts of about 10 ms, for ``seconds``.
    A burst is as short as the shortest timing below, so a quiet moment of a busy machine that
    speeds a timing up speeds some burst up too; a rate averaged over all ``seconds`` would
    not, and a timing could then beat the floor."""
    for _ in range(3):
        run()
    sync(device)
    best, end = 0.0, time.perf_counter() + seconds
    while not best or time.perf_counter() < end:
        reps, start = 0, time.perf_counter()
        while time.perf_counter() - start < 0.01 or reps < 3:
            run()
            reps += 1
        sync(device)
        best = max(best, reps * work / (time.perf_counter() - start))
    return best


def gemm_rate(n, H, device, seconds=0.5) -> float:
    """The best FLOP/s among the step's product shapes (encoder x W^T: n x d x H; decoder h W:
    n x H x d; the stacked weight gradient A^T B: H x 2n x d), each timed for ``seconds``: the
    fastest any of them runs, so no epoch of these products can beat FLOPs / this rate."""
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.rand(n, D, device=device, generator=g)
    W = torch.rand(H, D, device=device, generator=g)
    h = torch.rand(n, H, device=device, generator=g)
    A, B = torch.rand(2 * n, H, device=device, generator=g), torch.rand(2 * n, D, device=device, generator=g)
    out_h, out_d, out_W = torch.empty(n, H, device=device), torch.empty(n, D, device=device), torch.empty_like(W)
    products = [(lambda: torch.mm(x, W.t(), out=out_h), 2 * n * D * H),
                (lambda: torch.mm(h, W, out=out_d), 2 * n * D * H),
                (lambda: torch.mm(A.t(), B, out=out_W), 2 * 2 * n * D * H)]
    return max(best_rate(product, flops, device, seconds) for product, flops in products)


def bandwidth(device, numel=None, seconds=0.5) -> float:
    """Bytes/s of a device-to-device copy (read + write) of ``numel`` floats (default: large,
    memory's rate); the floor uses W's size, the working set its passes stream through."""
    a = torch.empty(numel or (64 << 20 if device.type == "cuda" else 16 << 20), device=device)
    b = torch.empty_like(a)
    return best_rate(lambda: b.copy_(a), 2 * a.numel() * 4, device, seconds)


def timed_batches(wanted: int, bs: int) -> int:
    """At most one epoch's minibatches: the data hold no more (timing more than ran would
    divide one epoch's time by too many minibatches and beat the floor)."""
    return max(1, min(wanted, math.ceil(N / bs)))


def scheda_epoch(data, n_batches, bs, H, device, fused=True, cuda_graph=False) -> float:
    """Seconds per N-example epoch of the real Trainer, from ``n_batches`` timed minibatches."""
    model = DenoisingAutoencoder(D, H, generator=torch.Generator().manual_seed(0)).to(device)
    opt = SGD(model.parameters(), lr=LR)
    x = data[: n_batches * bs]
    n_batches = math.ceil(x.shape[0] / bs)
    trainer = Trainer(model, opt, masking, NoiseSchedule("constant", [Stage(NU, 2)]), x, bs,
                      torch.Generator(device=device).manual_seed(0), step=StepBuilder(fused=fused, cuda_graph=cuda_graph))
    trainer.train_epoch()  # warm-up: allocation, kernels, caches
    sync(device)
    start = time.perf_counter()
    trainer.train_epoch()
    sync(device)
    return (time.perf_counter() - start) / n_batches * math.ceil(N / bs)


def naive_epoch(data, n_batches, bs, H, device) -> float:
    """What a first PyTorch implementation looks like; timed like scheda_epoch."""
    W = torch.nn.Parameter(DenoisingAutoencoder(D, H, generator=torch.Generator().manual_seed(0)).W.detach().to(device))
    b = torch.nn.Parameter(torch.zeros(H, device=device))
    b_prime = torch.nn.Parameter(torch.zeros(D, device=device))
    opt = SGD([W, b, b_prime], lr=LR)
    dataset = torch.utils.data.TensorDataset(data[: (n_batches + 2) * bs].cpu())
    loader = torch.utils.data.DataLoader(dataset, batch_size=bs, shuffle=True)
    times = []
    start = time.perf_counter()
    for i, (x,) in enumerate(loader):
        x = x.to(device)
        x_tilde = x * torch.bernoulli(torch.full_like(x, 1 - NU))
        z = torch.sigmoid(F.linear(torch.sigmoid(F.linear(x_tilde, W, b)), W.t(), b_prime))
        loss = F.binary_cross_entropy(z, x, reduction="sum") / x.shape[0]
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()
        sync(device)
        now = time.perf_counter()
        if i >= 2:  # after warm-up; includes the loader's per-sample collation of the batch
            times.append(now - start)
        start = now
    return sum(times) / len(times) * math.ceil(N / bs)


def grid_epoch(data, n_batches, bs, H, device, K, graphed) -> float:
    """Seconds per N-example epoch of a fused sweep of K models (one batched step for all)."""
    models = [DenoisingAutoencoder(D, H, generator=torch.Generator().manual_seed(k)).to(device) for k in range(K)]
    opts = [SGD(m.parameters(), lr=LR) for m in models]
    gens = [torch.Generator(device=device).manual_seed(k) for k in range(K)]
    step = BatchedStep(models, opts, [Masking() for _ in range(K)], bs, device)
    x = data[: n_batches * bs]
    n_batches = math.ceil(x.shape[0] / bs)
    if graphed:
        step = GraphedStep(step, x, gens)
    idx = torch.stack([torch.randperm(x.shape[0], device=device, generator=g)[:bs] for g in gens])

    def epoch():
        for _ in range(n_batches):
            step(x, idx, [NU] * K, gens)

    epoch()
    sync(device)
    start = time.perf_counter()
    epoch()
    sync(device)
    return (time.perf_counter() - start) / n_batches * math.ceil(N / bs)


def lr_search_seconds(n, features, device) -> float:
    """The torch_lr C search of the default evaluation (C = 2^-10 .. 2^6, warm starts) on n x
    ``features`` sigmoid features of 10 balanced classes."""
    from scheda.classifiers import TorchLRConfig
    from scheda.evaluate import evaluate_features

    g = torch.Generator(device=device).manual_seed(0)
    splits = {"train": n, "val": max(10, n // 9), "test": max(10, n // 4.5)}
    feats, labels = {}, {}
    for name, rows in splits.items():
        y = torch.arange(int(rows), device=device) % 10
        centres = torch.randn(10, features, device=device, generator=g)
        feats[name] = torch.sigmoid(centres[y] + 2 * torch.randn(int(rows), features, device=device, generator=g))
        labels[name] = y.cpu().numpy()
    sync(device)
    start = time.perf_counter()
    evaluate_features(feats, labels, TorchLRConfig(), device)
    sync(device)
    return time.perf_counter() - start


def main(argv=None) -> int:
    global N
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, nargs="+", default=[1000, 2000])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--batches", type=int, default=None, help="timed minibatches (default: ~8 s of work each)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--n", type=int, default=N, help="examples per epoch (CIFAR-10's training split: 45000)")
    parser.add_argument("--skip-naive", action="store_true")
    parser.add_argument("--grid", type=int, default=0, help="also a fused sweep of this many models vs one")
    parser.add_argument("--lr-search", type=int, nargs=2, default=None, metavar=("N", "F"),
                        help="also time torch_lr's C search on N x F features")
    parser.add_argument("--rate-seconds", type=float, default=0.5,
                        help="how long each matmul rate and copy bandwidth is timed (the floor's inputs)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    N = args.n
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    g = torch.Generator().manual_seed(0)
    data = torch.randint(0, 256, (N, D), dtype=torch.uint8, generator=g).to(device).float().div_(255)
    name = torch.cuda.get_device_name(device) if cuda else "CPU"
    rate_s = args.rate_seconds
    bytes_per_s = bandwidth(device, seconds=rate_s)
    print(f"device {device} ({name}), torch {torch.__version__}, threads {torch.get_num_threads()}; "
          f"N={N}, d={D}, nu={NU}; copy bandwidth {bytes_per_s / 1e9:.1f} GB/s")
    print(f"{'H':>5} {'batch':>5} {'GFLOP/s':>8} {'floor s':>8} {'eager s':>8} {'graphed s':>9} {'autograd s':>10} "
          f"{'naive s':>8} {'eager/floor':>11} {'graphed/floor':>13} {'eager/graphed':>13} {'naive/best':>10}")
    rows = []
    for H in args.hidden:
        for bs in args.batch_sizes:
            # The matmul rate is measured around every timing and the best kept: a busy machine
            # only slows a measurement down, so the floor stays a floor when the load changes.
            def peak():
                return gemm_rate(bs, H, device, rate_s), bandwidth(device, H * D, rate_s)

            peaks = [peak()]
            n_batches = timed_batches(args.batches or max(4, int(8 * peaks[0][0] / (10 * bs * D * H))), bs)
            eager = scheda_epoch(data, n_batches, bs, H, device)
            peaks.append(peak())
            graphed = scheda_epoch(data, n_batches, bs, H, device, cuda_graph=True) if cuda else math.nan
            autograd = scheda_epoch(data, n_batches, bs, H, device, fused=False)
            peaks.append(peak())
            naive = math.nan if args.skip_naive else naive_epoch(data, n_batches, bs, H, device)
            peaks.append(peak())
            rate, bw, steps = max(p[0] for p in peaks), max(p[1] for p in peaks), math.ceil(N / bs)
            floor = max(10 * N * D * H / rate, steps * 5 * 4 * H * D / bw)
            best = eager if math.isnan(graphed) else min(eager, graphed)
            row = {"hidden": H, "batch_size": bs, "timed_batches": n_batches, "gemm_gflops": rate / 1e9,
                   "bandwidth_gbs": bw / 1e9, "floor_s": floor, "eager_s": eager, "graphed_s": graphed,
                   "autograd_s": autograd, "naive_s": naive, "eager_over_floor": eager / floor,
                   "graphed_over_floor": graphed / floor, "eager_over_graphed": eager / graphed,
                   "naive_over_best": naive / best}
            rows.append(row)
            print(f"{H:>5} {bs:>5} {rate / 1e9:>8.1f} {floor:>8.2f} {eager:>8.2f} {graphed:>9.2f} {autograd:>10.2f} "
                  f"{naive:>8.2f} {eager / floor:>11.2f} {graphed / floor:>13.2f} {eager / graphed:>13.2f} "
                  f"{naive / best:>10.2f}", flush=True)
    report = {"device": str(device), "device_name": name, "torch": torch.__version__,
              "threads": torch.get_num_threads(), "n": N, "rows": rows}
    if args.grid:
        H, bs = args.hidden[0], args.batch_sizes[0]
        n_batches = timed_batches(args.batches or 50, bs)
        one, many = (grid_epoch(data, n_batches, bs, H, device, k, cuda) for k in (1, args.grid))
        report["grid"] = {"hidden": H, "batch_size": bs, "models": args.grid, "one_s": one, "grid_s": many,
                          "grid_over_one": many / one}
        print(f"fused sweep, H {H}, batch {bs}: one model {one:.2f} s/epoch, {args.grid} models {many:.2f} s/epoch "
              f"({many / one:.2f}x one model's time for {args.grid}x the models)")
    if args.lr_search:
        seconds = lr_search_seconds(*args.lr_search, device)
        report["lr_search"] = {"n": args.lr_search[0], "features": args.lr_search[1], "seconds": seconds}
        print(f"torch_lr C search (17 C, warm starts) on {args.lr_search[0]} x {args.lr_search[1]} features: "
              f"{seconds:.1f} s")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
