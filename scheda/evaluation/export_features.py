"""Replaced by ``scheda-export RUN --features F.svm`` (scheda.evaluation.export), and kept
for this release only: writes a trained run's encoded features in LIBSVM text, so LIBLINEAR's
own ``svm_read_problem`` and command-line tools (``train -s 0 -B 1 ...``) read them, and says
that it is replaced.

    scheda-export-features outputs/runs/DATE/TIME --out features/
    scheda-export-features RUN/checkpoints/epoch_00100.pt --splits test

Writes ``<out>/{train,val,test}.libsvm``: one line per example, ``label 1:f1 2:f2 ...``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch


from scheda.data import load_dataset
from scheda.utils.errors import SchedaError
from scheda.evaluation.evaluate import encode_splits, labels_of
from scheda.training.checkpoint import load_run_model
from scheda.evaluation.export import write_libsvm


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a run directory or one of its checkpoints")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: RUN/features)")
    parser.add_argument("--splits", nargs="+", default=["train", "val", "test"], choices=["train", "val", "test"])
    parser.add_argument("--data-root", default=None, help="override the run's dataset.root")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--chunk-size", type=int, default=8192)
    args = parser.parse_args(argv)
    try:
        cfg, model, state = load_run_model(args.run, args.device)
        if args.data_root:
            cfg.dataset.root = args.data_root
        data = load_dataset(cfg.dataset)
        out = args.out or Path(state["path"]).parent.parent / "features"
        start = time.perf_counter()
        features = encode_splits(model, data, torch.device(args.device), args.chunk_size)
        labels = labels_of(data)
        for split in args.splits:
            path = write_libsvm(out / f"{split}.libsvm", features[split].cpu().numpy(), labels[split])
            print(f"{path}: {features[split].shape[0]} x {features[split].shape[1]}")
        print(f"epoch {state['epoch']} of {state['path']}; {time.perf_counter() - start:.1f}s")
        print("scheda-export-features is replaced by scheda-export RUN --features F.svm (or F.npz); it goes in the "
              "release after this one")
    except SchedaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
