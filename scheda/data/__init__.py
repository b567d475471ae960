"""Data modules: each loads one data set into labelled train/validation/test splits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol

import numpy as np

from scheda.utils.lazy import lazy

torch = lazy("torch", globals())


@dataclass
class Splits:
    """A data set split for the paper's protocol, as uint8/float arrays on the host.

    Stored values are divided by ``max_value`` to give the model's [0, 1] inputs (255 for pixels).
    """

    name: str
    train_x: np.ndarray
    train_y: np.ndarray
    val_x: np.ndarray
    val_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    max_value: float = 1.0
    image_shape: tuple[int, int, int] | None = None
    unlabeled_x: Any = None  # extra inputs for the autoencoder only (no labels)
    vocabulary: list[str] | None = None  # names of the input dimensions, for text
    labelled: bool = True  # False: no labels at all (the run trains and skips evaluation)
    # Each split's rows in the data set's own files (train/val from its training rows, test from
    # its test rows or, carved, its training rows): what an export records beside the features.
    indices: dict[str, np.ndarray] | None = None
    # A stacked run's data are the codes of the layers below (scheda.training.stack): the data set's
    # own splits, kept where fine-tuning the whole stack reads them; None otherwise.
    inputs: "Splits | None" = None
    # ... and, where its evaluation reads every layer (evaluate.layers=all), those layers' codes of each
    # labelled split concatenated, bottom first (the last of them: the split's own rows), on the run's device;
    # None otherwise.
    below: "dict[str, torch.Tensor] | None" = None

    @property
    def n_input(self) -> int:
        return self.train_x.shape[1]

    def tensor(self, split: str, device: torch.device | str) -> torch.Tensor:
        """One split's inputs as a single dense float32 tensor in [0, 1] on ``device``."""
        return self._dense(getattr(self, f"{split}_x"), device)

    def autoencoder_tensor(self, device: torch.device | str) -> torch.Tensor:
        """What the autoencoder trains on: the training split plus any unlabelled inputs."""
        if self.unlabeled_x is None or self.unlabeled_x.shape[0] == 0:
            return self.tensor("train", device)
        return torch.cat([self.tensor("train", device), self._dense(self.unlabeled_x, device)])

    def on_device(self, device: torch.device | str) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The autoencoder's training tensor and the labelled splits (``train``, ``val``, ``test``)
        on ``device``, each made once: every evaluation and fine-tuning of a run shares them (the
        labelled train split is the training tensor itself when there are no unlabelled inputs)."""
        train_x = self.autoencoder_tensor(device)
        return train_x, {"train": train_x if self.unlabeled_x is None else self.tensor("train", device),
                         "val": self.tensor("val", device), "test": self.tensor("test", device)}

    def _dense(self, x, device) -> torch.Tensor:
        if hasattr(x, "tocsr"):  # scipy sparse: scatter the non-zeros into a dense tensor on the device
            x = x.tocsr()
            rows = np.repeat(np.arange(x.shape[0]), np.diff(x.indptr))
            out = torch.zeros(x.shape, dtype=torch.float32, device=device)
            out[torch.from_numpy(rows).to(device), torch.from_numpy(x.indices.astype(np.int64)).to(device)] = \
                torch.from_numpy(x.data.astype(np.float32)).to(device)
        else:
            # a memory-mapped file is read-only: read it into memory (torch wants a writable array)
            x = np.ascontiguousarray(x) if x.flags.writeable else np.array(x)
            out = torch.from_numpy(x).to(device).to(torch.float32)
        if self.max_value != 1.0:
            out.div_(self.max_value)
        return out


class DataSet(Protocol):
    """What a data set's config schema (registered in the ``dataset`` group) provides: its
    input size and image shape known before loading (to build the model and its figures), and
    ``load()``, the labelled splits in [0, 1] (with any unlabelled inputs for the autoencoder)."""

    name: str
    root: str
    image_shape: tuple[int, int, int] | None

    @property
    def n_input(self) -> int: ...

    def load(self) -> Splits: ...


def dataset_spec(config: Mapping) -> DataSet:
    """The checked schema object of ``config`` (the dataset group)."""
    from scheda.config import typed

    return typed("dataset", config)


def input_size(config: Mapping) -> int:
    """The input dimension a config implies, known before the data are loaded."""
    return dataset_spec(config).n_input


def load_dataset(config: Mapping) -> Splits:
    return dataset_spec(config).load()
