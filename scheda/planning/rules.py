"""Rules between config groups, and the step they leave a run: every refusal of a run's settings
lives here, one function and one line each, checked once while the run's plan is made
(scheda.planning.plan), before it loads its data or writes anything but its results.json
(written first, with status running, so that a refused run leaves its one-line error where a
sweep reads it): no TensorBoard, no checkpoint.

Each group's own values are checked by its schema (``check()``); what can only be judged from
two groups together, or from a group and the device, lives here: each rule takes the typed
config (scheda.planning.plan.RunConfig) and the device, and returns the one-line error or None.
:func:`choose_step` then turns the settings left open (``trainer.step=auto``,
``trainer.cuda_graph=null``) into the one step that trains the run.
"""

from __future__ import annotations

from typing import Callable

import torch

from scheda.model.schedule import options_with_nu_key
from scheda.training.products import bf16_refusal
from scheda.training.step import FinetuneChoice
from scheda.training.steps import (FUSED_STEP, PLAIN_SGD, StepChoice, auto_kind, parallel, plain_sgd, step_kind,
                                   trains_composite, trains_fused)
from scheda.utils.errors import ConfigError

from scheda.planning.run_config import RunConfig

# trainer.compile=null compiles the bf16 update for runs of at least this many epochs: on the 2-core
# EPYC it saves 0.2 to 1.1 ms a minibatch of 20 (docs/performance.md), 0.5 s or more a CIFAR-10 epoch,
# against 2.3 s of compilation with its cache on disk and 8 s without.
COMPILE_EPOCHS = 20


def _graph_refusal(config: RunConfig) -> str | None:
    """Why a CUDA graph cannot capture this run's step, the device aside (None: it can). A graph
    replays the fused step with plain SGD folded into it and a noise level fixed for the epoch:
    a schedule that draws nu per minibatch would replay a stale one."""
    if not trains_fused(config):
        return f"trainer.cuda_graph=true needs the fused step: {FUSED_STEP}, trainer.step not autograd"
    if not plain_sgd(config):
        return f"trainer.cuda_graph=true needs plain SGD: {PLAIN_SGD}"
    if config.schedule.per_minibatch:
        return ("trainer.cuda_graph=true needs one noise level per epoch, and this schedule draws nu per "
                "minibatch: use trainer.cuda_graph=null (it then runs eager) or false")
    return None


def _compile_refusal(config: RunConfig, device: torch.device) -> str | None:
    """Why the bf16 update in one compiled pass (trainer.compile) cannot train this run (None: it
    can): it is the update of the fused or composite step with plain SGD folded in, in bf16, on a CPU."""
    t = config.trainer
    if t.precision != "bf16":
        return (f"trainer.compile=true compiles the bf16 step's update, not trainer.precision={t.precision}'s: set "
                f"trainer.precision=bf16 or trainer.compile=null")
    if device.type != "cpu":
        return f"trainer.compile=true compiles the CPU's bf16 update, not {device}'s: use trainer.compile=null"
    if t.step not in ("auto", "fused") or not (trains_fused(config) or trains_composite(config)):
        return (f"trainer.compile=true needs the fused or composite step ({FUSED_STEP}, trainer.step auto or fused): "
                f"use trainer.compile=null")
    if not plain_sgd(config):
        return f"trainer.compile=true folds plain SGD into the update: {PLAIN_SGD}, or trainer.compile=null"
    return None


def compile_needs_its_step(config: RunConfig, device: torch.device) -> str | None:
    return _compile_refusal(config, device) if config.trainer.compile else None


def cuda_settings_need_a_cuda_device(config: RunConfig, device: torch.device) -> str | None:
    t = config.trainer
    if t.step != "auto" and (refusal := step_kind(t.step).device_refusal(device)):
        return refusal
    if device.type != "cuda" and t.cuda_graph:
        return f"trainer.cuda_graph=true needs a CUDA device, not {device}: use trainer.device=cuda or trainer.cuda_graph=null"
    return None


def bf16_needs_bf16_arithmetic(config: RunConfig, device: torch.device) -> str | None:
    """bf16 where the device has no bf16 arithmetic would be emulated, slower than fp32: said before
    any training (scheda.training.products.bf16_refusal)."""
    if config.trainer.precision != "bf16" or not config.model.trains:
        return None
    refusal = bf16_refusal(device)
    return f"trainer.precision=bf16: {refusal}: use trainer.precision=fp32" if refusal else None


def the_step_can_train_the_run(config: RunConfig, device: torch.device) -> str | None:
    """A step asked for by name (trainer.step; trainer.cuda_graph=true) is one that can train the run
    (its own refusal, scheda.training.steps); ``trainer.precision=tf32x3`` names the two-pass step's
    products, so it needs that step."""
    t = config.trainer
    if t.step != "auto" and (refusal := step_kind(t.step).refusal(config)):
        return refusal
    if t.step != "two_pass" and t.precision == "tf32x3":
        return "trainer.precision=tf32x3 is the two-pass step's product precision: set trainer.step=two_pass"
    return _graph_refusal(config) if t.cuda_graph else None


def parallel_needs_the_fused_step(config: RunConfig, device: torch.device) -> str | None:
    """A fused sweep's models share the hand-written step, with plain SGD folded into it."""
    if parallel(config) and not (trains_fused(config) and plain_sgd(config)):
        return f"trainer.parallel needs the plain fused step: {FUSED_STEP}, {PLAIN_SGD}"
    return None


def parallel_nu_needs_a_noise_level(config: RunConfig, device: torch.device) -> str | None:
    if config.trainer.parallel.nu and config.schedule.nu_key is None:
        return (f"trainer.parallel.nu needs schedule {', '.join(options_with_nu_key())} (one noise level to set), "
                f"not {config.schedule.name}")
    return None


def parallel_trains(config: RunConfig, device: torch.device) -> str | None:
    if parallel(config) and config.finetune.skips_training:
        return "trainer.parallel trains models: it cannot be combined with finetune.standalone"
    return None


def resume_or_init_from(config: RunConfig, device: torch.device) -> str | None:
    if config.resume and config.init_from and not config.finetune.skips_training:
        return "resume and init_from are both set: resume continues a run, init_from starts a new one"
    return None


def standalone_needs_init_from(config: RunConfig, device: torch.device) -> str | None:
    if config.finetune.skips_training and not config.init_from:
        return "finetune.standalone=true needs init_from=<a DA/ScheDA run or checkpoint>"
    return None


def finetune_output_needs_a_linear_classifier(config: RunConfig, device: torch.device) -> str | None:
    if config.finetune.enabled and config.finetune.init_output == "classifier" and not config.classifier.linear:
        return (f"finetune.init_output=classifier starts the output layer from a linear classifier, and "
                f"classifier={config.classifier.name} has none: use classifier=torch_lr or liblinear, or "
                f"finetune.init_output=zero")
    return None


def finetune_output_needs_the_top_codes(config: RunConfig, device: torch.device) -> str | None:
    """The fine-tuned net's output layer reads the top layer's codes: a classifier of every layer's
    codes (evaluate.layers=all) has another shape to start it from."""
    if config.finetune.enabled and config.finetune.init_output == "classifier" and config.stack_on \
            and config.evaluate.layers == "all":
        return ("finetune.init_output=classifier starts the output layer from the classifier of the top layer's "
                "codes, and evaluate.layers=all evaluates every layer's: fine-tune with evaluate.layers=top (a "
                "run of its own), or finetune.init_output=zero")
    return None


def finetune_output_needs_an_evaluation(config: RunConfig, device: torch.device) -> str | None:
    """The output layer starts from the frozen-feature evaluation's classifier: without evaluations
    it started from zero without a word."""
    if config.finetune.enabled and config.finetune.init_output == "classifier" and not config.evaluate.enabled:
        return ("finetune.init_output=classifier starts the output layer from the frozen-feature evaluation's "
                "classifier, and evaluate.enabled=false runs none: set evaluate.enabled=true, or "
                "finetune.init_output=zero")
    return None


def raw_needs_evaluation(config: RunConfig, device: torch.device) -> str | None:
    if not config.model.trains and not config.evaluate.enabled:
        return "model=raw only evaluates: set evaluate.enabled=true"
    return None


def raw_has_no_encoder_to_finetune(config: RunConfig, device: torch.device) -> str | None:
    """Fine-tuning trains an autoencoder's encoder under a classifier: the raw inputs have none (it
    was skipped without a word)."""
    if not config.model.trains and config.finetune.enabled:
        return ("finetune.enabled=true fine-tunes an autoencoder's encoder, and model=raw has none: use "
                "model=da, or finetune.enabled=false")
    return None


def finetune_fused_needs_plain_sgd(config: RunConfig, device: torch.device) -> str | None:
    """The fused fine-tuning trains every rate at once with plain SGD, as the fused DA step does."""
    f = config.finetune
    if f.enabled and f.fused and f.momentum != 0:
        return (f"finetune.fused=true trains every learning rate at once with plain SGD, not finetune.momentum="
                f"{f.momentum:g}: set finetune.momentum=0, or finetune.fused=false (one rate after another)")
    return None


def patience_needs_evaluations(config: RunConfig, device: torch.device) -> str | None:
    """The patience rule counts evaluations in the schedule's last stage: it needs them there."""
    if config.trainer.patience and not (config.evaluate.enabled and config.evaluate.every >= 1):
        return ("trainer.patience counts evaluations without a new best validation error: set evaluate.enabled=true "
                "and evaluate.every=N (N >= 1), or trainer.patience=null")
    return None


RULES: tuple[Callable[[RunConfig, torch.device], str | None], ...] = (
    cuda_settings_need_a_cuda_device, bf16_needs_bf16_arithmetic, the_step_can_train_the_run, parallel_needs_the_fused_step,
    parallel_nu_needs_a_noise_level, parallel_trains, resume_or_init_from, standalone_needs_init_from, finetune_output_needs_a_linear_classifier, finetune_output_needs_the_top_codes,
    finetune_output_needs_an_evaluation,
    raw_needs_evaluation, raw_has_no_encoder_to_finetune, patience_needs_evaluations, finetune_fused_needs_plain_sgd,
    compile_needs_its_step,
)


def check(config: RunConfig, device: torch.device) -> None:
    """Every rule; the first broken one is raised as one line."""
    for rule in RULES:
        message = rule(config, device)
        if message:
            raise ConfigError(message)


def check_data(config: RunConfig, n_train: int, labelled: bool) -> None:
    """The rules that need the data (checked once it is loaded, before anything is built from it):
    a minibatch no larger than the training examples, labels for the raw baseline, the patience rule
    and fine-tuning."""
    if config.model.trains and config.trainer.batch_size > n_train:
        raise ConfigError(f"trainer.batch_size={config.trainer.batch_size} exceeds the {n_train} "
                          f"training examples: lower it")
    if not labelled and not config.model.trains:
        raise ConfigError("model=raw only evaluates, and dataset.root has no train_y: add train_y")
    if not labelled and config.trainer.patience:
        raise ConfigError("trainer.patience reads the validation error, and dataset.root has no train_y: add "
                          "train_y, or set trainer.patience=null")
    if not labelled and config.finetune.enabled:
        raise ConfigError("finetune.enabled=true needs labels, and dataset.root has no train_y: add train_y, "
                          "or set finetune.enabled=false")


def check_handed(config: RunConfig) -> None:
    """Arrays handed to a run (scheda.train(data=...)) are read as ``dataset=arrays`` reads its files."""
    if not hasattr(config.dataset, "handed"):
        raise ConfigError(f"arrays handed to the run are read as dataset=arrays reads its files: compose "
                          f"it with dataset=arrays, not dataset={config.dataset.name}")


def choose_step(config: RunConfig, device: torch.device, epochs: int = 0) -> StepChoice:
    """The step that trains a run whose rules passed: ``trainer.step=auto`` becomes the Triton step on
    a CUDA device wherever it applies (on a CPU the torch step measures faster), else the fused
    step wherever it applies, else autograd; ``trainer.cuda_graph=null`` becomes true on a CUDA
    device wherever a graph can capture the step; ``trainer.compile=null`` compiles the bf16 update
    wherever it applies and the run trains at least COMPILE_EPOCHS of its ``epochs``."""
    t, cuda = config.trainer, device.type == "cuda"
    kind = auto_kind(config, device) if t.step == "auto" else t.step
    graph = t.cuda_graph if t.cuda_graph is not None else cuda and kind != "autograd" and _graph_refusal(config) is None
    compiled = t.compile if t.compile is not None else \
        kind == "fused" and epochs >= COMPILE_EPOCHS and _compile_refusal(config, device) is None
    return StepChoice(kind, bool(graph), t.precision, bool(compiled))


def choose_finetune_step(config: RunConfig, device: torch.device) -> FinetuneChoice:
    """The step that fine-tunes a run whose rules passed (a stack's every layer with it): the
    fused one as asked (``finetune.fused``), graphed on a CUDA device."""
    fused = bool(config.finetune.fused)
    return FinetuneChoice(fused, fused and device.type == "cuda")
