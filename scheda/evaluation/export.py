"""``scheda-export RUN``: what a run learnt, in files other tools read.

    scheda-export RUN --weights W.safetensors --features F.npz
    scheda-export RUN --features F.svm        # LIBSVM text: F.train.svm, F.val.svm, F.test.svm

``--weights``: the DA's W (hidden x input), b and b' as safetensors, with the run's config, its
noise levels (epoch by epoch), the epoch and scheda's version as the file's metadata;
``init_from=W.safetensors`` starts a run from them. ``--features``: the encoded train /
validation / test splits (no noise) with their labels and each split's rows in the data set's
own files (``train_idx``, ``val_idx``, ``test_idx``), as an .npz, or as LIBSVM text (``.svm``:
LIBLINEAR's ``train`` and ``svm_read_problem`` read it). RUN: a run directory (the model it
reports: under ``trainer.patience`` its best on validation, where a checkpoint was taken then,
else its newest checkpoint) or a checkpoint file; every file is written atomically.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

import scheda
from scheda.training.checkpoint import load_run_model
from scheda.data import load_dataset
from scheda.utils.errors import ConfigError, SchedaError
from scheda.evaluation.evaluate import encode_splits, labels_of
from scheda.training.stack import load_stack
from scheda.utils.io import atomic_write, print_line
from scheda.utils.interrupt import one_line_on_ctrl_c, quiet_on_a_closed_pipe

SPLITS = ("train", "val", "test")


def write_libsvm(path: Path, x: np.ndarray, y: np.ndarray, precision: int = 6) -> Path:
    """Dense rows as LIBSVM lines; one C-level format per row, written atomically."""
    d = x.shape[1]
    fmt = "%d " + " ".join(f"{j}:%.{precision}g" for j in range(1, d + 1))
    rows = np.column_stack([y.astype(np.float64), x.astype(np.float64)])

    def write(f):
        np.savetxt(f, rows, fmt=fmt)

    return atomic_write(path, write)


def export_weights(path: Path, model, state: dict, cfg: DictConfig) -> Path:
    """W, b, b' and what they came from, as safetensors."""
    from safetensors.torch import save

    history = state.get("history") or []
    meta = {"format": "scheda-da", "scheda": scheda.__version__, "epoch": str(int(state["epoch"])),
            "config": json.dumps(OmegaConf.to_container(cfg, resolve=True)),
            "nu_history": json.dumps([{"epoch": h["epoch"], "nu": h["nu"]} for h in history]),
            "checkpoint": str(state["path"])}
    tensors = {key: value.detach().cpu().contiguous() for key, value in model.state_dict().items()}
    blob = save(tensors, metadata=meta)
    return atomic_write(path, lambda f: f.write(blob))


def export_features(path: Path, model, data, device: torch.device, chunk_size: int) -> list[Path]:
    """The encoded splits with labels and row indices: one .npz, or LIBSVM text per split (.svm)."""
    features = {k: v.cpu().numpy() for k, v in encode_splits(model, data, device, chunk_size).items()}
    labels = labels_of(data)
    if path.suffix == ".svm":
        return [write_libsvm(path.with_suffix(f".{split}.svm"), features[split], labels[split]) for split in SPLITS]
    if path.suffix != ".npz":
        raise ConfigError(f"--features {path}: name an .npz (arrays) or an .svm (LIBSVM text) file")
    arrays = {**{f"{s}_x": features[s] for s in SPLITS}, **{f"{s}_y": np.asarray(labels[s]) for s in SPLITS}}
    if data.indices is not None:
        arrays.update({f"{s}_idx": np.asarray(data.indices[s]) for s in SPLITS})
    return [atomic_write(path, lambda f: np.savez(f, **arrays))]


@quiet_on_a_closed_pipe
@one_line_on_ctrl_c
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scheda-export", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a run directory (the model it reports: under trainer.patience its best on "
                                    "validation, else its newest checkpoint) or a checkpoint file")
    parser.add_argument("--weights", type=Path, help="W, b, b' as safetensors (name it .safetensors)")
    parser.add_argument("--features", type=Path, help="the encoded splits: an .npz, or .svm for LIBSVM text")
    parser.add_argument("--data-root", default=None, help="read the data from here instead of the run's dataset.root")
    parser.add_argument("--device", default="cpu", help="where to encode (cuda, cuda:1)")
    parser.add_argument("--chunk-size", type=int, default=8192,
                        help="rows encoded at once (lower it if memory runs out)")
    args = parser.parse_args(argv)
    if not (args.weights or args.features):
        parser.error("nothing to export: give --weights W.safetensors and/or --features F.npz (or F.svm)")
    if args.weights and args.weights.suffix != ".safetensors":
        parser.error(f"--weights {args.weights}: name it .safetensors")
    try:
        start = time.perf_counter()
        cfg, model, state = load_run_model(args.run, args.device)
        if args.weights:
            print(f"{export_weights(args.weights, model, state, cfg)}: W {tuple(model.W.shape)}, b, b_prime "
                  f"(epoch {state['epoch']})")
        if args.features:
            if args.data_root:
                cfg.dataset.root = args.data_root
            data = load_dataset(cfg.dataset)
            if cfg.get("stack_on"):  # a stacked run's inputs: the codes of the layers below
                data = load_stack(cfg.stack_on).splits(data, torch.device(args.device),  # its evaluation's features
                                                       keep_codes=cfg.evaluate.get("layers") == "all")
            for path in export_features(args.features, model, data, torch.device(args.device), args.chunk_size):
                splits = path.suffixes[-2][1:] if path.suffix == ".svm" else "train/val/test"  # F.train.svm: one split
                width = model.n_hidden + (0 if data.below is None else data.below["train"].shape[1])
                print(f"{path}: {splits} features of {width}")
        print(f"from epoch {state['epoch']} of {state['path']}; {time.perf_counter() - start:.1f} s")
    except SchedaError as exc:
        print_line(f"error: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
