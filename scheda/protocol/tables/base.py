"""What a phase of the protocol is: one class that declares the jobs it plans (by launch: a
phase may run its jobs in more than one folder), what it reads of them once they ran, its share
of the estimate printed before any job, and its section of the report. The protocol runs a
table's phases (``table.phases``) in order and asks each; nothing else lists them.

Adding a phase is one class in a table's module of this package, decorated with
``@register_phase`` (docs/extending.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from omegaconf import DictConfig

from scheda.protocol import rows
from scheda.protocol.jobs import JobSpec
from scheda.protocol.seeds import Replicas
from scheda.utils.errors import ConfigError

REPORT = "report"  # not a phase: phases=[...] names it to write the report


@dataclass
class Progress:
    """What the phases know so far: each launch's jobs and what each phase read of them (the grid
    tables' selection, continuations and seeds; ``found[phase]`` for any other phase), and how
    many jobs each launch ran."""

    cfg: DictConfig
    out_dir: Path
    jobs: dict[str, list[JobSpec]] = field(default_factory=dict)
    selection: dict[str, Any] = field(default_factory=dict)
    continued: dict[str, Any] = field(default_factory=dict)
    seeded: dict[str, Any] = field(default_factory=dict)
    seed_plan: Replicas | None = None
    found: dict[str, Any] = field(default_factory=dict)
    counts: list[dict[str, int]] = field(default_factory=list)
    launching: bool = False
    owner: bool = True  # holds the out_dir: writes what it collects (an interim report reads only)
    # A block that reads another's selection (table.blocks.selection): that block's index, and the jobs
    # planned here that it trained (read from its record, not launched: not in ``jobs``)
    given_from: int | None = None
    given: list[JobSpec] = field(default_factory=list)
    given_dir: Path | None = None  # that block's folder, where the given jobs ran

    def run_dir(self, job: JobSpec) -> Path:
        """Where a planned job's run is: in this out_dir, or the selection block's folder for a given one."""
        given = self.given_dir is not None and any((g.phase, g.name) == (job.phase, job.name) for g in self.given)
        return (self.given_dir if given else self.out_dir) / job.phase / job.name

    def all_jobs(self) -> list[JobSpec]:
        return [job for jobs in self.jobs.values() for job in jobs]

    @property
    def ran_jobs(self) -> bool:
        """Whether this invocation trained anything (a launch it was stopped in counts)."""
        return self.launching or any(c["run"] for c in self.counts)


class Phase(ABC):
    """One phase: ``plan`` gives its jobs by launch (the folder they run in: ``<out_dir>/<launch>/``)
    from what the phases before it found, ``collect`` reads what they gave (every phase collects,
    whether ``phases=[...]`` launched it or not), ``estimate`` says what it costs at most before
    any job ran, ``report`` writes its section."""

    name: ClassVar[str]  # what phases=[...] and table.phases call it
    aliases: ClassVar[tuple[str, ...]] = ()  # older names phases=[...] still takes (they launch nothing)

    @abstractmethod
    def plan(self, p: Progress) -> dict[str, list[JobSpec]]:
        """The jobs to launch, by launch name."""

    def collect(self, p: Progress) -> None:
        """Read what the jobs gave into ``p`` (written to out_dir only when ``p.owner``)."""

    @abstractmethod
    def estimate(self, cfg: DictConfig) -> list[dict[str, Any]]:
        """Its jobs before any ran, each model at its cap: one item per model of a job, with its
        ``phase`` (the plan's word for it), ``hidden``, ``epochs``, ``evals`` and ``models``
        (``eager``: nu per minibatch; ``inputs``: a stacked layer's, the layer below's units, where not
        the table's; ``timing``: the benchmark's key for its step where that is not
        the device's default, e.g. ``autograd_s``; ``finetune: True`` for a fine-tuning job, costed by
        its preset)."""

    def report(self, p: Progress, path: Path) -> list[str]:
        """Its section of the report at ``path`` (figures go beside it)."""
        return []

    def check(self, cfg: DictConfig) -> None:
        """Whatever of the table and scale it plans from, checked before any training."""



class RecordedPhase(Phase):
    """A phase that keeps what it found as a block's record (scheda.protocol.blocks): a table may
    declare blocks only when every one of its phases is one of these."""

    @abstractmethod
    def record(self, p: Progress) -> Any:
        """What it found, as small JSON that ``restore`` reads back with no run folder; None while it
        is not complete (the block writes no record then)."""

    @abstractmethod
    def restore(self, p: Progress, payloads: list[Any]) -> None:
        """``p.found[self.name]`` from the records of several blocks (their ``record`` payloads)."""

    def files(self, p: Progress) -> dict[str, bytes]:
        """Small files kept beside the record (a figure the report shows from there), by name; called
        once ``record`` is complete."""
        return {}


class RowPhase(RecordedPhase):
    """A phase whose every job gives one row (scheda.protocol.rows), found as seed -> model -> row by
    the job's ``meta`` (seed, model). ``jobs`` declares them; the plan, what is collected, the record
    and the estimate (each job at its cap: ``meta`` epochs, evals and, where not the device's
    default, timing) follow from it."""

    @abstractmethod
    def jobs(self, cfg: DictConfig, p: Progress | None) -> list[JobSpec]:
        """Its jobs from what the phases before it found (``p``); ``p=None``: the estimate's, every
        earlier model assumed finished."""

    def plan(self, p: Progress) -> dict[str, list[JobSpec]]:
        return by_launch(self.jobs(p.cfg, p))

    def rows(self, p: Progress) -> rows.Rows:
        out: rows.Rows = {}
        for job in self.jobs(p.cfg, p):
            out.setdefault(str(job.meta["seed"]), {})[job.meta["model"]] = rows.from_run(p.run_dir(job))
        return out

    def collect(self, p: Progress) -> None:
        p.found[self.name] = self.rows(p)

    def estimate(self, cfg: DictConfig) -> list[dict[str, Any]]:
        return [{"phase": self.name, "hidden": job.meta["hidden"], "epochs": job.meta["epochs"], "models": 1,
                 "evals": job.meta["evals"], **({"timing": job.meta["timing"]} if "timing" in job.meta else {})}
                for job in self.jobs(cfg, None)]

    def record(self, p: Progress) -> Any:
        return rows.to_record(p.found[self.name])

    def restore(self, p: Progress, payloads: list[Any]) -> None:
        p.found[self.name] = rows.from_record(merged(payloads))


def by_launch(jobs: list[JobSpec]) -> dict[str, list[JobSpec]]:
    """A phase's jobs by the launch (folder) each runs in: what ``Phase.plan`` returns."""
    out: dict[str, list[JobSpec]] = {}
    for job in jobs:
        out.setdefault(job.phase, []).append(job)
    return out


def merged(payloads: list[Any]) -> dict[str, Any]:
    """Several blocks' payloads keyed by seed as one (each seed is one block's): what ``restore`` reads."""
    out: dict[str, Any] = {}
    for payload in payloads:
        out.update(payload or {})
    return out


REGISTRY: dict[str, Phase] = {}


def register_phase(cls: type[Phase]) -> type[Phase]:
    """Class decorator: ``table.phases`` can name the phase from here on."""
    if cls.name in REGISTRY or cls.name == REPORT:
        raise ValueError(f"phase {cls.name!r} is registered twice (or is the word {REPORT!r})")
    REGISTRY[cls.name] = cls()
    return cls


def phases_of(cfg: DictConfig) -> list[Phase]:
    """The table's phases in order (``table.phases``), each a registered one."""
    unknown = [name for name in cfg.table.phases if name not in REGISTRY]
    if unknown:
        raise ConfigError(f"table.phases has {unknown}: a phase is one of {', '.join(REGISTRY)}")
    return [REGISTRY[name] for name in cfg.table.phases]


def chosen_phases(cfg: DictConfig) -> list[str]:
    """What ``phases=[...]`` asks of this table: every phase and the report when it is null; a
    name that is none of the table's phases (nor an older name of one) is refused in one line."""
    table = phases_of(cfg)
    if cfg.phases is None:
        return [phase.name for phase in table] + [REPORT]
    known = {phase.name for phase in table} | {a for phase in table for a in phase.aliases} | {REPORT}
    unknown = [name for name in cfg.phases if name not in known]
    if unknown:
        raise ConfigError(f"phases has {sorted(unknown)}: table={cfg.table.name} has the phases "
                          f"{', '.join(phase.name for phase in table)} (and {REPORT}: the report)")
    return list(cfg.phases)
