"""Training speed against the hardware: one DA epoch on CIFAR-shaped data, measured in ONE run.

For each precision, hidden size H and minibatch size it prints the floors, each a time no
epoch can beat, and every timing's ratio to the largest:
  (a) the product floor: each of the step's four products (encode x~ W^T + b, decode h W + b',
      dh = dz W^T, the update W += [dh; h]^T [x~; dz]), called as the step calls them, at its own
      rate, each timed on its own in 10 ms bursts, before and after the timings, the best burst
      kept; the floor sums each product's FLOPs over its own rate. The shape floor charges all
      10 N d H FLOPs at the best of those rates (never above the product floor; kept for older
      rows). Each product's rate is printed, so a slow one shows;
  (b) the peak floor: the same FLOPs over the device's peak dense rate for the precision in
      use, from a large square product (fp32 and tf32 apart; TF32 is CUDA's);
  (c) the byte floor: about five passes over W per minibatch (three products read it, the
      update reads and writes it) over the measured bandwidth of a copy of W's own size;
  (d) the launch floor (CUDA): the kernels one minibatch of the Triton step launches (counted
      by the profiler) times the measured cost of one kernel node in a CUDA graph;
  (e) the occupancy floor of the two-pass step, for a named card (``--card``, on any device): each
      kernel's FLOPs as its tiles pad them over the FP32 FMA rate of the SMs its grid can occupy
      (scheda.training.kernels.two_pass_launches), so a grid that cannot reach a goal shows on a CPU;
and scheda's trainer (scheda.training.trainer.ModelState, the real code path) with each step: the torch
step eager and graphed, the Triton step graphed (CUDA's default), autograd
(trainer.step=autograd), and a naive PyTorch loop (per-sample DataLoader, torch.bernoulli,
autograd), each timed over a fixed number of minibatches (at most one epoch's) after a warm-up
and extrapolated to N examples. ``--grid M`` also times a fused sweep of M models (the paper's
8 noise levels) with the device's default step in every row; ``--lr-search N F`` the torch_lr
C search on N x F features; ``--finetune`` an epoch of fine-tuning (one learning rate with autograd, and the
paper's five fused in one step). A timing under the largest
floor is reported and fails the run: the benchmark, not the hardware, would be wrong. A step that
falls back (a Triton step that cannot compile trains with the torch step) fails its row in one
line: its time would be another step's under its name. The JSON is written after every row, so a
crash keeps what was measured; on CUDA each row also has the per-kernel times of the Triton and
two-pass steps from the profiler.

    python scripts/bench_train.py                       # H 1000,2000; batch 128,512; CPU
    python scripts/bench_train.py --device cuda --hidden 1000 2000 5000 --batch-sizes 20 128 \\
        --precisions fp32 tf32 --grid 8 --lr-search 45000 5000 --finetune --json bench_train.json
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


from scheda.model.autoencoder import DenoisingAutoencoder
from scheda.model.network import CompositeDA
from scheda.model.optim import SGD
from scheda.model.schedule import NoiseSchedule, Stage
from scheda.model.noise import build_noise
from scheda.training.steps import StepChoice
from scheda.training.trainer import Trainer, ModelState

D, NU, LR = 3072, 0.3, 0.01
# Cards the occupancy floor knows: SMs, FP32 FMA lanes a SM, boost clock (NVIDIA's data sheets).
CARDS = {"H100": (132, 128, 1.98e9), "H200": (132, 128, 1.98e9), "A100": (108, 64, 1.41e9)}
FINETUNE_RATES = 5  # the paper's fine-tuning grid
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


PRODUCTS = ("encode", "decode", "dh", "update")  # the step's four products, in its order


def product_flops(n, H, M=1) -> dict[str, int]:
    """Each product's FLOPs a minibatch of n for M models: three of n x d x H, the rank-2n update twice that."""
    one = 2 * M * n * D * H
    return {"encode": one, "decode": one, "dh": one, "update": 2 * one}


def product_rates(n, H, device, seconds=0.5, M=1, precision="fp32") -> dict[str, float]:
    """Each of the step's products for M models at its best FLOP/s, called as the steps call it
    (batched products over W [M, H, d] and its transpose view; the biases added by baddbmm in
    scheda.training.step.BatchedStep, by a kernel after bmm in TritonStep: the faster form
    counts; the update in place), each timed for ``seconds``: no epoch of these steps can run a
    product faster than its rate here. ``precision="bf16"``: the products as
    scheda.training.products.Bf16Products calls them (bf16 operands and outputs, the biases and
    the update's addition to the fp32 weights outside the product)."""
    if precision == "bf16":
        return bf16_product_rates(n, H, device, seconds, M)
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.rand(M, n, D, device=device, generator=g)
    W = torch.rand(M, H, D, device=device, generator=g)
    h, dz = torch.rand(M, n, H, device=device, generator=g), torch.rand(M, n, D, device=device, generator=g)
    b, b_prime = torch.rand(M, 1, H, device=device, generator=g), torch.rand(M, 1, D, device=device, generator=g)
    A, B = torch.rand(M, 2 * n, H, device=device, generator=g), torch.rand(M, 2 * n, D, device=device, generator=g)
    out_h, out_d = torch.empty(M, n, H, device=device), torch.empty(M, n, D, device=device)
    calls = {"encode": [lambda: torch.baddbmm(b, x, W.transpose(1, 2), out=out_h),
                        lambda: torch.bmm(x, W.transpose(1, 2), out=out_h)],  # the Triton step adds b in a kernel
             "decode": [lambda: torch.baddbmm(b_prime, h, W, out=out_d), lambda: torch.bmm(h, W, out=out_d)],
             "dh": [lambda: torch.bmm(dz, W.transpose(1, 2), out=out_h)],
             "update": [lambda: W.baddbmm_(A.transpose(1, 2), B, alpha=1e-30)]}
    flops = product_flops(n, H, M)
    return {name: max(best_rate(call, flops[name], device, seconds) for call in forms) for name, forms in calls.items()}


def bf16_product_rates(n, H, device, seconds=0.5, M=1) -> dict[str, float]:
    g = torch.Generator(device=device).manual_seed(0)

    def rand(*shape):
        return torch.rand(*shape, device=device, generator=g).bfloat16()

    x, W, h, dz = rand(M, n, D), rand(M, H, D), rand(M, n, H), rand(M, n, D)
    A, B = rand(M, 2 * n, H), rand(M, 2 * n, D)
    out_h, out_d, out_w = rand(M, n, H), rand(M, n, D), rand(M, H, D)
    calls = {"encode": lambda: torch.bmm(x, W.transpose(1, 2), out=out_h),
             "decode": lambda: torch.bmm(h, W, out=out_d),
             "dh": lambda: torch.bmm(dz, W.transpose(1, 2), out=out_h),
             "update": lambda: torch.bmm(A.transpose(1, 2), B, out=out_w)}
    flops = product_flops(n, H, M)
    return {name: best_rate(call, flops[name], device, seconds) for name, call in calls.items()}


# Bytes a weight each minibatch at the least: fp32, three products read W and the update reads and
# writes it (5 x 4); bf16, three products read its bf16 copy and the update reads and writes the
# fp32 weights (3 x 2 + 2 x 4; the copy's own write and the widened update left out: a floor).
WEIGHT_BYTES = {"fp32": 20, "tf32": 20, "bf16": 14}


def best_rates(measured: list[dict[str, float]]) -> dict[str, float]:
    """Each product's best rate over several measurements (a busy moment only slows one down)."""
    return {name: max(m[name] for m in measured) for name in PRODUCTS}


def product_floor(rates: dict[str, float], n, H, minibatches, M=1) -> float:
    """Seconds of an epoch's products, each at its own rate."""
    return minibatches * sum(f / rates[name] for name, f in product_flops(n, H, M).items())


def bandwidth(device, numel=None, seconds=0.5) -> float:
    """Bytes/s of a device-to-device copy (read + write) of ``numel`` floats (default: large,
    memory's rate); the floor uses W's size, the working set its passes stream through."""
    a = torch.empty(numel or (64 << 20 if device.type == "cuda" else 16 << 20), device=device)
    b = torch.empty_like(a)
    return best_rate(lambda: b.copy_(a), 2 * a.numel() * 4, device, seconds)


def peak_rate(device, seconds=0.5, precision="fp32") -> float:
    """FLOP/s of a large square product at the precision set now (torch.backends.cuda.matmul
    .allow_tf32; bf16 operands for bf16): the device's dense peak as torch reaches it, which no
    epoch's products beat."""
    size = 8192 if device.type == "cuda" else 1536
    g = torch.Generator(device=device).manual_seed(0)
    a, b = (torch.rand(size, size, device=device, generator=g).to(torch.bfloat16 if precision == "bf16" else torch.float32)
            for _ in range(2))
    out = torch.empty_like(a)
    return best_rate(lambda: torch.mm(a, b, out=out), 2 * size ** 3, device, seconds)


def node_seconds(device, nodes=400) -> float:
    """The cost of one kernel node in a CUDA graph: a graph of ``nodes`` one-element kernels,
    replayed, its best time per node (what a graphed step pays per kernel, arithmetic aside)."""
    t = torch.zeros(1, device=device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        t.add_(1)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(nodes):
            t.add_(1)
    return 1 / best_rate(graph.replay, nodes, device, 0.3)


def kernels_per_minibatch(M, H, bs, device) -> int | None:
    """Kernels one minibatch of the Triton step launches for M models, counted by the profiler
    (None where it cannot count)."""
    from torch.profiler import ProfilerActivity, profile

    data = torch.rand(bs, D, device=device)
    step = _triton_step(M, H, bs, data, graphed=False)
    idx = torch.arange(bs, device=device).repeat(M, 1)
    step(data, idx, [NU] * M, step.generators)  # compiled and warm before counting
    sync(device)
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step(data, idx, [NU] * M, step.generators)
            sync(device)
    except Exception:  # no CUPTI: the floor is then left out, not guessed
        return None
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA) or None


def _triton_step(M, H, bs, data, graphed):
    from scheda.training.step import TritonStep

    models = [DenoisingAutoencoder(D, H, generator=torch.Generator().manual_seed(k)).to(data.device) for k in range(M)]
    gens = [torch.Generator(device=data.device).manual_seed(k) for k in range(M)]
    return TritonStep(models, [SGD(m.parameters(), lr=LR) for m in models], [build_noise({"name": "masking"}) for _ in range(M)], bs,
                      data, gens, graphed)


class Fallback(RuntimeError):
    """The step built is not the step asked for: its time would be another step's."""


def occupancy_floor(M: int, H: int, bs: int, minibatches: int, card: str) -> tuple[float, list[dict]]:
    """Seconds an epoch of the two-pass step takes at least on ``card``: each kernel's padded FLOPs
    over the FP32 FMA rate of the SMs its grid can occupy (at most one SM a program); and the
    launches it read (scheda.training.kernels.two_pass_launches)."""
    from scheda.training.kernels import two_pass_launches

    sms, lanes, clock = CARDS[card]
    launches = two_pass_launches(M, H, D, bs)
    per_sm = 2 * lanes * clock
    seconds = sum(k["flops"] / (min(k["programs"], sms) * per_sm) for k in launches)
    return minibatches * seconds, launches


def kernel_times(M: int, H: int, bs: int, data, device, kind: str) -> dict[str, float] | None:
    """Microseconds a minibatch in each kernel of the ``kind`` step (eager, M models), from the
    profiler: CUDA only (None elsewhere, or without CUPTI)."""
    if device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    models = [DenoisingAutoencoder(D, H, generator=torch.Generator().manual_seed(k)).to(device) for k in range(M)]
    gens = [torch.Generator(device=device).manual_seed(k) for k in range(M)]
    step = StepChoice(kind).build(models, [SGD(m.parameters(), lr=LR) for m in models],
                                  [build_noise({"name": "masking"}) for _ in range(M)], bs, data, gens)
    if step.fallback:
        raise Fallback(step.fallback)
    idx = torch.arange(4 * bs, device=device).repeat(M, 1)
    step(data, idx, [NU] * M, gens)
    sync(device)
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step(data, idx, [NU] * M, gens)
            sync(device)
    except Exception:  # noqa: BLE001 - no CUPTI: left out, not guessed
        return None
    out: dict[str, float] = {}
    for e in prof.key_averages():
        if e.device_type == torch.autograd.DeviceType.CUDA and e.self_device_time_total > 0:
            out[e.key[:60]] = out.get(e.key[:60], 0.0) + e.self_device_time_total / 4  # per minibatch, us
    return out


def write_json(path: Path | None, report: dict) -> None:
    """The report so far, atomically (a temporary file, then a rename): a crash keeps every row."""
    if path is None:
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=2))
    tmp.replace(path)


def timed_batches(wanted: int, bs: int) -> int:
    """At most one epoch's minibatches: the data hold no more (timing more than ran would
    divide one epoch's time by too many minibatches and beat the floor)."""
    return max(1, min(wanted, math.ceil(N / bs)))


def scheda_epoch(data, n_batches, bs, H, device, models=1, composite=False, **step) -> float:
    """Seconds per N-example epoch of the real training loop (a Trainer of ``models`` trainers,
    one model each: a fused sweep when more than one), from ``n_batches`` timed minibatches,
    with the step ``step`` names (scheda.training.step.StepChoice's fields); ``composite``: the
    Section 5 composite DA (two groups at nu 0.2 and 0.4, updated jointly) instead of a DA."""
    x = data[: n_batches * bs]
    n_batches = math.ceil(x.shape[0] / bs)
    trainers = []
    for k in range(models):
        generator = torch.Generator().manual_seed(k)
        model = (CompositeDA(D, H, [0.2, 0.4], "joint", generator=generator) if composite
                 else DenoisingAutoencoder(D, H, generator=generator)).to(device)
        trainers.append(ModelState(model, SGD(model.parameters(), lr=LR), build_noise({"name": "masking"}),
                                NoiseSchedule("constant", [Stage(NU, 2)]), x, bs,
                                torch.Generator(device=device).manual_seed(k), step=StepChoice(**step)))
    loop = Trainer(trainers)
    loop.step_for(trainers)  # built now: a fallback fails the row before it is timed
    if trainers[0].ran["fallback"]:
        raise Fallback(trainers[0].ran["fallback"])

    def epoch():
        for t, e in zip(trainers, loop.run_minibatches(trainers)):
            t.end_epoch(e)

    epoch()  # warm-up: allocation, kernels, caches, the graph's capture
    sync(device)
    start = time.perf_counter()
    epoch()
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


def finetune_epoch(data, n_batches, bs, H, device, rates=1) -> float:
    """Seconds per N-example epoch of fine-tuning: one learning rate with autograd
    (``finetune.fused=false``), or ``rates`` of them fused (scheda.training.finetune.FusedFinetune, the
    default; graphed on CUDA)."""
    from scheda.model.network import FinetuneNet
    from scheda.training.finetune import FusedFinetune

    nets = [FinetuneNet(DenoisingAutoencoder(D, H, generator=torch.Generator().manual_seed(0)).to(device), 10)
            for _ in range(rates)]
    x = data[: n_batches * bs]
    y = torch.arange(x.shape[0], device=device) % 10
    gens = [torch.Generator(device=device).manual_seed(k) for k in range(rates)]
    if rates > 1:
        step = FusedFinetune(nets, [0.001 * 2 ** -k for k in range(rates)], x, y, bs, graphed=device.type == "cuda")
        if step.fallback:
            raise Fallback(f"fine-tuning: {step.fallback}")
    else:
        opt = SGD(nets[0].parameters(), lr=0.001)

    def epoch():
        perms = [torch.randperm(x.shape[0], generator=g, device=device) for g in gens]
        for first in range(0, x.shape[0], bs):
            if rates > 1:
                step(torch.stack([p[first:first + bs] for p in perms]))
                continue
            idx = perms[0][first:first + bs]
            loss = F.cross_entropy(nets[0](x.index_select(0, idx)), y.index_select(0, idx))
            opt.zero_grad(set_to_none=False)
            loss.backward()
            opt.step()

    epoch()
    sync(device)
    start = time.perf_counter()
    epoch()
    sync(device)
    return (time.perf_counter() - start) / math.ceil(x.shape[0] / bs) * math.ceil(N / bs)


def lr_search_seconds(n, features, device) -> float:
    """The torch_lr C search of the default evaluation (C = 2^-10 .. 2^6, warm starts) on n x
    ``features`` sigmoid features of 10 balanced classes."""
    from scheda.evaluation.classifiers import TorchLRConfig
    from scheda.evaluation.evaluate import evaluate_features

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


def lr_search_of_run(run: str, device, data_root: str | None = None) -> dict:
    """One evaluation as a trained run's jobs pay it: its model encodes the train, validation and
    test splits of its own data set, then the default torch_lr C search (C = 2^-10 .. 2^6, warm
    starts) on those features. A DA's features are correlated, and the search on them takes about
    three times as long as on random ones (``lr_search_seconds``; 500 features, a 2-core EPYC)."""
    from scheda.data import load_dataset
    from scheda.evaluation.classifiers import TorchLRConfig
    from scheda.evaluation.evaluate import encode_splits, evaluate_features, labels_of
    from scheda.training.checkpoint import load_run_model

    cfg, model, state = load_run_model(run, device)
    if data_root:
        cfg.dataset.root = data_root
    data = load_dataset(cfg.dataset)
    sync(device)
    start = time.perf_counter()
    features = encode_splits(model, data, device, 8192)
    sync(device)
    encoded = time.perf_counter() - start
    evaluate_features(features, labels_of(data), TorchLRConfig(), device)
    sync(device)
    seconds = time.perf_counter() - start
    return {"n": int(features["train"].shape[0]), "features": int(features["train"].shape[1]), "seconds": seconds,
            "encode_seconds": encoded, "run": str(state["path"])}


def job_costs(data, bs, H, device, step, tries: int = 3) -> dict[str, float]:
    """What every job pays beyond its epochs (the protocol's estimate counts them), each the best
    of ``tries``: a process that imports scheda's training and initialises the device; the training
    split's load from a .npy file to the device as float32 (a data module's work); the build of the
    step (a CUDA graph's capture; triton's compilation is cached on disk after the first)."""
    import subprocess
    import tempfile

    import numpy as np

    code = (f"import torch, scheda.run; torch.zeros(1, device={str(device)!r}).sum().item()")
    starts = []
    for _ in range(tries):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        starts.append(time.perf_counter() - t)
    loads = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train_x.npy"
        np.save(path, (data.cpu() * 255).to(torch.uint8).numpy())
        for _ in range(tries):
            t = time.perf_counter()
            torch.from_numpy(np.load(path)).to(device).float().div_(255)
            sync(device)
            loads.append(time.perf_counter() - t)
    builds = []
    for _ in range(tries):
        model = DenoisingAutoencoder(D, H, generator=torch.Generator().manual_seed(0)).to(device)
        trainer = ModelState(model, SGD(model.parameters(), lr=LR), build_noise({"name": "masking"}), NoiseSchedule("constant", [Stage(NU, 1)]),
                          data, bs, torch.Generator(device=device).manual_seed(0), step=StepChoice(**step))
        t = time.perf_counter()
        Trainer([trainer]).step_for([trainer])
        sync(device)
        builds.append(time.perf_counter() - t)
    return {"job_start_s": min(starts), "data_load_s": min(loads), "build_s": min(builds)}


def steps_of(precision: str, steps: dict[str, dict], default: str) -> tuple[str, dict[str, dict]]:
    """The default step and the steps a row of ``precision`` times: bf16 is the torch step's (the
    Triton steps compute in fp32), eager on a CPU, its update in one compiled pass as a run of 20
    epochs or more trains it there (trainer.compile=null), and graphed on CUDA."""
    if precision != "bf16":
        return default, steps
    bf16 = {label: {**step, "precision": "bf16", **({"compiled": True} if label == "eager" and "graphed" not in steps
                                                   else {})}
            for label, step in steps.items() if label in ("eager", "graphed")}
    return ("graphed" if "graphed" in bf16 else "eager"), bf16


def interleaved(data, args, device, chosen: dict[str, tuple[str, dict]], rows: list[dict], beaten: list[str]) -> list[dict]:
    """Each (H, minibatch) row's default step in every precision, timed ``args.rounds`` times in
    turn, so that a busy minute slows one round of each, not one precision: per round the ratio of
    each precision's epoch to the first precision's, their median and spread; and each precision's
    median epoch over its own product floor (its row's, measured above). A timing under its row's
    largest floor fails the run as the rows' do."""
    from statistics import median

    first, out = args.precisions[0], []
    row_of = {(r["precision"], r["hidden"], r["batch_size"]): r for r in rows if "error" not in r}
    for H in args.hidden:
        for bs in args.batch_sizes:
            if not all((p, H, bs) in row_of for p in args.precisions):
                continue
            n_batches = row_of[(first, H, bs)]["timed_batches"]
            times = {p: [] for p in args.precisions}
            for _ in range(args.rounds):
                for p in args.precisions:
                    set_precision(p)
                    label, steps = chosen[p]
                    seconds = scheda_epoch(data, n_batches, bs, H, device, **steps[label])
                    times[p].append(seconds)
                    if seconds < row_of[(p, H, bs)]["floor_s"]:
                        beaten.append(f"interleaved {p} H {H} batch {bs}: {seconds:.4g} s < floor "
                                      f"{row_of[(p, H, bs)]['floor_s']:.4g} s")
            entry = {"hidden": H, "batch_size": bs, "rounds": args.rounds, "timed_batches": n_batches,
                     "steps": {p: chosen[p][0] for p in args.precisions}, "epoch_s": times,
                     "median_s": {p: median(t) for p, t in times.items()},
                     "over_product_floor": {p: median(t) / row_of[(p, H, bs)]["product_floor_s"]
                                            for p, t in times.items()}, f"over_{first}": {}}
            for p in args.precisions[1:]:
                ratios = [a / b for a, b in zip(times[p], times[first])]
                entry[f"over_{first}"][p] = {"median": median(ratios), "min": min(ratios), "max": max(ratios),
                                             "per_round": ratios}
            out.append(entry)
            print(f"interleaved H {H} batch {bs}, {args.rounds} rounds: "
                  + ", ".join(f"{p} {entry['median_s'][p]:.3g} s ({entry['over_product_floor'][p]:.2f}x its product "
                              f"floor)" for p in args.precisions) + "; "
                  + ", ".join(f"{p}/{first} {r['median']:.3f} (median; {r['min']:.3f} to {r['max']:.3f})"
                              for p, r in entry[f"over_{first}"].items()), flush=True)
    return out


def set_precision(precision: str) -> None:
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"


def main(argv=None) -> int:
    global N
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, nargs="+", default=[1000, 2000])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--precisions", nargs="+", default=["fp32"], choices=["fp32", "tf32", "bf16"],
                        help="tf32: CUDA products in TF32 (trainer.precision=tf32); bf16: the torch step's products in "
                             "bf16 (trainer.precision=bf16); the torch step, autograd and naive loops are timed in the "
                             "first precision only")
    parser.add_argument("--rounds", type=int, default=5,
                        help="with several precisions: each row's default step timed this many times in every "
                             "precision, interleaved, and the median of the per-round ratios to the first printed "
                             "with its spread (a busy minute slows one round, not the median)")
    parser.add_argument("--batches", type=int, default=None, help="timed minibatches (default: ~8 s of work each)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--n", type=int, default=N, help="examples per epoch (CIFAR-10's training split: 45000)")
    parser.add_argument("--skip-naive", action="store_true")
    parser.add_argument("--grid", type=int, default=0, help="also a fused sweep of this many models in every row")
    parser.add_argument("--lr-search", type=int, nargs=2, default=None, metavar=("N", "F"),
                        help="also time torch_lr's C search on N x F features")
    parser.add_argument("--lr-search-run", default=None, metavar="RUN",
                        help="instead of --lr-search, time an evaluation (encoding and C search) of a trained run "
                             "on its own data set (SCHEDA_DATA or --data-root)")
    parser.add_argument("--data-root", default=None, help="the data set's folder for --lr-search-run")
    parser.add_argument("--finetune", action="store_true", help="also time an epoch of fine-tuning in every row")
    parser.add_argument("--rate-seconds", type=float, default=0.5,
                        help="how long each matmul rate and copy bandwidth is timed (the floors' inputs)")
    parser.add_argument("--job-tries", type=int, default=3,
                        help="how often each per-job cost (process start, data load, step build) is timed, the best kept")
    parser.add_argument("--no-triton", action="store_true", help="CUDA without the Triton step (triton cannot compile)")
    parser.add_argument("--card", choices=sorted(CARDS), default=None,
                        help="the card of the occupancy floor (default: the device's, else H100)")
    parser.add_argument("--threads", type=int, default=None, help="torch's CPU threads (default: torch's)")
    parser.add_argument("--side-by-side", type=int, default=1, metavar="K",
                        help="K copies of this benchmark at once, each with 1/K of the threads, as K protocol "
                             "jobs share one CPU (launcher=joblib n_jobs=K): each job's time, not one alone's")
    parser.add_argument("--alone", action="store_true",
                        help="with --side-by-side: also one copy alone on every thread, after them (a launch of one "
                             "job gets every core): the plan charges such a launch at that copy's timings")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.side_by_side > 1:
        return side_by_side(list(sys.argv[1:] if argv is None else argv), args.side_by_side, args.json, args.alone)
    if args.threads:
        torch.set_num_threads(args.threads)
    N = args.n
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if not cuda and "tf32" in args.precisions:
        parser.error("--precisions tf32 needs --device cuda (TF32 is a CUDA matmul mode)")
    if "bf16" in args.precisions:
        from scheda.training.products import bf16_refusal

        if bf16_refusal(device):
            parser.error(f"--precisions bf16: {bf16_refusal(device)}")
    g = torch.Generator().manual_seed(0)
    data = torch.randint(0, 256, (N, D), dtype=torch.uint8, generator=g).to(device).float().div_(255)
    name = torch.cuda.get_device_name(device) if cuda else cpu_name()
    card = args.card or next((c for c in CARDS if c in name), "H100")
    rate_s = args.rate_seconds
    bytes_per_s = bandwidth(device, seconds=rate_s)
    peaks = {}
    for precision in args.precisions:
        set_precision(precision)
        peaks[precision] = peak_rate(device, rate_s, precision)
    node_s = node_seconds(device) if cuda else None
    triton = cuda and not args.no_triton
    kernels = {M: kernels_per_minibatch(M, 64, 20, device) for M in {1, args.grid or 1}} if triton else {}
    libraries = {} if cuda else cpu_libraries()
    print(f"device {device} ({name}), torch {torch.__version__}, threads {torch.get_num_threads()}; "
          + "".join(f"{k.replace('_', ' ')} {v}; " for k, v in libraries.items()) +
          f"N={N}, d={D}, nu={NU}; copy bandwidth {bytes_per_s / 1e9:.1f} GB/s; peak "
          + ", ".join(f"{p} {r / 1e12:.1f} TFLOP/s" for p, r in peaks.items())
          + (f"; one graph node {node_s * 1e6:.2f} us" if cuda else "")
          + ("; Triton step kernels a minibatch " + ", ".join(f"M={M}: {n}" for M, n in sorted(kernels.items()))
             if triton else ""), flush=True)
    rows, beaten, failed = [], [], []
    report = {"device": str(device), "device_name": name, "torch": torch.__version__, **libraries,
              "threads": torch.get_num_threads(), "n": N, "node_us": node_s * 1e6 if node_s else None,
              "kernels_per_minibatch": {str(M): n for M, n in kernels.items()}, "card": card,
              "peak_tflops": {p: r / 1e12 for p, r in peaks.items()}, "rows": rows, "beaten_floors": beaten,
              "failed_rows": failed}
    steps = {"eager": dict(kind="fused")}
    if cuda:
        steps["graphed"] = dict(kind="fused", cuda_graph=True)
    if triton:
        steps["triton"] = dict(kind="triton", cuda_graph=True)
        steps["two_pass"] = dict(kind="two_pass", cuda_graph=True)  # its own kernels: not the default yet
    cuda_default = default = "triton" if triton else "graphed" if cuda else "eager"
    all_steps = steps
    for precision in args.precisions:
        set_precision(precision)
        first = precision == args.precisions[0]
        default, steps = steps_of(precision, all_steps, cuda_default)
        for H in args.hidden:
            for bs in args.batch_sizes:
                try:
                    # The shape rate is measured around the timings and the best kept: a busy machine
                    # only slows a measurement down, so the floor stays a floor when the load changes.
                    measured = [product_rates(bs, H, device, rate_s, precision=precision)]
                    n_batches = timed_batches(args.batches or max(4, int(8 * max(measured[0].values())
                                                                         / (10 * bs * D * H))), bs)
                    times = {}
                    for label, step in steps.items():
                        if (first or label == default) and not (label == "two_pass" and precision != "fp32"):
                            times[label] = scheda_epoch(data, n_batches, bs, H, device, **step)
                    if "two_pass" in times:  # three-pass TF32 beside fp32, the same kernels (its seeds: compare_precision)
                        times["two_pass_tf32x3"] = scheda_epoch(data, n_batches, bs, H, device, kind="two_pass",
                                                                cuda_graph=True, precision="tf32x3")
                    measured.append(product_rates(bs, H, device, rate_s, precision=precision))
                    if precision == "bf16" and not first:  # the composite DA's step in bf16 too
                        times["composite"] = scheda_epoch(data, n_batches, bs, H, device, composite=True, kind="fused",
                                                          precision="bf16", compiled=device.type == "cpu")
                    if first:
                        times["autograd"] = scheda_epoch(data, n_batches, bs, H, device, kind="autograd")
                        # the composite DA's own step (CPU and CUDA alike: eager) and its autograd
                        times["composite"] = scheda_epoch(data, n_batches, bs, H, device, composite=True, kind="fused")
                        times["composite_autograd"] = scheda_epoch(data, n_batches, bs, H, device, composite=True,
                                                                   kind="autograd")
                        if not args.skip_naive:
                            times["naive"] = naive_epoch(data, n_batches, bs, H, device)
                    if args.finetune:  # one rate with autograd, and the paper's five fused (the default)
                        times["finetune"] = finetune_epoch(data, n_batches, bs, H, device)
                        times["finetune_grid"] = finetune_epoch(data, n_batches, bs, H, device, rates=FINETUNE_RATES)
                    measured.append(product_rates(bs, H, device, rate_s, precision=precision))
                    # the peak too, around the timings: measured once at the start it was a busy moment's
                    # (52 GFLOP/s beside a second copy, 2026-12-02) and a floor above the step it bounds
                    peaks[precision] = max(peaks[precision], peak_rate(device, rate_s, precision))
                    rates = best_rates(measured)
                    minibatches = math.ceil(N / bs)
                    flops = 10 * N * D * H
                    floors = {"product": product_floor(rates, bs, H, minibatches), "shape": flops / max(rates.values()),
                              "peak": flops / peaks[precision],
                              "bytes": minibatches * WEIGHT_BYTES[precision] * H * D / bandwidth(device, H * D, rate_s)}
                    if kernels.get(1):
                        floors["launch"] = kernels[1] * node_s * minibatches
                    largest = max(floors.values())
                    occupancy, launches = occupancy_floor(1, H, bs, minibatches, card)
                    row = {"precision": precision, "hidden": H, "batch_size": bs, "timed_batches": n_batches,
                           "occupancy_floor_s": occupancy, "occupancy_card": card,
                           "two_pass_programs": {k["kernel"]: k["programs"] for k in launches},
                           "product_gflops": {name: r / 1e9 for name, r in rates.items()},
                           "shape_gflops": max(rates.values()) / 1e9, "peak_tflops": peaks[precision] / 1e12,
                           "bandwidth_gbs": bytes_per_s / 1e9, **{f"{k}_floor_s": v for k, v in floors.items()},
                           "floor_s": largest, "default_step": default, "default_s": times[default],
                           **{f"{k}_s": v for k, v in times.items()}}
                    if args.grid:
                        M = args.grid
                        row["grid_s"] = scheda_epoch(data, n_batches, bs, H, device, models=M, **steps[default])
                        # its own floors: the batched products of M models, M models' weights streamed
                        row["grid_floor_s"] = max(product_floor(product_rates(bs, H, device, rate_s, M, precision), bs, H, minibatches, M),
                                                  M * floors["peak"],
                                                  minibatches * WEIGHT_BYTES[precision] * M * H * D
                                                  / bandwidth(device, M * H * D, rate_s),
                                                  (kernels.get(M) or 0) * (node_s or 0) * minibatches)
                        row["grid_over_one"] = row["grid_s"] / times[default]
                        row["grid_over_floor"] = row["grid_s"] / row["grid_floor_s"]
                        if "two_pass_s" in times:  # the new step's sweep too (issue 45: M 1 and 8)
                            row["grid_two_pass_s"] = scheda_epoch(data, n_batches, bs, H, device, models=M, **steps["two_pass"])
                    for k, v in floors.items():
                        row[f"default_over_{k}_floor"] = times[default] / v
                    row["default_over_floor"] = times[default] / largest
                    if "two_pass_s" in row:  # its products are its own kernels: the device's peak, W streamed 3 times
                        row["two_pass_floor_s"] = max(floors["peak"], floors["bytes"] * 3 / 5)  # fewer launches: not counted
                        row["two_pass_over_floor"] = times["two_pass"] / row["two_pass_floor_s"]
                        row["two_pass_over_triton"] = times["two_pass"] / times["triton"]
                        row["two_pass_tf32x3_over_fp32"] = times["two_pass_tf32x3"] / times["two_pass"]
                        row["kernel_us"] = {kind: kernel_times(1, H, bs, data, device, kind) for kind in ("triton", "two_pass")}
                    for label, seconds in times.items():
                        # three-pass TF32 runs on tensor cores: only the bytes bound the device's fp32 peak cannot
                        floor = {"two_pass": row.get("two_pass_floor_s"),
                                 "two_pass_tf32x3": floors["bytes"] * 3 / 5}.get(label, largest)
                        if not label.startswith("finetune") and seconds < floor:
                            beaten.append(f"{precision} H {H} batch {bs}: {label} {seconds:.4g} s < floor {floor:.4g} s")
                    if args.grid and row["grid_s"] < row["grid_floor_s"]:
                        beaten.append(f"{precision} H {H} batch {bs}: grid {row['grid_s']:.4g} s < floor {row['grid_floor_s']:.4g} s")
                    rows.append(row)
                    print(f"{precision} H {H} batch {bs}: products " + ", ".join(f"{k} {r / 1e9:.0f}" for k, r in rates.items())
                          + " GFLOP/s; floors " + ", ".join(f"{k} {v:.3g}" for k, v in floors.items())
                          + " s; " + ", ".join(f"{k} {v:.3g}" for k, v in times.items())
                          + (f", {args.grid} fused {row['grid_s']:.3g} ({row['grid_over_one']:.2f}x one)" if args.grid else "")
                          + f" s; {default}/floor {row['default_over_floor']:.2f}"
                          + (f"; two-pass/triton {row['two_pass_over_triton']:.2f}, tf32x3/fp32 "
                             f"{row['two_pass_tf32x3_over_fp32']:.2f}" if "two_pass_over_triton" in row else "")
                          + f"; two-pass occupancy floor on {card} {occupancy:.3g} s ("
                          + ", ".join(f"{k['kernel']} {k['programs']} programs" for k in launches) + ")", flush=True)
                except Fallback as exc:  # this row's step is not the one named: no time under its name
                    rows.append({"precision": precision, "hidden": H, "batch_size": bs, "error": str(exc)})
                    failed.append(f"{precision} H {H} batch {bs}: {exc}")
                    print(f"{precision} H {H} batch {bs}: FAILED, {exc}", file=sys.stderr, flush=True)
                report["rows"] = rows
                write_json(args.json, report)
    timed = [r for r in rows if "error" not in r]
    if args.grid and timed:  # the first row's sweep, where the estimate looks for it
        r = timed[0]
        report["grid"] = {"hidden": r["hidden"], "batch_size": r["batch_size"], "models": args.grid,
                          "one_s": r["default_s"], "grid_s": r["grid_s"], "grid_over_one": r["grid_over_one"]}
    if len(args.precisions) > 1:
        report["interleaved"] = interleaved(data, args, device, {p: steps_of(p, all_steps, cuda_default)
                                                                 for p in args.precisions}, rows, beaten)
    set_precision(args.precisions[0])
    report.update(job_costs(data, args.batch_sizes[0], args.hidden[0], device, all_steps[cuda_default], args.job_tries))
    print("per job: start {job_start_s:.2f} s, data load {data_load_s:.2f} s, step build {build_s:.3f} s".format(**report))
    if args.lr_search_run:
        report["lr_search"] = search = lr_search_of_run(args.lr_search_run, device, args.data_root)
        print(f"an evaluation of {search['run']}: {search['n']} x {search['features']} features, encoded in "
              f"{search['encode_seconds']:.1f} s, with the C search {search['seconds']:.1f} s")
    elif args.lr_search:
        seconds = lr_search_seconds(*args.lr_search, device)
        report["lr_search"] = {"n": args.lr_search[0], "features": args.lr_search[1], "seconds": seconds}
        print(f"torch_lr C search (17 C, warm starts) on {args.lr_search[0]} x {args.lr_search[1]} features: "
              f"{seconds:.1f} s")
    write_json(args.json, report)
    for line in beaten:
        print(f"a timing beats its floor (the benchmark is wrong): {line}", file=sys.stderr)
    for line in failed:
        print(f"a row failed: {line}", file=sys.stderr)
    return 1 if beaten or failed else 0


def _without(argv: list[str], flag: str) -> list[str]:
    """``argv`` less ``flag`` and its value (``--flag V`` or ``--flag=V``)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == flag:
            skip = True
        elif not arg.startswith(f"{flag}="):
            out.append(arg)
    return out


def side_by_side(argv: list[str], jobs: int, json_path: Path | None, alone: bool = False) -> int:
    """``jobs`` copies of this benchmark started together, each with 1/``jobs`` of the threads (as the
    protocol's ``launcher=joblib n_jobs=K`` shares a CPU; on a 2-core EPYC at H 500 an epoch took 4.9 s
    alone with both threads, 7.7 and 8.3 s for each of two side by side). The report is the slowest copy's (every timing, floor and
    check its own: a copy that beats its floor fails the run), with each copy's default step time and
    ``side_by_side`` ({jobs, threads}), which the protocol's estimate divides its device-hours by.
    ``alone``: then one copy alone on every thread, its first row's timings kept as ``alone`` (the
    plan's charge for a launch of one job, measured in the same run as the copies beside each other)."""
    import subprocess
    import tempfile

    every = torch.get_num_threads()
    threads = max(1, every // jobs)
    rest = _without(_without(_without(argv, "--side-by-side"), "--json"), "--threads")
    rest = [arg for arg in rest if arg != "--alone"]

    def copies(n: int, each_threads: int, tmp: str, tag: str) -> tuple[list[int], list[dict]]:
        parts = [Path(tmp) / f"{tag}{i}.json" for i in range(n)]
        procs = [subprocess.Popen([sys.executable, str(Path(__file__).resolve()), *rest, "--threads",
                                   str(each_threads), "--json", str(part)]) for part in parts]
        codes = [proc.wait() for proc in procs]
        return codes, [json.loads(part.read_text()) for part in parts if part.exists()]

    with tempfile.TemporaryDirectory() as tmp:
        codes, reports = copies(jobs, threads, tmp, "job")
        lone_codes, lone = copies(1, every, tmp, "alone") if alone else ([], [])
    timed = reports + lone
    if len(timed) < jobs + alone or not all(r["rows"] and "default_s" in r["rows"][0] for r in timed):
        print(f"side by side: {jobs + alone - len(timed)} of {jobs + alone} copies wrote no timing (exit codes "
              f"{codes + lone_codes})", file=sys.stderr)
        return 1
    each = [r["rows"][0]["default_s"] for r in reports]
    report = reports[each.index(max(each))]
    report["side_by_side"] = {"jobs": jobs, "threads": threads, "default_s": each}
    if lone:
        row = lone[0]["rows"][0]
        report["alone"] = {"threads": every, **{k: row[k] for k in ("hidden", "batch_size", "default_s", "eager_s",
                                                                       "finetune_s", "finetune_grid_s") if k in row},
                           **({"lr_search_s": lone[0]["lr_search"]["seconds"]} if lone[0].get("lr_search") else {})}
    write_json(json_path, report)
    print(f"side by side: {jobs} jobs of {threads} thread{'s' if threads != 1 else ''}, the first row's epoch "
          + ", ".join(f"{t:.3g}" for t in each) + " s (the slowest copy's report kept)"
          + (f"; alone on {every}: {report['alone']['default_s']:.3g} s" if lone else ""), flush=True)
    return max(codes + lone_codes)


def cpu_libraries() -> dict[str, str]:
    """The BLAS torch's CPU products call and the vector extension its kernels use (a CPU row's
    rates mean little without them)."""
    import re

    config = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=(\w+)", config)
    version = re.search(r"(Math Kernel Library Version [\d.]+|OpenBLAS[\w .\-]*\d)", config)
    name = (blas.group(1) if blas else "unknown") + (f" ({version.group(1)})" if version else "")
    return {"blas": name, "vector_extension": torch.backends.cpu.get_cpu_capability()}


def cpu_name() -> str:
    from scheda.utils.environment import describe

    return describe(torch.device("cpu")).get("device_name") or "CPU"


if __name__ == "__main__":
    sys.exit(main())
