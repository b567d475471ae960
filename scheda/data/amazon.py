"""Amazon product reviews (Blitzer, Dredze & Pereira, 2007), as in the paper's supplementary
material: each review a binary presence vector over the ``vocab_size`` (3000) most frequent
words, positive (1) vs negative (0).

``dataset.root`` holds one or both releases, each with one folder per domain holding
``positive.review``, ``negative.review`` and optionally ``unlabeled.review``:

* ``processed_acl``: one review per line, ``token:count ...`` with a final
  ``#label#:positive|negative``; unigram tokens are used (bigrams contain ``_``).
* ``sorted_data_acl`` (or ``unprocessed``): pseudo-XML ``<review>`` blocks (not valid XML:
  bare ``&``); the text is ``<title>`` + ``<review_text>``, lower-cased, tokenised as
  maximal runs of letters, digits and inner apostrophes (``don't``, ``4``).

A domain name matches a folder of that name or one starting with ``name_`` (``kitchen``
matches ``kitchen_&_housewares``). Word counts for the vocabulary come from the autoencoder's
training data only (labelled train + unlabelled), most frequent first, ties alphabetical.
The matrices are kept sparse (CSR) and densified on the device.
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Iterator, List, Mapping, Optional

import numpy as np

from scheda.config import Component, register
from scheda.data import Splits
from scheda.utils.errors import ConfigError, DataError

log = logging.getLogger(__name__)

RELEASES = ("processed_acl", "sorted_data_acl", "unprocessed")
LABEL_FILES = {"positive.review": 1, "negative.review": 0}
UNLABELED_FILE = "unlabeled.review"
TOKEN_RE = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")
FIELD_RE = re.compile(r"<(rating|title|review_text)>\s*(.*?)\s*</\1>", re.S)


def tokenize(text: str) -> list[str]:
    return TOKEN_RE.findall(text.lower())


def _where(root: Path) -> str:
    return (f"put the Blitzer et al. (2007) Multi-Domain Sentiment Dataset (from its authors' page, e.g. "
            f"processed_acl.tar.gz, unpacked: "
            f"{' or '.join(RELEASES[:2])}/<domain>/positive.review, negative.review[, unlabeled.review]) in "
            f"{root}, or set SCHEDA_DATA to a data root that holds amazon/")


def read_processed(path: Path, labelled: bool) -> Iterator[tuple[Counter, int | None]]:
    """(unigram counts, label) per line of a processed_acl file."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, start=1):
            line = line.strip()
            if not line:
                continue
            counts: Counter = Counter()
            label = None
            for item in line.split():
                token, sep, count = item.rpartition(":")
                if not sep or not token:
                    raise DataError(f"{path}:{lineno}: '{item[:40]}' is not token:count; the file is malformed")
                if token == "#label#":
                    if not labelled:  # unlabeled.review may carry labels; they are not used
                        continue
                    if count not in ("positive", "negative"):
                        raise DataError(f"{path}:{lineno}: label '{count[:20]}' is not positive/negative")
                    label = 1 if count == "positive" else 0
                    continue
                if not count.isdigit():
                    raise DataError(f"{path}:{lineno}: count '{count[:20]}' of '{token[:30]}' is not an integer")
                if "_" not in token:
                    counts[token] += int(count)
            if labelled and label is None:
                raise DataError(f"{path}:{lineno}: no #label#: field; the line is truncated or malformed")
            yield counts, label


def read_reviews(path: Path, labelled: bool) -> Iterator[tuple[Counter, int | None]]:
    """(word counts, label from the rating) per <review> block of a sorted_data_acl file."""
    text = path.read_text(encoding="utf-8", errors="replace")
    pos = 0
    while True:
        start = text.find("<review>", pos)
        if start < 0:
            if text.find("</review>", pos) >= 0:
                raise DataError(f"{path}:{text.count(chr(10), 0, pos) + 1}: '</review>' without '<review>'")
            return
        end = text.find("</review>", start)
        lineno = text.count("\n", 0, start) + 1
        nxt = text.find("<review>", start + 8)
        if end < 0 or (0 <= nxt < end):
            raise DataError(f"{path}:{lineno}: <review> block is not closed; the file is truncated or malformed")
        fields = {k: v for k, v in FIELD_RE.findall(text[start:end])}
        if "review_text" not in fields:
            raise DataError(f"{path}:{lineno}: <review> block has no <review_text>")
        label = None
        if labelled:
            try:
                rating = float(fields["rating"])
            except (KeyError, ValueError):
                raise DataError(f"{path}:{lineno}: <review> block has no valid <rating>") from None
            label = 1 if rating > 3 else 0
        yield Counter(tokenize(fields.get("title", "") + " " + fields["review_text"])), label
        pos = end + len("</review>")


def find_release(root: Path, release: str) -> tuple[str, Path]:
    if release != "auto":
        if not (root / release).is_dir():
            raise DataError(f"{root / release} not found: {_where(root)}")
        return release, root / release
    for name in RELEASES:
        if (root / name).is_dir():
            return name, root / name
    raise DataError(f"Amazon reviews not found in {root}: {_where(root)}")


def domain_folders(folder: Path, domains) -> dict[str, Path]:
    found = sorted(p for p in folder.iterdir() if p.is_dir())
    if domains is None:
        chosen = {p.name: p for p in found}
    else:
        chosen = {}
        for name in domains:
            match = [p for p in found if p.name == name or p.name.startswith(name + "_")]
            if not match:
                raise DataError(f"domain '{name}' not found in {folder} (has: {', '.join(p.name for p in found)}); "
                                f"fix dataset.domains")
            chosen[name] = match[0]
    if not chosen:
        raise DataError(f"no domain folders in {folder}: {_where(folder.parent)}")
    return chosen


def read_domains(config: Mapping) -> tuple[list[Counter], np.ndarray, np.ndarray, list[Counter], str]:
    """All labelled reviews (counts, label, domain index) and the unlabelled ones."""
    root = Path(str(config["root"])).expanduser().absolute()
    release, folder = find_release(root, config["release"])
    reader = read_processed if release == "processed_acl" else read_reviews
    docs, labels, domains, unlabeled = [], [], [], []
    for d, (name, path) in enumerate(domain_folders(folder, config["domains"]).items()):
        before = len(docs)
        for file, expected in LABEL_FILES.items():
            if not (path / file).exists():
                raise DataError(f"{path / file} is missing: each domain needs positive.review and negative.review")
            for counts, label in reader(path / file, labelled=True):
                docs.append(counts)
                labels.append(expected if release != "processed_acl" or label is None else label)
                domains.append(d)
        if len(docs) == before:
            raise DataError(f"{path} holds no reviews: an empty domain is an error, remove it from dataset.domains")
        if config["use_unlabeled"] and (path / UNLABELED_FILE).exists():
            unlabeled.extend(c for c, _ in reader(path / UNLABELED_FILE, labelled=False))
    return docs, np.asarray(labels, np.int64), np.asarray(domains, np.int64), unlabeled, release


def _count(value, total: int, key: str) -> int:
    if isinstance(value, float) and 0 < value < 1:
        return int(round(value * total))
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= total:
        return value
    raise ConfigError(f"dataset.{key}={value!r} must be a fraction in (0, 1) or a count in 1..{total}")


def balanced_split(labels: np.ndarray, domains: np.ndarray, sizes: list[int], seed: int) -> list[np.ndarray]:
    """Disjoint index sets of the given sizes, each balanced over (domain, label) groups."""
    rng = np.random.default_rng(seed)
    groups = [np.flatnonzero((labels == lab) & (domains == dom))
              for dom in np.unique(domains) for lab in np.unique(labels)]
    groups = [rng.permutation(g) for g in groups if len(g)]
    parts: list[list[int]] = [[] for _ in sizes]
    taken = [0] * len(groups)
    for s, size in enumerate(sizes):
        # Largest-remainder allocation of this split over what is left of each group, in proportion:
        # every split gets exactly its size (proportions of the whole group would leave the last
        # split short where the earlier ones rounded up in the same group).
        left = [len(g) - t for g, t in zip(groups, taken)]
        want = [size * n / sum(left) for n in left]
        alloc = [int(math.floor(w)) for w in want]
        for i in sorted(range(len(groups)), key=lambda i: want[i] - alloc[i], reverse=True)[:size - sum(alloc)]:
            alloc[i] += 1
        for i, (g, a) in enumerate(zip(groups, alloc)):
            parts[s].extend(g[taken[i]:taken[i] + a])
            taken[i] += a
    return [np.sort(np.asarray(p, np.int64)) for p in parts]


def build_vocabulary(docs: list[Counter], size: int) -> list[str]:
    total: Counter = Counter()
    for counts in docs:
        total.update(counts)
    return [w for w, _ in sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))[:size]]


def binary_matrix(docs: list[Counter], vocabulary: list[str]):
    """Presence (1) of each vocabulary word, as a uint8 CSR matrix."""
    from scipy import sparse

    index = {w: i for i, w in enumerate(vocabulary)}
    indptr, indices = [0], []
    for counts in docs:
        cols = sorted(index[w] for w in counts if w in index)
        indices.extend(cols)
        indptr.append(len(indices))
    data = np.ones(len(indices), np.uint8)
    return sparse.csr_matrix((data, np.asarray(indices, np.int32), np.asarray(indptr, np.int64)),
                             shape=(len(docs), len(vocabulary)))


def load(config: Mapping) -> Splits:
    vocab_size = config["vocab_size"]
    docs, labels, domains, unlabeled, release = read_domains(config)
    n = len(docs)
    sizes = [_count(config[k], n, k) for k in ("train_size", "val_size", "test_size")]
    if sum(sizes) > n:
        raise ConfigError(f"dataset.train_size+val_size+test_size = {sum(sizes)} exceeds the {n} labelled reviews")
    train, val, test = balanced_split(labels, domains, sizes, config["split_seed"])
    limit = config.get("unlabeled_size")
    if limit is not None:
        unlabeled = unlabeled[:limit]
    if config["use_unlabeled"] and not unlabeled:
        log.warning("no unlabelled reviews (%s) in %s: the autoencoder trains on the %d labelled training "
                    "reviews only (the paper added 35000 unlabelled ones)", UNLABELED_FILE, config["root"], len(train))
    vocabulary = build_vocabulary([docs[i] for i in train] + unlabeled, vocab_size)
    if len(vocabulary) < vocab_size:
        raise DataError(f"only {len(vocabulary)} distinct words in the training reviews, fewer than "
                        f"dataset.vocab_size={vocab_size}: lower it")
    return Splits(
        name=f"amazon/{release}",
        train_x=binary_matrix([docs[i] for i in train], vocabulary), train_y=labels[train],
        val_x=binary_matrix([docs[i] for i in val], vocabulary), val_y=labels[val],
        test_x=binary_matrix([docs[i] for i in test], vocabulary), test_y=labels[test],
        unlabeled_x=binary_matrix(unlabeled, vocabulary) if unlabeled else None,
        vocabulary=vocabulary,
    )


@register("dataset")
@dataclass
class AmazonConfig(Component):
    """Amazon reviews (Blitzer et al., 2007): binary presence of the vocab_size most frequent words."""

    name: str = "amazon"
    root: str = "${oc.env:SCHEDA_DATA,data}/amazon"
    release: str = "auto"  # auto (processed_acl, else sorted_data_acl, else unprocessed) | one of those
    domains: Optional[List[str]] = None  # null: every domain folder found; e.g. [books, dvd, electronics, kitchen]
    use_unlabeled: bool = True  # unlabeled.review files, when present, join the autoencoder's training data
    vocab_size: int = 3000  # words counted on the autoencoder's training data only
    # Labelled splits: fractions of the labelled reviews or counts, each balanced over (domain, label).
    # The paper: 10000 train / 10000 val / 10000 test labelled + 35000 unlabelled. The default below
    # suits the 8000 labelled reviews of four domains with no unlabelled files: 4800 / 1600 / 1600.
    train_size: Any = 0.6
    val_size: Any = 0.2
    test_size: Any = 0.2
    unlabeled_size: Optional[int] = None  # cap on unlabelled reviews (null: all)
    split_seed: int = 0
    image_shape: ClassVar[None] = None

    @property
    def n_input(self) -> int:
        return self.vocab_size

    def check(self) -> None:
        if self.vocab_size < 1:
            raise self.invalid("vocab_size", "must be a positive integer")
        if self.release not in ("auto", *RELEASES):
            raise self.invalid("release", f"is unknown: use auto, {', '.join(RELEASES)}")
        if self.domains is not None and len(self.domains) == 0:
            raise self.invalid("domains", "names no domain: list some (books, dvd, electronics, kitchen, ...) or "
                                          "null for every one found")

    def load(self) -> Splits:
        return load(self)
