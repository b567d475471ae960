"""Fine-tuning as evaluation sees it (the paper's supplementary material): the frozen-feature
evaluation it starts from (the baseline, and the output layer's starting weights, kept beside the
checkpoints so a resume does not evaluate again), the fine-tuning itself (scheda.training.finetune,
a training recipe), and what it reports: the test error at the (learning rate, epoch) of lowest
validation error, with the frozen features' beside it.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch

from scheda.data import Splits
from scheda.evaluation.classifiers import LinearModel
from scheda.loggers.base import MetricLogger
from scheda.model.autoencoder import DenoisingAutoencoder
from scheda.runs.rundir import FINETUNE_INIT, RunResults, params_of
from scheda.training.checkpoint import load_checkpoint, save_checkpoint
from scheda.training.finetune import FinetunePlan, Finetuner
from scheda.utils.interrupt import NEVER, Interrupted, StopRequest

log = logging.getLogger(__name__)
INIT = FINETUNE_INIT  # the frozen-feature classifier fine-tuning starts from, so a resume need not evaluate again


def _save_init(output_dir: Path, init, evaluation: dict[str, Any]) -> None:
    """The frozen-feature classifier fine-tuning starts from, beside its checkpoints, with the
    evaluation that chose it (a stand-alone fine-tuning has no training checkpoint to hold it)."""
    save_checkpoint(output_dir / "checkpoints" / INIT, {
        "model": {}, "kind": "finetune_init", "epoch": evaluation["epoch"], "W": torch.as_tensor(init.W),
        "b": torch.as_tensor(init.b), "classes": torch.as_tensor(init.classes), "evaluation": json.dumps(evaluation)})


def _load_init(resume_dir: Path | None, results: RunResults) -> LinearModel | None:
    """A resumed run's saved classifier, when it is the one of its last evaluation (None: evaluate).
    A stand-alone fine-tuning's evaluation comes back from the same file."""
    path = None if resume_dir is None else Path(resume_dir) / INIT  # resume_dir: the run's checkpoints folder
    if path is None or not path.exists():
        return None
    state = load_checkpoint(path)
    if not results.evaluations and "evaluation" in state:  # no training checkpoint restored it
        results.add_evaluation(json.loads(state["evaluation"]))
    if not results.evaluations or state.get("epoch") != results.evaluations[-1]["epoch"]:
        return None
    log.info("fine-tuning starts from the classifier of epoch %d's evaluation (%s)", state["epoch"], path)
    return LinearModel(state["W"].numpy(), state["b"].numpy(), state["classes"].numpy())


def finetune_encoder(plan: FinetunePlan, model: DenoisingAutoencoder, data: Splits, labelled: dict[str, torch.Tensor],
                     output_dir: Path, *, evaluation=None, resume_dir: Path | None = None,
                     loggers: MetricLogger | None = None, epoch: int = 0, stop: StopRequest = NEVER) -> dict:
    """Fine-tune ``model``'s encoder as its run's plan decided (``plan``), after its training (a run's last step): the frozen-feature
    evaluation (``evaluation``, scheda.evaluation.evaluate.EvaluationCallback; run now at ``epoch``
    if training did not end with one) gives the baseline and the output layer's starting weights;
    a run resumed from ``resume_dir`` picks up a fine-tuning cut short there."""
    frozen, init = None, None
    if evaluation is not None:
        saved = _load_init(resume_dir, evaluation.results)
        if saved is not None:  # evaluated before an interrupt: not again
            init = saved
        else:
            if evaluation.last_model is None or not evaluation.results.evaluations:
                evaluation.evaluate(model, plan.device, epoch=epoch, nu=None, reason="before_finetune")
            init = evaluation.last_model
            _save_init(output_dir, init, evaluation.results.evaluations[-1])
        last = evaluation.results.evaluations[-1]
        frozen = {"epoch": last["epoch"], "params": params_of(last), "val_error": last["val_error"],
                  "test_error": last["test_error"]}
    if stop.requested:  # a signal during the evaluation: its result is kept, fine-tuning not begun
        raise Interrupted(stop.signum, f"{stop.name} before fine-tuning", forward=stop.forward())
    tuner = Finetuner(plan, model, data, labelled, output_dir, init=init, loggers=loggers, stop=stop)
    if resume_dir is not None:
        tuner.load(resume_dir)
    result = tuner.run()
    result["frozen"] = frozen
    chosen = result["chosen"]
    log.info("fine-tuned: lr=%g epoch %d val %.4f test %.4f (frozen features: %s)", chosen["lr"],
             chosen["best_epoch"], chosen["val_error"], chosen["test_error"],
             f"test {frozen['test_error']:.4f}" if frozen else "not evaluated")
    return result
