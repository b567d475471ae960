"""Tiny CIFAR-10 arrays with class structure, in the real file layout, with numpy alone: what
the tests and the GPU check's tiny mode (scripts/gpu_check.sh --tiny) train on. Nothing of
scheda is imported here, so a script that needs only the data starts in a fraction of a second."""

from __future__ import annotations

from pathlib import Path

import numpy as np

N_TRAIN, N_TEST = 100, 30


def make_cifar_arrays(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Images with class structure (a per-class mean + noise), labels balanced over 10 classes."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 10
    rng.shuffle(y)
    means = np.random.default_rng(123).integers(30, 220, size=(10, 3072))
    x = np.clip(means[y] + rng.normal(0, 25, size=(n, 3072)), 0, 255).astype(np.uint8)
    return x, y.astype(np.uint8)


def write_cifar_arrays(root: Path, n_train: int = N_TRAIN, n_test: int = N_TEST) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    train_x, train_y = make_cifar_arrays(n_train, 1)
    test_x, test_y = make_cifar_arrays(n_test, 2)
    for name, arr in dict(train_x=train_x, train_y=train_y, test_x=test_x, test_y=test_y).items():
        np.save(root / f"{name}.npy", arr)
    return root


def write_amazon_processed(root: Path, domains=("books", "kitchen"), n: int = 45, words: int = 400,
                           seed: int = 0) -> Path:
    """Amazon reviews in the ``processed_acl`` release's own format under ``root/processed_acl``:
    per domain ``positive.review`` and ``negative.review``, ``n`` lines each of ``token:count``
    unigrams and ``_``-joined bigrams ending in ``#label#:positive|negative``. Words are drawn
    Zipf-like from ``words`` made-up ones, the first twenty carrying the sentiment."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i:04d}" for i in range(words)]
    weights = 1.0 / np.arange(1, words + 1)
    for domain in domains:
        folder = root / "processed_acl" / domain
        folder.mkdir(parents=True, exist_ok=True)
        for label, file in ((1, "positive.review"), (0, "negative.review")):
            lines = []
            for _ in range(n):
                counts: dict[str, int] = {}
                drawn = rng.choice(words - 20, size=int(rng.integers(20, 60)), p=weights[20:] / weights[20:].sum())
                sentiment = rng.choice(10, size=4) + (0 if label else 10)
                for i in [*(drawn + 20), *sentiment]:
                    counts[vocab[i]] = counts.get(vocab[i], 0) + 1
                tokens = [f"{w}:{c}" for w, c in counts.items()] + [f"{vocab[drawn[0] + 20]}_{domain}:1"]
                lines.append(" ".join(tokens) + f" #label#:{'positive' if label else 'negative'}")
            (folder / file).write_text("\n".join(lines) + "\n")
    return root
