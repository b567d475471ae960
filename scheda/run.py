"""One training run from a composed config: its directory taken (scheda.runs.reentry), its plan
made (scheda.planning.plan), then one path for one model and a fused sweep alike: the models
built from the plan, trained in lockstep (scheda.training.trainer), finished (evaluation and
fine-tuning: scheda.evaluation) and recorded. ``scheda-train`` (scheda.cli) and the Python API
(scheda.api) call :func:`run`.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Mapping

import torch
from omegaconf import DictConfig

from scheda.config import check_composed
from scheda.data import dataset_spec
from scheda.evaluation.evaluate import EvaluationCallback, evaluate_raw
from scheda.evaluation.finetune import finetune_encoder
from scheda.loggers import Loggers, LoggingCallback, build_loggers, hparams
from scheda.model.autoencoder import build_model
from scheda.model.noise import build_noise
from scheda.model.optim import build_optimizer
from scheda.runs.reentry import enter, enter_model
from scheda.runs.rundir import CAP, PATIENCE, SCHEDULE, RunResults, kept, summarise_sweep, summary_lines
from scheda.training.callbacks import CheckpointCallback, Patience, ProgressBar
from scheda.training.checkpoint import find_checkpoint_dir, find_model, load_checkpoint, load_model_weights
from scheda.planning import rules
from scheda.planning.plan import Plan, PlannedModel, make_plan
from scheda.training.trainer import ModelState, Trainer, setup_process
from scheda.utils import environment
from scheda.utils.interrupt import Interrupted, stop_on_signals, terminate_as_interrupt
from scheda.utils.io import shown_path
from scheda.utils.lock import hold
from scheda.utils.seeding import derive_seed, train_seed

log = logging.getLogger(__name__)


def run(cfg: DictConfig, output_dir: str | Path, data: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Train the configured DA/ScheDA (``model=raw``: evaluate the inputs); returns the run's
    results, also in results.json, which a failed run fills too (status failed / diverged /
    interrupted, the error: a sweep's selection skips it). ``data``: arrays instead of the data
    set's files, read as ``dataset=arrays`` reads its files. One process at a time writes into
    ``output_dir`` (scheda.utils.lock)."""
    output_dir = Path(output_dir)
    log.info("run directory: %s", shown_path(output_dir))
    with hold(output_dir):
        check_composed(cfg)
        results, done = enter(cfg, output_dir)
        if done:
            return results.data
        plan = None
        try:
            plan = make_plan(cfg, data)  # before any data, logger or checkpoint
            results.update(plan=plan.record())
            setup_process(plan.config.trainer, plan.device)  # threads and precision: a raw baseline's evaluation too
            if plan.config.model.trains:
                log.info(plan.describe())
                summary = train_plan(plan, output_dir, results)
            else:  # model=raw evaluates the inputs themselves: nothing to checkpoint, a SIGTERM stops it as Ctrl-C does
                with terminate_as_interrupt():
                    summary = evaluate_raw(load_data(plan), plan.config.classifier, plan.device, results)
            for line in summary_lines(summary, output_dir, plan.config.logger):
                log.info(line)
            return summary
        except Interrupted as exc:
            written = "checkpoint and results.json" if plan is not None and plan.config.model.trains else "results.json"
            exc.message = (f"interrupted by {exc.message}; {written} written: "
                           f"continue with {environment.invoked_as('scheda-train', 'scheda.cli', 'train.py')} "
                           f"resume={shown_path(output_dir)}")
            results.record_failure(exc)
            if exc.forward is not None:  # submitit's handler: requeue the job (it exits)
                exc.forward()
            raise
        except BaseException as exc:
            results.record_failure(exc)
            raise


def step_fields(step: dict[str, Any]) -> dict[str, Any]:
    """results.json's record of a step (StepChoice.describe, with ``fallback`` once built): the step
    and, as before it, whether it was graphed, a Triton step, the two-pass one."""
    return {"step": step, "cuda_graph": step["cuda_graph"], "triton": step["kind"] in ("triton", "two_pass"),
            "two_pass": step["kind"] == "two_pass"}


class Member:
    """One planned model, built (by :func:`build`, which knows the order): its state in the loop,
    results, loggers and evaluation."""

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
        self.model = build_model(config.model, dataset_spec(config.dataset).n_input, generator=init)
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
        self.results.data.update(schedule=schedule.describe(), device=str(device), **step_fields(step.describe()),
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
                                            config.trainer.keep_checkpoints, self.results.evaluations))
        callbacks.append(ProgressBar(config.trainer.progress_bar and self.planned.index == 0))  # one bar a run
        if self.loggers:
            n_filters = max((getattr(c, "n_filters", 0) for c in config.logger), default=0)
            callbacks.append(LoggingCallback(self.loggers, hparams(config, config.seed, schedule), data.image_shape,
                                             data.vocabulary, n_filters))
        self.state = ModelState(model, optimizer, build_noise(config.noise), schedule, train_x,
                                config.trainer.batch_size, generator, callbacks, step=step)
        if self.resume_state is not None:
            self.state.resume(self.resume_state)

    def record_training(self) -> None:
        s = self.state
        stopped = {}
        if s.finished:  # why it stopped: the patience rule, its cap, or (no rule) its schedule's end
            stopped["stopped_by"] = PATIENCE if s.converged else CAP if self.config.trainer.patience else SCHEDULE
        ran = step_fields(s.ran) if s.ran is not None else {}  # the step built, which a fallback may change
        self.results.data.update(epochs=s.epoch, final_train_loss=s.history[-1]["loss"] if s.history else None,
                                 switches=s.switches, seconds=time.time() - self.started, history=s.history,
                                 **stopped, **ran)

    def finish(self, data, labelled, stop) -> dict[str, Any]:
        """Fine-tune (scheda.evaluation.finetune) if asked, then record the model completed; a
        signal (``stop``) during its evaluation or its epochs stops it as it stops training."""
        if self.config.finetune.enabled:
            self.results.update(finetune=finetune_encoder(
                self.config.finetune, self.model, data, labelled, self.plan.device, self.output_dir,
                seed=self.config.seed, evaluation=self.evaluation, resume_dir=self.resume_dir, loggers=self.loggers,
                epoch=self.state.epoch, step=self.plan.finetune_step, stop=stop))
        read = kept(self.results.data)  # the evaluation the run reports: TensorBoard's HParams and MLflow's
        if read is not None:             # run tables show a scalar's last value, past the best under the rule
            self.loggers.log_dict({"reported/val_error": read["val_error"], "reported/test_error": read["test_error"]},
                                  read["epoch"])
        self.results.update(status="completed", seconds=time.time() - self.started)
        self.loggers.close("completed")
        return self.results.data


def load_data(plan: Plan):
    """The plan's data set, loaded and checked against the run's rules that need it."""
    data = dataset_spec(plan.config.dataset).load()
    n_train = data.train_x.shape[0] + (0 if data.unlabeled_x is None else data.unlabeled_x.shape[0])
    log.info("data %s: train %s, val %s, test %s", data.name, data.train_x.shape, data.val_x.shape, data.test_x.shape)
    rules.check_data(plan.config, n_train, data.labelled)
    return data


def build(plan: Plan, output_dir: Path, results: RunResults) -> tuple[list[Member], Any, dict[str, torch.Tensor]]:
    """Every model of the plan built, in the one order that works: models and checkpoints (no
    data), the data on the device, then each model's state."""
    members = [Member(planned, plan, output_dir, results) for planned in plan.models]
    data = load_data(plan)
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
        members, data, labelled = build(plan, output_dir, results)
        results.kept = None  # its models and data built: from here a failure is this attempt's own record
        if plan.sweep:
            results.update(models=[{"dir": p.subdir, "overrides": p.overrides} for p in plan.models])
        with stop_on_signals() as stop:  # training, then each model's evaluation and fine-tuning
            for member in members:
                member.state.stop = stop
            try:
                if not plan.standalone:
                    try:
                        Trainer([member.state for member in members]).fit()
                    finally:
                        for member in members:
                            member.record_training()
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
