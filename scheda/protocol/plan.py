"""Planning: which jobs each stage of the paper's protocol (Geras & Sutton 2015, Section 4.1)
runs, from the scale and table and, for the later stages, from what the earlier ones selected.

Stage 1 trains the DA grid (one run per hidden size, nu and lr, evaluated and checkpointed
every ``eval_every`` epochs); stage 3 continues the selected checkpoints with noise schedules
(ScheDA: decreasing; the control experiments: increasing, constant) or trains random-nu DAs
from scratch; stage 4 plans the controls of the best schedules, stage 5 the fine-tuning. One
out_dir per scale holds the runs of every table: a continuation (named by its kind and
settings) is shared by the tables that use it. Also every check that can run before training.
"""

from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import Any, Iterable

from omegaconf import DictConfig, OmegaConf

from scheda.config import flatten
from scheda.utils.errors import ConfigError
from scheda.utils.io import atomic_write
from scheda.protocol.config import STAGES, ScheduleGridConfig
from scheda.protocol.jobs import CONTINUATIONS, FINETUNES, STEP_KINDS, JobSpec, Kind, fmt
from scheda.protocol.launch import launcher_overrides
from scheda.model.schedule import build_schedule, level_count, nu_key, options_with_nu_key

log = logging.getLogger(__name__)






def check(cfg: DictConfig) -> None:
    """Every protocol value that can be checked before any training."""
    unknown = set(cfg.stages) - set(STAGES)
    if unknown:
        raise ConfigError(f"stages has {sorted(unknown)}: use any of {', '.join(STAGES)}")
    check_seeds(cfg.scale)
    da_jobs(cfg.scale, cfg.table.raw)
    launcher_overrides(cfg)
    for kind in cfg.table.continuations:
        if kind not in CONTINUATIONS and kind not in cfg.scale.schedules:
            raise ConfigError(f"table.continuations has {kind!r}: use any of {', '.join(CONTINUATIONS)}, or a "
                              f"schedule with its grid in scale.schedules.{kind}")
    for kind in cfg.scale.schedules:
        grid = schedule_grid(cfg.scale, kind)
        if nu_key({"name": kind}) is None:
            raise ConfigError(f"scale.schedules.{kind}: a continuation starts at its DA's nu, and schedule {kind} has "
                              f"no single one: use one of {', '.join(options_with_nu_key())}")
        if not grid.nu0:
            raise ConfigError(f"scale.schedules.{kind}.nu0 must list at least one value")
        for settings in _grid_points(grid):  # every planned schedule builds (or a one-line error now)
            build_schedule({"name": kind, nu_key({"name": kind}): grid.nu0[0], **settings})
    for kind in STEP_KINDS:
        grid = cfg.scale[kind]
        if kind in cfg.table.continuations and not (grid.nu0 and grid.delta_nu and grid.K):
            raise ConfigError(f"scale.{kind}.nu0, delta_nu and K must each list at least one value")


def check_seeds(scale: DictConfig) -> list[int]:
    seeds = [int(s) for s in scale.seeds]
    if not seeds:
        raise ConfigError("scale.seeds must list at least one seed (the first selects the hyper-parameters)")
    if len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ConfigError(f"scale.seeds={seeds}: list each seed once, each >= 0")
    return seeds


def check_scale_unchanged(scale: DictConfig, out_dir: Path) -> None:
    """An out_dir belongs to one scale: its values are kept in ``scale.yaml`` at the first
    invocation, and a later one that differs (``scale.hidden=[32]``, say) is refused before it
    could mix runs or overwrite the report. The description is text, not a setting; seeds may
    be added or removed, but the first (the selection seed) is fixed with the runs it chose."""
    path = out_dir / "scale.yaml"
    now = {k: v for k, v in OmegaConf.to_container(scale, resolve=True).items() if k != "description"}
    if path.exists():
        saved = OmegaConf.to_container(OmegaConf.load(path))
        saved_seeds = saved.pop("seeds", [0])  # a directory from before seeds: one seed, 0
        # The C grid moved from evaluate.* to classifier.* (the classifier owns its grid): the same setting.
        saved["train"] = [o.replace("evaluate.c_log2_", "classifier.c_log2_") for o in saved.get("train", [])]
        if saved_seeds[0] != now["seeds"][0]:
            raise ConfigError(f"{out_dir} selected its hyper-parameters with seed {saved_seeds[0]}; this invocation "
                              f"says scale.seeds={now['seeds']}: keep {saved_seeds[0]} first (further seeds may "
                              f"change), or give another out_dir=...")
        flat_saved = flatten(saved)
        flat_now = flatten({k: v for k, v in now.items() if k != "seeds"})
        for key in sorted(set(flat_saved) | set(flat_now)):
            if flat_saved.get(key) != flat_now.get(key):
                raise ConfigError(f"{out_dir} holds the runs of scale.{key}={flat_saved.get(key)}; this invocation "
                                  f"says scale.{key}={flat_now.get(key)}: give another out_dir=... (or delete that "
                                  f"directory)")
    atomic_write(path, lambda f: f.write(OmegaConf.to_yaml(OmegaConf.create(now)).encode()))


def da_jobs(scale: DictConfig, raw: bool) -> list[JobSpec]:
    grid = scale.da
    if grid.epochs < 1 or grid.eval_every < 1:
        raise ConfigError(f"scale.da.epochs={grid.epochs} and scale.da.eval_every={grid.eval_every} must be >= 1")
    if not (scale.hidden and grid.nu and grid.lr):
        raise ConfigError("scale.hidden, scale.da.nu and scale.da.lr must each list at least one value")
    jobs = [JobSpec("raw", "da", groups={"model": "raw"}, meta={"kind": Kind.RAW})] if raw else []
    for hidden in scale.hidden:
        if grid.fused:  # every nu of one (hidden, lr) in one process: batched matmuls (GPU)
            for lr in grid.lr:
                jobs.append(JobSpec(
                    f"da_h{hidden}_lr{fmt(lr)}_fused", "da", groups={"schedule": "constant"},
                    values={"model.hidden": hidden, "schedule.nu": grid.nu[0], "schedule.epochs": grid.epochs,
                            "trainer.parallel.nu": list(grid.nu), "optim.lr": lr,
                            "evaluate.every": grid.eval_every, "trainer.checkpoint_every": grid.eval_every},
                    meta={"kind": Kind.DA_FUSED, "hidden": hidden, "nus": list(grid.nu), "lr": lr,
                          "epochs": grid.epochs}))
            continue
        for nu in grid.nu:
            for lr in grid.lr:
                jobs.append(JobSpec(
                    f"da_h{hidden}_nu{fmt(nu)}_lr{fmt(lr)}", "da", groups={"schedule": "constant"},
                    values=da_values(hidden, nu, lr, grid),
                    meta={"kind": Kind.DA, "hidden": hidden, "nu": nu, "lr": lr, "epochs": grid.epochs}))
    return jobs


def da_values(hidden: int, nu: float, lr: float, grid: DictConfig) -> dict[str, Any]:
    """One DA of the grid: evaluated and checkpointed every ``eval_every`` epochs."""
    return {"model.hidden": hidden, "schedule.nu": nu, "schedule.epochs": grid.epochs, "optim.lr": lr,
            "evaluate.every": grid.eval_every, "trainer.checkpoint_every": grid.eval_every}


def continuation_jobs(scale: DictConfig, kinds: Iterable[str], selection: dict[str, Any]) -> list[JobSpec]:
    """ScheDA / increasing schedules from the selected DA(nu0) checkpoints (the paper's
    protocol) and the random-nu DAs, one per lr of the DA grid (selected on validation)."""
    jobs: list[JobSpec] = []
    for hidden_key, sel in selection["hidden"].items():
        hidden = int(hidden_key)
        for kind in kinds:
            if kind in STEP_KINDS:
                jobs += _step_jobs(kind, scale[kind], hidden, sel["by_nu"])
            elif kind in scale.schedules:
                jobs += _schedule_jobs(kind, schedule_grid(scale, kind), hidden, sel["by_nu"])
            elif scale.random_nu.hidden in (None, hidden):
                jobs += [_random_job(kind, scale.random_nu, hidden, lr) for lr in scale.da.lr]
    return jobs


def _starts(kind: str, grid: DictConfig, hidden: int, by_nu: dict[str, Any]) -> Iterable[tuple[float, dict]]:
    """Each nu0 of a continuation grid with the selected DA(nu0) it continues (none: skipped, said)."""
    for nu0 in grid.nu0:
        start = by_nu.get(fmt(nu0))
        if start is None:
            log.warning("%s from nu0=%g (%d hidden): no selected DA(%g) to continue; skipped", kind, nu0, hidden, nu0)
            continue
        yield nu0, start


def _step_jobs(kind: str, grid: DictConfig, hidden: int, by_nu: dict[str, Any]) -> list[JobSpec]:
    """One continuation per (nu0, delta_nu, K) that has at least one level between nu0 and
    nu_final (ScheDA from 0.1 with delta_nu 0.1 down to 0.05 has none: it is not planned)."""
    direction = "decreasing" if kind == Kind.SCHEDA else "increasing"
    jobs = []
    for nu0, start in _starts(kind, grid, hidden, by_nu):
        for delta_nu in grid.delta_nu:
            levels = level_count(STEP_KINDS[kind], nu0, delta_nu, grid.nu_final)
            if levels == 0:
                log.info("%s from nu0=%g with delta_nu=%g has no level up to nu_final=%g: not planned",
                         kind, nu0, delta_nu, grid.nu_final)
                continue
            for K in grid.K:
                jobs.append(JobSpec(
                    f"{kind}_h{hidden}_nu{fmt(nu0)}_dnu{fmt(delta_nu)}_K{K}", "continue", groups={"schedule": direction},
                    values={"model.hidden": hidden, "schedule.nu0": nu0, "schedule.delta_nu": delta_nu,
                            "schedule.K": K, "schedule.initial_epochs": 0, "schedule.nu_final": grid.nu_final,
                            "optim.lr": grid.lr, "init_from": start["checkpoint"], "trainer.checkpoint_every": 0},
                    meta={"kind": kind, "hidden": hidden, "nu0": nu0, "delta_nu": delta_nu, "K": K,
                          "levels": levels, "epochs": levels * K, "start_epoch": start["epoch"],
                          "start_checkpoint": start["checkpoint"]}))
    return jobs


def schedule_grid(scale: DictConfig, kind: str) -> DictConfig:
    """``scale.schedules.<kind>`` checked against its schema (ScheduleGridConfig)."""
    try:
        return OmegaConf.merge(OmegaConf.structured(ScheduleGridConfig), scale.schedules[kind])
    except Exception as exc:  # noqa: BLE001 - OmegaConf's validation error, as the user's error
        raise ConfigError(f"scale.schedules.{kind}: {str(exc).splitlines()[0]}") from None


def _grid_points(grid: DictConfig) -> list[dict[str, Any]]:
    keys = list(grid.grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(list(grid.grid[k]) for k in keys))]


def _schedule_jobs(kind: str, grid: DictConfig, hidden: int, by_nu: dict[str, Any]) -> list[JobSpec]:
    """Any registered schedule continued from the selected DA(nu0) checkpoints: one run per
    combination of ``scale.schedules.<kind>.grid``, nu0 in the schedule's own noise-level key."""
    key = nu_key({"name": kind})
    jobs = []
    for nu0, start in _starts(kind, grid, hidden, by_nu):
        for settings in _grid_points(grid):
            schedule = build_schedule({"name": kind, key: nu0, **settings})
            tag = "_".join(f"{k}{fmt(v) if isinstance(v, float) else v}" for k, v in settings.items())
            jobs.append(JobSpec(
                f"{kind}_h{hidden}_nu{fmt(nu0)}{'_' + tag if tag else ''}", "continue", groups={"schedule": kind},
                values={"model.hidden": hidden, f"schedule.{key}": nu0,
                        **{f"schedule.{k}": v for k, v in settings.items()}, "optim.lr": grid.lr,
                        "init_from": start["checkpoint"], "trainer.checkpoint_every": 0},
                meta={"kind": kind, "hidden": hidden, "nu0": nu0, "settings": settings,
                      "levels": len(schedule.stages), "epochs": schedule.total_epochs,
                      "start_epoch": start["epoch"], "start_checkpoint": start["checkpoint"]}))
    return jobs


def _random_job(kind: str, cfg: DictConfig, hidden: int, lr: float) -> JobSpec:
    schedule = {"schedule.low": cfg.low, "schedule.high": cfg.high} if kind == Kind.RANDOM_UNIFORM \
        else {"schedule.values": list(cfg["values"])}
    every = max(1, cfg.epochs // 20)
    return JobSpec(f"{kind}_h{hidden}_lr{fmt(lr)}", "continue", groups={"schedule": kind},
                   values={"model.hidden": hidden, "schedule.epochs": cfg.epochs, "optim.lr": lr, **schedule,
                           "evaluate.every": every, "trainer.checkpoint_every": every},
                   meta={"kind": kind, "hidden": hidden, "lr": lr})


def control_jobs(scale: DictConfig, kinds: Iterable[str], continued: dict[str, Any]) -> list[JobSpec]:
    """For the best run of each step-schedule kind per hidden size, two controls from the same
    checkpoint (and, through the seed, the same training stream: common random numbers):

    * ``control``: the DA trained on at its own nu0 for as long as that run's whole
      continuation, evaluated where the schedule switched (every K epochs): tells the
      schedule's effect from that of more epochs;
    * ``jump``: straight to the run's selected final nu for as many epochs as it took to reach
      it, evaluated every K: tells a gradual schedule from a single switch.
    """
    if not scale.control:
        return []
    jobs: dict[str, JobSpec] = {}
    for hidden, by_kind in continued.items():
        for kind in kinds:
            best = by_kind.get(kind, {}).get("best")
            if kind in STEP_KINDS and best is not None:
                for job in controls_of(scale[kind], int(hidden), best):
                    jobs.setdefault(job.name, job)
    return list(jobs.values())


def controls_of(grid: DictConfig, hidden: int, best: dict[str, Any]) -> list[JobSpec]:
    common = {"model.hidden": hidden, "optim.lr": grid.lr, "init_from": best["start_checkpoint"],
              "evaluate.every": best["K"], "trainer.checkpoint_every": 0}
    meta = {"hidden": hidden, "nu0": best["nu0"], "K": best["K"], "start_epoch": best["start_epoch"],
            "start_checkpoint": best["start_checkpoint"]}
    same = JobSpec(f"control_h{hidden}_nu{fmt(best['nu0'])}_{best['epochs']}ep", "control",
                   groups={"schedule": "constant"},
                   values={**common, "schedule.nu": best["nu0"], "schedule.epochs": best["epochs"]},
                   meta={"kind": Kind.CONTROL, **meta, "nu": best["nu0"], "epochs": best["epochs"]})
    jump = JobSpec(f"jump_h{hidden}_nu{fmt(best['nu0'])}_to{fmt(best['nu'])}_{best['epoch']}ep", "control",
                   groups={"schedule": "constant"},
                   values={**common, "schedule.nu": best["nu"], "schedule.epochs": best["epoch"]},
                   meta={"kind": Kind.JUMP, **meta, "nu": best["nu"], "epochs": best["epoch"]})
    return [same, jump]


def finetune_jobs(preset: str, selection: dict[str, Any], continued: dict[str, Any]) -> list[JobSpec]:
    """Supervised fine-tuning of the best DA's and the best ScheDA's encoder of each hidden size
    (the paper's Table 3 has both; 36.77 -> 35.7 % for the 5000-unit ScheDA)."""
    jobs = []
    for hidden, sel in selection["hidden"].items():
        for kind, of in FINETUNES.items():
            best = sel["best"] if of == Kind.DA else continued.get(hidden, {}).get(of, {}).get("best")
            if best and best.get("checkpoint"):
                jobs.append(JobSpec(
                    f"{kind}_h{hidden}", "finetune", groups={"finetune": preset},
                    values={"model.hidden": int(hidden), "finetune.enabled": True, "finetune.standalone": True,
                            "init_from": best["checkpoint"]},
                    meta={"kind": kind, "hidden": int(hidden), "from": best["run"]}))
    return jobs
