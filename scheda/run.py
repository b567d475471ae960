"""One training run from a composed config: its directory taken (scheda.runs.reentry), its plan
made (scheda.training.plan: every group typed, every rule checked, the step chosen, its M >= 1
models listed), then one path for one model and for a fused sweep alike: the models built from
the plan, trained in lockstep (scheda.training.trainer), finished (evaluation and fine-tuning:
scheda.evaluation) and recorded.

``scheda-train`` (scheda.cli) is the Hydra wrapper around :func:`run`; tests, scripts and the
Python API (scheda.api) call it with a config, an output directory and, if they have them,
arrays to train on.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Mapping

import torch
from omegaconf import DictConfig, OmegaConf

from scheda.config import check_composed
from scheda.data import dataset_spec
from scheda.evaluation.evaluate import EvaluationCallback, evaluate_raw
from scheda.evaluation.finetune import finetune_encoder
from scheda.loggers import Loggers, LoggingCallback, build_loggers, hparams
from scheda.model.autoencoder import build_model
from scheda.model.noise import build_noise
from scheda.model.optim import build_optimizer
from scheda.runs.reentry import earlier_seconds, enter
from scheda.runs.rundir import RunResults, read_results, status_of, summary_lines
from scheda.training.callbacks import CheckpointCallback, ProgressBar
from scheda.training.checkpoint import find_checkpoint_dir, load_checkpoint, load_model_weights
from scheda.training.plan import Plan, PlannedModel, make_plan
from scheda.training.trainer import ModelState, Trainer, setup_process
from scheda.utils import environment
from scheda.utils.errors import CheckpointError, ConfigError
from scheda.utils.interrupt import Interrupted, stop_on_signals
from scheda.utils.io import atomic_write, shown_path
from scheda.utils.lock import hold
from scheda.utils.seeding import derive_seed, train_seed

log = logging.getLogger(__name__)


def run(cfg: DictConfig, output_dir: str | Path, data: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Train the configured DA/ScheDA (or evaluate raw inputs for ``model=raw``); returns
    the run's results, also written to results.json. ``data``: arrays to train on instead of
    the data set's files (``train_x`` and optionally ``train_y``, ``test_x``, ``test_y``,
    ``unlabelled_x``, read as ``dataset=arrays`` reads its files). A run that fails still leaves
    a results.json saying how (status failed / diverged / interrupted, and the error), so a
    sweep's selection can skip it. One process at a time writes into ``output_dir`` (scheda.utils.lock)."""
    output_dir = Path(output_dir)
    log.info("run directory: %s", shown_path(output_dir))
    with hold(output_dir):
        check_composed(cfg)
        results, done = enter(cfg, output_dir)
        if done:
            return results.data
        try:
            plan = make_plan(cfg, data)  # before any data, logger or checkpoint
            if plan.config.model.trains:
                summary = train(plan, output_dir, results)
            else:  # model=raw evaluates the inputs themselves
                summary = evaluate_raw(plan.config.dataset, plan.config.classifier, plan.device, results)
            for line in summary_lines(summary, output_dir, plan.config.logger):
                log.info(line)
            return summary
        except Interrupted as exc:
            exc.message = (f"interrupted by {exc.message}; checkpoint and results.json written: "
                           f"continue with {environment.invoked_as('scheda-train', 'scheda.cli', 'train.py')} "
                           f"resume={shown_path(output_dir)}")
            results.record_failure(exc)
            if exc.forward is not None:  # submitit's handler: requeue the job (it exits)
                exc.forward()
            raise
        except BaseException as exc:
            results.record_failure(exc)
            raise


class Member:
    """One planned model, built: its state in the loop (scheda.training.trainer.ModelState), its
    results, loggers and evaluation. Made by :func:`build` only, which knows the order."""

    def __init__(self, planned: PlannedModel, plan: Plan, output_dir: Path, results: RunResults):
        """What needs no data: the model (seeded: this seeds torch's global generator and draws the
        initial weights from a stream of its own) and the checkpoints it resumes or starts from
        (loaded here, so a bad one fails before the data)."""
        config = self.config = planned.config
        self.planned, self.plan, self.results = planned, plan, results
        self.output_dir = output_dir / planned.subdir if planned.subdir else output_dir
        if plan.sweep:
            before = read_results(self.output_dir) if config.resume else None
            self.results = RunResults(self.output_dir / "results.json", overrides=planned.overrides,
                                      config=config.composed, seconds=earlier_seconds(before))
            atomic_write(self.output_dir / "config.yaml", lambda f: f.write(OmegaConf.to_yaml(config.composed).encode()))
        self.started = time.time() - (self.results.data.get("seconds") or 0.0)  # earlier attempts count
        self.state: ModelState | None = None
        self.evaluation: EvaluationCallback | None = None
        self.loggers = Loggers()
        torch.manual_seed(config.seed)
        init = torch.Generator().manual_seed(derive_seed(config.seed, "init"))
        self.model = build_model(config.model, dataset_spec(config.dataset).n_input, generator=init)
        self.resume_dir = Path(find_checkpoint_dir(config.resume)) if config.resume else None
        self.resume_state = load_checkpoint(config.resume) if config.resume and not plan.standalone else None
        self.init_state = load_checkpoint(config.init_from) if config.init_from else None

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
        self.results.data.update(schedule=schedule.describe(), device=str(device), cuda_graph=step.cuda_graph,
                                 triton=step.triton, two_pass=step.kind == "two_pass",
                                 cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
                                 environment=environment.describe(device))
        self.loggers = build_loggers(config.logger, self.output_dir,
                                     purge_step=self.resume_state["epoch"] + 1 if self.resume_state else None)
        callbacks = []  # order matters: evaluation runs before the epoch's checkpoint, which then carries it
        if config.evaluate.enabled and data.labelled:  # unlabelled data: the data set said so in one line
            self.evaluation = EvaluationCallback(config.evaluate, config.classifier, data, labelled, self.results,
                                                 self.loggers)
            callbacks.append(self.evaluation)
        callbacks.append(CheckpointCallback(self.output_dir / "checkpoints", config.trainer.checkpoint_every))
        callbacks.append(ProgressBar(config.trainer.progress_bar and self.planned.index == 0))  # one bar a run
        if self.loggers:
            n_filters = max((getattr(c, "n_filters", 0) for c in config.logger), default=0)
            callbacks.append(LoggingCallback(self.loggers, hparams(config, config.seed, schedule), data.image_shape,
                                             data.vocabulary, n_filters))
        self.state = ModelState(model, optimizer, build_noise(config.noise), schedule, train_x,
                                config.trainer.batch_size, generator, callbacks, step=step)
        if self.resume_state is not None:
            self._resume()

    def _resume(self) -> None:
        saved, state = self.resume_state, self.state
        load_model_weights(self.model, saved)
        try:
            state.load_state_dict(saved)
        except (KeyError, ValueError, RuntimeError) as exc:
            raise CheckpointError(f"{saved['path']} cannot resume this run ({exc}); "
                                  f"check the config matches the checkpoint's run") from None
        if saved["schedule"] != [[s.nu, s.epochs] for s in state.schedule.stages]:
            log.warning("the schedule differs from the checkpoint's; continuing with the configured one")
        log.info("resumed from %s at epoch %d", saved["path"], state.epoch)

    def record_training(self) -> None:
        s = self.state
        self.results.data.update(epochs=s.epoch, final_train_loss=s.history[-1]["loss"] if s.history else None,
                                 switches=s.switches, seconds=time.time() - self.started, history=s.history)

    def finish(self, data, labelled) -> dict[str, Any]:
        """Fine-tune (scheda.evaluation.finetune) if asked, then record the model completed."""
        if self.config.finetune.enabled:
            self.results.update(finetune=finetune_encoder(
                self.config.finetune, self.model, data, labelled, self.plan.device, self.output_dir,
                seed=self.config.seed, evaluation=self.evaluation, resume_dir=self.resume_dir, loggers=self.loggers,
                epoch=self.state.epoch))
        self.results.update(status="completed", seconds=time.time() - self.started)
        self.loggers.close("completed")
        return self.results.data

    def close_loggers(self, exc: BaseException) -> None:
        """A model that stops early closes its loggers with its status (a backend records it)."""
        try:
            self.loggers.close(status_of(exc))
        except Exception as error:  # noqa: BLE001 - the run's own error is the one to report
            log.warning("closing the loggers failed: %s", error)


def build(plan: Plan, output_dir: Path, results: RunResults) -> tuple[list[Member], Any, dict[str, torch.Tensor]]:
    """Every model of the plan built, in the one order that works: models and checkpoints (no
    data), the process's settings, the data on the device, then each model's state."""
    members = [Member(planned, plan, output_dir, results) for planned in plan.models]
    setup_process(plan.config.trainer)
    config = plan.config
    data = dataset_spec(config.dataset).load()
    n_train = data.train_x.shape[0] + (0 if data.unlabeled_x is None else data.unlabeled_x.shape[0])
    if config.trainer.batch_size > n_train:
        raise ConfigError(f"trainer.batch_size={config.trainer.batch_size} exceeds the {n_train} "
                          f"training examples: lower it")
    log.info("data %s: train %s, val %s, test %s", data.name, data.train_x.shape, data.val_x.shape, data.test_x.shape)
    if not data.labelled and config.finetune.enabled:
        raise ConfigError("finetune.enabled=true needs labels, and dataset.root has no train_y: add train_y, "
                          "or set finetune.enabled=false")
    train_x = data.autoencoder_tensor(plan.device)
    # Shared by every evaluation and fine-tuning of the run.
    labelled = {"train": train_x if data.unlabeled_x is None else data.tensor("train", plan.device),
                "val": data.tensor("val", plan.device), "test": data.tensor("test", plan.device)}
    if plan.sweep:
        log.info("fused sweep of %d models: %s", len(plan.models), [p.overrides for p in plan.models])
    elif plan.standalone:  # no autoencoder training: the schedule's line would describe nothing that runs
        log.info("fine-tuning %s's encoder (finetune.standalone: no schedule), device %s", config.init_from, plan.device)
    else:
        schedule = plan.models[0].schedule
        log.info("schedule %s: %s (%d epochs), device %s", schedule.name, schedule.describe(), schedule.total_epochs,
                 plan.device)
    try:
        for member in members:
            member._attach(data, train_x, labelled)
    except BaseException as exc:
        for member in members:
            member.close_loggers(exc)
        raise
    return members, data, labelled


def train(plan: Plan, output_dir: Path, results: RunResults) -> dict[str, Any]:
    """Build the plan's models, train them in lockstep, finish each; a fused sweep's run records
    each model's outcome (every model's own results.json says where it got to)."""
    started = time.time() - (results.data.get("seconds") or 0.0)
    members: list[Member] = []
    try:
        members, data, labelled = build(plan, output_dir, results)
        if plan.sweep:
            results.update(models=[{"dir": p.subdir, "overrides": p.overrides} for p in plan.models])
        if not plan.standalone:
            try:
                with stop_on_signals() as stop:
                    for member in members:
                        member.state.stop = stop
                    Trainer([member.state for member in members]).fit()
            except BaseException as exc:
                for member in members:
                    member.record_training()
                    if member.results is not results:  # the run's own is recorded by run()
                        member.results.record_failure(exc)
                raise
            for member in members:
                member.record_training()
        summaries = [member.finish(data, labelled) for member in members]
    except BaseException as exc:
        for member in members:
            member.close_loggers(exc)
        raise
    if not plan.sweep:
        return summaries[0]
    for entry, summary in zip(results.data["models"], summaries):
        last = summary["evaluations"][-1] if summary["evaluations"] else {}
        entry.update(status=summary["status"], val_error=last.get("val_error"), test_error=last.get("test_error"),
                     final_train_loss=summary.get("final_train_loss"))
    results.data.update(evaluations=[])
    vals = [e["val_error"] for e in results.data["models"] if e["val_error"] is not None]
    results.update(status="completed", best_val_error=min(vals) if vals else None, seconds=time.time() - started)
    return results.data
