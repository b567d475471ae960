"""One training run from a composed config: build everything, train, write results.

``scheda-train`` (scheda.cli; ``python train.py`` in a checkout) is the thin Hydra wrapper
around :func:`run`; tests, scripts and the Python API (scheda.api) call :func:`run` with a
config, an output directory and, if they have them, arrays to train on. The composed config is checked and typed once
(scheda.training.rules.check_run); everything after that is built from the typed run alone.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import logging
import os
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from omegaconf import DictConfig, OmegaConf

from scheda.config import check_composed
from scheda.data import dataset_spec
from scheda.evaluation.evaluate import EvaluationCallback, evaluate_features, labels_of, raw_features
from scheda.evaluation.finetune import finetune_encoder
from scheda.loggers import Loggers, LoggingCallback, build_loggers, hparams
from scheda.model.autoencoder import build_model
from scheda.model.noise import build_noise
from scheda.model.optim import build_optimizer
from scheda.model.schedule import build_schedule, check_nu, nu_key
from scheda.runs.resume import check_resume_config
from scheda.runs.rundir import RunResults, params_of, params_text, previous_attempt, read_results, set_aside, status_of
from scheda.training.callbacks import CheckpointCallback, ProgressBar
from scheda.training.checkpoint import find_checkpoint_dir, load_checkpoint, load_model_weights
from scheda.training.rules import TypedRun, check_run
from scheda.training.trainer import ModelState, Trainer, setup_process
from scheda.utils import environment
from scheda.utils.errors import CheckpointError, ConfigError
from scheda.utils.interrupt import Interrupted, stop_on_signals
from scheda.utils.io import atomic_write, atomic_write_json, shown_path
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
        return _run(cfg, output_dir, data)


def _run(cfg: DictConfig, output_dir: Path, data: Mapping[str, Any] | None) -> dict[str, Any]:
    check_composed(cfg)
    # A directory that already holds a run: a sweep run again into its folder, a job Slurm
    # requeued (time limit, preemption), the same hydra.run.dir twice.
    if not cfg.resume:
        action, why, before = previous_attempt(cfg, output_dir)
    elif Path(cfg.resume).resolve() == output_dir.resolve():  # resume=RUN_DIR continues into RUN_DIR
        action, why, before = "resumed", "", read_results(output_dir)
    else:
        action, why, before = "ran", "", None
    attempts = [*(before or {}).get("attempts", []), {"action": action, "at": time.strftime("%Y-%m-%dT%H:%M:%S")}]
    if why:
        restart = os.environ.get("SLURM_RESTART_COUNT", "0")
        requeued = f"requeued by Slurm (restart {restart}): " if restart not in ("", "0") else ""
        log.info("%s%s: %s", requeued, shown_path(output_dir), why)
    if action == "skipped":
        before["attempts"] = attempts
        atomic_write_json(output_dir / "results.json", before)
        return before
    if action == "resumed":  # its checkpoint holds where it stands: where it started no longer counts
        cfg.resume, cfg.init_from = str(output_dir), None
    elif action == "reran" and (output_dir / "results.json").exists():
        set_aside(output_dir)
    if cfg.resume:
        changed = check_resume_config(cfg, cfg.resume)
        if changed:
            log.warning("resuming with changed settings: %s", ", ".join(changed))
    results = RunResults(output_dir / "results.json", config=OmegaConf.to_container(cfg, resolve=True),
                         attempts=attempts, seconds=earlier_seconds(before if action == "resumed" else None))
    results.save()  # status running from the start: a rerun tells a killed run from a fresh directory
    try:
        typed_run = check_run(cfg)  # every group and every rule between groups, before any data, logger or checkpoint
        if data is not None:
            if not hasattr(typed_run.dataset, "handed"):
                raise ConfigError(f"arrays handed to the run are read as dataset=arrays reads its files: compose "
                                  f"it with dataset=arrays, not dataset={typed_run.dataset.name}")
            typed_run.dataset = typed_run.dataset.handed(data)
        trains = typed_run.model.trains  # model=raw evaluates the inputs themselves
        summary = train(typed_run, output_dir, results) if trains else run_raw(typed_run, results)
        log_summary(summary, output_dir, typed_run.logger)
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


def earlier_seconds(before: dict[str, Any] | None) -> float:
    """The time the earlier attempts of a run being resumed spent (what they recorded when
    stopped; a SIGKILL records none), so that results.json's seconds is the run's, not its last
    attempt's; ``before``: their results, None for a fresh run."""
    return float((before or {}).get("seconds") or 0.0)


def log_summary(summary: dict[str, Any], output_dir: Path, loggers: Sequence[Any] = ()) -> None:
    """What a finished run gives and where everything is, on one screen."""
    shown = shown_path(output_dir)
    lines = [f"done in {summary.get('seconds', 0) / 60:.1f} min ({summary.get('epochs', 0)} epochs)"]
    models = summary.get("models")
    for entry in models or [summary]:
        last = entry if models else (summary["evaluations"][-1] if summary.get("evaluations") else None)
        where = f"  {entry['dir']} {entry['overrides']}: " if models else "  "
        if last and last.get("val_error") is not None:
            chosen = f"{params_text(params_of(last))}, " if params_of(last) else ""
            lines.append(f"{where}{chosen}val error {100 * last['val_error']:.2f} %, test error {100 * last['test_error']:.2f} %")
        elif models:
            lines.append(f"{where}{entry.get('status')}")
    ft = summary.get("finetune", {}).get("chosen")
    if ft:
        lines.append(f"  fine-tuned: lr {ft['lr']:g}, epoch {ft['best_epoch']}: val error {100 * ft['val_error']:.2f} %, "
                     f"test error {100 * ft['test_error']:.2f} %")
    lines.append(f"  results: {shown}/results.json")
    if (output_dir / "checkpoints").is_dir() or models:
        lines.append(f"  checkpoints: {shown}/{'models/*/' if models else ''}checkpoints/")
    lines += [f"  {line}" for line in (logger.where(output_dir) for logger in loggers) if line]
    for line in lines:
        log.info(line)


class Job:
    """One DA to train: its typed run (scheda.training.rules), output directory and results, and
    what is built for it: made with what needs no data (:meth:`build` adds what does)."""

    def __init__(self, run: TypedRun, output_dir: Path, results: RunResults):
        """What the run is, before any data is loaded: its schedule, noise, device and model
        (seeded: this seeds torch's global generator and draws the initial weights), and the
        checkpoints it resumes or starts from (loaded here, so a bad one fails before the data)."""
        self.run, self.output_dir, self.results = run, output_dir, results
        self.trainer: ModelState | None = None
        self.evaluation: EvaluationCallback | None = None
        self.loggers = Loggers()  # every backend logger= selects, built with the run
        self.started = time.time() - (results.data.get("seconds") or 0.0)  # a resumed run's earlier attempts count
        self.trainer_cfg = run.trainer
        self.schedule = build_schedule(run.schedule, run.trainer.max_epochs)
        self.noise = build_noise(run.noise)
        self.device = run.trainer.resolve_device()
        torch.manual_seed(run.seed)
        init_generator = torch.Generator().manual_seed(derive_seed(run.seed, "init"))
        self.model = build_model(run.model, dataset_spec(run.dataset).n_input, generator=init_generator)
        self.standalone = run.finetune.enabled and run.finetune.standalone
        self.resume_dir = Path(find_checkpoint_dir(run.resume)) if run.resume else None
        self.resume_state = load_checkpoint(run.resume) if run.resume and not self.standalone else None
        self.init_state = load_checkpoint(run.init_from) if run.init_from else None

    def build(self, data, train_x: torch.Tensor, labelled: dict[str, torch.Tensor]) -> ModelState:
        run, model, device = self.run, self.model, self.device
        if self.init_state is not None:
            load_model_weights(model, self.init_state)
            log.info("initialised from %s (epoch %d)", self.init_state["path"], self.init_state["epoch"])
        model.to(device)
        optimizer = build_optimizer(run.optim, model.parameters())
        start_epoch = int(self.init_state["epoch"]) if self.init_state is not None else 0
        generator = torch.Generator(device=device).manual_seed(train_seed(run.seed, start_epoch, run.train_seed))
        self.results.data.update(schedule=self.schedule.describe(), device=str(device), cuda_graph=run.trainer.cuda_graph, triton=run.trainer.triton, two_pass=run.trainer.two_pass,
                                 cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
                                 environment=environment.describe(device))
        self.loggers = build_loggers(run.logger, self.output_dir,
                                     purge_step=self.resume_state["epoch"] + 1 if self.resume_state else None)
        # Order matters: evaluation runs before the epoch's checkpoint, which then carries it.
        callbacks = []
        if run.evaluate.enabled and data.labelled:  # unlabelled data: the data set said so in one line
            self.evaluation = EvaluationCallback(run.evaluate, run.classifier, data, labelled, self.results,
                                                 self.loggers)
            callbacks.append(self.evaluation)
        callbacks.append(CheckpointCallback(self.output_dir / "checkpoints", run.trainer.checkpoint_every))
        callbacks.append(ProgressBar(run.trainer.progress_bar))
        if self.loggers:
            callbacks.append(LoggingCallback(self.loggers, hparams(run, run.seed, self.schedule), data.image_shape,
                                             data.vocabulary, max((getattr(c, "n_filters", 0) for c in run.logger),
                                                                  default=0)))
        self.trainer = ModelState(model, optimizer, self.noise, self.schedule, train_x, run.trainer.batch_size,
                               generator, callbacks, step=run.trainer.step_builder())
        if self.resume_state is not None:
            self._resume()
        return self.trainer

    def _resume(self) -> None:
        state, trainer = self.resume_state, self.trainer
        load_model_weights(self.model, state)
        try:
            trainer.load_state_dict(state)
        except (KeyError, ValueError, RuntimeError) as exc:
            raise CheckpointError(f"{state['path']} cannot resume this run ({exc}); "
                                  f"check the config matches the checkpoint's run") from None
        if state["schedule"] != [[s.nu, s.epochs] for s in self.schedule.stages]:
            log.warning("the schedule differs from the checkpoint's; continuing with the configured one")
        log.info("resumed from %s at epoch %d", state["path"], trainer.epoch)

    def record_training(self) -> None:
        t = self.trainer
        self.results.data.update(epochs=t.epoch, final_train_loss=t.history[-1]["loss"] if t.history else None,
                                 switches=t.switches, seconds=time.time() - self.started,
                                 history=t.history)

    def finish(self, data, labelled) -> dict[str, Any]:
        if self.run.finetune.enabled:
            self.results.update(finetune=finetune_encoder(
                self.run.finetune, self.model, data, labelled, self.device, self.output_dir, seed=self.run.seed,
                evaluation=self.evaluation, resume_dir=self.resume_dir, loggers=self.loggers, epoch=self.trainer.epoch))
        self.results.update(status="completed", seconds=time.time() - self.started)
        self.loggers.close("completed")
        return self.results.data

    def close_loggers(self, exc: BaseException) -> None:
        """A run that stops early closes its loggers with its status (a backend records it)."""
        try:
            self.loggers.close(status_of(exc))
        except Exception as error:  # noqa: BLE001 - the run's own error is the one to report
            log.warning("closing the loggers failed: %s", error)


def load_training_data(run: TypedRun, device: torch.device):
    """The data set, the autoencoder's training tensor and the labelled splits, on the device."""
    data = dataset_spec(run.dataset).load()
    n_train = data.train_x.shape[0] + (0 if data.unlabeled_x is None else data.unlabeled_x.shape[0])
    if run.trainer.batch_size > n_train:
        raise ConfigError(f"trainer.batch_size={run.trainer.batch_size} exceeds the {n_train} "
                          f"training examples: lower it")
    log.info("data %s: train %s, val %s, test %s", data.name, data.train_x.shape, data.val_x.shape, data.test_x.shape)
    if not data.labelled:
        if run.finetune.enabled:
            raise ConfigError("finetune.enabled=true needs labels, and dataset.root has no train_y: add train_y, "
                              "or set finetune.enabled=false")
    train_x = data.autoencoder_tensor(device)
    # Shared by every evaluation and fine-tuning of the run.
    labelled = {"train": train_x if data.unlabeled_x is None else data.tensor("train", device),
                "val": data.tensor("val", device), "test": data.tensor("test", device)}
    return data, train_x, labelled


def train(run: TypedRun, output_dir: Path, results: RunResults) -> dict[str, Any]:
    if parallel_variants(run):
        return train_parallel(run, output_dir, results)
    job = Job(run, output_dir, results)
    setup_process(job.trainer_cfg)
    data, train_x, labelled = load_training_data(run, job.device)
    if job.standalone:  # no autoencoder training: the schedule's line would describe nothing that runs
        log.info("fine-tuning %s's encoder (finetune.standalone: no schedule), device %s", run.init_from, job.device)
    else:
        log.info("schedule %s: %s (%d epochs), device %s", job.schedule.name, job.schedule.describe(),
                 job.schedule.total_epochs, job.device)
    try:
        trainer = job.build(data, train_x, labelled)
        if not job.standalone:
            try:
                with stop_on_signals() as trainer.stop:
                    trainer.fit()
            finally:
                job.record_training()
        return job.finish(data, labelled)
    except BaseException as exc:
        job.close_loggers(exc)
        raise


def parallel_variants(run: TypedRun) -> list[dict[str, Any]]:
    """The overrides of each model of a fused sweep (``trainer.parallel``); [] for one model."""
    par = run.trainer.parallel
    axes = []
    if par.nu:  # a schedule with one noise level to set (scheda.training.rules)
        key = nu_key({"name": run.schedule.name})
        axes.append([(f"schedule.{key}", check_nu("trainer.parallel.nu", v)) for v in par.nu])
    if par.lr:
        axes.append([("optim.lr", float(v)) for v in par.lr])
    if par.seed:
        axes.append([("seed", int(v)) for v in par.seed])
    return [dict(combo) for combo in itertools.product(*axes)] if axes else []


def model_of(run: TypedRun, overrides: dict[str, Any], resume: str | None) -> TypedRun:
    """One model of a fused sweep: the typed run with that model's values (``schedule.<nu key>``,
    ``optim.lr``, ``seed``) set on copies of the groups they belong to, its loggers naming its
    records by those values, and its record of the config to match. Nothing is composed or
    typed again."""
    groups: dict[str, Any] = {"trainer": dataclasses.replace(
        run.trainer, parallel=dataclasses.replace(run.trainer.parallel, nu=[], lr=[], seed=[]))}
    seed = run.seed
    composed = copy.deepcopy(run.composed)
    composed["trainer"]["parallel"].update(nu=[], lr=[], seed=[])
    for key, value in overrides.items():
        group, _, field = key.partition(".")
        if group == "seed":
            seed = value
            composed["seed"] = value
        else:
            groups[group] = dataclasses.replace(groups.get(group, getattr(run, group)), **{field: value})
            groups[group].check()  # that group's own ranges, for this value
            composed[group][field] = value
    label = ",".join(f"{key}={v}" for key, v in overrides.items())
    loggers = [copy.copy(c) for c in run.logger]
    for logger in loggers:  # each model's curves by its values
        type(logger).label(logger, label)
    for key, logger in zip(composed.get("logger") or {}, loggers):
        composed["logger"][key] = {**composed["logger"][key], **dataclasses.asdict(logger)}
    return dataclasses.replace(run, **groups, logger=loggers, seed=seed, resume=resume, composed=composed)


def train_parallel(run: TypedRun, output_dir: Path, results: RunResults) -> dict[str, Any]:
    """A fused sweep: every variant of ``trainer.parallel`` trained in one process with batched
    matmuls, each in ``models/<k>/`` with its own results.json, checkpoints and TensorBoard.
    A failing model (divergence, say) stops the sweep; every model's results.json says where
    it got to."""
    started = time.time() - (results.data.get("seconds") or 0.0)
    variants = parallel_variants(run)
    jobs = []
    for k, overrides in enumerate(variants):
        resume = None
        if run.resume:
            model_dir = Path(run.resume) / "models" / str(k)
            if not model_dir.is_dir():
                raise CheckpointError(f"{model_dir} not found: resume a fused sweep with its run directory")
            resume = str(model_dir)
        run_k = model_of(run, overrides, resume)
        out = output_dir / "models" / str(k)
        job = Job(run_k, out, RunResults(out / "results.json", overrides=overrides, config=run_k.composed,
                                         seconds=earlier_seconds(read_results(out) if resume else None)))
        atomic_write(out / "config.yaml", lambda f, c=run_k.composed: f.write(OmegaConf.to_yaml(c).encode()))
        jobs.append(job)
    if len({j.device for j in jobs}) != 1:
        raise ConfigError("trainer.parallel models must share trainer.device")
    setup_process(jobs[0].trainer_cfg)
    data, train_x, labelled = load_training_data(jobs[0].run, jobs[0].device)
    log.info("fused sweep of %d models: %s", len(jobs), variants)
    try:
        summaries = _fit_fused(jobs, data, train_x, labelled, variants, results)
    except BaseException as exc:
        for job in jobs:
            job.close_loggers(exc)
        raise
    for entry, summary in zip(results.data["models"], summaries):
        last = summary["evaluations"][-1] if summary["evaluations"] else {}
        entry.update(status=summary["status"], val_error=last.get("val_error"), test_error=last.get("test_error"),
                     final_train_loss=summary.get("final_train_loss"))
    results.data.update(evaluations=[])
    vals = [e["val_error"] for e in results.data["models"] if e["val_error"] is not None]
    results.update(status="completed", best_val_error=min(vals) if vals else None, seconds=time.time() - started)
    return results.data


def _fit_fused(jobs: list[Job], data, train_x, labelled, variants, results: RunResults) -> list[dict[str, Any]]:
    """Build every model of a fused sweep, train them in lockstep and finish each."""
    trainers = [job.build(data, train_x, labelled) for job in jobs]
    for trainer in trainers[1:]:  # one progress bar for the whole fused sweep
        for cb in trainer.callbacks:
            if isinstance(cb, ProgressBar):
                cb.enabled = False
    results.update(models=[{"dir": f"models/{k}", "overrides": v} for k, v in enumerate(variants)])
    try:
        with stop_on_signals() as stop:
            for trainer in trainers:
                trainer.stop = stop
            Trainer(trainers).fit()
    except BaseException as exc:
        for job in jobs:
            job.record_training()
            job.results.record_failure(exc)
        raise
    for job in jobs:
        job.record_training()
    return [job.finish(data, labelled) for job in jobs]


def run_raw(run: TypedRun, results: RunResults) -> dict[str, Any]:
    """The raw-input baseline: no training, the same evaluation on the inputs themselves."""
    started = time.time()
    device = run.trainer.resolve_device()
    data = dataset_spec(run.dataset).load()
    if not data.labelled:
        raise ConfigError("model=raw only evaluates, and dataset.root has no train_y: add train_y")
    results.data.update(device=str(device), environment=environment.describe(device))
    result = evaluate_features(raw_features(data, device), labels_of(data), run.classifier, device)
    results.add_evaluation({"epoch": 0, "nu": None, "reason": "raw", **result})
    log.info("raw %s: %s val %.4f test %.4f", data.name, params_text(result["params"]), result["val_error"],
             result["test_error"])
    results.update(status="completed", epochs=0, seconds=time.time() - started)
    return results.data
