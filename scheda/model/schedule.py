"""Noise schedules: which corruption level nu each epoch (or minibatch) is trained at.

A schedule is a list of stages ``(nu, epochs)``. A plain DA is one stage; a ScheDA is nu0 for
``initial_epochs`` and then ``nu_t = nu_{t-1} - delta_nu`` for ``K`` epochs each (Geras &
Sutton, 2015, Section 3). Random schedules draw nu per minibatch (the paper's supplementary
experiment); their single stage has ``nu=None``.
"""

from __future__ import annotations

import abc
import itertools
import math
import logging
from dataclasses import dataclass, field
from typing import ClassVar, List, Mapping, Optional, Sequence

from omegaconf import MISSING, OmegaConf

from scheda.config import GROUPS, Component, register, schema_of, typed
from scheda.utils.errors import ConfigError
from scheda.utils.lazy import lazy

torch = lazy("torch", globals())

log = logging.getLogger(__name__)

MAX_LEVELS = 10_000  # more noise levels than any schedule needs; guards against delta_nu ~ 0
MIN_DELTA_NU = 1e-6  # well above the rounding below, so levels stay strictly monotonic
NU_DECIMALS = 10  # nu0 - t*delta_nu is rounded so that 0.7 - 0.1*4 prints (and compares) as 0.3


@dataclass(frozen=True)
class Stage:
    nu: float | None
    epochs: int


def check_nu(key: str, value: float) -> float:
    """``value`` as a noise level, rounded to the schedules' precision: a sweep's
    ``range(0.1,0.4,0.1)`` gives 0.30000000000000004, which logs and compares as 0.3. Only what
    every noise shares is checked here (a finite number >= 0); the noise itself bounds it further
    (a masking probability below 1, a Gaussian std unbounded: scheda.model.noise.Noise.check_levels)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value < math.inf:
        raise ConfigError(f"{key}={value!r} is not a noise level: nu must be a finite number >= 0")
    return round(float(value), NU_DECIMALS)


def check_epochs(key: str, value: int, minimum: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"{key}={value!r} must be an integer >= {minimum}")
    return value


class NoiseSchedule:
    """A sequence of stages, optionally cut or extended to ``max_epochs``."""

    per_minibatch = False

    def __init__(self, name: str, stages: Sequence[Stage]):
        if not stages:
            raise ConfigError(f"schedule '{name}' has no stages: give at least one (nu, epochs)")
        self.name = name
        self.stages = tuple(stages)
        self._ends = []
        total = 0
        for stage in self.stages:
            total += stage.epochs
            self._ends.append(total)

    @property
    def total_epochs(self) -> int:
        return self._ends[-1]

    def with_max_epochs(self, max_epochs: int | None) -> "NoiseSchedule":
        """Cut the schedule after ``max_epochs``, or extend its last stage up to it."""
        if max_epochs is None or max_epochs == self.total_epochs:
            return self
        check_epochs("trainer.max_epochs", max_epochs)
        stages: list[Stage] = []
        left = max_epochs
        for stage in self.stages:
            if left <= 0:
                break
            stages.append(Stage(stage.nu, min(stage.epochs, left)))
            left -= stage.epochs
        if left > 0:
            last = stages[-1]
            stages[-1] = Stage(last.nu, last.epochs + left)
        return self._replace_stages(stages)

    def agrees_with(self, stages: Sequence[Stage]) -> bool:
        """Whether ``stages`` (a checkpoint's) are this schedule's for as long as both run: one may
        be the other cut short or run on (``trainer.max_epochs`` changed on a resume)."""
        other = NoiseSchedule(self.name, stages)
        both = min(self.total_epochs, other.total_epochs)
        return self.with_max_epochs(both).stages == other.with_max_epochs(both).stages

    def _replace_stages(self, stages: Sequence[Stage]) -> "NoiseSchedule":
        return NoiseSchedule(self.name, stages)

    def stage_index(self, epoch: int) -> int:
        """Index of the stage that (0-based) ``epoch`` belongs to."""
        if not 0 <= epoch < self.total_epochs:
            raise IndexError(f"epoch {epoch} outside schedule of {self.total_epochs} epochs")
        for i, end in enumerate(self._ends):
            if epoch < end:
                return i
        raise AssertionError("unreachable")

    @property
    def last_stage_start(self) -> int:
        """Epochs completed before the last stage begins (0 for one stage)."""
        return self.total_epochs - self.stages[-1].epochs

    def nu_at(self, epoch: int) -> float | None:
        return self.stages[self.stage_index(epoch)].nu

    def epochs_into_stage(self, epoch: int) -> int:
        """How many epochs of its stage (0-based) ``epoch`` completes: 1 for a stage's first."""
        i = self.stage_index(epoch)
        return epoch + 1 - (self._ends[i - 1] if i else 0)

    def is_stage_end(self, epoch: int) -> bool:
        """True when ``epoch`` is the last epoch of its stage (the paper's evaluation points)."""
        return epoch + 1 in self._ends

    def epoch_nus(self) -> list[float | None]:
        """nu of every epoch, in order (for tests and reports)."""
        return [stage.nu for stage in self.stages for _ in range(stage.epochs)]

    def draw(self, generator: torch.Generator, device: torch.device) -> torch.Tensor:
        raise TypeError(f"schedule '{self.name}' has a fixed nu per epoch; nothing to draw")

    def describe(self) -> str:
        return " -> ".join(f"{s.nu:g}x{s.epochs}" if s.nu is not None else f"random x{s.epochs}"
                           for s in self.stages)


class RandomUniformSchedule(NoiseSchedule):
    """nu ~ U[low, high] drawn afresh for every minibatch."""

    per_minibatch = True

    def __init__(self, low: float, high: float, epochs: int):
        self.low, self.high = low, high
        super().__init__("random_uniform", [Stage(None, epochs)])

    def _replace_stages(self, stages):
        return RandomUniformSchedule(self.low, self.high, stages[0].epochs)

    def draw(self, generator, device):
        u = torch.rand((), generator=generator, device=device)
        return self.low + (self.high - self.low) * u


class RandomDiscreteSchedule(NoiseSchedule):
    """nu drawn uniformly from a fixed set for every minibatch."""

    per_minibatch = True

    def __init__(self, values: Sequence[float], epochs: int):
        self.values = tuple(values)
        self._table: dict[torch.device, torch.Tensor] = {}
        super().__init__("random_discrete", [Stage(None, epochs)])

    def _replace_stages(self, stages):
        return RandomDiscreteSchedule(self.values, stages[0].epochs)

    def draw(self, generator, device):
        table = self._table.get(device)
        if table is None:
            table = self._table[device] = torch.tensor(self.values, device=device)
        i = torch.randint(len(self.values), (), generator=generator, device=device)
        return table[i]


def level_stages(
    direction: int,
    nu0: float,
    delta_nu: float,
    K: int,
    initial_epochs: int,
    T: int | None,
    nu_final: float | None,
) -> list[Stage]:
    """Stages of a decreasing (direction=-1) or increasing (+1) schedule.

    With ``T`` the schedule makes exactly that many changes of nu; with ``nu_final`` it
    goes on while nu stays on the near side of ``nu_final`` (inclusive); with neither it goes
    on while nu stays inside (0, 1). Only with ``nu_final`` may an increasing schedule pass 1 (a
    Gaussian std; the noise refuses it for a probability). The values are checked already
    (:meth:`LevelScheduleConfig.check`); what only the sequence tells (a T past its end) is refused here.
    """
    key = "schedule"
    levels = level_sequence(direction, nu0, delta_nu, _ceiling(direction, nu_final))
    if T is None:
        T = level_count(direction, nu0, delta_nu, nu_final)
    elif T > MAX_LEVELS:
        raise ConfigError(f"{key}.T={T} exceeds {MAX_LEVELS}")
    if T > len(levels):
        end = "below 0" if direction < 0 else "to 1 or more (set nu_final to go past 1)"
        raise ConfigError(f"{key}.T={T} takes nu to {_nu_t(direction, nu0, delta_nu, T):g}, {end}: "
                          f"use T <= {min(len(levels), MAX_LEVELS)}")

    stages = [Stage(nu0, initial_epochs)] if initial_epochs > 0 else []
    stages += [Stage(nu, K) for nu in levels[:T]]
    if not stages:
        raise ConfigError(f"{key} has no epochs: set {key}.initial_epochs > 0 or {key}.T > 0")
    return stages


def _nu_t(direction: int, nu0: float, delta_nu: float, t: int) -> float:
    """nu after ``t`` changes by ``delta_nu`` from ``nu0`` (rounded: 0.7 - 3 x 0.1 is 0.4)."""
    return round(nu0 + direction * t * delta_nu, NU_DECIMALS)


def _ceiling(direction: int, nu_final: float | None) -> float:
    """Where a schedule's levels must stop rising: an increasing one without ``nu_final`` below 1
    (a probability's end), any other where its own end says (decreasing: at 0)."""
    return 1.0 if direction > 0 and nu_final is None else math.inf


def level_sequence(direction: int, nu0: float, delta_nu: float, ceiling: float = 1.0) -> list[float]:
    """nu_1, nu_2, ... of a decreasing (-1) or increasing (+1) schedule of levels, as long as they
    stay in [0, ``ceiling``) (at most MAX_LEVELS + 1): the one place the sequence is computed."""
    levels = []
    for t in range(1, MAX_LEVELS + 2):
        nu = _nu_t(direction, nu0, delta_nu, t)
        if not 0 <= nu < ceiling:
            break
        levels.append(nu)
    return levels


def level_count(direction: int, nu0: float, delta_nu: float, nu_final: float | None) -> int:
    """How many levels after ``nu0`` a decreasing (-1) or increasing (+1) schedule visits: those on
    the near side of ``nu_final`` (inclusive), or inside (0, 1) when it is None. The protocol
    plans a continuation only where this is at least 1."""
    if nu_final is None:
        kept = [nu for nu in level_sequence(direction, nu0, delta_nu) if nu > 0]
    else:
        kept = list(itertools.takewhile(lambda nu: direction * (nu - nu_final) <= 1e-9,
                                        level_sequence(direction, nu0, delta_nu, _ceiling(direction, nu_final))))
    if len(kept) > MAX_LEVELS:
        raise ConfigError(f"schedule.delta_nu={delta_nu:g} gives over {MAX_LEVELS} levels: "
                          f"use a larger delta_nu or set schedule.T")
    return len(kept)


# --- the schedule group's options: each schema checks its values and builds its schedule ---
@dataclass
class ScheduleConfig(Component, abc.ABC):
    """Base of the schedules. ``nu_key``: the key that holds a run's noise level, which a fused
    sweep's ``trainer.parallel.nu`` sets (None: the schedule has no single one); ``builds``: the
    NoiseSchedule class ``build()`` returns, whose ``per_minibatch`` says whether it draws nu per
    minibatch (the steps that hold one level an epoch refuse it: scheda.planning.rules), known
    without building it and said once, by that class."""

    nu_key: ClassVar[str | None] = None
    builds: ClassVar[type[NoiseSchedule]] = NoiseSchedule
    nu_fields: ClassVar[tuple[str, ...]] = ()  # the settings that give its noise levels (a list: each item)

    @property
    def per_minibatch(self) -> bool:
        return self.builds.per_minibatch

    def nu_settings(self) -> dict[str, float | None]:
        """Every setting that gives a noise level, as ``schedule.<key>`` -> its value: the noise
        checks them against its own range (scheda.model.noise.Noise.check_levels). Every level the
        schedule reaches lies between them (a decreasing one stops at 0, an increasing one without
        nu_final below 1)."""
        out: dict[str, float | None] = {}
        for name in self.nu_fields:
            value = getattr(self, name)
            if isinstance(value, (list, tuple)) or OmegaConf.is_list(value):
                out.update({f"schedule.{name}[{i}]": v for i, v in enumerate(value)})
            else:
                out[f"schedule.{name}"] = value
        return out

    @abc.abstractmethod
    def build(self) -> NoiseSchedule:
        """The stages this schedule's values describe, once ``check()`` has refused a bad value (what
        only the stages can tell, such as a T past the sequence's end, is a ConfigError here)."""


@register("schedule")
@dataclass
class ConstantScheduleConfig(ScheduleConfig):
    """A plain DA: one noise level for the whole run."""

    name: str = "constant"
    nu_fields: ClassVar[tuple[str, ...]] = ('nu',)
    nu: float = 0.3
    epochs: int = 100
    nu_key: ClassVar[str | None] = "nu"

    def check(self) -> None:
        self.nu, self.epochs = check_nu("schedule.nu", self.nu), check_epochs("schedule.epochs", self.epochs)

    def build(self) -> NoiseSchedule:
        return NoiseSchedule(self.name, [Stage(self.nu, self.epochs)])


@register("schedule")
@dataclass
class LevelScheduleConfig(ScheduleConfig):
    """ScheDA (Geras & Sutton 2015): nu0 for initial_epochs ("until converged"), then
    nu_t = nu_{t-1} - delta_nu for K epochs each; stop after ``T`` changes, or at the last
    level >= nu_final, or (both null) at the last level above 0. Paper grid: delta_nu in
    {0.05, 0.1}, K in {50, 100}. Continuing a trained DA(nu0), as the paper does:
    ``init_from=<its run> schedule.initial_epochs=0``."""

    name: str = "decreasing"
    nu_fields: ClassVar[tuple[str, ...]] = ('nu0', 'nu_final')
    nu0: float = 0.7
    delta_nu: float = 0.1
    K: int = 50
    initial_epochs: int = 100
    T: Optional[int] = None
    nu_final: Optional[float] = None
    steps: Optional[int] = None  # 0.2's name of T: read as it (with a warning) until 0.4
    nu_key: ClassVar[str | None] = "nu0"
    direction: ClassVar[int] = -1

    def check(self) -> None:
        if self.steps is not None:
            if self.T is not None:
                raise self.invalid("steps", "is 0.2's name of schedule.T, also set: set schedule.T only")
            log.warning("schedule.steps is called schedule.T now (the paper's T): read as schedule.T=%s", self.steps)
            self.T, self.steps = self.steps, None
        key = "schedule"
        self.nu0 = check_nu(f"{key}.nu0", self.nu0)
        if not isinstance(self.delta_nu, (int, float)) or not MIN_DELTA_NU <= self.delta_nu < 1:
            raise self.invalid("delta_nu", f"must be in [{MIN_DELTA_NU:g}, 1)")
        check_epochs(f"{key}.K", self.K)
        check_epochs(f"{key}.initial_epochs", self.initial_epochs, minimum=0)
        if self.T is not None and self.nu_final is not None:
            raise ConfigError(f"{key}.T and {key}.nu_final are both set: set one of them (the other null)")
        if self.T is not None:
            check_epochs(f"{key}.T", self.T, minimum=0)
        if self.nu_final is not None:
            self.nu_final = check_nu(f"{key}.nu_final", self.nu_final)
            if self.direction * (self.nu_final - self.nu0) < 0:
                word = "<=" if self.direction < 0 else ">="
                raise ConfigError(f"{key}.nu_final={self.nu_final:g} must be {word} {key}.nu0={self.nu0:g}")

    def build(self) -> NoiseSchedule:
        return NoiseSchedule(self.name, level_stages(self.direction, self.nu0, self.delta_nu, self.K,
                                                    self.initial_epochs, self.T, self.nu_final))


@register("schedule")
@dataclass
class IncreasingScheduleConfig(LevelScheduleConfig):
    """The paper's control (Section 4.1.1): nu rises from nu0 by delta_nu every K epochs, up to
    nu_final (the paper: nu0 in {0.1, 0.2, 0.3, 0.4}, up to at most 0.7)."""

    name: str = "increasing"
    nu0: float = 0.1
    nu_final: Optional[float] = 0.7
    direction: ClassVar[int] = 1


@dataclass
class StageSpec:
    nu: float = MISSING
    epochs: int = MISSING


@register("schedule")
@dataclass
class StagesScheduleConfig(ScheduleConfig):
    """Any explicit sequence of (nu, epochs) stages."""

    name: str = "stages"
    stages: List[StageSpec] = field(default_factory=lambda: [StageSpec(0.7, 100), StageSpec(0.4, 50),
                                                             StageSpec(0.1, 50)])

    def nu_settings(self) -> dict[str, float | None]:
        return {f"schedule.stages[{i}].nu": stage.nu for i, stage in enumerate(self.stages)}

    def check(self) -> None:
        if not self.stages:
            raise ConfigError("schedule.stages is empty: list at least one {nu: ..., epochs: ...}")
        for i, stage in enumerate(self.stages):
            stage.nu = check_nu(f"schedule.stages[{i}].nu", stage.nu)
            check_epochs(f"schedule.stages[{i}].epochs", stage.epochs)

    def build(self) -> NoiseSchedule:
        return NoiseSchedule(self.name, [Stage(s.nu, s.epochs) for s in self.stages])


@register("schedule")
@dataclass
class RandomUniformScheduleConfig(ScheduleConfig):
    """nu ~ U[low, high] drawn for every minibatch (the paper's supplementary experiment)."""

    name: str = "random_uniform"
    nu_fields: ClassVar[tuple[str, ...]] = ('low', 'high')
    low: float = 0.1
    high: float = 0.7
    epochs: int = 100
    builds: ClassVar[type[NoiseSchedule]] = RandomUniformSchedule

    def check(self) -> None:
        self.low, self.high = check_nu("schedule.low", self.low), check_nu("schedule.high", self.high)
        if self.low > self.high:
            raise ConfigError(f"schedule.low={self.low:g} must be <= schedule.high={self.high:g}")
        check_epochs("schedule.epochs", self.epochs)

    def build(self) -> NoiseSchedule:
        return RandomUniformSchedule(self.low, self.high, self.epochs)


@register("schedule")
@dataclass
class RandomDiscreteScheduleConfig(ScheduleConfig):
    """nu drawn uniformly from ``values`` for every minibatch (the paper's supplementary experiment)."""

    name: str = "random_discrete"
    nu_fields: ClassVar[tuple[str, ...]] = ('values',)
    values: List[float] = field(default_factory=lambda: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])
    epochs: int = 100
    builds: ClassVar[type[NoiseSchedule]] = RandomDiscreteSchedule

    def check(self) -> None:
        if not self.values:
            raise ConfigError("schedule.values is empty: list at least one nu")
        self.values = [check_nu(f"schedule.values[{i}]", v) for i, v in enumerate(self.values)]
        check_epochs("schedule.epochs", self.epochs)

    def build(self) -> NoiseSchedule:
        return RandomDiscreteSchedule(self.values, self.epochs)


@register("schedule")
@dataclass
class ExponentialScheduleConfig(ScheduleConfig):
    """Exponential noise decay, as other DA/GSN code offers: nu_t = max(nu_min, nu0 * gamma^t)
    for level t = 0, 1, ..., each held for K epochs (K = 1: a new level every epoch); once it
    reaches nu_min it stays there to the end of ``epochs``. Each level is a stage, so evaluation
    and checkpoints at stage ends come once per level: raise K to space them out."""

    name: str = "exponential"
    nu_fields: ClassVar[tuple[str, ...]] = ('nu0', 'nu_min')
    nu0: float = 0.7
    gamma: float = 0.95
    nu_min: float = 0.1
    K: int = 1
    epochs: int = 100
    nu_key: ClassVar[str | None] = "nu0"

    def check(self) -> None:
        self.nu0, self.nu_min = check_nu("schedule.nu0", self.nu0), check_nu("schedule.nu_min", self.nu_min)
        if not 0 < self.gamma < 1:
            raise ConfigError(f"schedule.gamma={self.gamma!r} must be in (0, 1)")
        if self.nu_min > self.nu0:
            raise ConfigError(f"schedule.nu_min={self.nu_min:g} must be <= schedule.nu0={self.nu0:g}")
        check_epochs("schedule.K", self.K)
        check_epochs("schedule.epochs", self.epochs)

    def build(self) -> NoiseSchedule:
        nu0, nu_min, K, left = self.nu0, self.nu_min, self.K, self.epochs
        stages: list[Stage] = []
        while left > 0:
            nu = max(nu_min, round(nu0 * self.gamma ** len(stages), NU_DECIMALS))
            held = left if nu == nu_min else min(K, left)
            stages.append(Stage(nu, held))
            left -= held
        return NoiseSchedule(self.name, stages)


def options_with_nu_key() -> list[str]:
    """The schedules a fused sweep's ``trainer.parallel.nu`` can vary."""
    return [name for name, cls in GROUPS["schedule"].items() if cls.nu_key is not None]


def nu_key(config: Mapping) -> str | None:
    """The key of ``config`` (the schedule group) that holds the run's noise level, if it has one."""
    return schema_of("schedule", config).nu_key


def build_schedule(config: Mapping, max_epochs: int | None = None) -> NoiseSchedule:
    """Make the schedule that ``config`` (the ``schedule`` config group) describes."""
    spec = typed("schedule", config)
    built = spec.build()
    if built.per_minibatch != spec.per_minibatch:  # the rules read it before the build: a schema must say it
        raise ConfigError(f"schedule {spec.name!r} builds a {type(built).__name__}, which draws nu "
                          f"{'per minibatch' if built.per_minibatch else 'per epoch'}, but its schema says "
                          f"builds = {spec.builds.__name__}: set builds to the class build() returns")
    return built.with_max_epochs(max_epochs)
