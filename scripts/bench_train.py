"""Training speed against the hardware: one DA epoch on CIFAR-shaped data, measured in ONE run.

For each hidden size H and minibatch size it prints
  (a) the float32 matrix-product rate sustained on the step's own shapes (the five products
      of n x d x H that one tied-DA step needs), hence the epoch's lower bound 10 N d H / rate;
  (b) scheda's trainer (scheda.trainer.Trainer, the real code path, fused step) and its
      autograd step (trainer.fused=false), timed over a fixed number of minibatches after a
      warm-up and extrapolated to N examples;
  (c) a naive PyTorch loop: per-sample DataLoader, torch.bernoulli masks, sigmoid +
      binary_cross_entropy, autograd;
and the ratios scheda/bound and naive/scheda.

    python scripts/bench_train.py                       # H 1000,2000; batch 128,512; CPU
    python scripts/bench_train.py --device cuda --batches 50 --json bench_train.json
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
from scheda.noise import masking
from scheda.schedule import NoiseSchedule, Stage
from scheda.trainer import Trainer

D, NU, LR = 3072, 0.3, 0.01
N = 45000  # examples per epoch (--n)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def gemm_rate(n, H, device, seconds=1.0) -> float:
    """FLOP/s of the step's five n x d x H products (encoder, decoder, dz W^T, stacked dW)."""
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.rand(n, D, device=device, generator=g)
    W = torch.rand(H, D, device=device, generator=g)
    h = torch.rand(n, H, device=device, generator=g)
    A, B = torch.rand(2 * n, H, device=device, generator=g), torch.rand(2 * n, D, device=device, generator=g)
    out_h, out_d, out_W = torch.empty(n, H, device=device), torch.empty(n, D, device=device), torch.empty_like(W)

    def five():
        torch.mm(x, W.t(), out=out_h)
        torch.mm(h, W, out=out_d)
        torch.mm(x, W.t(), out=out_h)
        torch.mm(A.t(), B, out=out_W)

    for _ in range(3):
        five()
    sync(device)
    reps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        five()
        reps += 1
    sync(device)
    return reps * 10 * n * D * H / (time.perf_counter() - start)


def scheda_epoch(data, n_batches, bs, H, device, fused=True) -> float:
    """Seconds per N-example epoch of the real Trainer, from ``n_batches`` timed minibatches."""
    model = DenoisingAutoencoder(D, H, generator=torch.Generator().manual_seed(0)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x = data[: n_batches * bs]
    trainer = Trainer(model, opt, masking, NoiseSchedule("constant", [Stage(NU, 2)]), x, bs,
                      torch.Generator(device=device).manual_seed(0), fused=fused)
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
    opt = torch.optim.SGD([W, b, b_prime], lr=LR)
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


def main(argv=None) -> int:
    global N
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, nargs="+", default=[1000, 2000])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--batches", type=int, default=None, help="timed minibatches (default: ~8 s of work each)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--n", type=int, default=N, help="examples per epoch (CIFAR-10's training split: 45000)")
    parser.add_argument("--skip-naive", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    N = args.n
    device = torch.device(args.device)
    g = torch.Generator().manual_seed(0)
    data = torch.randint(0, 256, (N, D), dtype=torch.uint8, generator=g).to(device).float().div_(255)
    print(f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}), "
          f"torch {torch.__version__}, threads {torch.get_num_threads()}; N={N}, d={D}, nu={NU}")
    header = (f"{'H':>5} {'batch':>5} {'GFLOP/s':>8} {'bound s':>8} {'scheda s':>9} {'autograd s':>10} "
              f"{'naive s':>8} {'scheda/bound':>12} {'naive/scheda':>12}")
    print(header)
    rows = []
    for H in args.hidden:
        for bs in args.batch_sizes:
            flop = 10 * N * D * H
            rate = gemm_rate(bs, H, device)
            n_batches = args.batches or max(4, int(8 * rate / (10 * bs * D * H)))
            bound = flop / rate
            fused = scheda_epoch(data, n_batches, bs, H, device)
            autograd = scheda_epoch(data, n_batches, bs, H, device, fused=False)
            naive = math.nan if args.skip_naive else naive_epoch(data, n_batches, bs, H, device)
            row = {"hidden": H, "batch_size": bs, "timed_batches": n_batches, "gemm_gflops": rate / 1e9,
                   "bound_s": bound, "scheda_s": fused, "scheda_autograd_s": autograd, "naive_s": naive,
                   "scheda_over_bound": fused / bound, "naive_over_scheda": naive / fused}
            rows.append(row)
            print(f"{H:>5} {bs:>5} {rate / 1e9:>8.1f} {bound:>8.2f} {fused:>9.2f} {autograd:>10.2f} {naive:>8.2f} "
                  f"{fused / bound:>12.2f} {naive / fused:>12.2f}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"device": str(device), "torch": torch.__version__,
                                         "threads": torch.get_num_threads(), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
