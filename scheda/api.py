"""scheda from Python: train a run, load one, encode with it (``import scheda``).

    run = scheda.train(["model.hidden=100", "schedule=constant"], data=(x, y))
    features = run.encode(x)
    again = scheda.load(run.dir)

``train`` composes the same config ``scheda-train`` would from ``overrides`` (Hydra strings or a
dict), inside Hydra's compose API, which it leaves as it found it (a notebook's next call starts
clean), and runs it in this process (scheda.run.run). ``data`` hands arrays or tensors to the
run instead of a data set: ``(train_x,)``, ``(train_x, train_y)`` or ``(train_x, train_y,
test_x, test_y)``, read as ``dataset=arrays`` reads its files (scheda/data/arrays.py).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from scheda.utils.errors import ConfigError, DataError

DATA_NAMES = ("train_x", "train_y", "test_x", "test_y")


class Run:
    """A finished (or stopped) run: its directory, its results.json, its model and an encoder."""

    def __init__(self, run_dir: str | Path):
        from scheda.training.checkpoint import find_model

        self.dir = Path(run_dir)
        try:
            self.results: dict[str, Any] = json.loads((self.dir / "results.json").read_text())
        except FileNotFoundError:
            self.results = {}
        except (OSError, ValueError):
            raise DataError(f"{self.dir / 'results.json'} cannot be read as JSON (cut short or damaged): its "
                            f"checkpoints are in {self.dir / 'checkpoints'}") from None
        # what the run is, as its plan recorded it (a run from before the record: its models/ folder)
        if (self.results.get("plan") or {}).get("sweep", (self.dir / "models").is_dir()):
            raise ConfigError(f"{self.dir} is a fused sweep: load one of its models, {self.dir}/models/<k>")
        if "config" not in self.results:
            raise ConfigError(f"{self.dir} holds no scheda run (no results.json with its config): "
                              f"pass the run directory a run printed")
        self._checkpoint = find_model(self.dir) if (self.dir / "checkpoints").is_dir() else None
        self._model = None
        self._stack = None

    @property
    def stack(self):
        """The frozen layers below a stacked run (``stack_on``; scheda.training.stack.Stack), or None."""
        below = self.results["config"].get("stack_on")
        if below and self._stack is None:
            from scheda.training.stack import load_stack

            self._stack = load_stack(below)
        return self._stack

    @property
    def n_input(self) -> int:
        """What :meth:`encode` takes: the data set's inputs (a stacked run's: its bottom layer's)."""
        return self.stack.n_input if self.stack is not None else self.model.n_input

    @property
    def model(self):
        """The trained DA (on the CPU, in eval mode) the run reports: under trainer.patience its best
        on validation where a checkpoint was taken then (scheda.training.checkpoint.find_model)."""
        if self._model is None:
            from scheda.training.checkpoint import load_checkpoint, load_model_weights
            from scheda.model.autoencoder import build_model

            if self._checkpoint is None:
                raise ConfigError(f"{self.dir} has no checkpoint: it trained no model (model=raw?)")
            state = load_checkpoint(self._checkpoint)
            config = self.results["config"]
            n_input = state["model"]["W"].shape[1]
            model = build_model(config["model"], n_input)
            load_model_weights(model, state)
            self._model = model.eval()
        return self._model

    @torch.no_grad()
    def encode(self, x, chunk_size: int = 8192):
        """The hidden representation s(W x + b) of rows ``x`` in [0, 1] (uint8 is divided by 255),
        in chunks, without gradients: numpy in, numpy out; a tensor in, a tensor out (on its device).
        A stacked run encodes through the layers below first (its ``stack``)."""
        as_numpy = not isinstance(x, torch.Tensor)
        t = torch.from_numpy(np.asarray(x)) if as_numpy else x
        if t.ndim != 2 or t.shape[1] != self.n_input:
            raise ValueError(f"encode takes rows of {self.n_input} inputs, not an array of shape {tuple(t.shape)}")
        scale = 255.0 if t.dtype == torch.uint8 else 1.0
        if scale == 1.0 and t.numel() and not bool(((t >= 0) & (t <= 1)).all()):
            if bool(t.isnan().any()):
                raise ValueError(f"encode's inputs hold {int(t.isnan().sum())} NaN values: give numbers in [0, 1]")
            raise ValueError(f"encode takes inputs in [0, 1], as the run trained on them (its data divided by "
                             f"dataset.scale; uint8 is divided by 255 here), not values in [{float(t.min()):g}, "
                             f"{float(t.max()):g}]: divide them by their scale first")
        model, stack = self.model.to(t.device), self.stack

        def codes(rows):
            return model.encode(rows if stack is None else stack.encode(rows))
        out = torch.cat([codes(t[i:i + chunk_size].to(torch.float32) / scale)
                         for i in range(0, t.shape[0], chunk_size)]) if t.shape[0] else \
            torch.empty(0, model.n_hidden, device=t.device)
        return out.cpu().numpy() if as_numpy else out

    @property
    def metrics(self) -> dict[str, dict[int, float]]:
        """Every scalar the run logged to its metrics.csv (``logger=[...,csv]``), as
        ``{name: {epoch: value}}``: the curves, without TensorBoard; {} when it logged none."""
        from scheda.runs.rundir import read_metrics

        name = ((self.results.get("config") or {}).get("logger") or {}).get("csv", {}).get("file", "metrics.csv")
        return read_metrics(self.dir / name)

    @property
    def status(self) -> str:
        """results.json's status, read as ``scheda-results`` reads it: "killed" for a run it says is
        running whose process has ended (scheda.runs.rundir.run_status)."""
        from scheda.runs.rundir import run_status

        return run_status(self.results, self.dir)

    def __repr__(self) -> str:
        return f"Run({str(self.dir)!r}, status={self.status!r})"


def load(run_dir: str | Path) -> Run:
    """A run directory as a :class:`Run`."""
    return Run(run_dir)


def _override_list(overrides: Sequence[str] | Mapping[str, Any]) -> list[str]:
    if isinstance(overrides, Mapping):
        return [f"{k}={json.dumps(v) if isinstance(v, (list, dict)) else v}" for k, v in overrides.items()]
    if isinstance(overrides, str):
        raise ConfigError(f"overrides={overrides!r}: give a list of strings (or a dict), not one string")
    return list(overrides)


def train(overrides: Sequence[str] | Mapping[str, Any] = (), data=None, output_dir: str | Path | None = None) -> Run:
    """Train (and evaluate) one run in this process, as ``scheda-train OVERRIDES`` would, into
    ``output_dir`` (default: ``outputs/runs/<date>/<time>``, as the command's); returns its
    :class:`Run`. A run that fails raises its one-line error, its results.json kept."""
    from hydra.core.global_hydra import GlobalHydra

    from scheda.commandline import compose_train
    from scheda.config import register_configs
    from scheda.data import arrays
    from scheda.run import run

    register_configs()
    extra, handed = _override_list(overrides), None
    if data is not None:
        if isinstance(data, (np.ndarray, torch.Tensor)):
            data = (data,)
        if len(data) not in (1, 2, 4):
            raise ConfigError("data: give (train_x,), (train_x, train_y) or (train_x, train_y, test_x, test_y)")
        handed = dict(zip(DATA_NAMES, data))
        extra += ["dataset=arrays", f"dataset.root={arrays.HANDED}scheda.train"]
    if output_dir is None:  # scheda-train's own layout (configs/hydra/default.yaml)
        output_dir = Path("outputs/runs") / datetime.now().strftime("%Y-%m-%d/%H-%M-%S-%f")
    if GlobalHydra.instance().is_initialized():
        raise ConfigError("scheda.train runs inside Hydra's compose API, and Hydra is initialised already "
                          "(inside a Hydra app?): call it from plain Python")
    cfg = compose_train(extra)  # the command line's one line for a misspelt key, a wrong type, an unknown option
    run(cfg, output_dir, data=handed)
    return Run(output_dir)


def train_stack(layers: Sequence[Sequence[str] | Mapping[str, Any]], output_dir: str | Path,
                common: Sequence[str] | Mapping[str, Any] = ()) -> list[Run]:
    """A stacked DA trained greedily in one call: layer ``i`` (its own overrides: units, schedule,
    noise, lr, ..., after ``common``, every layer's) into ``output_dir/layer<i>``, stacked on the
    layer before (``stack_on``; scheda.training.stack), bottom first; returns each layer's
    :class:`Run`. Called again, a finished layer with the same config is read, a stopped one
    resumes, a changed one is refused as a run is (scheda.runs.reentry)."""
    if isinstance(layers, (str, Mapping)) or not layers:
        raise ConfigError("layers: give one list of overrides per layer, bottom first (at least one)")
    runs: list[Run] = []
    for i, layer in enumerate(layers, 1):
        own = _override_list(layer)
        if any(o.lstrip("+~").partition("=")[0] == "stack_on" for o in own):
            raise ConfigError(f"layer {i} sets stack_on: train_stack stacks each layer on the one before it (give "
                              f"the first layer's own run as stack_on in common to build on a finished run)")
        below = [f"stack_on={runs[-1].dir}"] if runs else []
        runs.append(train([*_override_list(common), *own, *below], output_dir=Path(output_dir) / f"layer{i}"))
    return runs
