"""The grid tables' phases (table1, increasing, random_nu, amazon: the paper's Section 4.1): the
DA grid and the selection on validation, the continuations of the selected DAs, the controls of
the best schedules, fine-tuning, and the further seeds. Their report is one Results table read
from every phase, so the last phase (seeds) writes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from scheda.protocol import phases, recorded_runs, selection as select
from scheda.protocol.jobs import JobSpec, fmt
from scheda.protocol.kinds import BASELINE, FINETUNE, control_kinds, kind_of, of_role
from scheda.protocol.report import results_section
from scheda.protocol.seed_report import RULES
from scheda.protocol.seeds import SUBPHASES, Replicas
from scheda.protocol.tables.base import Progress, RecordedPhase, register_phase
from scheda.utils.errors import SchedaError
from scheda.utils.io import atomic_write_json


_PLANNED: dict[str, list[JobSpec]] = {}


def planned_continuations(cfg: DictConfig) -> list[JobSpec]:
    """The continuations the estimate counts: every DA of the grid selected at its last epoch
    (with the entry's fields a kind may plan from), so every nu0's are planned; planned once per
    scale and table (three phases count them, and planning says what it leaves out)."""
    key = OmegaConf.to_yaml({"scale": cfg.scale, "continuations": cfg.table.continuations})
    if key not in _PLANNED:
        _PLANNED[key] = _continuations_at_every_nu(cfg)
    return _PLANNED[key]


def _founds(p: Progress, payloads: list[Any]) -> list[Any]:
    """What ``phase`` found in each block, read back from its records (scheda.protocol.recorded_runs)."""
    return [recorded_runs.restored(payload, p) for payload in payloads]


def _by_hidden(founds: list[dict[str, Any]], what: str) -> dict[str, Any]:
    """Several blocks' ``hidden -> ...`` as one; a hidden size two blocks both hold is refused."""
    out: dict[str, Any] = {}
    for found in founds:
        twice = sorted(set(out) & set(found))
        if twice:
            raise SchedaError(f"two blocks' records both hold {what} of {', '.join(twice)} hidden units: a table's "
                              f"blocks share no hidden size (table.blocks.list)")
        out.update(found)
    return out


def _continuations_at_every_nu(cfg: DictConfig) -> list[JobSpec]:
    scale = cfg.scale
    selection = {"hidden": {str(h): {"by_nu": {fmt(nu): {"checkpoint": "c", "epoch": scale.da.epochs, "nu": nu,
                                                         "lr": scale.da.lr[0], "run": "r"}
                                               for nu in scale.da.nu}} for h in scale.hidden}}
    return phases.continuation_jobs(scale, cfg.table.continuations, selection)


@register_phase
class DAGrid(RecordedPhase):
    """Phase 1: the DA grid (and the raw baseline), then the best DA per hidden size and nu."""

    name = "da"
    aliases = ("select",)  # 0.2's phase of its own: the selection is part of this one

    def plan(self, p: Progress) -> dict[str, list[JobSpec]]:
        return {"da": phases.da_jobs(p.cfg.scale, p.cfg.table.raw)}

    def collect(self, p: Progress) -> None:
        p.selection = select.select_das(p.jobs["da"], p.out_dir)
        select.require_selection(p.selection, p.jobs["da"], p.out_dir)
        if p.owner:
            select.save_selection(p.out_dir, p.selection)

    def estimate(self, cfg: DictConfig) -> list[dict[str, Any]]:
        scale, items = cfg.scale, []
        for job in phases.da_jobs(scale, cfg.table.raw):
            if kind_of(job.meta["kind"]).role == BASELINE:
                items.append({"phase": "da", "hidden": 0, "epochs": 0, "evals": 1, "models": 1})
                continue
            models = len(job.meta.get("nus", [None]))
            items.append({"phase": "da", "hidden": job.meta["hidden"], "epochs": scale.da.epochs, "models": models,
                          "evals": models * (scale.da.epochs // scale.da.eval_every)})
        return items

    def record(self, p: Progress) -> dict[str, Any] | None:
        return recorded_runs.payload(p.selection, p)

    def restore(self, p: Progress, payloads: list[Any]) -> None:
        founds = _founds(p, payloads)
        p.selection = {"raw": next((f["raw"] for f in founds if f["raw"] is not None), None),
                       "hidden": _by_hidden([f["hidden"] for f in founds], "the DA grid")}


@register_phase
class Continue(RecordedPhase):
    """Phase 3: each continuation kind of the table from the selected DAs."""

    name = "continue"

    def plan(self, p: Progress) -> dict[str, list[JobSpec]]:
        return {"continue": phases.continuation_jobs(p.cfg.scale, p.cfg.table.continuations, p.selection)}

    def collect(self, p: Progress) -> None:
        p.continued = select.select_continuations(p.jobs["continue"], p.out_dir)

    def estimate(self, cfg: DictConfig) -> list[dict[str, Any]]:
        items = []
        for job in planned_continuations(cfg):
            kind, epochs = kind_of(job.meta["kind"]), job.meta.get("epochs", cfg.scale.random_nu.epochs)
            # a schedule evaluates after each level (under the rule every K epochs, its cap's worth); a
            # random-nu run every evaluate.every epochs
            evals = job.meta["levels"] if "levels" in job.meta and "trainer.patience" not in job.values \
                else epochs // job.values["evaluate.every"]
            items.append({"phase": "continue", "hidden": job.meta["hidden"], "epochs": epochs, "evals": evals,
                          "models": 1, "eager": kind.eager})
        return items

    def record(self, p: Progress) -> dict[str, Any] | None:
        """Each continuation kind's runs and best (its controls are Control's, the fine-tuned Finetune's)."""
        return recorded_runs.payload(select.continuations_of(p.continued), p)

    def restore(self, p: Progress, payloads: list[Any]) -> None:
        p.continued = _by_hidden(_founds(p, payloads), "continuations")


@register_phase
class Control(RecordedPhase):
    """Phase 4: the controls of the best run of each controlled continuation kind."""

    name = "control"

    def plan(self, p: Progress) -> dict[str, list[JobSpec]]:
        return {"control": phases.control_jobs(p.cfg.scale, p.cfg.table.continuations, p.continued)}

    def collect(self, p: Progress) -> None:
        select.attach_controls(p.cfg.scale, p.cfg.table.continuations, p.continued,
                               select.select_continuations(p.jobs["control"], p.out_dir))

    def estimate(self, cfg: DictConfig) -> list[dict[str, Any]]:
        """Each control at the length of its kind's longest continuation, evaluated every K epochs."""
        kinds = control_kinds(cfg.scale)
        if not kinds:
            return []
        longest: dict[tuple[int, str], tuple[int, int]] = {}  # (hidden, kind) -> (epochs, K) of its longest run
        for job in planned_continuations(cfg):
            kind, hidden = kind_of(job.meta["kind"]), job.meta["hidden"]
            if kind.controlled:
                epochs = job.meta.get("epochs", cfg.scale.random_nu.epochs)
                longest[(hidden, kind.name)] = max(longest.get((hidden, kind.name), (0, 1)), (epochs, job.meta["K"]))
        return [{"phase": "control", "hidden": hidden, "epochs": epochs, "evals": epochs // K, "models": 1}
                for (hidden, _), (epochs, K) in longest.items() for _control in kinds]

    def record(self, p: Progress) -> dict[str, Any] | None:
        """The controls put beside each run they control."""
        return recorded_runs.payload(select.controls_of(p.continued), p)

    def restore(self, p: Progress, payloads: list[Any]) -> None:
        select.put_controls(p.continued, _by_hidden(_founds(p, payloads), "controls"))


@register_phase
class Finetune(RecordedPhase):
    """Phase 5: the fine-tuning of the best DA and the best ScheDA (``scale.finetune``)."""

    name = "finetune"

    def plan(self, p: Progress) -> dict[str, list[JobSpec]]:
        preset = p.cfg.scale.finetune
        return {"finetune": phases.finetune_jobs(preset, p.selection, p.continued) if preset is not None else []}

    def collect(self, p: Progress) -> None:
        for h, found in select.select_continuations(p.jobs["finetune"], p.out_dir).items():
            p.continued.setdefault(h, {}).update(found)
        if p.owner:
            atomic_write_json(p.out_dir / f"continuations_{p.cfg.table.name}.json", p.continued)

    def estimate(self, cfg: DictConfig) -> list[dict[str, Any]]:
        """Every fine-tuning kind per hidden size and seed (the further seeds' own, launched by the
        seeds phase after their replicas: its seed_finetune)."""
        if cfg.scale.finetune is None:
            return []
        first = cfg.scale.seeds[0]
        return [{"phase": "finetune", "finetune": True, "hidden": h, **({} if seed == first else {"stage": SUBPHASES[2]})}
                for _kind in of_role(FINETUNE) for h in cfg.scale.hidden for seed in cfg.scale.seeds]

    def record(self, p: Progress) -> dict[str, Any] | None:
        """Each fine-tuning kind's chosen result."""
        return recorded_runs.payload(select.finetuned_of(p.continued), p)

    def restore(self, p: Progress, payloads: list[Any]) -> None:
        for h, found in _by_hidden(_founds(p, payloads), "fine-tuning").items():
            p.continued.setdefault(h, {}).update(found)


@register_phase
class Seeds(RecordedPhase):
    """The further seeds (scheda.protocol.seeds): every reported model trained again per seed,
    in three launches (SUBPHASES). Writes the table's report, which reads every phase."""

    name = "seeds"

    def plan(self, p: Progress) -> dict[str, list[JobSpec]]:
        p.seed_plan = Replicas(p.cfg.scale, p.out_dir, p.selection, p.continued, p.all_jobs() + p.given)
        return p.seed_plan.jobs

    def collect(self, p: Progress) -> None:
        p.seeded = p.seed_plan.collect()
        if p.owner:
            atomic_write_json(p.out_dir / f"seeds_{p.cfg.table.name}.json", p.seeded)

    def estimate(self, cfg: DictConfig) -> list[dict[str, Any]]:
        """Each further seed's replicas, at most: the best DA and the DA(nu0) of every kind that
        continues one (fused over the seeds when the grid is), and the longest run of each
        continuation kind with its controls."""
        scale, cont = cfg.scale, planned_continuations(cfg)
        further = len(scale.seeds) - 1
        if further < 1:
            return []
        items: list[dict[str, Any]] = []
        for hidden in scale.hidden:
            runs = [job for job in cont if job.meta["hidden"] == hidden]
            kinds = {job.meta["kind"] for job in runs}
            starts = {job.meta["kind"] for job in runs if "init_from" in job.values}
            das = min(len(scale.da.nu), 1 + len(starts))
            da = {"phase": "seeds", "stage": SUBPHASES[0], "hidden": hidden, "epochs": scale.da.epochs,
                  "evals": scale.da.epochs // scale.da.eval_every}
            items += [{**da, "models": further, "evals": further * da["evals"]}] * das if scale.da.fused \
                else [{**da, "models": 1}] * (das * further)
            for kind in sorted(kinds):
                longest = max((job for job in runs if job.meta["kind"] == kind), key=lambda j: j.meta.get("epochs", 0))
                epochs = longest.meta.get("epochs", scale.random_nu.epochs)
                evals = longest.meta.get("levels", epochs) if "trainer.patience" not in longest.values \
                    else epochs // longest.values["evaluate.every"]
                copies = 1 + len(control_kinds(scale)) if kind_of(kind).controlled else 1
                items += [{"phase": "seeds", "stage": SUBPHASES[1], "hidden": hidden, "epochs": epochs, "evals": evals,
                           "models": 1}] \
                    * (copies * further)
        return items

    def record(self, p: Progress) -> dict[str, Any] | None:
        """Each reported model's errors per seed (a block that reads another's selection holds the
        selection seed's too, as read from that block's record: its own records none without further seeds)."""
        return recorded_runs.payload(p.seeded, p)

    def restore(self, p: Progress, payloads: list[Any]) -> None:
        """The blocks' seeds as one: a block's hidden sizes, or its further seeds of the same models; a
        model's seed that two blocks both hold must be the same in both (the selection seed's, read)."""
        founds = _founds(p, payloads)
        first = {f["selection_seed"] for f in founds}
        if len(first) != 1:
            raise SchedaError(f"the blocks' records were selected on different seeds ({sorted(first)}): a table's "
                              f"blocks share the selection seed (the first of scale.seeds)")
        seeded: dict[str, Any] = {"seeds": list(dict.fromkeys(s for f in founds for s in f["seeds"])),
                                  "selection_seed": founds[0]["selection_seed"]}
        for rule in RULES:
            merged = seeded.setdefault(rule, {})
            for found in founds:
                for h, rows in found[rule].items():
                    for key, by_seed in rows.items():
                        row = merged.setdefault(h, {}).setdefault(key, {})
                        differ = sorted(s for s in set(row) & set(by_seed) if row[s] != by_seed[s])
                        if differ:
                            raise SchedaError(f"two blocks' records hold seed {', '.join(differ)} of {key} ({h} hidden "
                                              f"units) differently: a table's blocks share no seed of a model "
                                              f"(table.blocks.list)")
                        row.update(by_seed)
        p.seeded = seeded

    def report(self, p: Progress, path: Path) -> list[str]:
        return results_section(p.cfg, p.selection, p.continued, p.seeded, path)

