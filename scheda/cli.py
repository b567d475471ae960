"""Train a denoising / scheduled denoising autoencoder: ``scheda-train [overrides]``, also
``python -m scheda.cli`` and, in a checkout, ``python train.py``.

``--help``, ``--cfg`` and shell completion do not import torch (1.2 s of CPU): the schemas Hydra
composes live beside their torch code, which names torch through scheda.utils.lazy, so torch is
imported where it is first used. ``--help`` and shell completion list every group's options, for
which Hydra copies the whole config store once per group (120 copies, 4 s here):
:func:`scheda.commandline.list_groups_from_one_copy` makes one copy serve them all.
"""

import shutil
import signal
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from scheda.commandline import (conflicting_flags, list_groups_from_one_copy, one_line_composition_errors,
                                unknown_choice)
from scheda.config import COMPONENT_MODULES, CONFIGS, register_configs
from scheda.utils.devices import claim_gpu
from scheda.utils.errors import ConfigError, SchedaError
from scheda.utils.interrupt import quiet_on_a_closed_pipe
from scheda.utils.io import print_line
from scheda.runs.reentry import not_one_run, resume_argv
from scheda.runs.rundir import kept

try:
    register_configs()
except SchedaError as exc:  # a component package that fails to load: one line, before Hydra starts
    sys.exit(f"error: {exc}")
FRESH_RUN_FILES = {".hydra", "train.log", "results.json", ".lock"}  # all a run that failed its checks wrote


@hydra.main(version_base="1.3", config_path=CONFIGS, config_name="train")
def task(cfg: DictConfig) -> float | None:
    """Hydra's task function: one run (a job of a -m sweep). Returns the final validation error
    (for sweepers). A user's error prints as one line; in a multirun it fails only its own job.
    An interrupt exits with 128 + the signal."""
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode == RunMode.MULTIRUN and "joblib" in str(hydra_cfg.launcher.get("_target_", "")).lower():
        claim_gpu()  # before anything starts CUDA: one GPU per local parallel job
        from scheda.training.callbacks import label_console

        label_console(f"[#{hydra_cfg.job.num}]")  # the jobs share the console: whose line (Hydra's "#1 : ...")

    from scheda.utils.interrupt import Interrupted, unanswered_stop
    from scheda.utils.sweep_signals import in_sweep_worker, wait_for_the_sweep
    from scheda.run import run
    from scheda.utils.io import shown_path

    output_dir = Path(hydra_cfg.runtime.output_dir)
    earlier = (output_dir / "results.json").exists()  # an earlier run's record: never removed with a refusal
    try:
        summary = run(cfg, output_dir, label=_label(output_dir, hydra_cfg) if cfg.get("logger") else "")
        late = unanswered_stop()
        if late is not None and hydra_cfg.mode == RunMode.MULTIRUN:  # the job completed: the sweep stops here
            raise Interrupted(late, f"interrupted by {signal.Signals(late).name} as {shown_path(output_dir)} ended: "
                                    f"it completed; the same command goes on with the sweep's other jobs")
    except Interrupted as exc:
        print_line(exc.message)
        if in_sweep_worker():  # a worker that lived on would take the sweep's next job: it waits for the sweep's end
            import logging

            logging.shutdown()
            sys.stderr.flush()
            wait_for_the_sweep(exc.signum, exc.exit_code)
        sys.exit(exc.exit_code)
    except SchedaError as exc:
        if hydra_cfg.mode == RunMode.MULTIRUN:
            raise
        if isinstance(exc, ConfigError) and not cfg.resume and not earlier:
            _remove_failed_run_dir(output_dir)
        print_line(f"error: {exc}")
        sys.exit(1)
    # a fused sweep (trainer.parallel), as the run's plan recorded it (a run completed before the record: its summary's best)
    if (summary.get("plan") or {}).get("sweep", "best_val_error" in summary):
        return summary["best_val_error"]
    read = kept(summary)  # under the rule of training to convergence its best, else its last evaluation
    return read["val_error"] if read else summary.get("final_train_loss")


def _label(output_dir: Path, hydra_cfg) -> str:
    """A sweep job's swept values, which its loggers name its records by (not by its number); a
    job resumed alone (``scheda-train resume=<its directory>``, in its sweep's folder) gets the same,
    so its records stay one run."""
    from scheda.runs.sweep_summary import swept_label

    sweep_dir = Path(hydra_cfg.sweep.dir) if hydra_cfg.mode == RunMode.MULTIRUN else output_dir.parent
    return swept_label(sweep_dir, list(hydra_cfg.overrides.task))


def _fresh(output_dir: Path) -> bool:
    """Whether the directory holds nothing but this refused run's own files (not an earlier
    run's results, which a refused rerun into the same directory must keep)."""
    import json

    if not output_dir.is_dir() or not {p.name for p in output_dir.iterdir()} <= FRESH_RUN_FILES:
        return False
    try:
        results = json.loads((output_dir / "results.json").read_text())
    except FileNotFoundError:
        return True
    except ValueError:
        return False
    return results.get("status") == "failed" and len(results.get("attempts", [])) <= 1


def _remove_failed_run_dir(output_dir: Path) -> None:
    """A run refused by its config checks leaves no directory behind (nothing was trained)."""
    import logging

    if _fresh(output_dir):
        logging.shutdown()  # close train.log before it is removed
        shutil.rmtree(output_dir, ignore_errors=True)
        if output_dir.parent.is_dir() and not any(output_dir.parent.iterdir()):
            output_dir.parent.rmdir()


@quiet_on_a_closed_pipe
def main() -> None:
    wrong = conflicting_flags(sys.argv) or not_one_run(sys.argv) or \
        unknown_choice(sys.argv, [*COMPONENT_MODULES, "experiment"])
    if wrong:  # one line naming the options (Hydra's own: 15 lines with its search path)
        sys.exit(f"error: {wrong}")
    sys.argv = resume_argv(sys.argv)  # resume=RUN: the run's own overrides, then these, into RUN
    list_groups_from_one_copy(sys.argv)
    one_line_composition_errors("train")
    from scheda.utils.interrupt import Interrupted

    try:
        task()
    except Interrupted as exc:  # a sweep stopped across its job processes (scheda.utils.sweep_signals.jobs_stop_first)
        print_line(exc.message)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:  # a Ctrl-C where no run's handler stands (composing, evaluating raw inputs)
        print_line("interrupted by SIGINT: finished runs are kept; run the same command again to go on")
        sys.exit(130)


if __name__ == "__main__":
    main()
