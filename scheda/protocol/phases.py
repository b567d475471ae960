"""The phases: which jobs each phase of the paper's protocol (Geras & Sutton 2015, Section 4.1)
runs, from the scale and table and, for the later phases, from what the earlier ones selected.

Phase 1 trains the DA grid (one run per hidden size, nu and lr, evaluated and checkpointed
every ``eval_every`` epochs); phase 3 continues the selected checkpoints with noise schedules
(ScheDA: decreasing; the control experiments: increasing, constant) or trains random-nu DAs
from scratch; phase 4 plans the controls of the best schedules, phase 5 the fine-tuning. One
out_dir per scale holds the runs of every table: a continuation (named by its kind and
settings) is shared by the tables that use it. Also every check that can run before training.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Iterable

from omegaconf import DictConfig, OmegaConf

from scheda.utils.errors import ConfigError
from scheda.runs.rundir import flatten
from scheda.utils.io import atomic_write
from scheda.protocol.jobs import JobSpec, fmt, rule_values
from scheda.protocol.kinds import FINETUNE, continuation, control_kinds, kind_of, of_role
from scheda.protocol.kinds.da import DA, DAFused, Raw
from scheda.protocol.kinds.schedule import ScheduleKind
from scheda.protocol.launch import launcher_overrides
from scheda.protocol.seed_report import check_declared

log = logging.getLogger(__name__)


def check(cfg: DictConfig) -> None:
    """Every protocol value that can be checked before any training."""
    if cfg.table.scales and cfg.scale.name not in cfg.table.scales:
        raise ConfigError(f"table={cfg.table.name} has no scale={cfg.scale.name}: use scale="
                          f"{' | '.join(cfg.table.scales)} (configs/table_scale/{cfg.table.name}_<scale>.yaml)")
    check_seeds(cfg.scale)
    control_kinds(cfg.scale)
    if cfg.scale.patience is not None and cfg.scale.patience < 1:
        raise ConfigError(f"scale.patience={cfg.scale.patience} must be >= 1 (evaluations without a new best) or null")
    check_job_overrides(cfg, da_jobs(cfg.scale, cfg.table.raw))
    pruning = job_config(cfg).trainer.keep_checkpoints
    if pruning is not None:  # continuations, controls, fine-tunings and seeds start from epochs chosen after the runs trained
        raise ConfigError(f"trainer.keep_checkpoints={pruning}: scheda-reproduce continues runs from checkpoints at "
                          f"epochs it chooses after they trained (each further seed's at the selection seed's best "
                          f"epoch), so it keeps every one: drop it (trainer.keep_checkpoints is for scheda-train runs)")
    launcher_overrides(cfg)
    kinds = [continuation(name, cfg.scale) for name in cfg.table.continuations]
    for kind in [*kinds, *(ScheduleKind(name) for name in cfg.scale.schedules)]:
        kind.check(cfg.scale)
    check_declared(cfg)


def check_job_overrides(cfg: DictConfig, jobs: list[JobSpec]) -> None:
    """What every job is given (``scale.train``, ``overrides=[...]``) makes a training run's config
    with a DA job's own values: a misspelt key, a value of the wrong type or out of its range is
    refused here in one line, before any job is launched (a Slurm job waits in a queue first), and
    by ``dry_run=true`` too. The device is not asked: the jobs may run on other machines."""
    from scheda.commandline import compose_train
    from scheda.config import check_composed
    from scheda.planning.run_config import typed_config

    job = next((j for j in jobs if j.meta["kind"] != Raw.name), None)
    if job is None:
        return
    own = [*(f"{g}={c}" for g, c in job.groups.items()), *(f"{k}={v}" for k, v in job.values.items())]
    for given, where in ((list(cfg.scale.train), f"in scale={cfg.scale.name}'s train list"),
                         ([*cfg.scale.train, *cfg.overrides], "in overrides=[...]")):
        try:
            train = compose_train([*own, *given])
            check_composed(train)
            typed_config(train)
        except ConfigError as exc:
            raise ConfigError(f"{exc} ({where}, given to every job)") from None
        if not cfg.overrides:
            return


_COMPOSED: dict[str, DictConfig] = {}


def job_config(cfg: DictConfig, *groups: str) -> DictConfig:
    """A DA job's training config as its run composes it (its own values, ``groups`` such as
    ``finetune=cpu``, then ``scale.train`` and ``overrides=[...]``, every job's): the runs'
    settings read from composition rather than from the override strings (the minibatch, the C
    grid, the step, the fine-tuning budget the estimate costs); composed once per setting."""
    from scheda.commandline import compose_train

    job = next(j for j in da_jobs(cfg.scale, False))
    own = [*(f"{g}={c}" for g, c in job.groups.items()), *(f"{k}={v}" for k, v in job.values.items())]
    line = [*own, *groups, *cfg.scale.train, *cfg.overrides]
    key = "\n".join(map(str, line))
    if key not in _COMPOSED:
        _COMPOSED[key] = compose_train(line)
    return _COMPOSED[key]


def finetune_preset(cfg: DictConfig) -> DictConfig:
    """The fine-tuning a table's fine-tuning jobs compose: ``configs/finetune/<scale.finetune>.yaml``
    under the runs' own overrides (what the estimate costs and the report names as the budget)."""
    return job_config(cfg, f"finetune={cfg.scale.finetune}").finetune


def check_seeds(scale: DictConfig) -> list[int]:
    seeds = [int(s) for s in scale.seeds]
    if not seeds:
        raise ConfigError("scale.seeds must list at least one seed (the first selects the hyper-parameters)")
    if len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ConfigError(f"scale.seeds={seeds}: list each seed once, each >= 0")
    return seeds


def check_scale_unchanged(scale: DictConfig, out_dir: Path, keep: bool = True) -> None:
    """An out_dir belongs to one scale: its values are kept in ``scale.yaml`` at the first
    invocation, and a later one that differs (``scale.hidden=[32]``, say) is refused before it
    could mix runs or overwrite the report. The description is text, not a setting; seeds may
    be added or removed, but the first (the selection seed) is fixed with the runs it chose.
    ``keep=False``: checked, not written (an interim report, which writes nothing in out_dir)."""
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
    if keep:
        atomic_write(path, lambda f: f.write(OmegaConf.to_yaml(OmegaConf.create(now)).encode()))


def da_jobs(scale: DictConfig, raw: bool) -> list[JobSpec]:
    grid = scale.da
    if grid.epochs < 1 or grid.eval_every < 1:
        raise ConfigError(f"scale.da.epochs={grid.epochs} and scale.da.eval_every={grid.eval_every} must be >= 1")
    if not (scale.hidden and grid.nu and grid.lr):
        raise ConfigError("scale.hidden, scale.da.nu and scale.da.lr must each list at least one value")
    jobs = [JobSpec("raw", "da", groups={"model": "raw"}, meta={"kind": Raw.name})] if raw else []
    for hidden in scale.hidden:
        if grid.fused:  # every nu of one (hidden, lr) in one process: batched matmuls (GPU)
            for lr in grid.lr:
                jobs.append(JobSpec(
                    f"da_h{hidden}_lr{fmt(lr)}_fused", "da", groups={"schedule": "constant"},
                    values={"model.hidden": hidden, "schedule.nu": grid.nu[0], "schedule.epochs": grid.epochs,
                            "trainer.parallel.nu": list(grid.nu), "optim.lr": lr,
                            "evaluate.every": grid.eval_every, "trainer.checkpoint_every": grid.eval_every,
                            **rule_values(scale.patience)},
                    meta={"kind": DAFused.name, "hidden": hidden, "nus": list(grid.nu), "lr": lr,
                          "epochs": grid.epochs}))
            continue
        for nu in grid.nu:
            for lr in grid.lr:
                jobs.append(JobSpec(
                    f"da_h{hidden}_nu{fmt(nu)}_lr{fmt(lr)}", "da", groups={"schedule": "constant"},
                    values=da_values(hidden, nu, lr, grid, scale.patience),
                    meta={"kind": DA.name, "hidden": hidden, "nu": nu, "lr": lr, "epochs": grid.epochs}))
    return jobs


def da_values(hidden: int, nu: float, lr: float, grid: DictConfig, patience: int | None) -> dict[str, Any]:
    """One DA of the grid: evaluated and checkpointed every ``eval_every`` epochs, for the grid's
    epochs (with ``patience``: at most, stopped by the rule)."""
    return {"model.hidden": hidden, "schedule.nu": nu, "schedule.epochs": grid.epochs, "optim.lr": lr,
            "evaluate.every": grid.eval_every, "trainer.checkpoint_every": grid.eval_every, **rule_values(patience)}


def continuation_jobs(scale: DictConfig, kinds: Iterable[str], selection: dict[str, Any]) -> list[JobSpec]:
    """Each of the table's continuation kinds planned from the selected DAs of each hidden size
    (ScheDA and the other schedules from the DA(nu0) checkpoints; random-nu DAs from scratch)."""
    return [job for hidden, sel in selection["hidden"].items() for name in kinds
            for job in continuation(name, scale).plan(scale, int(hidden), sel["by_nu"])]


def control_jobs(scale: DictConfig, kinds: Iterable[str], continued: dict[str, Any]) -> list[JobSpec]:
    """The controls (scheda.protocol.kinds.control) of the best run of each ``controlled``
    continuation kind per hidden size, of the kinds ``scale.control`` names."""
    if not control_kinds(scale):
        return []
    jobs: dict[str, JobSpec] = {}
    for hidden, by_kind in continued.items():
        for name in kinds:
            best = by_kind.get(name, {}).get("best")
            if best is not None:
                for job in kind_of(name).controls(scale, int(hidden), best):
                    jobs.setdefault(job.name, job)
    return list(jobs.values())


def finetune_jobs(preset: str, selection: dict[str, Any], continued: dict[str, Any]) -> list[JobSpec]:
    """Each fine-tuning kind's job per hidden size, from the best run of the kind it fine-tunes
    (the best DA, the best ScheDA) where that run kept its checkpoint."""
    jobs = []
    for hidden, sel in selection["hidden"].items():
        bests = {DA.name: sel["best"], **{k: f.get("best") for k, f in continued.get(hidden, {}).items()}}
        for kind in of_role(FINETUNE):
            best = bests.get(kind.of)
            if best and best.get("checkpoint"):
                jobs.append(kind.job(preset, int(hidden), best))
    return jobs
