"""Analysis of learnt features (Geras & Sutton 2015, Sections 4.1.2-4.1.3): run labels, the
models of a sweep, heat maps and figures. Table 2's similarities and counts are
:mod:`scheda.analysis.similarity`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from scheda.runs.rundir import read_results
from scheda.utils.errors import DataError
from scheda.utils.lazy import lazy

torch = lazy("torch", globals())


def clean_reconstruction_error(model, x: torch.Tensor, chunk: int = 8192) -> float:
    """``model``'s loss of the clean inputs ``x`` (no noise: the same input whatever nu it trained at),
    mean per image, in chunks without gradients: what the features table and the precision
    comparison report as a model's reconstruction error."""
    with torch.no_grad():
        total = sum(float(model.loss(x[i:i + chunk], x[i:i + chunk])) * x[i:i + chunk].shape[0]
                    for i in range(0, x.shape[0], chunk))
    return total / x.shape[0]


def run_label(run_dir: str | Path) -> str:
    """DA(nu) for a single noise level, ScheDA(nu0 -> ... -> nuT) for a schedule."""
    data = read_results(Path(run_dir))
    if data is None:  # none, or unreadable (said in a warning): the folder's name
        return Path(run_dir).name
    levels = [s["nu"] for s in data.get("switches", [])]
    if not levels or levels[0] is None:
        return f"DA({data.get('schedule', '?')})"
    if len(levels) == 1:
        return f"DA({levels[0]:g})"
    return "ScheDA(" + "->".join(f"{nu:g}" for nu in levels) + ")"


def sweep_models(sweep_dir: str | Path) -> list[tuple[dict, Path]]:
    """(overrides, directory) of every model of a fused sweep (``trainer.parallel``)."""
    sweep_dir = Path(sweep_dir)
    results = read_results(sweep_dir)
    if results is None:
        raise DataError(f"{sweep_dir} has no readable results.json (a fused sweep's lists its models): pass the "
                        f"folder a trainer.parallel run printed")
    return [(m["overrides"], sweep_dir / m["dir"]) for m in results.get("models", [])]


def concat_grid(models: list[tuple[dict, Path]], axis_a: tuple[str, object], axis_b: tuple[str, object],
                vary: str) -> tuple[list, list, dict]:
    """The pairs of a nu x nu grid: rows are the models with ``axis_a`` (e.g. seed 1), columns
    those with ``axis_b`` (seed 2), each indexed by its value of ``vary`` (e.g. schedule.nu)."""
    rows = {o[vary]: d for o, d in models if o.get(axis_a[0]) == axis_a[1] and vary in o}
    cols = {o[vary]: d for o, d in models if o.get(axis_b[0]) == axis_b[1] and vary in o}
    return sorted(rows), sorted(cols), {(a, b): (rows[a], cols[b]) for a in rows for b in cols}


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend (no display on a cluster node)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig, path: str | Path, dpi: int = 100) -> None:
    """Write ``fig`` atomically (temp file, then rename) and free it."""
    from scheda.utils.io import atomic_write

    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=dpi))
    pyplot().close(fig)


def heat_map(values, row_labels, col_labels, title: str, path: str | Path, xlabel: str, ylabel: str) -> None:
    """A PNG heat map with each cell's value written in it (errors in %)."""
    plt = pyplot()
    values = np.asarray(values, dtype=float)
    fig, ax = plt.subplots(figsize=(1.2 * len(col_labels) + 2, 1.0 * len(row_labels) + 1.5))
    im = ax.imshow(values, cmap="viridis_r")
    ax.set_xticks(range(len(col_labels)), [f"{c:g}" for c in col_labels])
    ax.set_yticks(range(len(row_labels)), [f"{r:g}" for r in row_labels])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    middle = (np.nanmin(values) + np.nanmax(values)) / 2
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):  # dark text on the light (low-error) cells
            ax.text(j, i, f"{values[i, j]:.2f}", ha="center", va="center", fontsize=9,
                    color="k" if values[i, j] < middle else "w")
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    save_png(fig, path)
