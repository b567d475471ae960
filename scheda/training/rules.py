"""Rules between config groups, held in one place and checked once, before a run loads its data
or writes anything but its results.json (written first, with status running, so that a refused
run leaves its one-line error where a sweep reads it): no TensorBoard, no checkpoint.

Each group's own values are checked by its schema (``check()``); what can only be judged from
two groups together lives here, as one function per rule returning the one-line error (or
None). ``typed_run`` types every group once; ``check_run`` applies every rule to that.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from omegaconf import DictConfig, OmegaConf

from scheda.config import COMPONENT_MODULES, MANY, typed, typed_many
from scheda.utils.errors import ConfigError
from scheda.model.schedule import nu_key, options_with_nu_key
from scheda.training.step import graph_refusal, parallel_refusal, triton_refusal, two_pass_refusal

GROUPS = tuple(COMPONENT_MODULES)


@dataclass
class TypedRun:
    """Every group of a run's config as its checked schema object, and the top-level keys."""

    dataset: Any
    model: Any
    noise: Any
    schedule: Any
    optim: Any
    trainer: Any
    logger: list  # every selected logger's schema (config.MANY)
    evaluate: Any
    classifier: Any
    finetune: Any
    seed: int = 0
    train_seed: Optional[int] = None
    resume: Optional[str] = None
    init_from: Optional[str] = None
    # The composed config as plain data, to record (results.json, a fused model's config.yaml)
    # and to compare with a saved run's; nothing is built from it.
    composed: dict = field(default_factory=dict)


def typed_run(cfg: DictConfig) -> TypedRun:
    """Type (and so check) every group once; a bad value is a one-line ConfigError."""
    return TypedRun(**{g: typed_many(g, cfg.get(g)) if g in MANY else typed(g, cfg[g]) for g in GROUPS},
                    seed=int(cfg.get("seed", 0)), train_seed=cfg.get("train_seed"), resume=cfg.get("resume"),
                    init_from=cfg.get("init_from"), composed=OmegaConf.to_container(cfg, resolve=True))


def _fusable(run: TypedRun) -> bool:
    """Whether the model is one the hand-written step (scheda.training.step) trains: a tied cross-entropy DA."""
    return run.model.name == "da" and run.model.loss == "cross_entropy"


def _plain_sgd(run: TypedRun) -> bool:
    return run.optim.momentum == 0 and run.optim.weight_decay == 0


def _parallel(run: TypedRun) -> bool:
    par = run.trainer.parallel
    return bool(par.nu or par.lr or par.seed)


def _graph_refusal(run: TypedRun) -> str | None:
    """What keeps a CUDA graph from this run's step (scheda.training.step decides), the device aside."""
    t = run.trainer
    return graph_refusal(_fusable(run), t.fused, t.precision, _plain_sgd(run), run.schedule.build().per_minibatch)


def graph_can_capture_the_step(run: TypedRun) -> str | None:
    return _graph_refusal(run) if run.trainer.cuda_graph else None


def _triton_refusal(run: TypedRun) -> str | None:
    """What keeps the Triton step from this run (scheda.training.step decides), the device aside."""
    t = run.trainer
    return triton_refusal(_fusable(run), t.fused, t.precision, _plain_sgd(run), run.noise.name == "masking",
                          run.schedule.build().per_minibatch)


def triton_can_take_the_step(run: TypedRun) -> str | None:
    return _triton_refusal(run) if run.trainer.triton else None


def two_pass_is_a_triton_step(run: TypedRun) -> str | None:
    """The two-pass step is the Triton step in other kernels: what that needs, then its own limits;
    ``trainer.precision=tf32x3`` names its products, so it needs it."""
    t = run.trainer
    if not t.two_pass:
        if t.precision == "tf32x3":
            return "trainer.precision=tf32x3 is the two-pass step's product precision: set trainer.two_pass=true"
        return None
    if t.triton is False:
        return "trainer.two_pass=true is a Triton step: leave trainer.triton null (or true), or use trainer.two_pass=false"
    refusal = _triton_refusal(run)
    if refusal:
        return refusal.replace("trainer.triton=true", "trainer.two_pass=true")
    return two_pass_refusal(t.batch_size, t.precision)


def parallel_needs_the_fused_step(run: TypedRun) -> str | None:
    t = run.trainer
    return parallel_refusal(_fusable(run), t.fused, t.precision, _plain_sgd(run)) if _parallel(run) else None


def parallel_nu_needs_a_noise_level(run: TypedRun) -> str | None:
    if run.trainer.parallel.nu and nu_key({"name": run.schedule.name}) is None:
        return (f"trainer.parallel.nu needs schedule {', '.join(options_with_nu_key())} (one noise level to set), "
                f"not {run.schedule.name}")
    return None


def parallel_trains(run: TypedRun) -> str | None:
    if _parallel(run) and run.finetune.enabled and run.finetune.standalone:
        return "trainer.parallel trains models: it cannot be combined with finetune.standalone"
    return None


def resume_or_init_from(run: TypedRun) -> str | None:
    standalone = run.finetune.enabled and run.finetune.standalone
    if run.resume and run.init_from and not standalone:
        return "resume and init_from are both set: resume continues a run, init_from starts a new one"
    return None


def standalone_needs_init_from(run: TypedRun) -> str | None:
    if run.finetune.enabled and run.finetune.standalone and not run.init_from:
        return "finetune.standalone=true needs init_from=<a DA/ScheDA run or checkpoint>"
    return None


def finetune_output_needs_a_linear_classifier(run: TypedRun) -> str | None:
    if run.finetune.enabled and run.finetune.init_output == "classifier" and not run.classifier.linear:
        return (f"finetune.init_output=classifier starts the output layer from a linear classifier, and "
                f"classifier={run.classifier.name} has none: use classifier=torch_lr or liblinear, or "
                f"finetune.init_output=zero")
    return None


def raw_needs_evaluation(run: TypedRun) -> str | None:
    if not run.model.trains and not run.evaluate.enabled:
        return "model=raw only evaluates: set evaluate.enabled=true"
    return None


RULES: tuple[Callable[[TypedRun], str | None], ...] = (
    graph_can_capture_the_step, triton_can_take_the_step, two_pass_is_a_triton_step, parallel_needs_the_fused_step,
    parallel_nu_needs_a_noise_level,
    parallel_trains, resume_or_init_from, standalone_needs_init_from, finetune_output_needs_a_linear_classifier,
    raw_needs_evaluation,
)


def graph_applies(run: TypedRun) -> bool:
    """Whether a CUDA graph can capture this run's step: what ``trainer.cuda_graph=null`` turns into."""
    return run.trainer.resolve_device().type == "cuda" and _graph_refusal(run) is None


def triton_applies(run: TypedRun) -> bool:
    """Whether the Triton step trains this run: what ``trainer.triton=null`` turns into."""
    return run.trainer.resolve_device().type == "cuda" and _triton_refusal(run) is None


def resolve(run: TypedRun) -> TypedRun:
    """Settings whose default depends on other groups, decided once (after the rules passed)."""
    if run.trainer.cuda_graph is None:
        run.trainer.cuda_graph = graph_applies(run)
    if run.trainer.triton is None:
        run.trainer.triton = triton_applies(run) or run.trainer.two_pass
    return run


def check_run(cfg: DictConfig) -> TypedRun:
    """Every group typed and checked, then every rule between groups: the first broken one is
    raised as one line. Returns the typed run, its cross-group defaults resolved."""
    run = typed_run(cfg)
    for rule in RULES:
        message = rule(run)
        if message:
            raise ConfigError(message)
    return resolve(run)
