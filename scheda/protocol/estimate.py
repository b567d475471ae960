"""Before a scale runs: the jobs and model-epochs it plans, and what they cost on a device whose
speed ``scripts/bench_train.py --json`` measured (``bench=<that file>``).

The plan assumes every DA of the grid is selected (the continuations of every nu0 are planned)
and counts each control at the length of its kind's longest continuation: an upper bound on
the continuation and control phases. Each cost comes from the benchmark's measurements: an epoch
of each hidden size (its own row) with the step the runs get, a fused sweep's cost over one
model's, the C search (scaled by the number of features), an epoch of fine-tuning (every
learning rate of the preset for its ``max_epochs``), and per job the start of a process that
imports scheda and initialises the device, the load of the data to the device, and the build of
the step (a CUDA graph's capture).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from scheda.config import typed
from scheda.utils.errors import ConfigError
from scheda.protocol.phases import finetune_preset, job_config

TRAIN_EXAMPLES = 45000  # CIFAR-10's training split: an epoch of the benchmark (its "n") and of Table 1's runs
INPUTS = 3072  # CIFAR-10's pixels: the benchmark's input size (scripts/bench_train.py) and Table 1's raw features


def items(cfg: DictConfig, beyond: DictConfig | None = None) -> dict[str, Any]:
    """Per phase of the table (each phase's own estimate: scheda.protocol.tables): one item per
    model of a job, with its phase, hidden size, epochs and evaluations; fine-tuning jobs counted
    apart (their cost is their preset's). ``beyond``: a config whose items are left out, one for
    one (a block that reads another block's selection trains what its seeds add to that block's)."""
    from scheda.protocol.tables import phases_of

    planned = [item for phase in phases_of(cfg) for item in phase.estimate(cfg)]
    if beyond is not None:
        for item in (item for phase in phases_of(beyond) for item in phase.estimate(beyond)):
            if item not in planned:
                raise ConfigError(f"the plan of table={cfg.table.name} holds no {item['phase']} model like the "
                                  f"selection block's ({item}): a block that reads its selection sets only further "
                                  f"seeds (scale.seeds)")
            planned.remove(item)  # each of its items is one of cfg's: a block adds seeds to it
    return {"items": [i for i in planned if not i.get("finetune")],
            "finetune_jobs": sum(1 for i in planned if i.get("finetune")),
            "finetune_stages": [stage_of(i) for i in planned if i.get("finetune")]}


def stage_of(item: dict[str, Any]) -> str:
    """The launch that runs an item's job (``stage`` where a phase runs several in turn, as the
    seeds phase does: seed_da, then seed_continue, then seed_finetune), else its phase."""
    return item.get("stage", item["phase"])


def makespan(seconds: list[float], slots: int) -> float:
    """The wall time of one launch's jobs on ``slots`` jobs at once, the longest first, each on the
    first slot to free (scheda.protocol.launch starts a phase's jobs by the most work left, and
    Hydra's joblib launcher dispatches them so): a launch of fewer jobs than slots leaves slots
    idle, and one long job keeps the launch waiting while the others have finished."""
    import heapq

    free = [0.0] * max(1, slots)
    for s in sorted(seconds, reverse=True):
        heapq.heappush(free, heapq.heappop(free) + s)
    return max(free)


def load_bench(path: str | Path) -> dict[str, Any]:
    try:
        bench = json.loads(Path(path).read_text())
        bench["rows"]
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"bench={path} is not a scripts/bench_train.py --json file ({exc}): "
                          f"run python scripts/bench_train.py --json FILE on the device first") from None
    return bench


def runs_precision(cfg: DictConfig) -> str:
    """The precision the table's runs train in, as their composed trainer says (``scale.train`` may
    name it): bf16, or fp32 for the rest (tf32 is timed as fp32's rows, under CUDA's TF32 switch)."""
    return "bf16" if typed("trainer", job_config(cfg).trainer).precision == "bf16" else "fp32"


def for_precision(bench: dict[str, Any], precision: str, path: str | None = None) -> dict[str, Any]:
    """The benchmark with the rows of ``precision`` alone: the runs are charged the step that will
    run. fp32 keeps every row as before (older files name no precision); bf16 needs rows of its own."""
    if precision == "fp32":
        return bench
    rows = [r for r in bench["rows"] if r.get("precision") == precision]
    if not rows:
        raise ConfigError(f"bench={path or 'the benchmark'} has no {precision} rows, and the runs train in {precision}: "
                          f"run python scripts/bench_train.py --precisions fp32 {precision} --json FILE")
    return {**bench, "rows": rows}


def bench_row(bench: dict[str, Any], hidden: int, batch_size: int) -> dict[str, Any]:
    """The measured row nearest ``hidden`` at this minibatch, in fp32 (the runs' default precision;
    a benchmark of bf16 rows alone, :func:`for_precision`'s, gives those)."""
    rows = [r for r in bench["rows"] if r.get("precision", "fp32") == "fp32"] or bench["rows"]
    rows = [r for r in rows if r["batch_size"] == batch_size] or rows
    return min(rows, key=lambda r: abs(r["hidden"] - hidden))


def epoch_seconds(bench: dict[str, Any], hidden: int, batch_size: int, fast: bool = False,
                  examples: int = TRAIN_EXAMPLES, key: str | None = None, inputs: int = INPUTS) -> float:
    """One model's epoch of ``examples`` at ``hidden`` units and ``inputs`` inputs: the measured
    row at this minibatch (``key``, or the device's default step when the runs use it, ``fast``,
    else the eager torch step), scaled linearly in H and inputs from the nearest measured size."""
    row = bench_row(bench, hidden, batch_size)
    seconds = row.get(key) if key else row.get("default_s", row.get("graphed_s")) if fast else None
    if seconds is None or math.isnan(seconds):
        seconds = row.get("eager_s", row.get("scheda_s"))
    return (seconds * hidden / row["hidden"] * examples / bench.get("n", TRAIN_EXAMPLES)
            * inputs / bench.get("inputs", INPUTS))


def search_share(cfg: DictConfig) -> float:
    """The runs' C grid over the benchmark's (torch_lr's default, 17 values): the C search's time
    scales with the settings it fits (the runs' classifier as they compose it)."""
    from scheda.evaluation.classifiers import TorchLRConfig

    return len(typed("classifier", job_config(cfg).classifier).grid()) / len(TorchLRConfig().grid())


def train_examples(cfg: DictConfig) -> int:
    """An epoch's examples: ``dataset.train_limit`` where the runs set it, else the table's data
    set's (``table.train_examples``: CIFAR-10's 45000)."""
    limit = job_config(cfg).dataset.get("train_limit")
    return int(limit) if limit else int(cfg.table.get("train_examples", TRAIN_EXAMPLES))


def finetune_budget(cfg: DictConfig) -> tuple[int, int, bool]:
    """(learning rates, epochs each, fused) of the runs' fine-tuning: ``configs/finetune/<scale.finetune>.yaml``
    under the runs' own overrides, as a fine-tuning job composes it."""
    f = finetune_preset(cfg)
    return len(f.lrs), int(f.max_epochs), bool(f.fused)


def job_seconds(bench: dict[str, Any], examples: int = TRAIN_EXAMPLES) -> float:
    """A job's cost beyond its epochs and evaluations, as measured: the data's load to the device
    (scaled to ``examples``) and the step's build."""
    return (bench.get("data_load_s") or 0.0) * examples / bench.get("n", TRAIN_EXAMPLES) + (bench.get("build_s") or 0.0)


def start_seconds(bench: dict[str, Any], jobs: int, phases: int, launcher: str) -> float:
    """Processes' starts (imports, the device's initialisation): scheda-reproduce's own, and one
    per phase where Hydra's basic launcher runs a phase's jobs in one process, else one per job."""
    return (bench.get("job_start_s") or 0.0) * (1 + (phases if launcher == "basic" else jobs))


def item_seconds(item: dict[str, Any], bench: dict[str, Any], batch_size: int, fast: bool,
                 examples: int = TRAIN_EXAMPLES, search_scale: float = 1.0,
                 inputs: int = INPUTS) -> tuple[float, float]:
    """(training, evaluation) seconds of one planned job (an item of :func:`plan`); the raw
    baseline (no hidden units) evaluates the ``inputs`` features. ``search_scale``: the runs' C
    search over the benchmark's (:func:`search_share`)."""
    grid, search = bench.get("grid"), bench.get("lr_search")
    per_feature = search_scale * search["seconds"] / search["features"] if search else 0.0
    if not item["hidden"]:
        return 0.0, item["evals"] * per_feature * inputs
    # an item's own step where it names the benchmark's timing of it (a composite DA trains by autograd)
    one = epoch_seconds(bench, item["hidden"], batch_size, fast and not item.get("eager"), examples,
                        key=item.get("timing"), inputs=inputs)
    # a fused sweep's cost per model from the row of its own size where measured there
    over_one = bench_row(bench, item["hidden"], batch_size).get("grid_over_one", grid and grid["grid_over_one"])
    fused = over_one / grid["models"] * item["models"] if grid and item["models"] > 1 else item["models"]
    return item["epochs"] * one * fused, item["evals"] * per_feature * item["hidden"]


def step_timing(cfg: DictConfig) -> str | None:
    """The benchmark's timing of the step the runs get: a named step's own (its module in
    scheda.training.steps), ``auto``'s the device's default (the benchmark's ``default_s``: the Triton
    step graphed on CUDA) unless the runs turn CUDA graphs off; None: the eager torch step's."""
    from scheda.training.steps import step_kind

    t = typed("trainer", job_config(cfg).trainer)  # typed: 0.2's step flags read as trainer.step
    if t.step == "auto":
        return "default_s" if t.cuda_graph is not False else None
    return step_kind(t.step).timing(t.cuda_graph)


def fast_step(cfg: DictConfig) -> bool:
    """Whether the runs get the device's default step, as the benchmark timed it (``default_s``)."""
    return step_timing(cfg) == "default_s"


def estimate(cfg: DictConfig, bench: dict[str, Any] | None, batch_size: int,
             beyond: DictConfig | None = None) -> dict[str, Any]:
    """Jobs, model-epochs, evaluations and (with a benchmark) device-hours of ``cfg``'s scale, each
    epoch charged at the runs' own precision (:func:`for_precision`); beyond ``beyond``'s (:func:`items`)."""
    p = items(cfg, beyond)
    precision = runs_precision(cfg)
    if bench is not None:
        bench = for_precision(bench, precision, cfg.get("bench"))
    timing, examples, inputs = step_timing(cfg), train_examples(cfg), int(cfg.table.get("inputs", INPUTS))
    fast = timing == "default_s"
    out: dict[str, Any] = {"jobs": {}, "model_epochs": {}, "evaluations": 0, "finetune_jobs": p["finetune_jobs"],
                           "checkpoint_bytes": 0, "precision": precision}
    seconds_shared = 0.0
    charged: list[tuple[str, dict[str, float]]] = []  # each job's launch and seconds by part (train, eval, finetune)
    per_job = job_seconds(bench, examples) if bench is not None else 0.0
    for item in p["items"]:
        phase = item["phase"]
        if item.get("job", True):  # an analysis' work is no job of its own
            out["jobs"][phase] = out["jobs"].get(phase, 0) + 1
        if item["epochs"]:
            out["model_epochs"][phase] = out["model_epochs"].get(phase, 0) + item["epochs"] * item["models"]
        out["evaluations"] += item["evals"]
        if item.get("checkpoints", True):  # an analysis' evaluations keep no checkpoint
            out["checkpoint_bytes"] += item["evals"] * checkpoint_bytes(item["hidden"], item.get("inputs", inputs))
        if bench is not None:
            if timing not in (None, "default_s"):  # every model by the named step (autograd's, say)
                item = {"timing": timing, **item}
            # a layer stacked on another takes that layer's units as its inputs
            train, evals = item_seconds(item, bench, batch_size, fast, examples, search_share(cfg),
                                        item.get("inputs", inputs))
            if item.get("job", True):
                charged.append((stage_of(item), {"train": train, "eval": evals}))
            else:  # an analysis runs in the protocol's own process, on every core's threads
                seconds_shared += train + evals
    if bench is None:
        return out
    jobs = sum(1 for item in p["items"] if item.get("job", True)) + p["finetune_jobs"]
    phases = len({item["phase"] for item in p["items"]}) + bool(p["finetune_jobs"])
    starts = start_seconds(bench, jobs, phases, cfg.launcher)
    seconds_jobs = jobs * per_job + starts
    seconds_finetune, finetune_measured, finetune_each = 0.0, True, 0.0
    if p["finetune_jobs"]:
        lrs, epochs, fused = finetune_budget(cfg)
        for hidden in cfg.scale.hidden:  # the best DA and the best ScheDA of each size, per seed
            row = bench_row(bench, hidden, batch_size)
            finetune_measured &= "finetune_s" in row
            if fused and "finetune_grid_s" in row:  # every rate in one step, measured for the paper's five
                per_rate = epoch_seconds(bench, hidden, batch_size, examples=examples, key="finetune_grid_s",
                                         inputs=inputs) / 5
            else:
                per_rate = epoch_seconds(bench, hidden, batch_size, examples=examples, key="finetune_s", inputs=inputs)
            seconds_finetune += p["finetune_jobs"] / len(cfg.scale.hidden) * lrs * epochs * per_rate
        finetune_each = seconds_finetune / p["finetune_jobs"]
    # A benchmark timed as K jobs side by side on one device (bench_train.py --side-by-side K: each
    # timing is one job's while K run) gives the device K jobs' work in that time, where K jobs can
    # run: the launches run in turn, their jobs on K slots (:func:`makespan`), so a launch of fewer
    # jobs leaves slots idle and one long job keeps it waiting. A launch of one job gets every core
    # (scheda.protocol.launch): charged at the benchmark's copy timed alone where it has one
    # (--alone), that job holds the whole device. The processes' starts and the analyses are
    # shared by every core.
    share = (bench.get("side_by_side") or {}).get("jobs", 1)
    charged += [(stage, {"finetune": finetune_each}) for stage in p["finetune_stages"]]
    jobs_in = Counter(stage for stage, _ in charged)
    alone = alone_factors(bench, batch_size) if share > 1 else None
    spent = {"train": 0.0, "eval": 0.0, "finetune": 0.0}  # device-seconds of each part, times share
    jobs_of: dict[str, list[float]] = {}  # launch -> each of its jobs' seconds
    for stage, parts in charged:
        lone = alone is not None and jobs_in[stage] == 1  # it holds the whole device, at the alone timings
        for part, seconds in parts.items():
            parts[part] = seconds * (alone[part] if lone else 1)
            spent[part] += parts[part] * (share if lone else 1)
        jobs_of.setdefault(stage, []).append(sum(parts.values()) + per_job)
    seconds_train, seconds_eval, seconds_finetune = spent["train"], spent["eval"], spent["finetune"]
    total = seconds_train + seconds_eval + seconds_jobs + seconds_finetune
    launches = {stage: makespan(seconds, share) for stage, seconds in jobs_of.items()}
    wall = sum(launches.values()) + (starts + seconds_shared) / share
    hours = {f"{part}_hours": seconds / 3600 / share for part, seconds in (
        ("train", seconds_train), ("eval", seconds_eval), ("job", seconds_jobs), ("finetune", seconds_finetune))}
    hours.update(idle_hours=max(0.0, wall - total / share) / 3600, device_hours=max(wall, total / share) / 3600)
    out.update(device=bench.get("device_name", bench.get("device")), **hours, side_by_side=share,
               alone_measured=alone is not None,
               launches={stage: {"jobs": len(jobs_of[stage]), "hours": seconds / 3600} for stage, seconds in launches.items()},
               eval_measured="lr_search" in bench,
               jobs_measured="job_start_s" in bench, finetune_measured=finetune_measured)
    return out


def alone_factors(bench: dict[str, Any], batch_size: int) -> dict[str, float] | None:
    """A lone job's training, evaluation and fine-tuning time over one beside others, from the
    benchmark's copy timed alone on every thread (``alone``, bench_train.py --side-by-side K --alone)
    against the side-by-side row of its size; None where it has none (a lone job is then charged
    at the side-by-side timings: an upper bound)."""
    lone = bench.get("alone")
    if not lone or not lone.get("default_s"):
        return None
    row = bench_row(bench, int(lone.get("hidden", bench["rows"][0]["hidden"])), int(lone.get("batch_size", batch_size)))
    train = lone["default_s"] / row.get("default_s", row.get("eager_s"))
    search = (bench.get("lr_search") or {}).get("seconds")
    evals = lone["lr_search_s"] / search if search and lone.get("lr_search_s") else train
    tune = lone["finetune_s"] / row["finetune_s"] if lone.get("finetune_s") and row.get("finetune_s") else train
    return {"train": train, "eval": evals, "finetune": tune}


def checkpoint_bytes(hidden: int, inputs: int) -> int:
    """One checkpoint of a DA: W, b and b' in float32 (the plain SGD it trains with keeps no other
    state); every run keeps all of its checkpoints, one per evaluation at most (the continuations
    start from the selected epochs'). 0 for the raw baseline."""
    return 4 * (hidden * inputs + hidden + inputs) if hidden else 0


def describe(cfg: DictConfig, est: dict[str, Any], bench_path: str | None) -> str:
    jobs = ", ".join(f"{phase} {n}" for phase, n in est["jobs"].items())
    if est["finetune_jobs"]:
        jobs += f", finetune {est['finetune_jobs']}"
    epochs = sum(est["model_epochs"].values())
    # under the rule of training to convergence every count is its cap's: the most it can take
    most = "at most " if cfg.scale.get("patience") is not None else ""
    text = (f"plan for table={cfg.table.name} scale={cfg.scale.name}: "
            f"{sum(est['jobs'].values()) + est['finetune_jobs']} jobs ({jobs}), "
            f"{most}{epochs:,} model-epochs ({', '.join(f'{s} {n:,}' for s, n in est['model_epochs'].items())}), "
            f"{est['evaluations']:,} evaluations")
    if most:
        text += f" (every model at its cap; scale.patience={cfg.scale.patience} stops them earlier)"
    size = est["checkpoint_bytes"]
    size = f"{size / 1e9:,.1f} GB" if size >= 1e9 else f"{size / 1e6:,.1f} MB"
    text += f", {most}{size} of checkpoints in {cfg.out_dir}"
    if "device_hours" not in est:
        return text + "; device-hours: give bench=<scripts/bench_train.py --json output> to estimate them"
    def part(name: str, key: str, measured: bool) -> str:
        return f"{name} {est[key]:.2f}" if measured else f"{name} not measured"

    parts = [part("training", "train_hours", True), part("evaluation", "eval_hours", est["eval_measured"]),
             part("jobs' start", "job_hours", est["jobs_measured"])]
    if est["finetune_jobs"]:
        parts.append(part("fine-tuning", "finetune_hours", est["finetune_measured"]))
    if est.get("idle_hours", 0.0) >= 0.005:
        parts.append(f"slots idle while a launch has fewer jobs than {est['side_by_side']} or waits on its longest "
                     f"{est['idle_hours']:.2f}")
    jobs_at_once = f", {est['side_by_side']} jobs side by side as timed" if est.get("side_by_side", 1) > 1 else ""
    if jobs_at_once and est.get("alone_measured"):
        jobs_at_once += " (a launch of one job as timed alone on every core)"
    precision = f" in {est['precision']}" if est.get("precision", "fp32") != "fp32" else ""
    return (text + f"; about {est['device_hours']:.2f} device-hours{precision} on {est['device']}{jobs_at_once} "
            f"({', '.join(parts)}; from {bench_path})")


def by_launch(est: dict[str, Any]) -> str | None:
    """Where a plan's wall time goes: each launch's (a phase, or a stage of one) hours and jobs, the
    longest first, so a cut can be chosen by what it saves; None without a benchmark."""
    launches = est.get("launches")
    if not launches:
        return None
    order = sorted(launches.items(), key=lambda kv: -kv[1]["hours"])
    k = est.get("side_by_side", 1)
    return (f"by launch, on {k} slot{'s' if k != 1 else ''}, the longest first: " + ", ".join(
        f"{stage} {v['hours']:.2f} h ({v['jobs']} job{'s' if v['jobs'] != 1 else ''})" for stage, v in order))


def against_runs(cfg: DictConfig, bench: dict[str, Any], batch_size: int, runs: list[dict[str, Any]],
                 bench_path: str) -> list[str]:
    """The benchmark's cost model against the runs' own clocks: for each size and step, an epoch
    and an evaluation as they ran (the median over every epoch and evaluation the table's runs
    logged, so a pause or a resume does not weigh) beside what the plan charged for one. This checks
    the plan's per-epoch cost apart from its caps, which a patience rule stops models well short of.
    ``runs``: the results.json of the table's jobs (fine-tuning jobs are costed by their preset, and
    left out here)."""
    import statistics

    from scheda.runs.rundir import read_results

    fast, examples = fast_step(cfg), train_examples(cfg)
    bench = for_precision(bench, runs_precision(cfg), bench_path)
    per_feature = search_share(cfg) * bench["lr_search"]["seconds"] / bench["lr_search"]["features"] \
        if bench.get("lr_search") else None
    groups: dict[tuple[int, int, str], dict[str, list[float]]] = {}
    for results in runs:
        config, step = results.get("config") or {}, results.get("step") or {}
        hidden = (config.get("model") or {}).get("hidden")
        if not hidden or (config.get("finetune") or {}).get("enabled") or not results.get("history"):
            continue
        inputs = int(cfg.table.get("inputs", INPUTS))
        if config.get("stack_on"):  # a stacked layer's inputs: the units of the layer below
            below = read_results(Path(config["stack_on"]))
            if below is None:
                continue
            inputs = int(below["config"]["model"]["hidden"])
        kind = step.get("kind", "?")
        if (config.get("model") or {}).get("name") == "composite" and kind != "autograd":
            kind = "composite"  # its own fused step, charged as the plan charged it (composite_s)
        group = groups.setdefault((int(hidden), inputs, kind), {"epochs": [], "evals": []})
        group["epochs"] += [e["seconds"] for e in results["history"] if e.get("seconds")]
        group["evals"] += [e["seconds"] for e in results.get("evaluations") or [] if e.get("seconds")]
    lines: list[str] = []
    typical = charged_all = 0.0  # every epoch and evaluation at its group's median, and at its charge
    n_epochs = n_evals = 0
    for (hidden, inputs, kind), measured in sorted(groups.items()):
        key = {"autograd": "autograd_s", "composite": "composite_s"}.get(kind)
        charged = epoch_seconds(bench, hidden, batch_size, fast and kind in ("triton", "two_pass"), examples,
                                key=key, inputs=inputs)
        epoch = statistics.median(measured["epochs"])
        timed = bench_row(bench, hidden, batch_size).get(key) if key else None
        untimed = " as a DA's: the benchmark has no composite_s" \
            if key == "composite_s" and (timed is None or math.isnan(timed)) else ""
        text = (f"{hidden} units on {inputs} inputs, {kind} step: an epoch {_seconds(epoch)} (median of "
                f"{len(measured['epochs']):,}) against {_seconds(charged)} charged{untimed} ({epoch / charged:.2f}x)")
        n_epochs += len(measured["epochs"])
        typical += epoch * len(measured["epochs"])
        charged_all += charged * len(measured["epochs"])
        if measured["evals"] and per_feature:
            evaluation, charged_eval = statistics.median(measured["evals"]), per_feature * hidden
            text += (f", an evaluation {_seconds(evaluation)} (median of {len(measured['evals']):,}) against "
                     f"{_seconds(charged_eval)} ({evaluation / charged_eval:.2f}x)")
            n_evals += len(measured["evals"])
            typical += evaluation * len(measured["evals"])
            charged_all += charged_eval * len(measured["evals"])
        lines.append(text)
    if not lines:
        return []
    # the cost model over the work the runs did, apart from the caps (and, by the medians, from pauses)
    evals = f" and {n_evals:,} evaluations" if n_evals else ""
    k = int((bench.get("side_by_side") or {}).get("jobs", 1))
    return [f"- The benchmark against the runs ({bench_path}; measured over charged: above 1, the runs were slower "
            f"than the plan assumed, on shared or slower cores): " + "; ".join(lines),
            f"- In all, the {n_epochs:,} epochs{evals} the runs logged, each at its group's median, come to "
            f"{typical / 3600:.2f} job-hours against {charged_all / 3600:.2f} charged ({typical / charged_all:.2f}x)"
            + (f"; {k} jobs at once, as the benchmark timed them, make that about {typical / k / 3600:.2f} hours of wall "
               f"time" if k > 1 else "")]


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value >= 1 else f"{value:.2g} s"
