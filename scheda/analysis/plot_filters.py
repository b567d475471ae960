"""Filters of one or more runs side by side (the paper's Figures 3-4): a sample of rows of W
drawn in the data set's image shape (CIFAR-10: 32x32 colour; one channel: grey), each
normalised to its own range, labelled DA(nu) / ScheDA(nu0->...). A run on text (dataset=amazon)
gets each unit's top words instead, as markdown beside ``--out`` (``filters.md``).

    scheda-plot-filters RUN_DA RUN_SCHEDA --n 64 --out filters.png
    scheda-plot-filters RUN --image-shape 1 28 28   # a run of dataset=arrays trained without one
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch


from scheda.loggers import filter_grid
from scheda.loggers.base import top_words
from scheda.analysis.core import pyplot, run_label, save_png
from scheda.data import dataset_spec
from scheda.utils.errors import SchedaError
from scheda.utils.io import atomic_write, print_line
from scheda.training.checkpoint import load_run_model
from scheda.training.stack import load_stack
from scheda.utils.interrupt import one_line_on_ctrl_c, quiet_on_a_closed_pipe


@quiet_on_a_closed_pipe
@one_line_on_ctrl_c
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run directories (or checkpoints)")
    parser.add_argument("--n", type=int, default=100, help="filters per run")
    parser.add_argument("--seed", type=int, default=None, help="sample filters at random (default: the first n)")
    parser.add_argument("--out", type=Path, default=Path("filters.png"),
                        help="the figure (a run on text: its top words, in OUT with .md)")
    parser.add_argument("--image-shape", type=int, nargs=3, metavar=("C", "H", "W"), default=None,
                        help="draw the filters in this shape (default: the run's dataset.image_shape)")
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error(f"--n {args.n}: give how many filters to draw, at least 1")
    if args.image_shape is not None and min(args.image_shape) < 1:
        parser.error(f"--image-shape {' '.join(map(str, args.image_shape))}: each of C H W must be at least 1")
    plt = pyplot()
    try:
        panels, texts = [], []
        for run in args.runs:
            cfg, model, state = load_run_model(run)
            title = f"{run_label(Path(state['path']).parent.parent)}, epoch {state['epoch']}"
            if cfg.get("stack_on"):  # a stacked run's filters in input space: its first layer's
                stack = load_stack(cfg.stack_on)
                model, title = stack.layers[0], f"{title}: layer 1 of {len(stack.layers) + 1} ({run_label(stack.runs[0])})"
            rows = torch.arange(model.n_hidden)
            if args.seed is not None:
                rows = torch.randperm(model.n_hidden, generator=torch.Generator().manual_seed(args.seed))
            spec = dataset_spec(cfg.dataset)
            shape = args.image_shape or getattr(spec, "image_shape", None)
            vocabulary = spec.load().vocabulary if shape is None else None  # text has no shape: its words
            if vocabulary is not None:  # text: each unit's words of largest weight
                chosen = rows[: args.n]
                texts.append(f"## {title}\n\n" + top_words(model.W[chosen], vocabulary, len(chosen),
                                                           units=chosen.tolist()))
                continue
            if shape is None:
                raise SchedaError(f"{run}: dataset {cfg.dataset.name} has no image shape to draw filters in: give "
                                  f"--image-shape C H W (C*H*W = its {model.W.shape[1]} inputs)")
            if math.prod(shape) != model.W.shape[1]:
                raise SchedaError(f"{run}: --image-shape {' '.join(map(str, shape))} holds {math.prod(shape)} values, "
                                  f"its filters {model.W.shape[1]}: give C H W with C*H*W = {model.W.shape[1]}")
            panels.append((title, filter_grid(model.W[rows[: args.n]], tuple(shape))))
    except SchedaError as exc:
        print_line(f"error: {exc}")
        return 1
    if texts:
        words = args.out.with_suffix(".md")
        atomic_write(words, lambda f: f.write(("\n\n".join(texts) + "\n").encode()))
        print(words)
    if not panels:
        return 0
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 4.4), squeeze=False)
    for ax, (title, grid) in zip(axes[0], panels):
        if grid.shape[2] == 1:  # one channel: grey levels, the padding white
            ax.imshow(grid[:, :, 0], interpolation="nearest", cmap="gray", vmin=0, vmax=1)
        else:
            ax.imshow(grid, interpolation="nearest")
        ax.set_title(title, fontsize=10)
        ax.axis("off")
    fig.tight_layout()
    save_png(fig, args.out)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
