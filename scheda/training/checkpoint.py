"""Checkpoints: everything needed to continue a run exactly (model, optimizer, RNG, schedule
position, epoch), written atomically so that a kill or a full disk never corrupts the last one.
"""

from __future__ import annotations

import json
import logging

import re
from pathlib import Path
from typing import Any


from scheda.utils.errors import CheckpointError
from scheda.runs.rundir import CAP, CHECKPOINT_RE, PATIENCE, checkpoint_name, kept, read_results
from scheda.utils.io import atomic_write
from scheda.utils.lazy import lazy

torch = lazy("torch", globals())
log = logging.getLogger(__name__)

FORMAT_VERSION = 1


def _position(match: re.Match) -> tuple[int, int]:
    return int(match.group(1)), int(match.group(2) or 0)


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> Path:
    state = {"format_version": FORMAT_VERSION, **state}
    return atomic_write(path, lambda f: torch.save(state, f))


def _in_order(folder: Path) -> list[Path]:
    """The checkpoints of a folder, oldest first (by epoch, then minibatch)."""
    found = sorted((_position(m), p) for p in folder.iterdir() if (m := CHECKPOINT_RE.match(p.name)))
    return [p for _, p in found]


def prune_checkpoints(folder: str | Path, keep: int, best_epoch: int | None = None) -> list[Path]:
    """``trainer.keep_checkpoints``: remove all but the newest ``keep`` checkpoints of ``folder``
    and the one taken at ``best_epoch`` (the best validation evaluation: the model a run under the
    patience rule reports, and :func:`find_model` reads); returns those removed."""
    found = _in_order(Path(folder))
    kept_names = {p.name for p in found[-keep:]}
    if best_epoch is not None:
        kept_names.add(checkpoint_name(best_epoch))
    removed = [p for p in found if p.name not in kept_names]
    for p in removed:
        p.unlink(missing_ok=True)
    return removed


def find_checkpoint(path: str | Path) -> Path:
    """``path`` itself if it is a file; in a run or checkpoint directory, its latest checkpoint."""
    path = Path(path).expanduser()
    if path.is_file():
        return path
    if path.is_dir():
        folder = path / "checkpoints" if (path / "checkpoints").is_dir() else path
        found = _in_order(folder)
        if found:
            return found[-1]
        models = sorted(int(p.name) for p in (path / "models").glob("*") if p.name.isdigit())
        if models:  # a fused sweep's run: each model has its own checkpoints
            raise CheckpointError(f"{path} is a fused sweep of {len(models)} models, each with its own checkpoints: "
                                  f"pass one of them, {path / 'models'}/{models[0]} .. {models[-1]}")
        raise CheckpointError(f"no checkpoint (epoch_*.pt) in {folder}: pass a checkpoint file or a run directory")
    raise CheckpointError(f"checkpoint {path} does not exist: pass a checkpoint file or a run directory")


def find_model(path: str | Path) -> Path:
    """The checkpoint of the model a run reports (scheda-export, the analysis tools, ``scheda.load``,
    ``init_from``): a file as given; in a run directory under the rule of training to convergence,
    the checkpoint of its kept evaluation (its best on validation: the newest checkpoint is the
    patience past it) where one was taken at that epoch, else the newest (:func:`find_checkpoint`,
    which a resume continues), saying so."""
    newest = find_checkpoint(path)
    if Path(path).expanduser().is_file():
        return newest
    run_dir = newest.parent.parent
    results = read_results(run_dir)
    read = kept(results) if results and results.get("stopped_by") in (PATIENCE, CAP) else None
    if read is None:
        return newest
    chosen = newest.parent / checkpoint_name(read["epoch"])
    if chosen.exists():
        return chosen
    log.warning("%s reports its model at epoch %d, where no checkpoint was taken (trainer.checkpoint_every): "
                "using its newest, %s", run_dir, read["epoch"], newest.name)
    return newest


def find_checkpoint_dir(path: str | Path) -> Path:
    """The checkpoints/ folder of a run directory, or the folder a checkpoint file is in."""
    path = Path(path).expanduser()
    if path.is_file():
        return path.parent
    if (path / "checkpoints").is_dir():
        return path / "checkpoints"
    if path.is_dir():
        return path
    raise CheckpointError(f"checkpoint {path} does not exist: pass a checkpoint file or a run directory")


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """A checkpoint's state (a run directory: its newest); weights exported by ``scheda-export``
    (``.safetensors``) load as a checkpoint of their weights and epoch, for ``init_from``."""
    if str(path).endswith(".safetensors"):
        return load_exported(path, map_location)
    file = find_checkpoint(path)
    try:
        state = torch.load(file, map_location=map_location, weights_only=True)
    except Exception as exc:
        raise CheckpointError(f"{file} is corrupt or not a scheda checkpoint ({type(exc).__name__}); "
                              f"pass another checkpoint of the run") from None
    if not isinstance(state, dict) or state.get("format_version") != FORMAT_VERSION or "model" not in state:
        raise CheckpointError(f"{file} is not a scheda checkpoint (format {FORMAT_VERSION})")
    state["path"] = str(file)
    return state


def load_exported(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Weights written by ``scheda-export --weights`` as a checkpoint's state: W, b, b' and the
    epoch they were taken at (from the file's metadata)."""
    from safetensors import SafetensorError, safe_open

    file = Path(path).expanduser()
    try:
        with safe_open(str(file), framework="pt", device=str(map_location)) as f:
            model = {key: f.get_tensor(key) for key in f.keys()}
            meta = f.metadata() or {}
    except (OSError, SafetensorError) as exc:
        raise CheckpointError(f"{file} cannot be read as exported weights ({type(exc).__name__}: {exc}); "
                              f"export them again with scheda-export RUN --weights {file.name}") from None
    if not {"W", "b", "b_prime"} <= set(model):
        raise CheckpointError(f"{file} holds {sorted(model)}, not a DA's W, b, b_prime: export them with scheda-export")
    return {"model": model, "epoch": int(meta.get("epoch", 0)), "path": str(file), "format_version": FORMAT_VERSION}


def load_model_weights(model: torch.nn.Module, state: dict[str, Any]) -> None:
    """Copy a checkpoint's weights into ``model``, with a clear error when shapes differ."""
    own = model.state_dict()
    theirs = state["model"]
    if set(own) != set(theirs):
        raise CheckpointError(f"{state['path']} holds parameters {sorted(theirs)}, the model has {sorted(own)}")
    for key, value in theirs.items():
        if value.shape != own[key].shape:
            raise CheckpointError(
                f"{state['path']} has {key} of shape {tuple(value.shape)} but the model's is "
                f"{tuple(own[key].shape)}: set model.hidden (and the dataset) to match the checkpoint"
            )
    model.load_state_dict(theirs)


def load_run_model(path: str | Path, device: str | torch.device = "cpu"):
    """The config, trained model and checkpoint state of a run (a run directory: the model it
    reports, :func:`find_model`; or one of its checkpoints): what the analysis scripts read."""
    from omegaconf import OmegaConf

    from scheda.data import input_size
    from scheda.model import build_model

    state = load_checkpoint(find_model(path))
    run_dir = Path(state["path"]).parent.parent
    config_file = run_dir / ".hydra" / "config.yaml"
    if not config_file.exists():  # a model of a fused sweep keeps its own config.yaml
        config_file = run_dir / "config.yaml"
    if config_file.exists():
        cfg = OmegaConf.load(config_file)
    else:  # a run of scheda.train (Python) has no Hydra folder: its results.json holds the config
        try:
            cfg = OmegaConf.create(json.loads((run_dir / "results.json").read_text())["config"])
        except (OSError, ValueError, KeyError):
            raise CheckpointError(f"{run_dir} has neither .hydra/config.yaml nor a results.json with the run's "
                                  f"config: pass a checkpoint inside a scheda run directory") from None
    # The input size is the saved W's (a DA, any composite): weights need no data, and a run of
    # arrays handed to scheda.train has none on disk. A model without W asks its data set.
    saved_w = state["model"].get("W")
    model = build_model(cfg.model, saved_w.shape[1] if saved_w is not None else input_size(cfg.dataset))
    load_model_weights(model, state)
    return cfg, model.to(device), state
