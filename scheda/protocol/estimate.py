"""Before a scale runs: the jobs and model-epochs it plans, and what they cost on a device whose
speed ``scripts/bench_train.py --json`` measured (``bench=<that file>``).

The plan assumes every DA of the grid is selected (the continuations of every nu0 are planned)
and counts each control at the length of its kind's longest continuation: an upper bound on
the continuation and control stages. Fine-tuning is counted in jobs, not in time.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from scheda.errors import ConfigError
from scheda.protocol.jobs import STEP_KINDS, Kind, fmt
from scheda.protocol.plan import continuation_jobs, da_jobs

TRAIN_EXAMPLES = 45000  # CIFAR-10's training split: what one epoch of the paper's runs sees


def plan(cfg: DictConfig) -> dict[str, Any]:
    """Per stage: jobs, model-epochs and evaluations, with hidden size per item."""
    scale = cfg.scale
    da = da_jobs(scale, cfg.table.raw)
    selection = {"hidden": {str(h): {"by_nu": {fmt(nu): {"checkpoint": "c", "epoch": scale.da.epochs, "nu": nu}
                                               for nu in scale.da.nu}} for h in scale.hidden}}
    cont = continuation_jobs(scale, cfg.table.continuations, selection)
    items: list[dict[str, Any]] = []  # one per model of a job: stage, hidden, epochs, evaluations, fused
    for job in da:
        if job.meta["kind"] == Kind.RAW:
            items.append({"stage": "da", "hidden": 0, "epochs": 0, "evals": 1, "models": 1})
            continue
        models = len(job.meta.get("nus", [None]))
        items.append({"stage": "da", "hidden": job.meta["hidden"], "epochs": scale.da.epochs, "models": models,
                      "evals": models * (scale.da.epochs // scale.da.eval_every)})
    longest: dict[tuple[int, str], tuple[int, int]] = {}  # (hidden, kind) -> (epochs, K) of its longest run
    for job in cont:
        kind, hidden = job.meta["kind"], job.meta["hidden"]
        epochs = job.meta.get("epochs", scale.random_nu.epochs)
        # a schedule evaluates after each level; a random-nu run every evaluate.every epochs
        evals = job.meta["levels"] if "levels" in job.meta else epochs // job.values["evaluate.every"]
        items.append({"stage": "continue", "hidden": hidden, "epochs": epochs, "evals": evals, "models": 1,
                      "eager": kind in (Kind.RANDOM_UNIFORM, Kind.RANDOM_DISCRETE)})  # nu per minibatch: no graph
        if kind in STEP_KINDS:
            longest[(hidden, kind)] = max(longest.get((hidden, kind), (0, 1)), (epochs, job.meta["K"]))
    if scale.control:  # each control is evaluated every K epochs (scheda.protocol.plan.controls_of)
        for (hidden, _), (epochs, K) in longest.items():
            items += [{"stage": "control", "hidden": hidden, "epochs": epochs, "evals": epochs // K, "models": 1}] * 2
    items += _seed_items(scale, cont)
    finetune_jobs = 2 * len(scale.hidden) * len(scale.seeds) if scale.finetune is not None else 0
    return {"items": items, "finetune_jobs": finetune_jobs}


def _seed_items(scale: DictConfig, cont: list) -> list[dict[str, Any]]:
    """Each further seed's replicas, at most: the best DA and the DA(nu0) of every kind that
    continues one (fused over the seeds when the grid is), and the longest run of each
    continuation kind with its two controls."""
    further = len(scale.seeds) - 1
    if further < 1:
        return []
    items: list[dict[str, Any]] = []
    for hidden in scale.hidden:
        runs = [job for job in cont if job.meta["hidden"] == hidden]
        kinds = {job.meta["kind"] for job in runs}
        starts = {job.meta["kind"] for job in runs if "init_from" in job.values}
        das = min(len(scale.da.nu), 1 + len(starts))
        da = {"stage": "seeds", "hidden": hidden, "epochs": scale.da.epochs,
              "evals": scale.da.epochs // scale.da.eval_every}
        items += [{**da, "models": further, "evals": further * da["evals"]}] * das if scale.da.fused \
            else [{**da, "models": 1}] * (das * further)
        for kind in sorted(kinds):
            longest = max((job for job in runs if job.meta["kind"] == kind), key=lambda j: j.meta.get("epochs", 0))
            epochs = longest.meta.get("epochs", scale.random_nu.epochs)
            evals = longest.meta.get("levels", epochs)
            copies = 3 if scale.control and kind in STEP_KINDS else 1
            items += [{"stage": "seeds", "hidden": hidden, "epochs": epochs, "evals": evals, "models": 1}] \
                * (copies * further)
    return items


def load_bench(path: str | Path) -> dict[str, Any]:
    try:
        bench = json.loads(Path(path).read_text())
        bench["rows"]
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"bench={path} is not a scripts/bench_train.py --json file ({exc}): "
                          f"run python scripts/bench_train.py --json FILE on the device first") from None
    return bench


def bench_row(bench: dict[str, Any], hidden: int, batch_size: int) -> dict[str, Any]:
    """The measured row nearest ``hidden`` at this minibatch, in fp32 (the runs' default precision)."""
    rows = [r for r in bench["rows"] if r.get("precision", "fp32") == "fp32"] or bench["rows"]
    rows = [r for r in rows if r["batch_size"] == batch_size] or rows
    return min(rows, key=lambda r: abs(r["hidden"] - hidden))


def epoch_seconds(bench: dict[str, Any], hidden: int, batch_size: int, fast: bool = False) -> float:
    """One model's epoch at ``hidden`` units: the measured row at this minibatch (the device's
    default step when the runs use it, ``fast``, else the eager torch step), scaled linearly in H
    from the nearest measured size."""
    row = bench_row(bench, hidden, batch_size)
    seconds = (row.get("default_s", row.get("graphed_s")) if fast else None)
    if seconds is None or math.isnan(seconds):
        seconds = row.get("eager_s", row.get("scheda_s"))
    return seconds * hidden / row["hidden"] * TRAIN_EXAMPLES / bench.get("n", TRAIN_EXAMPLES)


def estimate(cfg: DictConfig, bench: dict[str, Any] | None, batch_size: int) -> dict[str, Any]:
    """Jobs, model-epochs, evaluations and (with a benchmark) device-hours of ``cfg``'s scale."""
    p = plan(cfg)
    # Graphed wherever the bench measured a graph (CUDA), unless the runs turn it off or cannot take it.
    graphed = not {"trainer.cuda_graph=false", "trainer.fused=false", "trainer.precision=bf16"} & {
        *cfg.scale.train, *cfg.overrides}
    out: dict[str, Any] = {"jobs": {}, "model_epochs": {}, "evaluations": 0, "finetune_jobs": p["finetune_jobs"]}
    seconds_train = seconds_eval = 0.0
    grid = (bench or {}).get("grid")
    search = (bench or {}).get("lr_search")
    for item in p["items"]:
        stage = item["stage"]
        out["jobs"][stage] = out["jobs"].get(stage, 0) + 1
        out["model_epochs"][stage] = out["model_epochs"].get(stage, 0) + item["epochs"] * item["models"]
        out["evaluations"] += item["evals"]
        if bench is None or not item["hidden"]:
            continue
        one = epoch_seconds(bench, item["hidden"], batch_size, graphed and not item.get("eager"))
        # a fused sweep's cost per model from the row of its own size where measured there
        over_one = bench_row(bench, item["hidden"], batch_size).get("grid_over_one", grid and grid["grid_over_one"])
        fused = over_one / grid["models"] * item["models"] if grid and item["models"] > 1 else item["models"]
        seconds_train += item["epochs"] * one * fused
        if search:
            seconds_eval += item["evals"] * search["seconds"] * item["hidden"] / search["features"]
    if bench is not None:
        out.update(device=bench.get("device_name", bench.get("device")), train_hours=seconds_train / 3600,
                   eval_hours=seconds_eval / 3600, device_hours=(seconds_train + seconds_eval) / 3600,
                   eval_measured=bool(search))
    return out


def describe(cfg: DictConfig, est: dict[str, Any], bench_path: str | None) -> str:
    jobs = ", ".join(f"{stage} {n}" for stage, n in est["jobs"].items())
    if est["finetune_jobs"]:
        jobs += f", finetune {est['finetune_jobs']}"
    epochs = sum(est["model_epochs"].values())
    text = (f"plan for table={cfg.table.name} scale={cfg.scale.name}: "
            f"{sum(est['jobs'].values()) + est['finetune_jobs']} jobs ({jobs}), "
            f"{epochs:,} model-epochs ({', '.join(f'{s} {n:,}' for s, n in est['model_epochs'].items())}), "
            f"{est['evaluations']:,} evaluations")
    if "device_hours" not in est:
        return text + "; device-hours: give bench=<scripts/bench_train.py --json output> to estimate them"
    evals = f"evaluation {est['eval_hours']:.2f}" if est["eval_measured"] else "evaluation not measured"
    return (text + f"; about {est['device_hours']:.2f} device-hours on {est['device']} (training "
            f"{est['train_hours']:.2f}, {evals}; from {bench_path}; fine-tuning not counted)")
