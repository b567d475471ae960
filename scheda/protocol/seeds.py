"""Seeds as a protocol axis (``scale.seeds``): every reported model trained again per seed.

The first seed is the *selection seed*: the grid, the continuations and the controls run with
it, and every hyper-parameter (nu, lr, epochs, the schedule and its T, each control's length)
is chosen on its validation errors, as before. Each further seed then trains the reported
models again with those hyper-parameters fixed, each as long as its selection job trained and
evaluated as that job was (under ``scale.patience``, the same rule of training to convergence,
never stopped before the selection seed's epoch), so that each seed can be read under two rules
(``collect``): at the epoch selected on the selection seed, and at its own best validation epoch
(the paper chooses the epochs on validation for every model it reports):

* ``seed_da``: the best DA and every DA(nu0) a reported continuation starts from, from a new
  initialisation (as one fused sweep over the seeds, ``trainer.parallel.seed``, when the scale
  fuses its DA grid: ``scale.da.fused``);
* ``seed_continue``: the best run of each continuation kind and its controls, continuing *that
  seed's* DA(nu0) checkpoint with that seed's training stream, so each comparison is paired by
  seed (common random numbers within a seed, as for the selection seed);
* ``seed_finetune``: the fine-tuned rows, from that seed's best DA and best ScheDA.

Job names are the selection seed's with ``_seed<s>``; a rerun that adds seeds plans the same
jobs for the old seeds (read, not rerun) and trains only the new ones.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig

from scheda.utils.errors import ConfigError
from scheda.protocol.jobs import JobSpec, fmt
from scheda.protocol.kinds import CONTINUATION, FINETUNE, kind_of, of_role
from scheda.protocol.kinds.da import DA
from scheda.runs.rundir import FINAL_STATUSES, best_evaluation, checkpoint_name, read_results
from scheda.protocol.phases import check_seeds, da_values

log = logging.getLogger(__name__)

SUBPHASES = ("seed_da", "seed_continue", "seed_finetune")  # what the protocol's phase "seeds" runs, in order


@dataclass
class Row:
    """One reported model of one hidden size: its selection-seed result and, per further seed,
    where its replica runs (``run`` / ``epoch``: the evaluation it is reported at; None for a
    fine-tuning job, which reports its own chosen epoch)."""

    key: str
    hidden: str
    selected: dict[str, Any]
    epoch: int | None  # the selection seed's reported evaluation (None: a fine-tuning's own choice)
    replicas: dict[int, tuple[Path, int | None]] = field(default_factory=dict)


class Replicas:
    """The replica jobs of every further seed, planned from the selection seed's results (all
    paths are known in advance, so the three phases can be planned at once)."""

    def __init__(self, scale: DictConfig, out_dir: Path, selection: dict[str, Any], continued: dict[str, Any],
                 jobs: list[JobSpec], prefix: str = "", folders: str = "",
                 per_seed: Callable[[int], dict[str, Any]] | None = None):
        """``prefix``: before the name of each DA it plans, ``folders``: before each of SUBPHASES'
        folder (a stacked table's layer on one base: ``on_da_da_h500_nu0.5_lr0.05_seed1`` in
        ``stack_seed_da/``); ``per_seed``: values each seed's replicas get beside its seed (that
        seed's layer below, ``stack_on``)."""
        self.scale, self.out_dir, self.prefix, self.folders = scale, out_dir, prefix, folders
        self.per_seed = per_seed or (lambda seed: {})
        self.seeds = check_seeds(scale)
        self.further = self.seeds[1:]
        self.by_name = {job.name: job for job in jobs}
        self.jobs: dict[str, list[JobSpec]] = {self.folder(phase): [] for phase in SUBPHASES}
        self.rows: list[Row] = []
        if self.further:
            for hidden, sel in selection["hidden"].items():
                self._plan_hidden(hidden, sel, continued.get(hidden, {}))

    def folder(self, phase: str) -> str:
        """Where one of SUBPHASES' replicas run (and the launch that runs them)."""
        return self.folders + phase

    # --- planning ---------------------------------------------------------------------------
    def _plan_hidden(self, hidden: str, sel: dict[str, Any], continued: dict[str, Any]) -> None:
        starts: dict[str, dict[int, Path]] = {}  # nu -> seed -> that seed's DA checkpoint

        def da_checkpoints(nu: float) -> dict[int, Path]:
            key = fmt(nu)
            if key not in starts:
                starts[key] = self._plan_da(int(hidden), sel["by_nu"][key])
            return starts[key]

        best_da = sel["best"]
        da_row = Row(DA.name, hidden, best_da, best_da["epoch"])
        for seed, ckpt in da_checkpoints(best_da["nu"]).items():
            da_row.replicas[seed] = (ckpt.parent.parent, best_da["epoch"])
        self.rows.append(da_row)
        final_checkpoints: dict[str, dict[int, Path]] = {DA.name: da_checkpoints(best_da["nu"])}
        for name, found in continued.items():
            if kind_of(name).role != CONTINUATION or found.get("best") is None:
                continue
            best = found["best"]
            start = da_checkpoints(best["nu0"]) if "nu0" in best and fmt(best["nu0"]) in sel["by_nu"] else None
            row = self._plan_replicas(name, hidden, best, start)
            final_checkpoints[name] = {s: run / "checkpoints" / checkpoint_name(epoch)
                                       for s, (run, epoch) in row.replicas.items()}
            if start is not None:
                for control_name, control in found.get("controls", {}).items():
                    self._plan_replicas(f"{name}.{control_name}", hidden, control, start)
        for kind in of_role(FINETUNE):
            chosen = continued.get(kind.name)
            source = final_checkpoints.get(kind.of)
            job = self.by_name.get(Path(chosen["run"]).name) if chosen else None
            if job is None or source is None:
                continue
            row = Row(kind.name, hidden, chosen, None)
            for seed in self.further:
                replica = self._replica(job, "seed_finetune", f"{job.name}_seed{seed}", seed,
                                        {"init_from": str(source[seed])})
                row.replicas[seed] = (self.out_dir / replica.phase / replica.name, None)
            self.rows.append(row)

    def _plan_da(self, hidden: int, selected: dict[str, Any]) -> dict[int, Path]:
        """The DA(nu) at its selected lr for the grid's epochs, for every further seed: one job
        per seed, or fused sweeps over the seeds; returns each seed's checkpoint at the selected
        epoch (evaluated and checkpointed every ``eval_every``, as the grid's runs), where its
        continuations start."""
        nu, lr, epoch = selected["nu"], selected["lr"], selected["epoch"]
        base = f"{self.prefix}da_h{hidden}_nu{fmt(nu)}_lr{fmt(lr)}"
        values = da_values(hidden, nu, lr, self.scale.da, self.scale.patience)
        if self.scale.patience is not None:  # the rule stops no replica before the epoch it is read at
            values["trainer.min_epochs"] = epoch
        meta = {"kind": DA.name, "hidden": hidden, "nu": nu, "lr": lr, "epochs": self.scale.da.epochs}
        where: dict[int, Path] = {}
        folder = self.folder("seed_da")
        if not self.scale.da.fused or self.per_seed(self.further[0]):  # values of its own: a job per seed
            for seed in self.further:
                job = JobSpec(f"{base}_seed{seed}", folder, groups={"schedule": "constant"},
                              values={**values, **self.per_seed(seed), "seed": seed}, meta={**meta, "seed": seed})
                self.jobs[folder].append(job)
                where[seed] = self.out_dir / folder / job.name
        else:
            for seeds in self._fused_groups(base):
                job = JobSpec(f"{base}_seeds{'_'.join(map(str, seeds))}", folder, groups={"schedule": "constant"},
                              values={**values, "seed": seeds[0], "trainer.parallel.seed": seeds},
                              meta={**meta, "seeds": seeds})
                self.jobs[folder].append(job)
                for k, seed in enumerate(seeds):
                    where[seed] = self.out_dir / folder / job.name / "models" / str(k)
        return {seed: run / "checkpoints" / checkpoint_name(epoch) for seed, run in where.items()}

    def _fused_groups(self, base: str) -> list[list[int]]:
        """The fused sweeps over seeds: those already on disk (kept as they are, so a rerun
        reads them) and one for the further seeds none of them holds."""
        pattern = re.compile(re.escape(base) + r"_seeds(\d+(?:_\d+)*)$")
        folder = self.out_dir / self.folder("seed_da")
        found = sorted([int(s) for s in m.group(1).split("_")]
                       for p in (folder.iterdir() if folder.is_dir() else []) if (m := pattern.match(p.name)))
        groups = [g for g in found if set(g) <= set(self.further)]
        covered = {s for g in groups for s in g}
        new = [s for s in self.further if s not in covered]
        return groups + ([new] if new else [])

    def _plan_replicas(self, key: str, hidden: str, best: dict[str, Any], start: dict[int, Path] | None) -> Row:
        """A continuation or control of the selection seed, for every further seed: the same job
        (its whole length, evaluated as it was) from that seed's DA(nu0) checkpoint (runs from
        scratch need none)."""
        job = self.by_name[Path(best["run"]).name]
        row = Row(key, hidden, best, best["epoch"])
        for seed in self.further:
            changes: dict[str, Any] = {}
            if "init_from" in job.values:
                if start is None:
                    raise ConfigError(f"{job.name} continues a DA that the selection does not hold: "
                                      f"its seeds cannot be planned")
                changes["init_from"] = str(start[seed])
            if "trainer.patience" in job.values:  # the rule stops no replica before the epoch it is read at
                changes["trainer.min_epochs"] = best["epoch"]
            replica = self._replica(job, "seed_continue", f"{job.name}_seed{seed}", seed, changes)
            row.replicas[seed] = (self.out_dir / replica.phase / replica.name, best["epoch"])
        self.rows.append(row)
        return row

    def _replica(self, job: JobSpec, phase: str, name: str, seed: int, changes: dict[str, Any]) -> JobSpec:
        values = {k: v for k, v in job.values.items() if not k.startswith("trainer.parallel.")}
        replica = JobSpec(name, self.folder(phase), dict(job.groups),
                          {**values, **changes, **self.per_seed(seed), "seed": seed},
                          {**job.meta, "seed": seed, "replica_of": job.name})
        self.jobs[replica.phase].append(replica)
        return replica

    # --- results ----------------------------------------------------------------------------
    def collect(self) -> dict[str, Any]:
        """Per hidden size and row: each seed's validation and test error (and which test images
        it got right) under both rules: ``hidden`` at the epoch selected on the selection seed,
        ``own_best`` at each seed's own best validation epoch (the selection seed's is the same
        under both: selection chose its best). A replica that has not finished is absent; a
        fine-tuned row reports its own chosen epoch under both."""
        s0 = str(self.seeds[0])
        out: dict[str, Any] = {"seeds": self.seeds, "selection_seed": self.seeds[0], "hidden": {}, "own_best": {}}
        for row in self.rows:
            first = read_outcome(Path(row.selected["run"]), row.epoch)
            at_selected, at_best = {s0: first}, {s0: first}
            for seed, (run, epoch) in row.replicas.items():
                for rule, where in ((at_selected, epoch), (at_best, None if epoch is None else BEST)):
                    outcome = read_outcome(run, where)
                    if outcome is not None:
                        rule[str(seed)] = outcome
            out["hidden"].setdefault(row.hidden, {})[row.key] = at_selected
            out["own_best"].setdefault(row.hidden, {})[row.key] = at_best
        return out


BEST = "best"  # read a run at its own best validation epoch


def read_outcome(run: Path, epoch: int | str | None) -> dict[str, Any] | None:
    """A model's errors at an evaluation: of epoch ``epoch``, its best on validation (``BEST``),
    or a fine-tuning job's chosen epoch (None); with the epoch and the per-image test
    correctness when the run kept it."""
    results = read_results(run)
    if results is None or results.get("status") not in FINAL_STATUSES:
        return None
    if epoch is None:
        found = (results.get("finetune") or {}).get("chosen")
        at = found.get("best_epoch") if found else None
    elif epoch == BEST:
        found = best_evaluation(results)
        at = found["epoch"] if found else None
    else:
        found = next((e for e in results.get("evaluations", []) if e["epoch"] == epoch), None)
        at = epoch
    if not found:
        return None
    return {"run": str(run), "epoch": at, "val_error": found["val_error"], "test_error": found["test_error"],
            "test_n": found.get("test_n"), "test_correct": found.get("test_correct"),
            "stopped_by": results.get("stopped_by"), "epochs_trained": results.get("epochs")}
