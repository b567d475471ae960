"""A run's plan: what its config decides, decided once, before any data, logger or checkpoint.

:func:`make_plan` types the composed config (every group's schema, checked), resolves the
device, checks every rule between groups (scheda.planning.rules), chooses the one step that
trains the run, and lists its M >= 1 models: one for a run, one per combination of
``trainer.parallel`` for a fused sweep, each the typed config with its own values and its
schedule built once. What follows (scheda.run) builds from the plan and decides nothing again.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch
from omegaconf import DictConfig

from scheda.data import dataset_spec
from scheda.model.schedule import NoiseSchedule, check_nu
from scheda.planning import rules
from scheda.runs.reentry import Entry
from scheda.planning.run_config import RunConfig, typed_config  # noqa: F401 - typed_config: the plan's first step
from scheda.training.finetune import FinetunePlan
from scheda.training.stack import Stack, load_stack
from scheda.training.step import FinetuneChoice
from scheda.training.steps import StepChoice
from scheda.utils.errors import CheckpointError

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class PlannedModel:
    """One model a run trains: its values in a fused sweep (``overrides``, {} for a run of one
    model), its config with those values set, its schedule, and its directory under the run's."""

    index: int
    overrides: dict
    config: RunConfig
    schedule: NoiseSchedule
    subdir: str  # "" for a run of one model, models/<index> in a fused sweep
    finetune: FinetunePlan  # what its fine-tuning (finetune.enabled) is handed


@dataclass(frozen=True)
class Plan:
    """What a run is: its typed config, device, step and models (``sweep``: a fused sweep, whose
    models live under models/<k>/ even when ``trainer.parallel`` lists one value)."""

    config: RunConfig
    device: torch.device
    step: StepChoice
    models: tuple[PlannedModel, ...]
    sweep: bool
    finetune_step: FinetuneChoice = FinetuneChoice()
    stack: Stack | None = None  # the frozen layers below a stacked run (stack_on), read before any data

    @property
    def n_input(self) -> int:
        """The models' inputs: the data set's, or the codes of the stack below."""
        return self.stack.n_output if self.stack is not None else dataset_spec(self.config.dataset).n_input

    @property
    def standalone(self) -> bool:
        """No autoencoder training: fine-tune ``init_from``'s encoder."""
        return self.config.finetune.skips_training

    def record(self) -> dict[str, Any]:
        """What results.json records of the plan (``plan``): what the run is, for whoever reads the run
        (the command line's sweepers, the Python API) without deciding it again."""
        return {"sweep": self.sweep, "models": len(self.models), "trains": bool(self.config.model.trains),
                "standalone": self.standalone, "device": str(self.device), "step": self.step.describe(),
                "finetune_step": self.finetune_step.describe()}

    def load_data(self):
        """The run's data set, loaded and checked against the rules that need it (rules.check_data);
        a stacked run's encoded through the stack below, once, on the run's device."""
        data = dataset_spec(self.config.dataset).load()
        if self.stack is not None:  # fine-tuning the whole stack reads the inputs themselves
            data = self.stack.splits(data, self.device, keep_inputs=self.config.finetune.enabled,
                                     keep_codes=self.config.evaluate.layers == "all")
        n_train = data.train_x.shape[0] + (0 if data.unlabeled_x is None else data.unlabeled_x.shape[0])
        log.info("data %s: train %s, val %s, test %s", data.name, data.train_x.shape, data.val_x.shape,
                 data.test_x.shape)
        rules.check_data(self.config, n_train, data.labelled)
        return data

    def describe(self) -> str:
        """What the run trains, in one line for its log."""
        if self.sweep:
            return f"fused sweep of {len(self.models)} models: {[m.overrides for m in self.models]}"
        if self.standalone:  # no autoencoder training: the schedule's line would describe nothing that runs
            return f"fine-tuning {self.config.init_from}'s encoder (finetune.standalone: no schedule), device {self.device}"
        schedule = self.models[0].schedule
        return f"schedule {schedule.name}: {schedule.describe()} ({schedule.total_epochs} epochs), device {self.device}"


def check_levels(config: RunConfig) -> None:
    """Every noise level the run sets (its schedule's, a fused sweep's, a composite's groups') is in
    its noise's own range (a probability below 1; a Gaussian std unbounded)."""
    groups = getattr(config.model, "group_nus", ())
    config.noise.check_levels({**config.schedule.nu_settings(),
                               **{f"trainer.parallel.nu[{i}]": nu for i, nu in enumerate(config.trainer.parallel.nu)},
                               **{f"model.group_nus[{i}]": nu for i, nu in enumerate(groups)}})


def parallel_variants(config: RunConfig) -> list[dict[str, Any]]:
    """The overrides of each model of a fused sweep (``trainer.parallel``); [] for one model."""
    par = config.trainer.parallel
    axes = []
    if par.nu:  # a schedule with one noise level to set (rules.parallel_nu_needs_a_noise_level)
        key = config.schedule.nu_key
        axes.append([(f"schedule.{key}", check_nu("trainer.parallel.nu", v)) for v in par.nu])
    if par.lr:
        axes.append([("optim.lr", float(v)) for v in par.lr])
    if par.seed:
        axes.append([("seed", int(v)) for v in par.seed])
    return [dict(combo) for combo in itertools.product(*axes)] if axes else []


def model_dir(resume: str, k: int) -> Path:
    """Model ``k`` of a fused sweep resumed from its run directory (``models/<k>``)."""
    path = Path(resume) / "models" / str(k)
    if not path.is_dir():
        raise CheckpointError(f"{path} not found: resume a fused sweep with its run directory")
    return path


def labelled(config: RunConfig, composed: dict[str, Any], label: str) -> tuple[list, dict[str, Any]]:
    """The loggers naming this run's records by ``label`` (a sweep job's or a fused model's values),
    and the composed config (copied) that says so; the typed config is not written."""
    loggers = [copy.copy(c) for c in config.logger]
    composed = copy.deepcopy(composed)
    if not label:
        return loggers, composed
    for logger in loggers:
        type(logger).label(logger, label)
    for key, logger in zip(composed.get("logger") or {}, loggers):
        composed["logger"][key] = {**composed["logger"][key], **dataclasses.asdict(logger)}
    return loggers, composed


def model_of(config: RunConfig, overrides: dict[str, Any], index: int) -> RunConfig:
    """Model ``index`` of a fused sweep: the typed config with that model's values (``schedule.<nu key>``,
    ``optim.lr``, ``seed``) set on copies of the groups they belong to, its loggers naming its
    records by those values, its record of the config to match, and, for a sweep resumed, its
    own checkpoints to resume. Nothing is composed or typed again."""
    resume = str(model_dir(config.resume, index)) if config.resume else None
    groups: dict[str, Any] = {"trainer": dataclasses.replace(
        config.trainer, parallel=dataclasses.replace(config.trainer.parallel, nu=[], lr=[], seed=[]))}
    seed = config.seed
    loggers, composed = labelled(config, config.composed, ",".join(f"{key}={v}" for key, v in overrides.items()))
    composed["trainer"]["parallel"].update(nu=[], lr=[], seed=[])
    for key, value in overrides.items():
        group, _, name = key.partition(".")
        if group == "seed":
            seed = value
            composed["seed"] = value
        else:
            groups[group] = dataclasses.replace(groups.get(group, getattr(config, group)), **{name: value})
            groups[group].check()  # that group's own ranges, for this value
            composed[group][name] = value
    return dataclasses.replace(config, **groups, logger=loggers, seed=seed, resume=resume, composed=composed)


def _planned(index: int, overrides: dict, config: RunConfig, subdir: str, device: torch.device,
             finetune_step: FinetuneChoice, stack: Stack | None) -> PlannedModel:
    schedule = config.schedule.build().with_max_epochs(config.trainer.max_epochs)
    below = stack.layers if stack is not None else ()
    return PlannedModel(index, overrides, config, schedule, subdir,
                        FinetunePlan(config.finetune, device, finetune_step, config.seed, below))


def make_plan(cfg: DictConfig, data: Mapping[str, Any] | None = None, entry: Entry | None = None,
              label: str = "") -> Plan:
    """The plan of the run ``cfg`` composes: every group typed, every rule checked (the first
    broken one is a one-line ConfigError), the step chosen, the models listed. ``data``: arrays
    handed to the run, read as ``dataset=arrays`` reads its files; ``entry``: what taking the run
    directory decided (scheda.runs.reentry.enter: the checkpoint to resume, the run to initialise
    from), which the config's own ``resume``/``init_from`` give way to; ``label``: a sweep job's
    swept values, which its loggers name its records by (scheda.runs.sweep_summary.swept_label)."""
    config = typed_config(cfg)
    loggers, composed = labelled(config, config.composed, label)
    config = dataclasses.replace(config, logger=loggers, composed=composed)
    if entry is not None:
        config = dataclasses.replace(config, resume=entry.resume, init_from=entry.init_from,
                                     composed=entry.record(composed))
    device = config.trainer.resolve_device()
    rules.check(config, device)
    stack = load_stack(config.stack_on) if config.stack_on else None  # its checkpoints: before any data
    finetune_step = rules.choose_finetune_step(config, device)
    if data is not None:
        rules.check_handed(config)
        config.dataset = config.dataset.handed(data)
    variants = parallel_variants(config)  # none: one model, the run's own config
    models = []
    for k, overrides in enumerate(variants or [{}]):
        model = model_of(config, overrides, k) if variants else config
        models.append(_planned(k, overrides, model, f"models/{k}" if variants else "", device, finetune_step, stack))
    check_levels(config)  # after each schedule's own checks (a finite nu >= 0)
    step = rules.choose_step(config, device, max(m.schedule.total_epochs for m in models))
    return Plan(config, device, step, tuple(models), sweep=bool(variants), finetune_step=finetune_step, stack=stack)
