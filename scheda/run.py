"""One training run from a composed config: its directory taken (scheda.runs.reentry), its plan
made (scheda.planning.plan), its models built, trained in lockstep (scheda.training.trainer) and
finished (evaluation, fine-tuning) on one path for one model and a fused sweep alike, and recorded.
``scheda-train`` (scheda.cli) and the Python API (scheda.api) call :func:`run`."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Mapping

import torch
from omegaconf import DictConfig, flag_override

from scheda.config import check_composed
from scheda.evaluation.evaluate import EvaluationCallback, evaluate_raw
from scheda.evaluation.finetune import finetune_encoder
from scheda.loggers import Loggers, LoggingCallback, build_loggers, hparams
from scheda.model.autoencoder import build_model
from scheda.model.noise import build_noise
from scheda.model.optim import build_optimizer
from scheda.runs.reentry import enter, enter_model, interrupted_line
from scheda.runs.rundir import RunResults, summarise_sweep, summary_lines
from scheda.training.callbacks import CheckpointCallback, Patience, ProgressBar
from scheda.training.checkpoint import find_checkpoint_dir, find_model, load_checkpoint, load_model_weights
from scheda.planning.plan import Plan, PlannedModel, make_plan
from scheda.training.step import step_record
from scheda.training.trainer import ModelState, Trainer, setup_process
from scheda.utils import environment
from scheda.utils.interrupt import Interrupted, stop_on_signals, terminate_as_interrupt
from scheda.utils.io import shown_path
from scheda.utils.lock import hold
from scheda.utils.seeding import derive_seed, train_seed

log = logging.getLogger(__name__)


def run(cfg: DictConfig, output_dir: str | Path, data: Mapping[str, Any] | None = None,
        label: str = "") -> dict[str, Any]:
    """Train the configured DA/ScheDA (``model=raw``: evaluate the inputs); returns the run's
    results, also in results.json, which a failed run fills too (status failed / diverged /
    interrupted, the error: a sweep's selection skips it). ``data``: arrays instead of the data
    set's files, read as ``dataset=arrays`` reads its files; ``label``: a sweep job's swept values,
    which its loggers name its records by. One process at a time writes into ``output_dir``
    (scheda.utils.lock). ``cfg`` is read-only here: what the run decides is in its plan."""
    output_dir = Path(output_dir)
    log.info("run directory: %s", shown_path(output_dir))
    with hold(output_dir), flag_override(cfg, "readonly", True):
        check_composed(cfg)
        entry = enter(cfg, output_dir)
        results = entry.results
        if entry.done:
            return results.data
        plan = None
        try:
            plan = make_plan(cfg, data, entry, label)  # before any data, logger or checkpoint
            results.update(plan=plan.record(), config=entry.record(plan.config.composed))
            entry.say_changes(plan.config.composed)
            setup_process(plan.config.trainer, plan.device)  # threads and precision: a raw baseline's evaluation too
            if plan.config.model.trains:
                log.info(plan.describe())
                summary = train_plan(plan, output_dir, results)
            else:  # model=raw evaluates the inputs themselves: nothing to checkpoint, a SIGTERM stops it as Ctrl-C does
                with terminate_as_interrupt():
                    summary = evaluate_raw(plan.load_data(), plan.config.classifier, plan.device, results)
            for line in summary_lines(summary, output_dir, plan.config.logger):
                log.info(line)
            return summary
        except Interrupted as exc:
            exc.message = interrupted_line(exc.message, output_dir, plan is not None and plan.config.model.trains)
            results.record_failure(exc)
            if exc.forward is not None:  # submitit's handler: requeue the job (it exits)
                exc.forward()
            raise
        except BaseException as exc:
            results.record_failure(exc)
            raise


class Member:
    """One planned model, built by :func:`build` (which knows the order): its state, results, loggers."""

    def __init__(self, planned: PlannedModel, plan: Plan, output_dir: Path, results: RunResults):
        """What needs no data: the model (seeded: this seeds torch's global generator and draws the
        initial weights from a stream of its own) and the checkpoints it resumes or starts from
        (loaded here, so a bad one fails before the data)."""
        config = self.config = planned.config
        self.planned, self.plan, self.results = planned, plan, results
        self.output_dir = output_dir / planned.subdir if planned.subdir else output_dir
        if plan.sweep:  # its own results.json and config.yaml under models/<k>/
            self.results = enter_model(self.output_dir, planned.overrides, config.composed, bool(config.resume))
        self.started = time.time() - (self.results.data.get("seconds") or 0.0)  # earlier attempts count
        self.state: ModelState | None = None
        self.evaluation: EvaluationCallback | None = None
        self.loggers = Loggers()
        torch.manual_seed(config.seed)
        init = torch.Generator().manual_seed(derive_seed(config.seed, "init"))
        self.model = build_model(config.model, plan.n_input, generator=init)
        self.resume_dir = Path(find_checkpoint_dir(config.resume)) if config.resume else None
        self.resume_state = load_checkpoint(config.resume) if config.resume and not plan.standalone else None
        self.init_state = load_checkpoint(find_model(config.init_from)) if config.init_from else None

    def _attach(self, data, train_x: torch.Tensor, labelled: dict[str, torch.Tensor]) -> None:
        """What needs the data: the optimiser, the generator, loggers, callbacks and the state."""
        config, model, device, schedule, step = self.config, self.model, self.plan.device, self.planned.schedule, self.plan.step
        if self.init_state is not None:
            load_model_weights(model, self.init_state)
            log.info("initialised from %s (epoch %d)", self.init_state["path"], self.init_state["epoch"])
        model.to(device)
        optimizer = build_optimizer(config.optim, model.parameters())
        start_epoch = int(self.init_state["epoch"]) if self.init_state is not None else 0
        generator = torch.Generator(device=device).manual_seed(train_seed(config.seed, start_epoch, config.train_seed))
        self.results.data.update(schedule=schedule.describe(), device=str(device), **step_record(step.describe()),
                                 cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
                                 environment=environment.describe(device))
        self.loggers = build_loggers(config.logger, self.output_dir,
                                     purge_epoch=self.resume_state["epoch"] + 1 if self.resume_state else None)
        callbacks = []  # order matters: evaluation runs before the epoch's checkpoint, which then carries it
        if config.evaluate.enabled and data.labelled:  # unlabelled data: the data set said so in one line
            self.evaluation = EvaluationCallback(config.evaluate, config.classifier, data, labelled, self.results,
                                                 self.loggers)
            callbacks.append(self.evaluation)
            if config.trainer.patience:  # after the evaluation it reads, before the checkpoint that follows it
                callbacks.append(Patience(self.results.evaluations, config.trainer.patience, config.trainer.min_epochs))
        callbacks.append(CheckpointCallback(self.output_dir / "checkpoints", config.trainer.checkpoint_every,
                                            config.trainer.keep_checkpoints, self.results.evaluations,
                                            saved=lambda: self.results.update(seconds=time.time() - self.started)))
        callbacks.append(ProgressBar(config.trainer.progress_bar and self.planned.index == 0))  # one bar a run
        if self.loggers:
            n_filters = max((getattr(c, "n_filters", 0) for c in config.logger), default=0)
            callbacks.append(LoggingCallback(self.loggers, hparams(config, config.seed, schedule), data.image_shape,
                                             data.vocabulary, n_filters))
        self.state = ModelState(model, optimizer, build_noise(config.noise), schedule, train_x,
                                config.trainer.batch_size, generator, callbacks, step=step)
        if self.resume_state is not None:
            self.state.resume(self.resume_state)

    def finish(self, data, labelled, stop) -> dict[str, Any]:
        """Fine-tune (scheda.evaluation.finetune) if asked, then record the model completed; a
        signal (``stop``) during its evaluation or its epochs stops it as it stops training."""
        if self.config.finetune.enabled:
            self.results.update(finetune=finetune_encoder(
                self.planned.finetune, self.model, data, labelled, self.output_dir, evaluation=self.evaluation,
                resume_dir=self.resume_dir, loggers=self.loggers, epoch=self.state.epoch, stop=stop))
        self.loggers.log_reported(self.results.data)
        self.results.update(status="completed", seconds=time.time() - self.started)
        self.loggers.close("completed")
        return self.results.data


def build(plan: Plan, output_dir: Path, results: RunResults) -> tuple[list[Member], Any, dict[str, torch.Tensor]]:
    """The plan's models built in the one order that works: models and checkpoints, data, states."""
    members = [Member(planned, plan, output_dir, results) for planned in plan.models]
    data = plan.load_data()
    train_x, labelled = data.on_device(plan.device)
    try:
        for member in members:
            member._attach(data, train_x, labelled)
    except BaseException as exc:
        for member in members:
            member.loggers.close_stopped(exc)
        raise
    return members, data, labelled


def train_plan(plan: Plan, output_dir: Path, results: RunResults) -> dict[str, Any]:
    """Build the plan's models, train them in lockstep, finish each; a fused sweep's run records
    each model's outcome (every model's own results.json says where it got to)."""
    started = time.time() - (results.data.get("seconds") or 0.0)
    members: list[Member] = []
    try:
        # From the build on (loading the data takes seconds): a signal before training is answered at its
        # first minibatch, with a checkpoint. Submitit's handler, in place before, ignores a SIGTERM (Slurm's
        # scancel or preemption): the job trained on to its end or its SIGKILL.
        with stop_on_signals() as stop:
            members, data, labelled = build(plan, output_dir, results)
            results.finished_copy = None  # its models and data built: from here a failure is this attempt's own record
            if plan.sweep:
                results.update(models=[{"dir": p.subdir, "overrides": p.overrides} for p in plan.models])
            for member in members:
                member.state.stop = stop
            try:
                if not plan.standalone:
                    try:
                        Trainer([member.state for member in members]).fit()
                    finally:
                        for m in members:
                            m.results.data.update(seconds=time.time() - m.started,
                                                  **m.state.outcome(bool(m.config.trainer.patience)))
                if data.inputs is not None:  # a stack fine-tunes every layer: from the inputs themselves
                    data, labelled = data.inputs, data.inputs.on_device(plan.device)[1]
                summaries = [member.finish(data, labelled, stop) for member in members]
            except BaseException as exc:
                for member in members:  # the run's own is recorded by run(); a finished model stays so
                    if member.results is not results and member.results.data.get("status") != "completed":
                        member.results.record_failure(exc)
                raise
    except BaseException as exc:
        for member in members:
            member.loggers.close_stopped(exc)
        raise
    return summarise_sweep(results, summaries, time.time() - started) if plan.sweep else summaries[0]
