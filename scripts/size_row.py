"""How many DA epochs of a protocol fit in a time budget on the device a benchmark measured:
what scripts/gpu_check.sh runs of the paper's 1000-unit row (scale=paper_h1000) in its minutes.

    python scripts/size_row.py bench_train.json --unit 100 --most 2000 --budget 330 \\
        table=table1 scale=paper_h1000 scale.scheda.nu0=[0.7] scale.scheda.delta_nu=[0.1]

The protocol is planned as scheda-reproduce plans it (scheda.protocol.estimate.plan); the
continuations and controls cost their epochs at one model's measured epoch and their
evaluations at the measured C search; what is left of the budget, after a fixed cost per job
(process and CUDA start, data load, the graphs' capture), goes to the fused DA grid: its epoch
at the measured fused sweep and its evaluations every ``eval_every``. Prints the epochs, a
multiple of ``--unit`` between one unit and ``--most``; the reasoning goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

JOB_SECONDS = 5.0  # per job beyond its epochs and evaluations: start, data, capture (H100: 2-3 s a job, docs/results/gpu_h100.md)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bench", type=Path)
    parser.add_argument("--unit", type=int, default=100)
    parser.add_argument("--most", type=int, default=2000)
    parser.add_argument("--budget", type=float, required=True, help="seconds the protocol may take")
    parser.add_argument("overrides", nargs="*", help="scheda-reproduce's overrides (table=, scale=, ...)")
    args = parser.parse_intermixed_args(argv)
    from hydra import compose, initialize_config_dir, initialize_config_module

    from scheda.config import CONFIGS
    from scheda.protocol.estimate import TRAIN_EXAMPLES, plan
    from scheda.protocol.reproduce import register_protocol_configs  # noqa: F401  (registers the schemas)

    where = initialize_config_module(CONFIGS.removeprefix("pkg://"), version_base="1.3") \
        if CONFIGS.startswith("pkg://") else initialize_config_dir(CONFIGS, version_base="1.3")
    with where:
        cfg = compose("reproduce", [*args.overrides, "out_dir=unused"])
    bench = json.loads(args.bench.read_text())
    hidden, fused = cfg.scale.hidden[0], len(cfg.scale.da.nu)  # one job per lr, its nu fused
    rows = [r for r in bench["rows"] if r.get("precision", "fp32") == "fp32" and r["batch_size"] == 20] or bench["rows"]
    row = min(rows, key=lambda r: abs(r["hidden"] - hidden))
    scale = hidden / row["hidden"] * TRAIN_EXAMPLES / bench["n"]
    one = row["default_s"] * scale
    sweep = row.get("grid_s", one * fused) * scale * fused / bench.get("grid", {}).get("models", fused)
    search = bench["lr_search"]["seconds"] * hidden / bench["lr_search"]["features"] if "lr_search" in bench else 1.0
    items = plan(cfg)["items"]
    jobs = len(items)
    rest = sum(i["epochs"] * i["models"] for i in items if i["stage"] != "da")
    rest_evals = sum(i["evals"] for i in items if i["stage"] != "da")
    evals_per_epoch = fused / cfg.scale.da.eval_every
    left = args.budget - jobs * JOB_SECONDS - rest * one - rest_evals * search
    epochs = int(left / (sweep + evals_per_epoch * search) // args.unit * args.unit)
    epochs = max(args.unit, min(args.most, epochs))
    print(f"size_row: {jobs} jobs x {JOB_SECONDS:g} s; continuations and controls {rest} epochs x {one:.3g} s and "
          f"{rest_evals} evaluations x {search:.3g} s; the fused DA of {fused} models {sweep:.3g} s an epoch, "
          f"{evals_per_epoch:g} evaluations an epoch: {left:.0f} s left for it -> {epochs} epochs", file=sys.stderr)
    print(epochs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
