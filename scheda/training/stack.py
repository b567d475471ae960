"""A run stacked on another (``stack_on=<run>``): a stacked denoising autoencoder trained greedily,
one layer a run (Vincent et al. 2010). The layers below are frozen: each is the model its run
reports (under the patience rule its best on validation, scheda.training.checkpoint.find_model),
read from its directory and, where that run was itself stacked, from the runs below it. The run's
data set is encoded through them once, on the run's device, before it trains: the layer then
trains, is evaluated and exported as a one-layer DA whose inputs are the layer below's clean
codes (in [0, 1], sigmoid units), with its own schedule, noise (applied to its own input), learning
rate and patience, and resumes as any run does. ``scheda.load(run).encode(x)`` encodes through the
whole stack.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheda.data import Splits
from scheda.model.autoencoder import build_model
from scheda.runs.rundir import read_results
from scheda.training.checkpoint import find_model, load_checkpoint, load_model_weights
from scheda.utils.errors import ConfigError
from scheda.utils.io import shown_path
from scheda.utils.lazy import lazy

torch = lazy("torch", globals())
log = logging.getLogger(__name__)
MAX_LAYERS = 64  # a stack deeper than this is a loop of stack_on's (a run stacked on itself)


@dataclass(frozen=True)
class Stack:
    """The frozen layers below a run, bottom first: each one's run directory and model (on the CPU,
    in eval mode)."""

    runs: tuple[Path, ...]
    layers: tuple[Any, ...]  # DenoisingAutoencoder

    @property
    def n_input(self) -> int:
        """What the bottom layer takes: the data set's inputs."""
        return self.layers[0].n_input

    @property
    def n_output(self) -> int:
        """What the top layer gives: the inputs of the layer stacked on it."""
        return self.layers[-1].n_hidden

    def describe(self) -> str:
        return " -> ".join([str(self.n_input), *(str(layer.n_hidden) for layer in self.layers)])

    def encode(self, x: torch.Tensor, chunk_size: int = 8192) -> torch.Tensor:
        """Rows ``x`` in [0, 1] through every layer (no noise), in chunks, on ``x``'s device."""
        return self.encode_layers(x, chunk_size, every=False)

    @torch.no_grad()
    def encode_layers(self, x: torch.Tensor, chunk_size: int = 8192, every: bool = True) -> torch.Tensor:
        """Rows ``x`` through every layer; ``every``: each layer's codes concatenated (bottom first),
        else the top's."""
        layers = [layer.to(x.device) for layer in self.layers]
        out = []
        for i in range(0, x.shape[0], chunk_size):
            codes = [x[i:i + chunk_size]]
            for layer in layers:
                codes.append(layer.encode(codes[-1]))
            out.append(torch.cat(codes[1:], dim=1) if every else codes[-1])
        width = sum(layer.n_hidden for layer in self.layers) if every else self.n_output
        return torch.cat(out) if out else torch.empty(0, width, device=x.device)

    def splits(self, data: Splits, device: torch.device | str, keep_inputs: bool = False,
               keep_codes: bool = False) -> Splits:
        """``data`` encoded through the stack, each split once on ``device``: what the layer on top
        trains on, is evaluated and exported with (no image shape or vocabulary: its inputs are codes);
        ``keep_inputs``: the data themselves as its ``inputs`` too (what fine-tuning the stack reads);
        ``keep_codes``: every layer's codes of the labelled splits as its ``below`` (what
        ``evaluate.layers=all`` evaluates beside the layer's own)."""
        if data.n_input != self.n_input:
            raise ConfigError(f"stack_on={shown_path(self.runs[0])} starts from {self.n_input} inputs, and "
                              f"dataset={data.name} has {data.n_input}: stack on a run of this data set")

        def encoded(x):
            return None if x is None else self.encode(data._dense(x, device)).cpu().numpy()

        below = {split: self.encode_layers(data.tensor(split, device))  # kept on the device: every evaluation reads them
                 for split in ("train", "val", "test")} if keep_codes else None
        return dataclasses.replace(data, train_x=encoded(data.train_x), val_x=encoded(data.val_x),
                                   test_x=encoded(data.test_x), unlabeled_x=encoded(data.unlabeled_x),
                                   max_value=1.0, image_shape=None, vocabulary=None,
                                   inputs=data if keep_inputs else None, below=below)


def _layer(run_dir: Path) -> tuple[Any, dict[str, Any]]:
    """The model a finished run reports, and its recorded config."""
    results = read_results(run_dir)
    if not results or "config" not in results:
        raise ConfigError(f"stack_on={shown_path(run_dir)} holds no scheda run (no results.json with its config): "
                          f"give the directory of a finished DA or ScheDA run")
    if results.get("status") != "completed":
        raise ConfigError(f"stack_on={shown_path(run_dir)} is {results.get('status')}, not completed: finish it "
                          f"first (resume={shown_path(run_dir)}), the layer below is read at its reported model")
    config = results["config"]
    if not (config.get("model") or {}).get("trains", True) or not (run_dir / "checkpoints").is_dir():
        raise ConfigError(f"stack_on={shown_path(run_dir)} trained no model (model=raw?): stack on a DA or ScheDA run")
    state = load_checkpoint(find_model(run_dir))
    model = build_model(config["model"], int(state["model"]["W"].shape[1]))
    load_model_weights(model, state)
    return model.eval(), config


def load_stack(run: str | Path) -> Stack:
    """The frozen stack under a run stacked on ``run``: that run's model and, where it was stacked
    itself, every layer below it, bottom first; each layer's inputs checked against the codes of the
    one below (one line naming both runs where they do not fit)."""
    runs, layers, seen = [], [], set()
    path: Path | None = Path(run).expanduser()
    while path is not None:
        if not path.is_dir():
            raise ConfigError(f"stack_on={path}: no such run directory: give the directory of a finished DA or "
                              f"ScheDA run")
        if path.resolve() in seen or len(runs) >= MAX_LAYERS:
            raise ConfigError(f"stack_on={shown_path(path)} is stacked on itself (its stack_on leads back to it)")
        seen.add(path.resolve())
        model, config = _layer(path)
        runs.append(path)
        layers.append(model)
        below = config.get("stack_on")
        path = Path(below).expanduser() if below else None
    runs.reverse()
    layers.reverse()
    for (low_run, low), (high_run, high) in zip(zip(runs, layers), zip(runs[1:], layers[1:])):
        if high.n_input != low.n_hidden:
            raise ConfigError(f"{shown_path(high_run)} takes {high.n_input} inputs, and the run it is stacked on, "
                              f"{shown_path(low_run)}, gives {low.n_hidden}: its stack_on was changed after it trained")
    stack = Stack(tuple(runs), tuple(layers))
    log.info("stacked on %s: layers %s", shown_path(runs[-1]), stack.describe())
    return stack
