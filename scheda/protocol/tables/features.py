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
from scheda.protocol.jobs import JobSpec, count, fmt
from scheda.protocol.kinds import kind_of
from scheda.protocol.kinds.da import DA
from scheda.protocol.tables.base import REPORT, Progress, RecordedPhase, by_launch, merged, register_phase
from scheda.protocol.kinds.base import errors, stopping
from scheda.runs.rundir import FINAL_STATUSES, best_evaluation, checkpoint_name, read_results
from scheda.utils.errors import ConfigError, SchedaError
from scheda.utils.io import shown_path

log = logging.getLogger(__name__)



# What a seed of a group trains (each model at its best validation epoch is what the analysis reads):
#   reference:  DA(max nu), DA(min nu), ScheDA from DA(max nu), the jump and the same start: Table 2's rows
#   candidates: a DA at every nu: Table 2's columns (another initialisation's than the references')
#   ends:       DA(max nu) and DA(min nu) alone;  scheda: ScheDA from DA(max nu) alone
#   composite:  the composite DA under each update rule
#   double:     DA(max nu) with twice the units and its ScheDA: Figure 6's fair comparison
ROLES = ("reference", "candidates", "ends", "scheda", "composite", "double")


@dataclass(frozen=True)
class Layout:
    """How a group of seeds lays out the table's models: each seed's roles, Table 2's comparisons
    (reference seed, candidate seed) and Figure 6's initialisation pairs, by position in the group."""

    seeds: int  # how many a group of this layout takes
    roles: tuple[tuple[str, ...], ...]  # by position
    comparisons: tuple[tuple[int, int], ...]
    concat: tuple[tuple[int, int], ...]
    says: str


LAYOUTS = {
    "pairs": Layout(2, (("reference", "candidates", "composite", "double"),) * 2, ((0, 1), (1, 0)), ((0, 1),),
                    "each seed trains every model; each one's references against the other's DAs, both ways"),
    "table2": Layout(2, (("reference",), ("candidates",)), ((0, 1),), ((0, 1),),
                     "the first seed's references (DA(max nu), DA(min nu), ScheDA, the jump, the same start) against "
                     "the second's DAs at every nu"),
    "composite": Layout(1, (("candidates", "composite", "scheda"),), (), (),
                        "one seed's DAs at every nu, its ScheDA and its composite DAs"),
    "double": Layout(2, (("ends", "double"), ("candidates",)), (), ((0, 1),),
                     "the first seed's DA(max nu) of twice the units and its ScheDA against the best concatenation "
                     "of a DA of each seed (the first's DA(max nu) and DA(min nu), the second's at every nu)"),
    "double_alone": Layout(1, (("double",),), (), (),
                           "its DA(max nu) of twice the units and that DA's ScheDA alone, against the best "
                           "concatenation of every initialisation pair's DAs (unpaired)"),
}


@dataclass(frozen=True)
class Settings:
    """``table.features`` resolved against the scale: what every phase of the table plans from."""

    nus: tuple[float, ...]  # largest first
    delta_nu: float
    seeds: tuple[int, ...]  # every group's, in order
    hidden: int
    lr: float
    K: int
    composite_nus: tuple[float, ...]
    updates: tuple[str, ...]
    double: bool
    summary_nu: float
    grid_seed: int  # the seed the grid tables' jobs run with (scale.seeds' first)
    roles: dict[int, frozenset[str]]  # what each seed trains (ROLES)
    comparisons: tuple[tuple[int, int], ...]  # Table 2: (reference seed, candidate seed)
    pairs: tuple[tuple[int, int], ...]  # Figure 6's initialisation pairs: (seed a, seed b)
    groups: tuple[tuple[str, tuple[int, ...]], ...]  # (layout, seeds)

    @property
    def nu0(self) -> float:
        return self.nus[0]

    @property
    def nu_final(self) -> float:
        return self.nus[-1]

    def has(self, seed: int, role: str) -> bool:
        return role in self.roles.get(seed, ())

    def trains_continuation(self, seed: int, model: str) -> bool:
        """Whether ``seed`` trains the continuation ``model`` (scheda, jump, same_start, scheda2)."""
        if model == "scheda2":
            return self.has(seed, "double")
        if model == "scheda":
            return self.has(seed, "reference") or self.has(seed, "scheda")
        return self.has(seed, "reference")

    def says(self) -> str:
        """What each group of seeds trains, in words (its layout's)."""
        return "; ".join(f"{', '.join(map(str, group))}: {LAYOUTS[layout].says}" for layout, group in self.groups)

    def da_levels(self, seed: int) -> list[float]:
        """The nu of every DA ``seed`` trains (largest first)."""
        if self.has(seed, "candidates"):
            return list(self.nus)
        wanted = set()
        if self.has(seed, "reference") or self.has(seed, "ends"):
            wanted |= {self.nu0, self.nu_final}
        if self.has(seed, "scheda"):
            wanted.add(self.nu0)
        return [nu for nu in self.nus if nu in wanted]

    def candidates_of(self, reference: int) -> int:
        return next(c for r, c in self.comparisons if r == reference)

    @property
    def references(self) -> list[int]:
        return [r for r, _ in self.comparisons]

    def concat_cells(self, a: int, b: int) -> list[tuple[float, float, int, int]]:
        """Figure 6's cells of the initialisation pair (a, b) that its DAs allow: (low nu, high nu, the
        seed whose DA(low) is taken, the seed whose DA(high) is): each unordered pair of levels once,
        the lower from seed a where a has it and b has the higher, else the other way round."""
        levels = sorted(self.nus)
        have = {seed: set(self.da_levels(seed)) for seed in (a, b)}
        cells = []
        for i, lo in enumerate(levels):
            for hi in levels[i:]:
                for x, y in ((a, b), (b, a)):
                    if lo in have[x] and hi in have[y]:
                        cells.append((lo, hi, x, y))
                        break
        return cells

    @property
    def high(self) -> list[str]:
        """The candidates the pre-registered summary counts: nu >= summary_nu."""
        return [fmt(nu) for nu in self.nus if nu >= self.summary_nu - 1e-9]


def _groups(f) -> list[tuple[str, list[int]]]:
    """(layout, seeds) of every group: ``table.features.groups``, else ``seeds`` paired."""
    if f.groups is None:
        seeds = [int(s) for s in f.seeds]
        if len(seeds) < 2 or len(seeds) % 2:
            raise ConfigError(f"table.features.seeds={seeds}: give an even number (2 or more) of different seeds >= 0: "
                              f"consecutive ones pair up (each one's references against the other's DAs, Figure 6's "
                              f"initialisation pairs)")
        return [("pairs", seeds[i:i + 2]) for i in range(0, len(seeds), 2)]
    out = []
    for group in f.groups:
        layout, seeds = group.get("layout"), [int(s) for s in group.get("seeds") or []]
        if layout not in LAYOUTS or len(seeds) != LAYOUTS[layout].seeds:
            known = ", ".join(f"{name} ({count(lay.seeds, 'seed')})" for name, lay in LAYOUTS.items())
            raise ConfigError(f"table.features.groups has {dict(group)}: give each group a layout and its seeds, "
                              f"one of {known}")
        out.append((layout, seeds))
    if not out:
        raise ConfigError("table.features.groups=[]: give at least one group (or null: table.features.seeds in pairs)")
    return out


def settings(cfg: DictConfig) -> Settings:
    f, scale = cfg.table.features, cfg.scale
    if f is None:
        raise ConfigError(f"table={cfg.table.name} runs the features phases but has no table.features")
    nus = sorted({float(nu) for nu in f.nu}, reverse=True)
    if len(nus) < 2 or len(nus) != len(f.nu) or not all(0 <= nu < 1 for nu in nus):
        raise ConfigError(f"table.features.nu={list(f.nu)}: give two or more different masking levels in [0, 1)")
    groups = _groups(f)
    seeds = [seed for _, group in groups for seed in group]
    if len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ConfigError(f"table.features' seeds {seeds}: give different seeds >= 0 (a seed is one initialisation of "
                          f"every model it trains; in one group only)")
    roles: dict[int, frozenset[str]] = {}
    comparisons, pairs = [], []
    for layout, group in groups:
        lay = LAYOUTS[layout]
        # table.features.double switches off the pairs' double-size models; other layouts name theirs
        roles.update({seed: frozenset(r) - ({"double"} if layout == "pairs" and not f.double else set())
                      for seed, r in zip(group, lay.roles)})
        comparisons += [(group[a], group[b]) for a, b in lay.comparisons]
        pairs += [(group[a], group[b]) for a, b in lay.concat]
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
                    tuple(f.composite_updates), bool(f.double), float(f.summary_nu), int(scale.seeds[0]),
                    roles, tuple(comparisons), tuple(pairs), tuple((layout, tuple(g)) for layout, g in groups))


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
        jobs += [_own(s, _da_job(cfg, s, s.hidden, nu), seed, "feature_da", grid, model="da")
                 for nu in s.da_levels(seed)]
        if s.has(seed, "double"):
            jobs.append(_own(s, _da_job(cfg, s, 2 * s.hidden, s.nu0), seed, "feature_da", grid, model="da2"))
        if s.has(seed, "composite"):
            jobs += [_own(s, _composite_job(cfg, s, u), seed, "feature_da", [], model="composite", update=u)
                     for u in s.updates]
    return jobs


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


def portable(e: dict[str, Any] | None) -> dict[str, Any] | None:
    """A reported model's entry as a block's record keeps it: no path, but the classifier's edge
    and the curves the report draws (each epoch's loss and nu, each evaluation's errors)."""
    if e is None:
        return None
    from scheda.protocol.convergence import edge_of

    results = read_results(Path(e["run"])) or {}
    out = {k: v for k, v in e.items() if k not in ("run", "checkpoint")}
    out["edge"] = edge_of(e)
    out["results"] = {
        "history": [{"epoch": h["epoch"], "loss": h["loss"], "nu": h.get("nu")} for h in results.get("history", [])],
        "evaluations": [{"epoch": v["epoch"], "val_error": v["val_error"], "test_error": v["test_error"]}
                        for v in results.get("evaluations", [])]}
    return out


def _entries(found: dict[str, Any]):
    """Every entry of a phase's found (seed -> model -> entry, or -> group -> key -> entry)."""
    for place in found.values():
        for value in place.values():
            if isinstance(value, dict) and "epoch" not in value:  # a group: da, composite
                yield from value.values()
            else:
                yield value


def _portable_found(found: dict[str, Any]) -> dict[str, Any] | None:
    """A phase's found with every entry portable; None while any model has not finished."""
    if any(e is None for e in _entries(found)):
        return None

    def walk(value):
        if isinstance(value, dict) and "epoch" in value:
            return portable(value)
        return {k: walk(v) for k, v in value.items()} if isinstance(value, dict) else value
    return walk(found)


def _key(job: JobSpec) -> tuple[str, str]:
    m = job.meta
    return (m["model"], fmt(m["nu"]) if m["model"] == "da" else m.get("update", ""))


@register_phase
class FeatureModels(RecordedPhase):
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

    def record(self, p: Progress) -> dict[str, Any] | None:
        return _portable_found(p.found[self.name])

    def restore(self, p: Progress, payloads: list[Any]) -> None:
        p.found[self.name] = merged(payloads)


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
            if not s.trains_continuation(seed, model):
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
            if model != "scheda" or not s.trains_continuation(seed, "jump"):
                continue
            levels = job.meta["levels"]
            best = {"nu0": s.nu0, "nu": s.nu_final, "K": s.K, "epochs": levels * s.K, "epoch": levels * s.K,
                    "start_checkpoint": start["checkpoint"], "start_epoch": start["epoch"]}
            for control, name in (("control", "same_start"), ("jump", "jump")):
                job = kind_of(control).job(scale.scheda, hidden, best, scale.patience)  # keeps its best epoch's
                jobs.append(_own(s, job, seed, "feature_continue", [], model=name))
    return jobs


@register_phase
class FeatureContinue(RecordedPhase):
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

    def record(self, p: Progress) -> dict[str, Any] | None:
        planned = {(str(job.meta["seed"]), job.meta["model"])
                   for job in continuation_jobs(p.cfg, p.found["feature_models"])}
        found = p.found[self.name]
        wanted = {(str(seed), model) for seed in settings(p.cfg).seeds for model in ("scheda", "jump", "same_start", "scheda2")
                  if settings(p.cfg).trains_continuation(seed, model)}
        if wanted - planned:  # a start that has not finished: its continuations are not planned yet
            return None
        return _portable_found(found)

    def restore(self, p: Progress, payloads: list[Any]) -> None:
        p.found[self.name] = merged(payloads)


# --- the analysis -------------------------------------------------------------------------------

@register_phase
class FeatureAnalysis(RecordedPhase):
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
        return [{"phase": self.name, "hidden": 2 * s.hidden, "epochs": 0, "models": 1,
                 "evals": len(s.concat_cells(a, b)), "checkpoints": False, "job": False} for a, b in s.pairs]

    def record(self, p: Progress) -> dict[str, Any] | None:
        """Every piece (each reference seed's similarities on both splits, each pair's cells, every
        model's reconstruction), or None while one is missing."""
        s, found = settings(p.cfg), p.found[self.name]
        entries = sum(1 for place in (p.found["feature_models"], p.found["feature_continue"])
                      for e in _entries(place) if e and e.get("checkpoint"))
        complete = (all(str(seed) in found["similarity"][split] for seed in s.references for split in found["similarity"])
                    and all(f"{a}_{b}" in found["concat"] and len(found["concat"][f"{a}_{b}"]["cells"])
                            == len(s.concat_cells(a, b)) for a, b in s.pairs)
                    and len(found["reconstruction"]) == entries)
        return found if complete else None

    def restore(self, p: Progress, payloads: list[Any]) -> None:
        out: dict[str, Any] = {"similarity": {}, "concat": {}, "reconstruction": {}}
        for payload in payloads:
            for split, by_seed in (payload or {}).get("similarity", {}).items():
                out["similarity"].setdefault(split, {}).update(by_seed)
            out["concat"].update((payload or {}).get("concat", {}))
            out["reconstruction"].update((payload or {}).get("reconstruction", {}))
        for split in ("train", "val"):
            out["similarity"].setdefault(split, {})
        p.found[self.name] = out

    def report(self, p: Progress, path: Path) -> list[str]:
        from scheda.protocol.features_report import section

        return section(p.cfg, settings(p.cfg), p.found, path)
