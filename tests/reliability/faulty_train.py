"""``python train.py`` with faults injected, for the kill/resume tests: ``main()`` (forked like
the other commands, helpers.start_faulty_train) or ``python tests/reliability/faulty_train.py ...``.

Environment:
  SCHEDA_FAULT_EPOCH_SLEEP=S   sleep S seconds after every epoch (so a kill lands mid-run);
  SCHEDA_FAULT_HANG_WRITE=NAME while writing the checkpoint file NAME, after its bytes are in
                               the temporary file, create NAME.hanging beside it and hang.
  SCHEDA_FAULT_EVAL_SLEEP=S    after every evaluation, touch ``evaluating`` in the working directory
                               and sleep S seconds (so a signal lands during an evaluation);
  SCHEDA_FAULT_FINETUNE_SLEEP=S sleep S seconds after every fine-tuning epoch;
  SCHEDA_FAULT_USR2_HANDLER=F  a scheduler's SIGUSR2 handler, as submitit installs one: it
                               writes the checkpoints that exist under the working directory
                               to F, then exits with status 3 (submitit requeues and exits).
"""

import os
import signal
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def inject_faults() -> None:
    """The faults the environment asks for, patched into this process's training code (a fork's
    own copy: the process it was forked from keeps the real code)."""
    import scheda.training.checkpoint
    import scheda.training.trainer

    sleep = float(os.environ.get("SCHEDA_FAULT_EPOCH_SLEEP", "0"))
    if sleep:
        run_epoch = scheda.training.trainer.Trainer.run_epoch

        def slow_epoch(self, active):
            run_epoch(self, active)
            time.sleep(sleep)

        scheda.training.trainer.Trainer.run_epoch = slow_epoch

    eval_sleep = float(os.environ.get("SCHEDA_FAULT_EVAL_SLEEP", "0"))
    if eval_sleep:
        import scheda.evaluation.evaluate

        evaluate = scheda.evaluation.evaluate.EvaluationCallback.evaluate

        def slow_evaluation(self, *args, **kwargs):
            entry = evaluate(self, *args, **kwargs)
            Path("evaluating").touch()
            time.sleep(eval_sleep)
            return entry

        scheda.evaluation.evaluate.EvaluationCallback.evaluate = slow_evaluation

    finetune_sleep = float(os.environ.get("SCHEDA_FAULT_FINETUNE_SLEEP", "0"))
    if finetune_sleep:
        import scheda.training.finetune

        tuner_epoch = scheda.training.finetune.Finetuner.epoch

        def slow_finetune_epoch(self, active, step):
            tuner_epoch(self, active, step)
            time.sleep(finetune_sleep)

        scheda.training.finetune.Finetuner.epoch = slow_finetune_epoch

    hang = os.environ.get("SCHEDA_FAULT_HANG_WRITE")
    if hang:
        atomic_write = scheda.training.checkpoint.atomic_write

        def hanging_write(path, write):
            def write_then_hang(f):
                write(f)
                if Path(path).name == hang:
                    f.flush()
                    Path(str(path) + ".hanging").touch()
                    time.sleep(600)

            return atomic_write(path, write_then_hang)

        scheda.training.checkpoint.atomic_write = hanging_write

    usr2 = os.environ.get("SCHEDA_FAULT_USR2_HANDLER")
    if usr2:
        def scheduler(signum, frame):
            Path(usr2).write_text("\n".join(sorted(p.name for p in Path.cwd().glob("**/checkpoints/*.pt"))))
            os._exit(3)

        signal.signal(signal.SIGUSR2, scheduler)  # before the run's own handler, which hands it on


def main() -> None:
    inject_faults()
    from scheda.cli import main as train

    train()


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.argv[0] = str(REPO / "train.py")
    main()
