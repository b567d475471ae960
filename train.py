"""Train a denoising / scheduled denoising autoencoder: ``python train.py [overrides]``."""

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from scheda.config import register_configs
from scheda.errors import SchedaError
from scheda.run import run

register_configs()


@hydra.main(version_base="1.3", config_path="configs", config_name="train")
def main(cfg: DictConfig) -> float | None:
    """Returns the final validation error (for sweepers). A user's error prints as one line;
    in a multirun it fails only its own job."""
    hydra_cfg = HydraConfig.get()
    try:
        summary = run(cfg, hydra_cfg.runtime.output_dir)
    except SchedaError as exc:
        if hydra_cfg.mode == RunMode.MULTIRUN:
            raise
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    if "best_val_error" in summary:  # a fused sweep (trainer.parallel)
        return summary["best_val_error"]
    evaluations = summary["evaluations"]
    return evaluations[-1]["val_error"] if evaluations else summary.get("final_train_loss")


if __name__ == "__main__":
    main()
