"""Concatenated representations (the paper's Section 4.1.2, Figure 6): the encoders of two
or more runs side by side (e.g. DA(nu1) of seed 1 with DA(nu2) of seed 2, 2000 + 2000 units),
evaluated like any representation (logistic regression, C chosen on validation).

    scheda-concat-eval RUN_A RUN_B [...]                 # one concatenation
    scheda-concat-eval --sweep SWEEP_RUN --out grid.png   # the nu x nu grid

The grid reads a fused sweep trained with the preset ``+experiment=concat_grid`` (every nu,
seeds 1 and 2): rows are seed-1 models, columns seed-2 models; it writes the heat map of test
errors and a JSON of every pair (diagonal cells pair the same nu from two seeds). The JSON is
written after every pair: the same command, stopped (Ctrl-C) and run again, evaluates only the
pairs it lacks.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf


from scheda.analysis.core import concat_grid, heat_map, run_label, sweep_models
from scheda.evaluation.classifiers import LiblinearConfig, TorchLRConfig
from scheda.data import load_dataset
from scheda.utils.errors import SchedaError
from scheda.evaluation.evaluate import encode_splits, evaluate_features, labels_of
from scheda.utils.io import atomic_write_json, print_line
from scheda.utils.interrupt import Interrupted, one_line_on_ctrl_c, quiet_on_a_closed_pipe
from scheda.training.checkpoint import load_run_model


class Evaluator:
    """Loads the data once, encodes each run once, evaluates concatenations."""

    def __init__(self, args):
        self.args, self.data, self.features = args, None, {}

    def encode(self, run: Path) -> dict[str, torch.Tensor]:
        if run not in self.features:
            cfg, model, _ = load_run_model(run, self.args.device)
            if self.data is None:
                if self.args.data_root:
                    cfg.dataset.root = self.args.data_root
                self.data = load_dataset(cfg.dataset)
                self.inputs = {s: self.data.tensor(s, self.args.device) for s in ("train", "val", "test")}
            self.features[run] = encode_splits(model, self.data, torch.device(self.args.device), 8192, self.inputs)
        return self.features[run]

    def evaluate(self, runs: list[Path]) -> dict:
        parts = [self.encode(r) for r in runs]
        features = {s: torch.cat([p[s] for p in parts], dim=1) for s in ("train", "val", "test")}
        schema = LiblinearConfig if self.args.classifier == "liblinear" else TorchLRConfig
        classifier = OmegaConf.structured(schema(c_log2_min=self.args.c_log2_min, c_log2_max=self.args.c_log2_max))
        result = evaluate_features(features, labels_of(self.data), classifier, self.args.device)
        result["runs"] = [str(r) for r in runs]
        result["features"] = int(features["train"].shape[1])
        return result


def finished_pairs(path: Path, settings: dict) -> dict[tuple, dict]:
    """The pairs an earlier invocation of the same grid wrote to ``path`` (none if it is absent);
    a file of another grid or other settings is refused, not overwritten."""
    if not path.exists():
        return {}
    try:
        saved = json.loads(path.read_text())
    except ValueError:
        raise SchedaError(f"{path} is not a grid's JSON (unreadable): give another --out, or delete it") from None
    if saved.get("settings") != settings:
        differ = sorted(k for k in {*settings, *saved.get("settings", {})}
                        if saved.get("settings", {}).get(k) != settings.get(k))
        raise SchedaError(f"{path} holds a grid of other settings ({', '.join(differ)}): give another --out, "
                          f"or delete it to start again")
    return {(pair["a"], pair["b"]): pair for pair in saved["pairs"]}


@quiet_on_a_closed_pipe
@one_line_on_ctrl_c
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="*", type=Path, help="runs whose encoders are concatenated")
    parser.add_argument("--sweep", type=Path, default=None, help="a fused sweep: evaluate the nu x nu grid")
    parser.add_argument("--vary", default="schedule.nu", help="the sweep axis of the grid")
    parser.add_argument("--seeds", type=int, nargs=2, default=[1, 2], help="seeds of the rows and of the columns")
    parser.add_argument("--classifier", default="liblinear", choices=["liblinear", "torch_lr"],
                        help="the probe: LIBLINEAR, or the same objective solved by torch")
    parser.add_argument("--c-log2-min", type=float, default=-10, help="the C grid from 2^min ...")
    parser.add_argument("--c-log2-max", type=float, default=6, help="... to 2^max, chosen on validation")
    parser.add_argument("--data-root", default=None, help="override the runs' dataset.root")
    parser.add_argument("--device", default="cpu", help="where to encode and fit the probe (cuda, cuda:1)")
    parser.add_argument("--out", type=Path, default=Path("concat.png"), help="heat map (with --sweep)")
    args = parser.parse_args(argv)
    if bool(args.runs) == bool(args.sweep) or len(args.runs) == 1:  # one run is no concatenation
        parser.error("give either two or more runs, or --sweep (one run's own errors are in its results.json)")
    ev = Evaluator(args)
    start = time.perf_counter()
    try:
        if args.runs:
            result = ev.evaluate(args.runs)
            names = " + ".join(run_label(r) for r in args.runs)
            print(f"{names}: {result['features']} features, C={result['C']:g}, val {100 * result['val_error']:.2f} %, "
                  f"test {100 * result['test_error']:.2f} %")
            for r in args.runs:  # each encoder alone, for comparison
                alone = ev.evaluate([r])
                print(f"  {run_label(r)} alone: val {100 * alone['val_error']:.2f} %, test {100 * alone['test_error']:.2f} %")
            return 0
        rows, cols, pairs = concat_grid(sweep_models(args.sweep), ("seed", args.seeds[0]), ("seed", args.seeds[1]),
                                        args.vary)
        if not pairs:
            raise SchedaError(f"{args.sweep} has no models with seeds {args.seeds} varying {args.vary}: "
                              f"train it with +experiment=concat_grid")
        out = args.out.with_suffix(".json")
        settings = {"sweep": str(args.sweep.resolve()), "vary": args.vary, "seeds": list(args.seeds),
                    "classifier": args.classifier, "c_log2_min": args.c_log2_min, "c_log2_max": args.c_log2_max}
        done = finished_pairs(out, settings)
        if done:
            print(f"{len(done)} of {len(pairs)} pairs already in {out}: evaluating the others", flush=True)
        grid = [[None] * len(cols) for _ in rows]
        for (a, b), (run_a, run_b) in sorted(pairs.items()):
            if (a, b) not in done:
                try:
                    result = ev.evaluate([run_a, run_b])
                except KeyboardInterrupt:
                    raise Interrupted(signal.SIGINT, f"interrupted by SIGINT: {len(done)} of {len(pairs)} pairs "
                                                     f"evaluated, kept in {out}; run the same command again to "
                                                     f"evaluate the others") from None
                done[(a, b)] = {"a": a, "b": b, **{k: result[k] for k in ("C", "val_error", "test_error", "features")}}
                print(f"{args.vary}={a:g} (seed {args.seeds[0]}) + {b:g} (seed {args.seeds[1]}): "
                      f"test {100 * result['test_error']:.2f} %", flush=True)
                atomic_write_json(out, {"settings": settings, "rows": rows, "cols": cols,
                                        "pairs": [done[key] for key in sorted(done)],
                                        "complete": len(done) == len(pairs)})
            grid[rows.index(a)][cols.index(b)] = 100 * done[(a, b)]["test_error"]
    except SchedaError as exc:
        print_line(f"error: {exc}")
        return 1
    heat_map(grid, rows, cols, "test error (%) of concatenated DAs", args.out,
             f"{args.vary}, seed {args.seeds[1]}", f"{args.vary}, seed {args.seeds[0]}")
    print(f"{args.out} ({time.perf_counter() - start:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
