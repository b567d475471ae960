"""Independent random streams derived from the run's ``seed``.

Weight initialisation and training (permutations, corruption masks, per-minibatch nu) draw
from separate generators, each seeded from ``(seed, stream, ...)`` through numpy's
SeedSequence, so the two are not the same sequence of numbers. A continuation
(``init_from``) adds the checkpoint's epoch: its first epoch does not replay the permutation
and masks of the DA it continues, while every continuation of one checkpoint with one seed
(a ScheDA and its controls) shares its stream: common random numbers make their comparison
fairer.
"""

from __future__ import annotations

import numpy as np

STREAMS = {"init": 0, "train": 1}


def derive_seed(seed: int, stream: str, *extra: int) -> int:
    """A 63-bit seed for ``stream`` from the user's ``seed`` and any further integers."""
    entropy = [int(seed) & (2**64 - 1), STREAMS[stream], *(int(e) for e in extra)]
    return int(np.random.SeedSequence(entropy).generate_state(1, dtype=np.uint64)[0] >> 1)


def train_seed(seed: int, start_epoch: int, override: int | None = None) -> int:
    """The training generator's seed: ``override`` (``train_seed`` in the config) when set,
    else derived from ``seed`` and the epoch of the checkpoint the run starts from (0 from
    scratch)."""
    if override is not None:
        return int(override)
    return derive_seed(seed, "train", start_epoch)
