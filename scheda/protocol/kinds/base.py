"""What a job kind is: one class that says, for the runs of one kind, which jobs the protocol
plans, how a finished run is selected, how the report names and describes it, how the figures
draw it, what the seeds replicate and what the estimate counts. Every other protocol module
asks a run's kind (``kind_of(meta["kind"])``) instead of testing which kind it is."""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar, Iterable

from omegaconf import DictConfig

from scheda.runs.rundir import best_evaluation, checkpoint_name, params_of
from scheda.protocol.jobs import JobSpec, count, fmt
from scheda.utils.errors import ConfigError

# What a kind is to the protocol (its phase): each role is planned, selected and reported in its own way.
BASELINE = "baseline"  # raw pixels: no training, evaluated once
GRID = "grid"  # the DA grid of phase 1 (by hidden size, nu, lr)
CONTINUATION = "continuation"  # phase 3: a schedule from a selected DA, or a random-nu DA
CONTROL = "control"  # phase 4: the same start as the best schedule of levels, without its schedule
FINETUNE = "finetune"  # phase 5: supervised fine-tuning of a selected encoder

REGISTRY: dict[str, "JobKind"] = {}


def register_kind(cls: type["JobKind"]) -> type["JobKind"]:
    """Class decorator: the protocol finds the kind by ``cls.name`` from here on."""
    if cls.name in REGISTRY:
        raise ValueError(f"job kind {cls.name!r} is registered twice ({REGISTRY[cls.name]!r} and {cls!r})")
    REGISTRY[cls.name] = cls()
    return cls


def errors(evaluation: dict[str, Any], results: dict[str, Any] | None = None) -> dict[str, Any]:
    """What every selected entry keeps of an evaluation: its errors, the classifier's setting and
    the validation size (for runs from before it was recorded, the split size in the run's own
    config, where that is a count: ``dataset.val_size``)."""
    val_n = evaluation.get("val_n")
    if val_n is None and results is not None:
        size = ((results.get("config") or {}).get("dataset") or {}).get("val_size")
        val_n = size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None
    return {"val_error": evaluation["val_error"], "test_error": evaluation["test_error"], "params": params_of(evaluation),
            "val_n": val_n}


def stopping(results: dict[str, Any]) -> dict[str, Any]:
    """Why a run stopped and after how many epochs (``stopped_by``: patience, cap or schedule;
    absent for a run from before the rule), as every selected entry keeps it."""
    return {"stopped_by": results.get("stopped_by"), "epochs_trained": results.get("epochs")}


def settings_text(e: dict[str, Any]) -> str:
    return ", ".join(f"{k}={fmt(v) if isinstance(v, float) else v}" for k, v in e["settings"].items())


def grid_points(grid: DictConfig) -> list[dict[str, Any]]:
    """Every combination of a ``scale.schedules.<name>.grid``."""
    keys = list(grid.grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(list(grid.grid[k]) for k in keys))]


class JobKind(ABC):
    """One kind of protocol job. Subclasses set ``name`` (the kind in a job's meta, the key of its
    rows in selection.json and the report), ``label`` (the report's row), ``role``, and override
    what their role uses; the defaults are those of a run selected at its best evaluation."""

    name: ClassVar[str]
    label: ClassVar[str]
    role: ClassVar[str]
    eager: ClassVar[bool] = False  # the estimate: nu drawn per minibatch, so the step is not graphed
    controlled: ClassVar[bool] = False  # the protocol plans controls (role CONTROL) for its best run
    in_figure5: ClassVar[bool] = False  # drawn by its starting nu in Figure 5

    @property
    def paper_row(self) -> str:
        """The key of its row in a table's ``paper`` numbers."""
        return self.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    # --- planning (each role's planner calls its own) --------------------------------------
    def check(self, scale: DictConfig) -> None:
        """Whatever of ``scale`` this kind plans from, checked before any training."""

    # --- selection ---------------------------------------------------------------------------
    def models(self, job: JobSpec, run_dir: Path) -> Iterable[tuple[Path, dict[str, Any]]]:
        """The models a job trained, each as (its run directory, its meta): one, unless fused."""
        yield run_dir, job.meta

    def select(self, run_dir: Path, results: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any] | None:
        """A finished run's entry: its best evaluation on validation (a schedule's T: the level
        it was reached at), or None when it has none."""
        best = best_evaluation(results)
        if best is None:
            return None
        levels = [e for e in results["evaluations"] if e.get("reason") == "stage_end"]
        # past the last level's stage end: the last level, which the patience rule let run on
        T = next((i + 1 for i, e in enumerate(levels) if e["epoch"] >= best["epoch"]), meta.get("levels"))
        ckpt = run_dir / "checkpoints" / checkpoint_name(best["epoch"])
        return {"run": str(run_dir), **meta, "epoch": best["epoch"], "nu": best.get("nu"), "T": T,
                "status": results["status"], "checkpoint": str(ckpt) if ckpt.exists() else None, **errors(best, results),
                **stopping(results)}

    def file(self, found: dict[str, Any], entry: dict[str, Any], meta: dict[str, Any]) -> None:
        """Put a selected entry where its phase keeps what it found: here, one of the runs of its
        hidden size and kind to choose the best among."""
        found.setdefault(str(meta["hidden"]), {}).setdefault(self.name, {"runs": []})["runs"].append(entry)

    # --- the report and the figures ----------------------------------------------------------
    def cap(self, scale: DictConfig) -> str | None:
        """Under ``scale.patience``, the most epochs this kind's runs train and how often they are
        evaluated, as the report's section on the rule says it (None: no cap of its own)."""
        return None

    def describe(self, e: dict[str, Any]) -> str:
        """The selected hyper-parameters of an entry, as the report's tables print them."""
        return f"lr={fmt(e['lr'])}, {count(e['epoch'], 'epoch')}" if "lr" in e else count(e["epoch"], "epoch")

    def series(self, e: dict[str, Any]) -> str:
        """The series an entry belongs to in the figures (one colour each)."""
        return self.name

    def legend(self, e: dict[str, Any]) -> str:
        """An entry's name in Figure 2's legend."""
        return self.label

    def figure5_legend(self, e: dict[str, Any]) -> str:
        """An entry's name in Figure 5's legend (``in_figure5`` kinds, drawn at their ``nu0``)."""
        return self.legend(e)


class ContinuationKind(JobKind):
    """Phase 3: runs planned from the selected DA of each nu (or from scratch), the best of a
    hidden size's runs reported against the best DA."""

    role = CONTINUATION
    compared_with: ClassVar[str | None] = None  # another continuation kind the seeds' report tests it against
    question_against: ClassVar[str] = ""  # what that comparison asks

    @abstractmethod
    def plan(self, scale: DictConfig, hidden: int, by_nu: dict[str, Any]) -> list[JobSpec]:
        """This kind's jobs for one hidden size, from the selected DA per nu (``by_nu``)."""

    def controls(self, scale: DictConfig, hidden: int, best: dict[str, Any]) -> list[JobSpec]:
        """The control jobs of this kind's best run (those of a ``controlled`` kind)."""
        return []

    @staticmethod
    def reached(e: dict[str, Any]) -> str:
        """Where a schedule continued from a DA was selected: its level T, its nu there, and its
        epochs past the DA's."""
        return (f"T={e['T']} (last nu {fmt(e['nu'])}), from the DA's epoch {e['start_epoch']}, "
                f"{count(e['epoch'], 'epoch')} more")

    def qualifies(self) -> str:
        """What the seeds' table adds to the name of one of this kind's controls."""
        return f" (of {self.label})"


class ControlKind(JobKind):
    """Phase 4: the best run of a ``controlled`` continuation trained again from the same
    checkpoint and stream without its schedule; each control is one sentence of the verdict."""

    role = CONTROL
    question: ClassVar[str]  # what the schedule against this control asks, as the report's seeds section says it

    @abstractmethod
    def job(self, grid: DictConfig, hidden: int, best: dict[str, Any], patience: int | None = None) -> JobSpec:
        """The control of ``best`` (a selected continuation run; ``grid``: its kind's scale grid), under
        the protocol's rule of training to convergence when ``patience`` is set."""

    @abstractmethod
    def verdict(self, best: dict[str, Any], control: dict[str, Any]) -> str:
        """What this control of ``best`` shows, as a clause of the report's verdict."""

    def describe(self, e: dict[str, Any]) -> str:
        return (f"nu={fmt(e['nu'])} for {e['epochs']} epochs from the DA({fmt(e['nu0'])})'s epoch {e['start_epoch']}, "
                f"best at {count(e['epoch'], 'epoch')} more")


def of_role(role: str) -> list[JobKind]:
    """The registered kinds of one role, in the order they were registered."""
    return [kind for kind in REGISTRY.values() if kind.role == role]


def control_kinds(scale: DictConfig) -> list[ControlKind]:
    """The control kinds a scale runs (``scale.control``): true, every one; false or null, none; a
    list of their names, those (a table whose questions need the same start only skips the jump)."""
    chosen, every = scale.get("control"), of_role(CONTROL)
    if chosen is None or isinstance(chosen, bool):
        return every if chosen else []
    names = [kind.name for kind in every]
    if isinstance(chosen, str) or not all(isinstance(name, str) and name in names for name in chosen):
        raise ConfigError(f"scale.control={chosen}: give true (every control), false (none) or a list of control "
                          f"kinds, e.g. scale.control=[{names[0]}] (of {', '.join(names)})")
    return [kind for kind in every if kind.name in chosen]
