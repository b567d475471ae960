"""How many DA epochs of a protocol fit in a time budget on the device a benchmark measured:
what scripts/gpu_check.sh runs of the paper's 1000-unit row (scale=paper_h1000) in its minutes.

    python scripts/size_row.py bench_train.json --unit 100 --most 2000 --budget 330 \\
        table=table1 scale=paper_h1000 scale.scheda.nu0=[0.7] scale.scheda.delta_nu=[0.1]

The protocol is planned and costed as scheda-reproduce's estimate does (scheda.protocol.estimate:
each job's start, data load and step build, the continuations' and controls' epochs and
evaluations); what is left of the budget goes to the DA grid: its epoch at the measured fused
sweep and its evaluations every ``eval_every``. Prints the epochs, a multiple of ``--unit``
between one unit and ``--most``; the reasoning goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

JOB_SECONDS = 5.0  # per job, where the benchmark did not measure it (H100: 2-3 s a job, docs/results/gpu_h100.md)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bench", type=Path)
    parser.add_argument("--unit", type=int, default=100)
    parser.add_argument("--most", type=int, default=2000)
    parser.add_argument("--budget", type=float, required=True, help="seconds the protocol may take")
    parser.add_argument("--json", action="store_true", help="print the sizing as JSON (fixed, rest and per-epoch seconds)")
    parser.add_argument("overrides", nargs="*", help="scheda-reproduce's overrides (table=, scale=, ...)")
    args = parser.parse_intermixed_args(argv)
    from hydra import compose, initialize_config_dir, initialize_config_module

    from scheda.config import CONFIGS
    from scheda.protocol import estimate
    from scheda.protocol.estimate import (fast_step, item_seconds, job_seconds, search_share, start_seconds,
                                          train_examples)
    from scheda.protocol.reproduce import register_protocol_configs  # noqa: F401  (registers the schemas)

    where = initialize_config_module(CONFIGS.removeprefix("pkg://"), version_base="1.3") \
        if CONFIGS.startswith("pkg://") else initialize_config_dir(CONFIGS, version_base="1.3")
    with where:
        cfg = compose("reproduce", [*args.overrides, "out_dir=unused"])
    bench = json.loads(args.bench.read_text())
    items = estimate.items(cfg)["items"]
    batch = next((int(o.split("=", 1)[1]) for o in [*cfg.scale.train, *cfg.overrides]
                  if o.startswith("trainer.batch_size=")), 20)
    fast, examples = fast_step(cfg), train_examples(cfg)
    phases = len({i["phase"] for i in items})
    fixed = len(items) * job_seconds(bench, examples) + start_seconds(bench, len(items), phases, cfg.launcher) \
        if "job_start_s" in bench else len(items) * JOB_SECONDS
    share = search_share(cfg)
    rest = sum(sum(item_seconds(i, bench, batch, fast, examples, share)) for i in items if i["phase"] != "da")
    da = [i for i in items if i["phase"] == "da" and i["hidden"]]
    per_epoch = sum(sum(item_seconds({**i, "epochs": 1, "evals": i["evals"] / i["epochs"]}, bench, batch, fast,
                                     examples, share)) for i in da)
    left = args.budget - fixed - rest
    epochs = max(args.unit, min(args.most, int(left / per_epoch // args.unit * args.unit)))
    print(f"size_row: {len(items)} jobs, {fixed:.0f} s to start them; continuations and controls {rest:.0f} s; "
          f"the DA grid {per_epoch:.3g} s an epoch with its evaluations: {left:.0f} s left for it -> {epochs} epochs",
          file=sys.stderr)
    if args.json:
        print(json.dumps({"epochs": epochs, "start_s": fixed, "rest_s": rest, "da_epoch_s": per_epoch,
                          "planned_s": fixed + rest + per_epoch * epochs}))
    else:
        print(epochs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
