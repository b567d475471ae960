"""Typed configuration schemas, registered in Hydra's ConfigStore.

Each YAML file in ``configs/<group>/`` extends one of these schemas (``defaults: [/base_X@_here_]``),
so a misspelt key or a value of the wrong type fails when Hydra composes the config, before
any work. Domain checks (``nu`` in [0, 1), ``lr`` > 0, ...) live beside the code that uses
each value, in the ``build_*`` functions, and raise :class:`scheda.errors.ConfigError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


# --- dataset ---------------------------------------------------------------------------
@dataclass
class Cifar10Config:
    name: str = "cifar10"
    root: str = MISSING
    download: bool = False
    val_size: int = 5000
    split_seed: int = 0
    train_limit: Optional[int] = None


@dataclass
class AmazonConfig:
    name: str = "amazon"
    root: str = MISSING
    release: str = "auto"
    domains: Optional[List[str]] = None
    use_unlabeled: bool = True
    vocab_size: int = 3000
    train_size: Any = 0.6
    val_size: Any = 0.2
    test_size: Any = 0.2
    unlabeled_size: Optional[int] = None
    split_seed: int = 0


# --- model -----------------------------------------------------------------------------
@dataclass
class DAConfig:
    name: str = "da"
    hidden: int = 1000
    activation: str = "sigmoid"
    loss: str = "cross_entropy"
    init_scale: float = 4.0
    encoder_bias_init: float = 0.0
    decoder_bias_init: float = 0.0


@dataclass
class CompositeConfig(DAConfig):
    name: str = "composite"
    group_nus: List[Optional[float]] = field(default_factory=lambda: [0.7, 0.1])
    update: str = "alternating"


@dataclass
class RawConfig:
    """No model: evaluate the raw inputs (the paper's baseline)."""

    name: str = "raw"


# --- noise -----------------------------------------------------------------------------
@dataclass
class NoiseConfig:
    name: str = "masking"


# --- schedule --------------------------------------------------------------------------
@dataclass
class ConstantScheduleConfig:
    name: str = "constant"
    nu: float = 0.3
    epochs: int = 100


@dataclass
class StepScheduleConfig:
    """``decreasing``/``increasing``: nu0 for initial_epochs, then nu0 -/+ t*delta_nu for K epochs each."""

    name: str = "decreasing"
    nu0: float = 0.7
    delta_nu: float = 0.1
    K: int = 50
    initial_epochs: int = 100
    steps: Optional[int] = None
    nu_final: Optional[float] = None


@dataclass
class StageConfig:
    nu: float = MISSING
    epochs: int = MISSING


@dataclass
class StagesScheduleConfig:
    name: str = "stages"
    stages: List[StageConfig] = field(default_factory=list)


@dataclass
class RandomUniformScheduleConfig:
    name: str = "random_uniform"
    low: float = 0.1
    high: float = 0.7
    epochs: int = 100


@dataclass
class RandomDiscreteScheduleConfig:
    name: str = "random_discrete"
    values: List[float] = field(default_factory=lambda: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])
    epochs: int = 100


# --- optimisation and trainer ----------------------------------------------------------
@dataclass
class OptimConfig:
    name: str = "sgd"
    lr: float = 0.01
    momentum: float = 0.0
    weight_decay: float = 0.0


@dataclass
class ParallelConfig:
    """Train the product of these variations of the run in one process (batched matmuls)."""

    nu: List[float] = field(default_factory=list)
    lr: List[float] = field(default_factory=list)
    seed: List[int] = field(default_factory=list)


@dataclass
class TrainerConfig:
    device: str = "auto"
    batch_size: int = 20
    max_epochs: Optional[int] = None
    checkpoint_every: int = 50
    num_threads: Optional[int] = None
    progress_bar: bool = True
    fused: bool = True
    precision: str = "fp32"
    parallel: "ParallelConfig" = field(default_factory=lambda: ParallelConfig())


# --- logger ----------------------------------------------------------------------------
@dataclass
class LoggerConfig:
    name: str = "tensorboard"
    log_dir: str = "tensorboard"
    n_filters: int = 100


# --- evaluation ------------------------------------------------------------------------
@dataclass
class EvaluateConfig:
    enabled: bool = True
    every: int = 0
    at_stage_ends: bool = True
    at_end: bool = True
    c_log2_min: float = -10.0
    c_log2_max: float = 6.0
    c_log2_step: float = 1.0
    chunk_size: int = 8192


@dataclass
class LiblinearConfig:
    name: str = "liblinear"
    eps: float = 0.0001
    warm_start: bool = True


@dataclass
class TorchLRConfig:
    name: str = "torch_lr"
    eps: float = 0.0001
    max_newton: int = 100
    max_cg: int = 200
    dtype: str = "float32"
    warm_start: bool = True


# --- fine-tuning -----------------------------------------------------------------------
@dataclass
class FinetuneConfig:
    enabled: bool = False
    standalone: bool = False
    lrs: List[float] = field(default_factory=lambda: [0.00125 * 2.0 ** -k for k in range(5)])
    max_epochs: int = 2000
    patience: Optional[int] = None
    batch_size: int = 20
    momentum: float = 0.0
    init_output: str = "classifier"


# --- top level -------------------------------------------------------------------------
@dataclass
class TrainConfig:
    dataset: Any = MISSING
    model: Any = MISSING
    noise: NoiseConfig = field(default_factory=NoiseConfig)
    schedule: Any = MISSING
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)
    classifier: Any = MISSING
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    seed: int = 0
    train_seed: Optional[int] = None
    resume: Optional[str] = None
    force_resume: bool = False
    init_from: Optional[str] = None
    # Keys that must be set (not null) for this composition: a preset that continues a
    # checkpoint lists init_from. (A preset's ``???`` cannot do it: merged over a default, it is dropped.)
    requires: List[str] = field(default_factory=list)


# --- the paper's protocol (scripts/reproduce.py) ----------------------------------------
@dataclass
class DAGridConfig:
    """Stage 1: one DA per (nu, lr), each evaluated every ``eval_every`` epochs (checkpointed
    there too, so a ScheDA can continue from the selected epoch)."""

    nu: List[float] = field(default_factory=list)
    lr: List[float] = field(default_factory=list)
    epochs: int = 2000
    eval_every: int = 100
    fused: bool = False


@dataclass
class StepGridConfig:
    """Stage 3: decreasing (ScheDA) or increasing schedules continued from the best DA(nu0)."""

    nu0: List[float] = field(default_factory=list)
    delta_nu: List[float] = field(default_factory=list)
    K: List[int] = field(default_factory=list)
    nu_final: float = 0.05
    lr: float = 0.01


@dataclass
class RandomNuConfig:
    """Stage 3 of table=random_nu: nu drawn per minibatch, trained from scratch at every lr of
    the DA grid (``da.lr``), the best chosen on validation like the DA's."""

    hidden: Optional[int] = None
    epochs: int = 2000
    low: float = 0.1
    high: float = 0.7
    values: List[float] = field(default_factory=lambda: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])


@dataclass
class ScaleConfig:
    name: str = MISSING
    description: str = MISSING
    hidden: List[int] = field(default_factory=list)
    da: DAGridConfig = field(default_factory=DAGridConfig)
    scheda: StepGridConfig = field(default_factory=StepGridConfig)
    increasing: StepGridConfig = field(default_factory=StepGridConfig)
    random_nu: RandomNuConfig = field(default_factory=RandomNuConfig)
    control: bool = False
    finetune: Optional[str] = None
    train: List[str] = field(default_factory=list)


@dataclass
class TableConfig:
    name: str = MISSING
    title: str = MISSING
    continuations: List[str] = field(default_factory=list)
    raw: bool = True
    paper: Any = field(default_factory=dict)


@dataclass
class ReproduceConfig:
    table: TableConfig = MISSING
    scale: ScaleConfig = MISSING
    out_dir: str = MISSING
    report_dir: str = "outputs/reports"
    overrides: List[str] = field(default_factory=list)
    launcher: str = "basic"
    n_jobs: int = 1
    launcher_overrides: List[str] = field(default_factory=list)
    scheduler_wait_min: float = 30.0
    stages: List[str] = field(default_factory=lambda: ["da", "select", "continue", "control", "finetune", "report"])


def register_configs() -> None:
    """Put the schemas in the ConfigStore; the YAML files in ``configs/`` extend them
    (``defaults: [/base_da@_here_]``). They are stored at the top level, not in their groups,
    so that ``--help`` and shell completion list only the real options of each group."""
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    cs.store(name="base_cifar10", node=Cifar10Config)
    cs.store(name="base_amazon", node=AmazonConfig)
    cs.store(name="base_da", node=DAConfig)
    cs.store(name="base_raw", node=RawConfig)
    cs.store(name="base_composite", node=CompositeConfig)
    cs.store(name="base_noise", node=NoiseConfig)
    cs.store(name="base_constant", node=ConstantScheduleConfig)
    cs.store(name="base_step", node=StepScheduleConfig)
    cs.store(name="base_stages", node=StagesScheduleConfig)
    cs.store(name="base_random_uniform", node=RandomUniformScheduleConfig)
    cs.store(name="base_random_discrete", node=RandomDiscreteScheduleConfig)
    cs.store(name="base_sgd", node=OptimConfig)
    cs.store(name="base_trainer", node=TrainerConfig)
    cs.store(name="base_logger", node=LoggerConfig)
    cs.store(name="base_evaluate", node=EvaluateConfig)
    cs.store(name="base_liblinear", node=LiblinearConfig)
    cs.store(name="base_torch_lr", node=TorchLRConfig)
    cs.store(name="base_finetune", node=FinetuneConfig)
    cs.store(name="reproduce_schema", node=ReproduceConfig)
    cs.store(name="base_scale", node=ScaleConfig)
    cs.store(name="base_table", node=TableConfig)


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """A nested dict as {"a.b.c": value}: configs compared key by key (resume, a protocol's scale)."""
    if isinstance(node, dict):
        return {k: v for key, value in node.items() for k, v in flatten(value, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): node}


# --- checks that Hydra's composition lets through --------------------------------------
MISSING_HINTS = {"init_from": "init_from=<the DA's run directory or checkpoint to continue>"}


def check_composed(cfg: Any) -> None:
    """Refuse keys no schema knows (Hydra's ``+key=value`` adds them even to typed nodes, and
    the run would silently ignore them), naming the nearest known key; and values a preset
    marks as required (``???``) but nobody gave."""
    import difflib
    import dataclasses

    from omegaconf import DictConfig, OmegaConf

    from scheda.errors import ConfigError

    def walk(node: DictConfig, prefix: str) -> None:
        schema = OmegaConf.get_type(node)
        known = [f.name for f in dataclasses.fields(schema)] if dataclasses.is_dataclass(schema) else None
        for key in node.keys():
            path = f"{prefix}{key}"
            if known is not None and key not in known:
                near = difflib.get_close_matches(str(key), known, n=1)
                hint = f"did you mean {prefix}{near[0]}?" if near else f"known keys: {', '.join(known)}"
                raise ConfigError(f"{path} is not a setting of {prefix.rstrip('.') or 'the run'} "
                                  f"({schema.__name__}): {hint}")
            if OmegaConf.is_missing(node, key):
                raise ConfigError(f"{path} is required here and was not given: add "
                                  f"{MISSING_HINTS.get(path, path + '=...')}")
            child = node._get_node(key)
            if isinstance(child, DictConfig) and not child._is_none():
                walk(child, f"{path}.")

    walk(cfg, "")
    for key in cfg.get("requires") or []:
        if OmegaConf.select(cfg, key, default=None) is None:
            raise ConfigError(f"{key} is required by this preset and was not given: add "
                              f"{MISSING_HINTS.get(key, key + '=...')}")
