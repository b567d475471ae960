"""The runs a block's record keeps (scheda.protocol.blocks), and read back as runs.

A phase that reads its models from their run folders (the grid tables' selection, continuations,
controls, fine-tuning and seeds; the stacked layers) keeps in its record what it found, with every
path relative to the folder that holds the block folders (so a block that reads another's selection,
``table.blocks.selection``, names that block's runs as it did; a checkpoint by its name only), and a
trimmed copy of each run's ``results.json`` it names: the curves and evaluations the report draws and
reads, without the classifier's per-setting grid or the per-image answers of every evaluation (an
entry keeps those of the evaluation it reports). Read back (:func:`restored`), each path points where
the run was (``<out_dir>/<table>_block_<N>/...``) and :func:`scheda.runs.rundir.read_results` answers
for it from the record: the report reads the same functions on the same paths, with no run folder
and no checkpoint on disk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scheda.runs.rundir import read_results, remember_results

# An entry's fields that name a file of the block: kept relative (a checkpoint by its name only, for the
# jobs planned from it; the record keeps no checkpoint)
PATHS = ("run", "from", "checkpoint", "start_checkpoint")
EVALUATION = ("epoch", "nu", "reason", "val_error", "test_error", "test_n", "val_n", "params", "C", "at_edge",
              "classifier")
HISTORY = ("epoch", "loss", "nu")


def trimmed(results: dict[str, Any]) -> dict[str, Any]:
    """What the report reads of a run's results.json."""
    ft = results.get("finetune") or None
    config_ft = ((results.get("config") or {}).get("finetune") or {})
    out = {k: results[k] for k in ("status", "stopped_by", "epochs", "switches", "error") if k in results}
    out["history"] = [{k: h[k] for k in HISTORY if k in h} for h in results.get("history", [])]
    out["evaluations"] = [{k: e[k] for k in EVALUATION if k in e} for e in results.get("evaluations", [])]
    if ft is not None:
        out["finetune"] = {"chosen": ft.get("chosen"), "frozen": ft.get("frozen"),
                           "per_lr": [{"lr": r["lr"], "epochs_run": r["epochs_run"]} for r in ft.get("per_lr", [])]}
    if "max_epochs" in config_ft:
        out["config"] = {"finetune": {"max_epochs": config_ft["max_epochs"]}}
    return out


def portable(found: Any, out_dir: Path) -> tuple[Any, dict[str, dict[str, Any]]] | None:
    """``found`` with every path relative to ``out_dir``, and the trimmed results of every run it
    names (by that relative path); None while a run it names has no results (not finished)."""
    runs: dict[str, Path] = {}
    root = Path(out_dir).resolve()

    def relative(value: str) -> str:
        path = Path(value).resolve()
        return path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                if k in PATHS and isinstance(v, str):
                    out[k] = relative(v)
                    if k == "run":
                        runs[out[k]] = Path(v)
                else:
                    out[k] = walk(v)
            return out
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    out = walk(found)
    kept = {}
    for name, run in runs.items():
        results = read_results(run)
        if results is None:
            return None
        kept[name] = trimmed(results)
    return out, kept


def _paths_under(found: Any, root: Path) -> Any:
    """``found`` of a record with every path under ``root``."""
    if isinstance(found, dict):
        return {k: str(root / v) if k in PATHS and isinstance(v, str) else _paths_under(v, root)
                for k, v in found.items()}
    if isinstance(found, list):
        return [_paths_under(v, root) for v in found]
    return found


def blocks_root(p) -> Path:
    """Where a table's block folders are (``<out_dir>/<table>_block_<N>``): a record's paths are relative
    to it, so a block that reads another's runs (its selection) names them as that block did."""
    out_dir = Path(p.cfg.out_dir)
    return out_dir.parent if p.cfg.get("block") is not None else out_dir


def payload(found: Any, p) -> dict[str, Any] | None:
    """A phase's record: what it found (portable) and its runs."""
    kept = portable(found, blocks_root(p))
    if kept is None:
        return None
    out, runs = kept
    return {"found": out, "runs": runs}


def remember(record: dict[str, Any], p) -> None:
    """The runs of a phase's record (:func:`payload`) read from it from now on, where the block's were."""
    root = blocks_root(p)
    remember_results({root / name: results for name, results in record["runs"].items()})


def restored(record: dict[str, Any], p) -> Any:
    """A phase's record (:func:`payload`) read back: its found with its paths where the block's were,
    its runs read from it (:func:`remember`)."""
    remember(record, p)
    return _paths_under(record["found"], blocks_root(p))
