"""Filters of one or more runs side by side (the paper's Figures 3-4): a sample of rows of W
as 32x32 colour images, each normalised to its own range, labelled DA(nu) / ScheDA(nu0->...).

    scheda-plot-filters RUN_DA RUN_SCHEDA --n 64 --out filters.png
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch


from scheda.loggers import filter_grid
from scheda.analysis.core import pyplot, run_label, save_png
from scheda.training.checkpoint import find_checkpoint
from scheda.data import dataset_spec
from scheda.utils.errors import SchedaError
from scheda.training.checkpoint import load_run_model


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run directories (or checkpoints)")
    parser.add_argument("--n", type=int, default=100, help="filters per run")
    parser.add_argument("--seed", type=int, default=None, help="sample filters at random (default: the first n)")
    parser.add_argument("--out", type=Path, default=Path("filters.png"))
    args = parser.parse_args(argv)
    plt = pyplot()
    try:
        panels = []
        for run in args.runs:
            cfg, model, state = load_run_model(run)
            shape = getattr(dataset_spec(cfg.dataset), "image_shape", None)
            if shape is None:
                raise SchedaError(f"{run}: dataset {cfg.dataset.name} has no image shape to draw filters in")
            rows = torch.arange(model.n_hidden)
            if args.seed is not None:
                rows = torch.randperm(model.n_hidden, generator=torch.Generator().manual_seed(args.seed))
            grid = filter_grid(model.W[rows[: args.n]], tuple(shape))
            run_dir = Path(find_checkpoint(run)).parent.parent
            panels.append((f"{run_label(run_dir)}, epoch {state['epoch']}", grid))
    except SchedaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 4.4), squeeze=False)
    for ax, (title, grid) in zip(axes[0], panels):
        ax.imshow(grid, interpolation="nearest")
        ax.set_title(title, fontsize=10)
        ax.axis("off")
    fig.tight_layout()
    save_png(fig, args.out)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
