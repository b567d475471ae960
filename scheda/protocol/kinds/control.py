"""The controls of the best run of a schedule of levels (phase 4), from the same checkpoint and,
through the seed, the same training stream (common random numbers):

* ``control``: the DA trained on at its own nu0 for as long as that run's whole continuation,
  evaluated where the schedule switched (every K epochs): tells the schedule's effect from
  that of more epochs;
* ``jump``: straight to the run's selected final nu for as many epochs as it took to reach it,
  evaluated every K: tells a gradual schedule from a single switch.

Under the rule of training to convergence (``scale.patience``) each control trains until its
validation error stops improving, up to the cap of the run it controls (``max_epochs`` of its
kind's grid): the schedule is then compared with the same start trained to convergence, at
nu0 and at the final nu. Each keeps two checkpoints, its newest (a resume's) and its best on
validation's (the model it reports, which a stacked layer stands on: table=stacked's same start).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from omegaconf import DictConfig

from scheda.protocol.jobs import JobSpec, fmt, pct, rule_values
from scheda.protocol.kinds.base import ControlKind, register_kind


def trained(e: dict[str, Any], fixed: str) -> str:
    """How long a control trained, and why it stopped: ``fixed`` where it ran its planned length
    (no rule of training to convergence)."""
    if not e.get("stopped_by") or e["stopped_by"] == "schedule":
        return fixed
    if e["stopped_by"] == "patience":
        return f"until its validation error stopped improving ({e['epochs_trained']} epochs)"
    return f"to its cap of {e['epochs_trained']} epochs (not converged by the rule there)"


def compared(best: dict[str, Any], control: dict[str, Any]) -> tuple[float, float, str]:
    """The schedule's gain over its control in points on test and on validation (positive: the
    schedule better), and the word for it."""
    gain = 100 * (control["test_error"] - best["test_error"])
    return gain, 100 * (control["val_error"] - best["val_error"]), "better than" if gain > 0 else "no better than"


class FromTheStart(ControlKind):
    """A constant nu from the best run's start checkpoint with its lr, evaluated every K epochs."""

    @abstractmethod
    def target(self, best: dict[str, Any]) -> tuple[float, int, str]:
        """(nu, epochs, what the job's name adds after nu0) of the control of ``best``."""

    def job(self, grid: DictConfig, hidden: int, best: dict[str, Any], patience: int | None = None) -> JobSpec:
        nu, epochs, tag = self.target(best)
        if patience is not None:  # to convergence, at most as long as the run it controls could train
            epochs = grid.max_epochs or best["epochs"]
        return JobSpec(f"{self.name}_h{hidden}_nu{fmt(best['nu0'])}{tag}_{epochs}ep", "control",
                       groups={"schedule": "constant"},
                       values={"model.hidden": hidden, "optim.lr": grid.lr, "init_from": best["start_checkpoint"],
                               "evaluate.every": best["K"], "trainer.checkpoint_every": best["K"],
                               "trainer.keep_checkpoints": 1, "schedule.nu": nu, "schedule.epochs": epochs,
                               **rule_values(patience)},
                       meta={"kind": self.name, "hidden": hidden, "nu0": best["nu0"], "K": best["K"],
                             "start_epoch": best["start_epoch"], "start_checkpoint": best["start_checkpoint"],
                             "nu": nu, "epochs": epochs})


@register_kind
class SameStart(FromTheStart):
    name, label = "control", "Control: same start, constant nu"
    question = ("is the schedule's gain more than the epochs it trains past the DA's checkpoint (the same checkpoint "
                "and training stream, trained on at its nu0)")

    def target(self, best: dict[str, Any]) -> tuple[float, int, str]:
        return best["nu0"], best["epochs"], ""

    def verdict(self, best: dict[str, Any], same: dict[str, Any]) -> str:
        gain, val_gain, word = compared(best, same)
        length = trained(same, f"for the schedule's {same['epochs']} epochs")
        return (f"the DA trained on at nu={fmt(same['nu'])} {length} reached "
                f"{pct(same['test_error'])} % test at its best epoch on validation ({same['epoch']}): the "
                f"schedule is {word} more epochs alone ({gain:+.2f} points on test, "
                f"{val_gain:+.2f} on validation; positive: the schedule better);")

    def legend(self, e: dict[str, Any]) -> str:
        return f"control: DA({fmt(e['nu0'])}) +{e['epochs']} epochs"


@register_kind
class Jump(FromTheStart):
    name, label = "jump", "Control: same start, one jump to the final nu"
    question = ("does moving nu step by step beat one switch (the same checkpoint and training stream, moved at "
                "once to the schedule's selected final nu)")

    def target(self, best: dict[str, Any]) -> tuple[float, int, str]:
        return best["nu"], best["epoch"], f"_to{fmt(best['nu'])}"

    def verdict(self, best: dict[str, Any], jump: dict[str, Any]) -> str:
        gain, val_gain, word = compared(best, jump)
        length = trained(jump, f"for {jump['epochs']} epochs")
        return (f"one jump straight to nu={fmt(jump['nu'])} {length} reached "
                f"{pct(jump['test_error'])} % test (best on validation at epoch {jump['epoch']}): the gradual "
                f"schedule is {word} a single switch ({gain:+.2f} points on test, {val_gain:+.2f} on validation).")

    def legend(self, e: dict[str, Any]) -> str:
        return f"control: DA({fmt(e['nu0'])}) -> {fmt(e['nu'])} at once"
