"""table=paper_settings: the gradual schedule against one jump in the paper's own settings.

The grid tables ran ScheDA with K 5 at lr 0.05, where a schedule can hardly differ from a jump;
the paper continued the best DA(nu0) with K 50 or 100 at lr 0.01. Two phases, per seed (each a
new initialisation and minibatch order): ``paper_start`` trains DA(nu0) at the scale's DA settings
until the scale's rule stops it; ``paper_continue`` continues its best checkpoint at
``table.paper_settings.lr`` with ScheDA (nu0 down by delta_nu every K epochs to nu_final), one
jump to nu_final for as many epochs, and the same start trained on at nu0 (at most as long, under
the rule). ScheDA and the jump run their epochs out: each is evaluated as the paper's Figure 2
(``stage_epochs`` after each change of nu, then every ``eval_every``) and read in the report
(scheda.protocol.paper_settings_report) under the rules fixed before any block ran.
"""

from __future__ import annotations

import json
import math
from abc import abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from scheda.model.schedule import level_count
from scheda.protocol import phases, rows
from scheda.protocol.jobs import JobSpec, fmt, rule_values
from scheda.protocol.tables.base import REPORT, Progress, RowPhase, merged, register_phase
from scheda.runs.rundir import checkpoint_name
from scheda.utils.errors import ConfigError, SchedaError
from scheda.utils.io import shown_path

START, CONTINUE = "paper_start", "paper_continue"
FILTERS = "paper_filters"  # <out_dir>/paper_filters/: each seed's filter images and numbers


@dataclass(frozen=True)
class Settings:
    """``table.paper_settings`` resolved against the scale."""

    nu0: float
    nu_final: float
    delta_nu: float
    Ks: tuple[int, ...]
    lr: float  # the continuations'
    eval_every: int
    stage_epochs: tuple[int, ...]
    seeds: tuple[int, ...]
    hidden: int
    da_lr: float
    margin: float  # points: fixed before any run
    grid_nus: tuple[float, ...] = ()
    grid_seeds: tuple[int, ...] = ()
    length_nu: float = 0.1
    length_epochs: int = 0
    length_every: int = 1
    length_seeds: tuple[int, ...] = ()
    composite_nus: tuple[float, ...] = ()
    switch_every: tuple[int, ...] = ()
    composite_seeds: tuple[int, ...] = ()
    selection_seed: int = 0

    def composite_patience(self, patience: int, every: int, switch_every: int | None) -> int:
        """The rule's patience of a composite run: the scale's, or a whole turn of the groups where that is
        longer (alternating every 50 epochs, the rule must not stop it before the second group has trained)."""
        if switch_every is None:
            return patience
        return max(patience, math.ceil(len(self.composite_nus) * switch_every / every))

    def composite_models(self) -> list[str]:
        """Every composite a seed trains: joint, and alternating at each switch_every."""
        return ["joint", *(f"alternating_S{S}" for S in self.switch_every)]

    @property
    def levels(self) -> int:
        return level_count(-1, self.nu0, self.delta_nu, self.nu_final)

    def epochs(self, K: int) -> int:
        """ScheDA's length with K epochs a level, and the jump's (the same)."""
        return self.levels * K

    @property
    def same_start_epochs(self) -> int:
        """The same start's cap: the longest continuation it stands beside."""
        return max(self.epochs(K) for K in self.Ks)

    def models(self) -> list[str]:
        """Every continuation a seed trains, in the report's order."""
        return [*(f"{arm}_K{K}" for K in self.Ks for arm in ("scheda", "jump")), "same_start"]


def settings(cfg: DictConfig) -> Settings:
    p, scale = cfg.table.get("paper_settings"), cfg.scale
    if p is None:
        raise ConfigError(f"table={cfg.table.name} runs the paper_settings phases but has no table.paper_settings")
    nu0, nu_final, dnu = float(p.nu0), float(p.nu_final), float(p.delta_nu)
    if not 0 <= nu_final < nu0 < 1 or dnu <= 0 or abs((nu0 - nu_final) / dnu - round((nu0 - nu_final) / dnu)) > 1e-6:
        raise ConfigError(f"table.paper_settings: nu0={fmt(nu0)}, nu_final={fmt(nu_final)}, delta_nu={fmt(dnu)}: give "
                          f"0 <= nu_final < nu0 < 1 and a delta_nu that steps from nu0 to nu_final in whole steps")
    Ks = tuple(int(K) for K in p.K)
    if not Ks or min(Ks) < 1 or len(set(Ks)) != len(Ks):
        raise ConfigError(f"table.paper_settings.K={list(p.K)}: give one or more different K >= 1 (epochs a level)")
    if not p.margin > 0:
        raise ConfigError(f"table.paper_settings.margin={p.margin}: give the margin of parity in points, > 0")
    if not p.lr > 0 or p.eval_every < 1 or any(e < 1 for e in p.stage_epochs):
        raise ConfigError(f"table.paper_settings: lr={p.lr}, eval_every={p.eval_every}, stage_epochs="
                          f"{list(p.stage_epochs)}: give lr > 0, eval_every >= 1 and stage epochs >= 1")
    seeds = _seeds(p.seeds, "seeds")
    grid_seeds, length_seeds = _seeds(p.grid.seeds, "grid.seeds"), _seeds(p.length.seeds, "length.seeds")
    composite_seeds = _seeds(p.composite.seeds, "composite.seeds")
    if not (seeds or grid_seeds or length_seeds or composite_seeds):
        raise ConfigError("table.paper_settings: seeds, grid.seeds, length.seeds and composite.seeds are all empty: "
                          "give one of them seeds to train")
    c = p.composite
    hidden = int(scale.hidden[0])
    if composite_seeds and (not c.nus or hidden % len(c.nus) or not all(0 <= nu < 1 for nu in c.nus)
                            or not c.switch_every or min(c.switch_every) < 1
                            or len(set(c.switch_every)) != len(c.switch_every)):
        raise ConfigError(f"table.paper_settings.composite: nus={list(c.nus)}, switch_every={list(c.switch_every)}: "
                          f"give one masking level in [0, 1) per group (the {hidden} hidden units split equally) and "
                          f"different switch_every >= 1")
    grid_nus = tuple(float(nu) for nu in p.grid.nu)
    if grid_seeds and (not grid_nus or len(set(grid_nus)) != len(grid_nus) or not all(0 <= nu < 1 for nu in grid_nus)):
        raise ConfigError(f"table.paper_settings.grid.nu={list(p.grid.nu)}: give one or more different masking levels "
                          f"in [0, 1)")
    length = p.length
    if length_seeds and not (0 <= length.nu < 1 and length.epochs >= 1 and 1 <= length.eval_every <= length.epochs):
        raise ConfigError(f"table.paper_settings.length: nu={length.nu}, epochs={length.epochs}, eval_every="
                          f"{length.eval_every}: give nu in [0, 1), epochs >= 1 and eval_every in [1, epochs]")
    if scale.patience is None:
        raise ConfigError(f"table=paper_settings scale={scale.name}: the DA and the same start train until the rule "
                          f"stops them; give scale.patience")
    return Settings(nu0, nu_final, dnu, Ks, float(p.lr), int(p.eval_every), tuple(int(e) for e in p.stage_epochs),
                    seeds, int(scale.hidden[0]), float(scale.da.lr[0]), float(p.margin), grid_nus, grid_seeds,
                    float(length.nu), int(length.epochs), int(length.eval_every), length_seeds,
                    tuple(float(nu) for nu in c.nus), tuple(int(S) for S in c.switch_every), composite_seeds,
                    int(c.selection_seed))


def _seeds(given, key: str) -> tuple[int, ...]:
    seeds = tuple(int(s) for s in given)
    if len(set(seeds)) != len(seeds) or (seeds and min(seeds) < 0):
        raise ConfigError(f"table.paper_settings.{key}={list(given)}: give different seeds >= 0")
    return seeds


def _da_job(cfg: DictConfig, s: Settings, nu: float, seed: int, launch: str, model: str) -> JobSpec:
    """DA(nu) for ``seed`` at the scale's DA settings, stopped by its rule (table1's grid job, seeded)."""
    da = cfg.scale.da
    return JobSpec(f"da_h{s.hidden}_nu{fmt(nu)}_lr{fmt(s.da_lr)}_seed{seed}", launch, groups={"schedule": "constant"},
                   values={**phases.da_values(s.hidden, nu, s.da_lr, da, cfg.scale.patience), "seed": seed},
                   meta={"kind": "da", "model": model, "seed": seed, "hidden": s.hidden, "nu": nu,
                         "epochs": da.epochs, "evals": da.epochs // da.eval_every})


def start_jobs(cfg: DictConfig) -> list[JobSpec]:
    """Per seed, DA(nu0) at the scale's DA settings, stopped by its rule."""
    s = settings(cfg)
    return [_da_job(cfg, s, s.nu0, seed, "paper_da", "da") for seed in s.seeds]


def grid_jobs(cfg: DictConfig) -> list[JobSpec]:
    """Per grid seed, a DA at each of ``grid.nu`` (the scale's settings, stopped by its rule), its row
    named by its nu."""
    s = settings(cfg)
    return [_da_job(cfg, s, nu, seed, "paper_grid", fmt(nu)) for seed in s.grid_seeds for nu in s.grid_nus]


def length_jobs(cfg: DictConfig) -> list[JobSpec]:
    """Per length seed, DA(length.nu) run out for length.epochs (no rule), its loss every epoch, evaluated
    every length.eval_every; its newest checkpoint kept (a resume's, and the filters' at its end)."""
    s = settings(cfg)
    return [JobSpec(f"da_h{s.hidden}_nu{fmt(s.length_nu)}_lr{fmt(s.da_lr)}_{s.length_epochs}ep_seed{seed}", "paper_length",
                    groups={"schedule": "constant"},
                    values={"model.hidden": s.hidden, "schedule.nu": s.length_nu, "schedule.epochs": s.length_epochs,
                            "optim.lr": s.da_lr, "evaluate.every": s.length_every,
                            "trainer.checkpoint_every": s.length_every, "trainer.keep_checkpoints": 1, "seed": seed},
                    meta={"kind": "da", "model": "length", "seed": seed, "hidden": s.hidden, "nu": s.length_nu,
                          "epochs": s.length_epochs, "evals": s.length_epochs // s.length_every})
            for seed in s.length_seeds]


def _evaluated(s: Settings) -> dict[str, Any]:
    """Figure 2's evaluations (stage epochs after each change of nu, every eval_every, each level's
    end), a checkpoint at each periodic one (the filters of any epoch the report reads)."""
    return {"evaluate.every": s.eval_every, "evaluate.stage_epochs": list(s.stage_epochs),
            "trainer.checkpoint_every": s.eval_every}


def continuation_jobs(cfg: DictConfig, starts: rows.Rows | None) -> list[JobSpec]:
    """Per seed whose DA(nu0) has finished (``starts=None``: every start assumed, the estimate):
    ScheDA and the jump for each K, and the same start, each from the DA's best checkpoint."""
    s, scale = settings(cfg), cfg.scale
    jobs = []
    for seed in s.seeds:
        if starts is None:
            start_from, start_epoch = "c", scale.da.epochs
        else:
            start = (starts.get(str(seed)) or {}).get("da")
            if start is None or start.checkpoint is None:
                continue
            start_from, start_epoch = str(start.checkpoint), start.epoch
        common = {"model.hidden": s.hidden, "optim.lr": s.lr, "init_from": start_from, "seed": seed,
                  **_evaluated(s)}
        meta = {"seed": seed, "hidden": s.hidden, "nu0": s.nu0, "start_epoch": start_epoch}
        tag = f"h{s.hidden}_nu{fmt(s.nu0)}"

        def evals(epochs: int, changes: int) -> int:  # Figure 2's: stage epochs after each change of nu
            return epochs // s.eval_every + changes * len(s.stage_epochs)

        for K in s.Ks:
            epochs = s.epochs(K)
            jobs.append(JobSpec(
                f"scheda_{tag}_dnu{fmt(s.delta_nu)}_K{K}_to{fmt(s.nu_final)}_lr{fmt(s.lr)}_seed{seed}", "paper_continue",
                groups={"schedule": "decreasing"},
                values={**common, "schedule.nu0": s.nu0, "schedule.delta_nu": s.delta_nu, "schedule.K": K,
                        "schedule.initial_epochs": 0, "schedule.nu_final": s.nu_final},
                meta={**meta, "kind": "scheda", "model": f"scheda_K{K}", "K": K, "epochs": epochs,
                      "evals": evals(epochs, s.levels)}))
            jobs.append(JobSpec(
                f"jump_{tag}_to{fmt(s.nu_final)}_{epochs}ep_lr{fmt(s.lr)}_seed{seed}", "paper_continue",
                groups={"schedule": "constant"}, values={**common, "schedule.nu": s.nu_final, "schedule.epochs": epochs},
                meta={**meta, "kind": "jump", "model": f"jump_K{K}", "K": K, "epochs": epochs,
                      "evals": evals(epochs, 1)}))
        epochs = s.same_start_epochs
        jobs.append(JobSpec(
            f"same_start_{tag}_{epochs}ep_lr{fmt(s.lr)}_seed{seed}", "paper_continue", groups={"schedule": "constant"},
            values={**common, "schedule.nu": s.nu0, "schedule.epochs": epochs, **rule_values(scale.patience)},
            meta={**meta, "kind": "control", "model": "same_start", "epochs": epochs, "evals": evals(epochs, 1)}))
    return jobs


def composite_jobs(cfg: DictConfig) -> list[JobSpec]:
    """Per composite seed: the composite DA with joint updates, and alternating at each switch_every,
    at the scale's DA settings until the rule stops it (its patience a whole turn of the groups at least)."""
    s, scale = settings(cfg), cfg.scale
    optim = phases.job_config(cfg).optim
    timing = "autograd_s" if optim.momentum or optim.weight_decay else "composite_s"  # as the features table's
    jobs = []
    nus = "_".join(fmt(nu) for nu in s.composite_nus)
    for seed in s.composite_seeds:
        for model, S in [("joint", None), *((f"alternating_S{S}", S) for S in s.switch_every)]:
            patience = s.composite_patience(scale.patience, scale.da.eval_every, S)
            values = {**phases.da_values(s.hidden, s.composite_nus[0], s.da_lr, scale.da, patience),
                      "model.group_nus": list(s.composite_nus), "model.update": "joint" if S is None else "alternating",
                      "seed": seed, **({} if S is None else {"model.switch_every": S})}
            jobs.append(JobSpec(f"composite_h{s.hidden}_nu{nus}_{model}_lr{fmt(s.da_lr)}_seed{seed}", "paper_composite",
                                groups={"schedule": "constant", "model": "composite"}, values=values,
                                meta={"kind": "da", "model": model, "seed": seed, "hidden": s.hidden, "nu": None,
                                      "epochs": scale.da.epochs, "patience": patience,
                                      "evals": scale.da.epochs // scale.da.eval_every, "timing": timing}))
    return jobs


def seed_filters(p: Progress, seed: str, ends: dict[str, tuple[int, Path] | None]) -> dict[str, Any] | None:
    """One seed's filters (the paper's Figures 3-4) as a record keeps them: per model (the start at its
    best epoch, each continuation at its last), a PNG of its first filters and the share of their energy
    at high spatial frequencies (scheda.analysis.filter_stats), median and mean over every unit. Written
    to ``<out_dir>/paper_filters/`` once; None where the data are no images or this invocation only reads."""
    import numpy as np

    from scheda.analysis.filter_stats import CUTOFF, filter_png, high_frequency_share
    from scheda.data import dataset_spec
    from scheda.training.checkpoint import load_run_model
    from scheda.utils.io import atomic_write

    folder = p.out_dir / FILTERS
    done = folder / f"seed{seed}.json"
    if done.exists():
        return json.loads(done.read_text())
    if not p.owner:
        return None
    out: dict[str, Any] = {"cutoff": CUTOFF, "models": {}}
    with one_thread():  # the protocol's process forks the next launch: no thread pool may start in it
        for model, end in ends.items():
            if end is None or not end[1].exists():
                out["models"][model] = None  # no checkpoint of that epoch: said in the report
                continue
            cfg, net, _ = load_run_model(end[1])
            shape = getattr(dataset_spec(cfg.dataset), "image_shape", None)
            if shape is None:
                return None
            share = high_frequency_share(net.W, tuple(shape))
            png = f"filters_seed{seed}_{model}.png"
            data = filter_png(net.W, tuple(shape))
            atomic_write(folder / png, lambda f, data=data: f.write(data))
            out["models"][model] = {"epoch": end[0], "median": float(np.median(share)), "mean": float(share.mean()),
                                    "units": int(share.size), "png": png}
    atomic_write(done, lambda f: f.write(json.dumps(out, indent=1).encode()))
    return out


@contextmanager
def one_thread():
    """torch on one thread inside (its setting restored after)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class WithFilters(RowPhase):
    """A row phase whose found is ``{"runs": seed -> model -> row, "filters": seed -> filters}``: its
    record keeps both, and each seed's filter images beside it (the report shows them from there)."""

    @abstractmethod
    def filters(self, p: Progress, runs: rows.Rows) -> dict[str, Any]:
        """Each seed's filters (seed_filters) once its models are in."""

    def collect(self, p: Progress) -> None:
        runs = self.rows(p)
        p.found[self.name] = {"runs": runs, "filters": self.filters(p, runs)}

    def record(self, p: Progress) -> dict[str, Any] | None:
        found = p.found[self.name]
        runs = rows.to_record(found["runs"])
        if runs is None or set(found["filters"]) != set(found["runs"]):
            return None
        return {"runs": runs, "filters": found["filters"]}

    def files(self, p: Progress) -> dict[str, bytes]:
        return {e["png"]: (p.out_dir / FILTERS / e["png"]).read_bytes()
                for kept in p.found[self.name]["filters"].values() for e in kept["models"].values() if e}

    def restore(self, p: Progress, payloads: list[Any]) -> None:
        p.found[self.name] = {"runs": rows.from_record(merged([q["runs"] for q in payloads])),
                              "filters": merged([q["filters"] for q in payloads])}


def _end(p: Progress, job: JobSpec, row: rows.Row | None) -> tuple[int, Path] | None:
    """A run's last epoch and its checkpoint (the filters' of a model read at its end)."""
    if row is None:
        return None
    return row.epochs_trained, p.run_dir(job) / "checkpoints" / checkpoint_name(row.epochs_trained)


@register_phase
class PaperStart(RowPhase):
    """Per seed: DA(nu0) at the scale's DA settings until the rule stops it."""

    name = START

    def check(self, cfg: DictConfig) -> None:
        settings(cfg)

    def jobs(self, cfg: DictConfig, p: Progress | None) -> list[JobSpec]:
        return start_jobs(cfg)


@register_phase
class PaperContinue(WithFilters):
    """Per seed: ScheDA and the jump for each K, and the same start, from its DA(nu0)."""

    name = CONTINUE

    def jobs(self, cfg: DictConfig, p: Progress | None) -> list[JobSpec]:
        return continuation_jobs(cfg, None if p is None else p.found[START])

    def filters(self, p: Progress, runs: rows.Rows) -> dict[str, Any]:
        models, out = settings(p.cfg).models(), {}
        for seed, by_model in runs.items():
            if not all(by_model.get(m) for m in models):
                continue
            start = p.found[START][seed]["da"]
            ends = {"da": None if start.checkpoint is None else (start.epoch, start.checkpoint),
                    **{job.meta["model"]: _end(p, job, by_model[job.meta["model"]])
                       for job in self.jobs(p.cfg, p) if str(job.meta["seed"]) == seed}}
            kept = seed_filters(p, seed, ends)
            if kept is not None:
                out[seed] = kept
        return out

    def record(self, p: Progress) -> dict[str, Any] | None:
        if set(p.found[self.name]["runs"]) != {str(seed) for seed in settings(p.cfg).seeds}:
            return None  # a start has not finished: nothing of it planned yet
        return super().record(p)

    def report(self, p: Progress, path: Path) -> list[str]:
        from scheda.protocol.paper_settings_report import section

        if not p.found[START] and not p.found[self.name]["runs"]:
            return []

        return section(p.cfg, settings(p.cfg), p.found, path, p.out_dir / FILTERS)


def _any_finished(p: Progress) -> bool:
    """Whether any model of the table has finished (every phase collected)."""
    by_seed = [p.found[START], p.found[CONTINUE]["runs"], p.found["paper_grid"], p.found["paper_length"]["runs"],
               p.found["paper_composite"]]
    return any(e for found in by_seed for by_model in found.values() for e in by_model.values())


@register_phase
class PaperGrid(RowPhase):
    """Per grid seed: a DA at each nu of ``grid.nu``, the scale's settings, stopped by its rule."""

    name = "paper_grid"

    def jobs(self, cfg: DictConfig, p: Progress | None) -> list[JobSpec]:
        return grid_jobs(cfg)

    def report(self, p: Progress, path: Path) -> list[str]:
        from scheda.protocol.paper_settings_report import grid_section

        return grid_section(p.cfg, settings(p.cfg), p.found)


@register_phase
class PaperLength(WithFilters):
    """Per length seed: DA(length.nu) run out for length.epochs, its training loss every epoch, and
    the share of high spatial frequencies of its filters at its end."""

    name = "paper_length"

    def jobs(self, cfg: DictConfig, p: Progress | None) -> list[JobSpec]:
        return length_jobs(cfg)

    def filters(self, p: Progress, runs: rows.Rows) -> dict[str, Any]:
        out = {}
        for job in self.jobs(p.cfg, p):
            seed = str(job.meta["seed"])
            end = _end(p, job, runs[seed]["length"])
            kept = None if end is None else seed_filters(p, f"{seed}_length", {"length": end})
            if kept is not None:
                out[seed] = kept
        return out

    def report(self, p: Progress, path: Path) -> list[str]:
        from scheda.protocol.paper_settings_report import length_section

        return length_section(p.cfg, settings(p.cfg), p.found, path)


@register_phase
class PaperComposite(RowPhase):
    """Per composite seed: the composite DA, joint and alternating at each switch_every; the report's
    declared comparisons (``table.paper_settings.compare``) over every part's rows follow its section."""

    name = "paper_composite"

    def jobs(self, cfg: DictConfig, p: Progress | None) -> list[JobSpec]:
        return composite_jobs(cfg)

    def collect(self, p: Progress) -> None:
        super().collect(p)
        if list(p.cfg.phases or []) == [REPORT] and not _any_finished(p):
            raise SchedaError(f"no model of table={p.cfg.table.name} has finished in {shown_path(p.out_dir)}: nothing "
                              f"to report yet; run the table (the same command without phases=)")

    def report(self, p: Progress, path: Path) -> list[str]:
        from scheda.protocol.paper_settings_report import comparisons_section, composite_section

        s = settings(p.cfg)
        return composite_section(p.cfg, s, p.found) + comparisons_section(p.cfg, s, p.found)
