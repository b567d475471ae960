"""A run's config typed: every group as its checked schema object (each group's schemas live
beside their code; this module names the type each group's options share), and the top-level
keys. The plan (scheda.planning.plan) types a composed config once, here; the rules
(scheda.planning.rules) and everything built from the plan read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from omegaconf import DictConfig, OmegaConf

from scheda.config import COMPONENT_MODULES, MANY, Component, typed, typed_many
from scheda.evaluation.classifiers import ClassifierConfig
from scheda.evaluation.evaluate import EvaluateConfig
from scheda.loggers.base import LoggerConfig
from scheda.model.autoencoder import DAConfig, RawConfig
from scheda.model.noise import Noise
from scheda.model.optim import SGDConfig
from scheda.model.schedule import ScheduleConfig
from scheda.training.finetune import FinetuneConfig
from scheda.training.trainer import TrainerConfig


@dataclass
class RunConfig:
    """Every group of a run's config (scheda.config.COMPONENT_MODULES, in its order) as its checked
    schema object, and the top-level keys."""

    dataset: Component  # the data modules' schemas share no base beyond Component (scheda.data)
    model: DAConfig | RawConfig
    noise: Noise
    schedule: ScheduleConfig
    optim: SGDConfig
    trainer: TrainerConfig
    logger: list[LoggerConfig]  # every selected logger's schema (config.MANY)
    evaluate: EvaluateConfig
    classifier: ClassifierConfig
    finetune: FinetuneConfig
    seed: int = 0
    train_seed: Optional[int] = None
    resume: Optional[str] = None
    init_from: Optional[str] = None
    stack_on: Optional[str] = None
    # The composed config as plain data, to record (results.json, a fused model's config.yaml)
    # and to compare with a saved run's; nothing is built from it.
    composed: dict = field(default_factory=dict)


def typed_config(cfg: DictConfig) -> RunConfig:
    """Type (and so check) every group once; a bad value is a one-line ConfigError."""
    return RunConfig(**{g: typed_many(g, cfg.get(g)) if g in MANY else typed(g, cfg[g]) for g in COMPONENT_MODULES},
                     seed=int(cfg.get("seed", 0)), train_seed=cfg.get("train_seed"), resume=cfg.get("resume"),
                     init_from=cfg.get("init_from"), stack_on=cfg.get("stack_on"), composed=OmegaConf.to_container(cfg, resolve=True))
