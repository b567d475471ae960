"""table=features: why ScheDA works, measured (the paper's Sections 4.1.2-5), with seeds.

Three phases. ``feature_models`` trains, per seed (each a new initialisation of every model), a DA
at every nu of ``table.features.nu``, DA(max nu) with twice the units, and the composite DA under
each update rule; ``feature_continue`` continues each seed's DA(max nu) with ScheDA down to min nu,
the one jump to min nu and the same start trained on at max nu (and the double-size ScheDA), every
model trained to convergence under the scale's rule. ``feature_analysis`` trains nothing: from the
models' reported checkpoints (each at its best validation epoch) it computes Table 2 under three
measures (scheda.analysis.similarity), Figure 6's concatenations, the composite's and the
reconstruction's comparisons and the filter figures, into ``<out_dir>/feature_analysis/``, each
piece written when done, so a stopped analysis goes on where it stood.

A job the grid tables of the scale would plan with the same values (seed 0's DAs and ScheDA at
``scale=cpu``: table1's) keeps the grid's name and folder, so it is read, not trained again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from scheda.protocol import phases
from scheda.protocol.jobs import JobSpec, fmt
from scheda.protocol.kinds import kind_of
from scheda.protocol.kinds.da import DA
from scheda.protocol.tables.base import REPORT, Phase, Progress, register_phase
from scheda.protocol.kinds.base import errors, stopping
from scheda.runs.rundir import FINAL_STATUSES, best_evaluation, checkpoint_name, read_results
from scheda.utils.errors import ConfigError, SchedaError
from scheda.utils.io import shown_path

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class Settings:
    """``table.features`` resolved against the scale: what every phase of the table plans from."""

    nus: tuple[float, ...]  # largest first
    delta_nu: float
    seeds: tuple[int, ...]
    hidden: int
    lr: float
    K: int
    composite_nus: tuple[float, ...]
    updates: tuple[str, ...]
    double: bool
    summary_nu: float
    grid_seed: int  # the seed the grid tables' jobs run with (scale.seeds' first)

    @property
    def nu0(self) -> float:
        return self.nus[0]

    @property
    def nu_final(self) -> float:
        return self.nus[-1]

    @property
    def pairs(self) -> list[tuple[int, int]]:
        """Consecutive seeds: each one's DAs are the other's DA*, and Figure 6's initialisation pair."""
        return [(self.seeds[i], self.seeds[i + 1]) for i in range(0, len(self.seeds), 2)]

    def partner(self, seed: int) -> int:
        a, b = next(p for p in self.pairs if seed in p)
        return b if seed == a else a

    @property
    def high(self) -> list[str]:
        """The candidates the pre-registered summary counts: nu >= summary_nu."""
        return [fmt(nu) for nu in self.nus if nu >= self.summary_nu - 1e-9]


def settings(cfg: DictConfig) -> Settings:
    f, scale = cfg.table.features, cfg.scale
    if f is None:
        raise ConfigError(f"table={cfg.table.name} runs the features phases but has no table.features")
    nus = sorted({float(nu) for nu in f.nu}, reverse=True)
    if len(nus) < 2 or len(nus) != len(f.nu) or not all(0 <= nu < 1 for nu in nus):
        raise ConfigError(f"table.features.nu={list(f.nu)}: give two or more different masking levels in [0, 1)")
    seeds = [int(s) for s in f.seeds]
    if len(seeds) < 2 or len(seeds) % 2 or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ConfigError(f"table.features.seeds={seeds}: give an even number (2 or more) of different seeds >= 0: "
                          f"consecutive ones pair up (each other's DA*, Figure 6's initialisation pairs)")
    levels = (nus[0] - nus[-1]) / f.delta_nu
    if f.delta_nu <= 0 or abs(levels - round(levels)) > 1e-6:
        raise ConfigError(f"table.features.delta_nu={f.delta_nu} must step from {fmt(nus[0])} down to {fmt(nus[-1])} "
                          f"in whole steps")
    hidden = f.hidden if f.hidden is not None else scale.hidden[0]
    composite = list(f.composite_nus)
    if not composite or hidden % len(composite) or not all(0 <= nu < 1 for nu in composite):
        raise ConfigError(f"table.features.composite_nus={composite}: one masking level in [0, 1) per group, the "
                          f"{hidden} hidden units split equally among them")
    wrong = [u for u in f.composite_updates if u not in ("joint", "alternating")]
    if wrong or not f.composite_updates:
        raise ConfigError(f"table.features.composite_updates={list(f.composite_updates)}: use joint and/or alternating")
    if not 0 < f.summary_nu <= nus[0]:
        raise ConfigError(f"table.features.summary_nu={f.summary_nu} must lie in (0, {fmt(nus[0])}]")
    return Settings(tuple(nus), float(f.delta_nu), tuple(seeds), int(hidden),
                    float(f.lr if f.lr is not None else scale.da.lr[0]), int(scale.scheda.K[0]), tuple(composite),
                    tuple(f.composite_updates), bool(f.double), float(f.summary_nu), int(scale.seeds[0]))


def _own(s: Settings, job: JobSpec, seed: int, folder: str, grid: list[JobSpec], **meta: Any) -> JobSpec:
    """``job`` for ``seed``: the grid's own job where the grid plans it with the same values and
    seed (read, not trained again), else one of this table's (``<folder>/<name>_seed<s>``, seeded)."""
    shared = next((g for g in grid if g.name == job.name and g.values == job.values), None)
    if shared is not None and seed == s.grid_seed:
        return JobSpec(shared.name, shared.phase, dict(shared.groups), dict(shared.values),
                       {**shared.meta, **meta, "seed": seed})
    return JobSpec(f"{job.name}_seed{seed}", folder, dict(job.groups), {**job.values, "seed": seed},
                   {**job.meta, **meta, "seed": seed})


def _da_job(cfg: DictConfig, s: Settings, hidden: int, nu: float) -> JobSpec:
    scale = cfg.scale
    return JobSpec(f"da_h{hidden}_nu{fmt(nu)}_lr{fmt(s.lr)}", "da", groups={"schedule": "constant"},
                   values=phases.da_values(hidden, nu, s.lr, scale.da, scale.patience),
                   meta={"kind": DA.name, "hidden": hidden, "nu": nu, "lr": s.lr, "epochs": scale.da.epochs})


def _composite_job(cfg: DictConfig, s: Settings, update: str) -> JobSpec:
    """Section 5's composite DA from scratch, trained and evaluated as the DAs are (the schedule's
    nu is unused: every group has its own)."""
    scale = cfg.scale
    values = phases.da_values(s.hidden, s.composite_nus[0], s.lr, scale.da, scale.patience)
    values.update({"model.group_nus": list(s.composite_nus), "model.update": update})
    name = f"composite_h{s.hidden}_nu{'_'.join(fmt(nu) for nu in s.composite_nus)}_{update}_lr{fmt(s.lr)}"
    return JobSpec(name, "feature_da", groups={"schedule": "constant", "model": "composite"}, values=values,
                   meta={"kind": DA.name, "hidden": s.hidden, "nu": None, "lr": s.lr, "epochs": scale.da.epochs})


def model_jobs(cfg: DictConfig) -> list[JobSpec]:
    """Every seed's DAs, double-size DA(max nu) and composites (meta ``model``: da, da2, composite)."""
    s = settings(cfg)
    grid = phases.da_jobs(cfg.scale, raw=False)
    jobs = []
    for seed in s.seeds:
        jobs += [_own(s, _da_job(cfg, s, s.hidden, nu), seed, "feature_da", grid, model="da") for nu in s.nus]
        if s.double:
            jobs.append(_own(s, _da_job(cfg, s, 2 * s.hidden, s.nu0), seed, "feature_da", grid, model="da2"))
        jobs += [_own(s, _composite_job(cfg, s, u), seed, "feature_da", [], model="composite", update=u)
                 for u in s.updates]
    return jobs


def by_launch(jobs: list[JobSpec]) -> dict[str, list[JobSpec]]:
    out: dict[str, list[JobSpec]] = {}
    for job in jobs:
        out.setdefault(job.phase, []).append(job)
    return out


def entry(out_dir: Path, job: JobSpec) -> dict[str, Any] | None:
    """A finished job's reported model: its best evaluation on validation with that epoch's
    checkpoint, errors and why it stopped; None while it has not finished (or kept no checkpoint
    there: nothing to analyse)."""
    run = out_dir / job.phase / job.name
    results = read_results(run)
    best = best_evaluation(results) if results and results.get("status") in FINAL_STATUSES else None
    if best is None:
        return None
    ckpt = run / "checkpoints" / checkpoint_name(best["epoch"])
    return {"run": str(run), "job": job.name, "epoch": best["epoch"], "nu": best.get("nu"),
            "checkpoint": str(ckpt) if ckpt.exists() else None, **errors(best, results), **stopping(results)}


def _key(job: JobSpec) -> tuple[str, str]:
    m = job.meta
    return (m["model"], fmt(m["nu"]) if m["model"] == "da" else m.get("update", ""))


@register_phase
class FeatureModels(Phase):
    """Per seed: DA(nu) at every nu, DA(max nu) at twice the units, the composite DA per update rule."""

    name = "feature_models"

    def check(self, cfg: DictConfig) -> None:
        settings(cfg)

    def plan(self, p: Progress) -> dict[str, list[JobSpec]]:
        return by_launch(model_jobs(p.cfg))

    def collect(self, p: Progress) -> None:
        found: dict[str, Any] = {}
        for job in model_jobs(p.cfg):
            model, key = _key(job)
            e = entry(p.out_dir, job)
            place = found.setdefault(str(job.meta["seed"]), {"da": {}, "composite": {}})
            if model == "da2":
                place["da2"] = e
            else:
                place[model][key] = e
        p.found[self.name] = found
        if list(p.cfg.phases) == [REPORT] and not any(e for place in found.values() for group in place.values()
                                                      for e in (group.values() if isinstance(group, dict) else [group])):
            raise SchedaError(f"no model of table={p.cfg.table.name} has finished in {shown_path(p.out_dir)}: nothing to "
                              f"report yet; run the table (the same command without phases=)")

    def estimate(self, cfg: DictConfig) -> list[dict[str, Any]]:
        da, optim = cfg.scale.da, phases.job_config(cfg).optim
        # the composite's own step (timed as composite_s; a DA's epoch where the benchmark has none) wants
        # plain SGD (scheda.planning.rules); with momentum it trains by autograd
        composite = "autograd_s" if optim.momentum or optim.weight_decay else "composite_s"
        return [{"phase": self.name, "hidden": job.values["model.hidden"], "epochs": da.epochs, "models": 1,
                 "evals": da.epochs // da.eval_every,
                 **({"timing": composite} if job.meta["model"] == "composite" else {})}
                for job in model_jobs(cfg)]


def continuation_jobs(cfg: DictConfig, models: dict[str, Any] | None) -> list[JobSpec]:
    """Per seed, from its DA(max nu) (at its best validation epoch): ScheDA to min nu, the jump and
    the same start; from its double-size DA, the double-size ScheDA. ``models=None``: every start
    assumed at the DA's cap (the estimate)."""
    s, scale = settings(cfg), cfg.scale
    scheda = kind_of("scheda")
    jobs = []
    for seed in s.seeds:
        place = (models or {}).get(str(seed), {})
        for model, hidden, start in (("scheda", s.hidden, place.get("da", {}).get(fmt(s.nu0))),
                                     ("scheda2", 2 * s.hidden, place.get("da2"))):
            if model == "scheda2" and not s.double:
                continue
            if models is None:
                start = {"checkpoint": "c", "epoch": scale.da.epochs, "nu": s.nu0}
            if not start or not start.get("checkpoint"):
                continue
            grid = [scheda.job(scale, hidden, start, s.nu0, dnu, K, scale.scheda.nu_final)
                    for dnu in scale.scheda.delta_nu for K in scale.scheda.K] \
                if s.nu0 in scale.scheda.nu0 and hidden in scale.hidden else []  # table1's
            job = scheda.job(scale, hidden, start, s.nu0, s.delta_nu, s.K, s.nu_final)
            jobs.append(_own(s, job, seed, "feature_continue", grid, model=model))
            if model != "scheda":
                continue
            levels = job.meta["levels"]
            best = {"nu0": s.nu0, "nu": s.nu_final, "K": s.K, "epochs": levels * s.K, "epoch": levels * s.K,
                    "start_checkpoint": start["checkpoint"], "start_epoch": start["epoch"]}
            for control, name in (("control", "same_start"), ("jump", "jump")):
                job = kind_of(control).job(scale.scheda, hidden, best, scale.patience)
                job.values["trainer.checkpoint_every"] = job.values["evaluate.every"]  # its best epoch is analysed
                jobs.append(_own(s, job, seed, "feature_continue", [], model=name))
    return jobs


@register_phase
class FeatureContinue(Phase):
    """Per seed: ScheDA, the jump and the same start from its DA(max nu); the double-size ScheDA."""

    name = "feature_continue"

    def plan(self, p: Progress) -> dict[str, list[JobSpec]]:
        return by_launch(continuation_jobs(p.cfg, p.found["feature_models"]))

    def collect(self, p: Progress) -> None:
        found: dict[str, Any] = {}
        for job in continuation_jobs(p.cfg, p.found["feature_models"]):
            found.setdefault(str(job.meta["seed"]), {})[job.meta["model"]] = entry(p.out_dir, job)
        p.found[self.name] = found

    def estimate(self, cfg: DictConfig) -> list[dict[str, Any]]:
        items = []
        for job in continuation_jobs(cfg, None):
            epochs = job.values.get("trainer.max_epochs", job.values.get("schedule.epochs", job.meta["epochs"]))
            every = job.values.get("evaluate.every")  # none: a schedule evaluated after each level only
            items.append({"phase": self.name, "hidden": job.values["model.hidden"], "epochs": epochs, "models": 1,
                          "evals": epochs // every if every else job.meta.get("levels", 1)})
        return items


# --- the analysis -------------------------------------------------------------------------------

@register_phase
class FeatureAnalysis(Phase):
    """Table 2 under three measures, Figure 6, the composite DA and reconstruction, from the models'
    reported checkpoints; trains nothing. Written to ``<out_dir>/feature_analysis/`` piece by piece;
    an invocation that does not run this phase (or only reads the folder) reports what is there."""

    name = "feature_analysis"

    def plan(self, p: Progress) -> dict[str, list[JobSpec]]:
        return {}

    def collect(self, p: Progress) -> None:
        from scheda.protocol.features_analysis import Analysis

        analysis = Analysis(p.cfg, p.out_dir, settings(p.cfg), p.found["feature_models"],
                            p.found["feature_continue"])
        if p.owner and self.name in p.cfg.phases:
            analysis.run()
        p.found[self.name] = analysis.load()

    def estimate(self, cfg: DictConfig) -> list[dict[str, Any]]:
        """Figure 6's concatenations: per initialisation pair, one classifier search per unordered
        pair of noise levels on twice the units (the similarities' matrix products are seconds)."""
        s = settings(cfg)
        cells = len(s.nus) * (len(s.nus) + 1) // 2
        return [{"phase": self.name, "hidden": 2 * s.hidden, "epochs": 0, "models": 1, "evals": cells,
                 "checkpoints": False, "job": False} for _pair in s.pairs]

    def report(self, p: Progress, path: Path) -> list[str]:
        from scheda.protocol.features_report import section

        return section(p.cfg, settings(p.cfg), p.found, path)
