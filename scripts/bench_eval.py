"""Benchmark the evaluation's C search: LIBLINEAR (the paper's) against torch_lr (the same
objective by batched Newton-CG), in one run, on the features of a trained run.

    SCHEDA_DATA=../shared/data python scripts/bench_eval.py outputs/runs/DATE/TIME
    python scripts/bench_eval.py RUN --c-log2-min -8 --c-log2-max 4 --json bench_eval.json

Prints for each solver: problem set-up (conversion) time, time per C, whole C-search time,
chosen C, validation and test error; then the ratio of the two search times and, at the
C LIBLINEAR chose, both objective values and test errors.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch


from scheda.evaluation.classifiers import TorchLRConfig, objective
from scheda.data import load_dataset
from scheda.evaluation.evaluate import encode_splits, evaluate_features, labels_of, raw_features
from scheda.training.checkpoint import load_run_model


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a run directory or checkpoint; 'raw' for raw pixels (needs --data-root)")
    parser.add_argument("--data-root", default=None, help="override the run's dataset.root")
    parser.add_argument("--c-log2-min", type=float, default=-10)
    parser.add_argument("--c-log2-max", type=float, default=6)
    parser.add_argument("--c-log2-step", type=float, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--liblinear-eps", type=float, default=1e-4)
    parser.add_argument("--torch-eps", type=float, default=1e-4)
    parser.add_argument("--skip-liblinear", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--warm-start-check", action="store_true",
                        help="each solver warm and fresh at its eps and looser ones, against a fresh float64 "
                             "reference at every C (errors, objective gap, seconds)")
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    if args.run == "raw":
        from omegaconf import OmegaConf

        cfg = OmegaConf.create({"dataset": {"name": "cifar10", "root": args.data_root, "download": False,
                                            "val_size": 5000, "split_seed": 0, "train_limit": None}})
        data = load_dataset(cfg.dataset)
        features = raw_features(data, device)
        source = "raw pixels"
    else:
        cfg, model, state = load_run_model(args.run, device)
        if args.data_root:
            cfg.dataset.root = args.data_root
        data = load_dataset(cfg.dataset)
        t = time.perf_counter()
        features = encode_splits(model, data, device, 8192)
        source = f"{state['path']} (epoch {state['epoch']}), encoded in {time.perf_counter() - t:.1f}s"
    labels = labels_of(data)
    grid = {"c_log2_min": args.c_log2_min, "c_log2_max": args.c_log2_max, "c_log2_step": args.c_log2_step}
    Cs = [p["C"] for p in TorchLRConfig(**grid).grid()]
    print(f"features: {source}; train {tuple(features['train'].shape)}, val {tuple(features['val'].shape)}, "
          f"test {tuple(features['test'].shape)}; {len(Cs)} values of C; torch threads {torch.get_num_threads()}")

    if args.warm_start_check:
        report = warm_start_check(features, labels, Cs, device, args)
        if args.json:
            args.json.write_text(json.dumps(report, indent=2))
        return 0

    solvers = {"torch_lr": {"name": "torch_lr", "eps": args.torch_eps, "max_newton": 100, "max_cg": 200,
                            "dtype": "float32", "warm_start": True, **grid}}
    if not args.skip_liblinear:
        solvers = {"liblinear": {"name": "liblinear", "eps": args.liblinear_eps, "warm_start": True, **grid}, **solvers}
    report = {"source": source, "Cs": Cs, "device": str(device)}
    for name, solver_cfg in solvers.items():
        result = evaluate_features(features, labels, solver_cfg, device)
        report[name] = result
        per_c = [g["seconds"] for g in result["grid"]]
        print(f"\n{name}: set-up {result['setup_seconds']:.2f}s, C search {result['seconds']:.2f}s "
              f"(per C: mean {np.mean(per_c):.2f}s, max {np.max(per_c):.2f}s)")
        print(f"  chosen C = 2^{np.log2(result['C']):g}: val error {100 * result['val_error']:.2f} %, "
              f"test error {100 * result['test_error']:.2f} %{'  (at the grid edge)' if result['at_edge'] else ''}")
        print("  " + "  ".join(f"2^{np.log2(g['params']['C']):g}:{100 * g['val_error']:.2f}%/{g['seconds']:.1f}s"
                               for g in result["grid"]))
    if "liblinear" in report:
        lib, ours = report["liblinear"], report["torch_lr"]
        ratio = lib["seconds"] / ours["seconds"]
        report["ratio_liblinear_over_torch_lr"] = ratio
        print(f"\nC search: liblinear {lib['seconds']:.1f}s / torch_lr {ours['seconds']:.1f}s = {ratio:.1f}x")
        print(f"test error at each one's chosen C: liblinear {100 * lib['test_error']:.2f} %, "
              f"torch_lr {100 * ours['test_error']:.2f} % (difference "
              f"{100 * (ours['test_error'] - lib['test_error']):+.2f} points)")
        # Same C, both solvers: how close are the solutions?
        from scheda.evaluation.classifiers import Liblinear, TorchLogReg

        C = lib["C"]
        x_train = features["train"].cpu().numpy()
        m_lib = Liblinear(x_train, labels["train"], eps=args.liblinear_eps).fit(C)
        m_ours = TorchLogReg(features["train"], labels["train"], eps=args.torch_eps, device=device).fit(C)
        f_lib, f_ours = objective(m_lib, x_train, labels["train"], C), objective(m_ours, x_train, labels["train"], C)
        test_x = features["test"].cpu().numpy()
        agree = float(np.mean(m_lib.predict(test_x) == m_ours.predict(test_x)))
        report["at_liblinear_C"] = {"C": C, "objective_liblinear": f_lib, "objective_torch_lr": f_ours,
                                    "test_error_liblinear": m_lib.error(test_x, labels["test"]),
                                    "test_error_torch_lr": m_ours.error(test_x, labels["test"]),
                                    "test_prediction_agreement": agree}
        print(f"at C = 2^{np.log2(C):g}: objective liblinear {f_lib:.6g}, torch_lr {f_ours:.6g} "
              f"(relative {(f_ours - f_lib) / f_lib:+.2e}); test predictions agree {100 * agree:.2f} %")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


def warm_start_check(features, labels, Cs, device, args) -> dict:
    """Each solver's variants along the whole grid (as an evaluation runs it) against one
    reference per C: a fresh torch_lr solve in float64 at eps 1e-8 (the same objective; fresh
    float32 solves stall at large C). Prints the largest validation/test error differences,
    the objective's largest relative gap, and the time of the whole grid."""
    from scheda.evaluation.classifiers import build_classifier

    x_train = features["train"].cpu().numpy().astype(np.float64)
    val_x, test_x = (features[s].cpu().numpy() for s in ("val", "test"))

    def grid(cfg):
        t0 = time.perf_counter()
        solver = build_classifier(cfg, features["train"], labels["train"], device)
        per_c = []
        for C in Cs:
            t = time.perf_counter()
            model = solver.fit(C)
            per_c.append({"C": C, "seconds": time.perf_counter() - t, "val": model.error(val_x, labels["val"]),
                          "test": model.error(test_x, labels["test"]),
                          "objective": objective(model, x_train, labels["train"], C)})
        return {"seconds": time.perf_counter() - t0, "per_c": per_c}

    def show(label, row):
        print(f"{label}: {row['seconds']:.1f}s  " + "  ".join(
            f"2^{np.log2(p['C']):g}:{100 * p['val']:.2f}/{100 * p['test']:.2f}%/{p['seconds']:.1f}s"
            for p in row["per_c"]), flush=True)

    torch_cfg = {"name": "torch_lr", "max_newton": 100, "max_cg": 200}
    ref = grid({**torch_cfg, "eps": 1e-8, "warm_start": False, "dtype": "float64"})
    show("reference (torch_lr fresh, float64, eps 1e-8)", ref)
    variants = {"torch_lr": [(args.torch_eps, True), (args.torch_eps * 10, True), (args.torch_eps * 10, False)],
                "liblinear": [(args.liblinear_eps, True), (0.01, True), (0.01, False)]}
    if args.skip_liblinear:
        variants.pop("liblinear")
    report = {"reference": ref}
    table = ["| solver | eps | start | grid seconds | max per C | max |val diff| (points) | "
             "max |test diff| (points) | max objective gap |", "|---|---|---|---|---|---|---|---|"]
    for name, runs in variants.items():
        for eps, warm in runs:
            cfg = {"name": name, "eps": eps, "warm_start": warm, **({**torch_cfg, "dtype": "float32"}
                                                                   if name == "torch_lr" else {})}
            row = grid(cfg)
            label = f"{name} eps {eps:g} {'warm' if warm else 'fresh'}"
            show(label, row)
            pairs = list(zip(row["per_c"], ref["per_c"]))
            row.update(max_val_diff=100 * max(abs(p["val"] - r["val"]) for p, r in pairs),
                       max_test_diff=100 * max(abs(p["test"] - r["test"]) for p, r in pairs),
                       max_objective_gap=max((p["objective"] - r["objective"]) / abs(r["objective"]) for p, r in pairs))
            report[label] = row
            table.append(f"| {name} | {eps:g} | {'warm' if warm else 'fresh'} | {row['seconds']:.1f} | "
                         f"{max(p['seconds'] for p in row['per_c']):.1f} | {row['max_val_diff']:.2f} | "
                         f"{row['max_test_diff']:.2f} | {row['max_objective_gap']:.1e} |")
    print(f"\nagainst the reference at each of {len(Cs)} values of C:")
    print("\n".join(table))
    return report


if __name__ == "__main__":
    sys.exit(main())
