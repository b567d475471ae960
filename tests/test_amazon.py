"""The Amazon reviews data module on small files written in both release formats."""

import json
from pathlib import Path

import numpy as np
import pytest

from scheda.data import load_dataset
from scheda.utils.errors import ConfigError, DataError

from helpers import run_train

POS_WORDS = ["great", "excellent", "love", "perfect", "best"]
NEG_WORDS = ["bad", "awful", "broken", "waste", "worst"]
COMMON = ["the", "it", "this", "product", "book", "was", "and", "very"]


def _review_words(rng, label, domain):
    words = list(rng.choice(POS_WORDS if label else NEG_WORDS, 3)) + list(rng.choice(COMMON, 4)) + [domain]
    return words


def write_processed(root: Path, domains=("books", "kitchen"), n=12, unlabeled=0) -> Path:
    rng = np.random.default_rng(0)
    for domain in domains:
        folder = root / "processed_acl" / domain
        folder.mkdir(parents=True)
        for label, file in ((1, "positive.review"), (0, "negative.review")):
            lines = []
            for _ in range(n):
                counts = {}
                for w in _review_words(rng, label, domain):
                    counts[w] = counts.get(w, 0) + 1
                tokens = [f"{w}:{c}" for w, c in counts.items()] + ["great_product:1"]
                lines.append(" ".join(tokens) + f" #label#:{'positive' if label else 'negative'}")
            (folder / file).write_text("\n".join(lines) + "\n")
        if unlabeled:
            lines = [" ".join(f"{w}:1" for w in _review_words(rng, i % 2, domain)) + " #label#:unknown"
                     for i in range(unlabeled)]
            (folder / "unlabeled.review").write_text("\n".join(lines) + "\n")
    return root


def _block(words, rating):
    return (f"<review>\n<unique_id>\nx\n</unique_id>\n<rating>\n{rating}\n</rating>\n<title>\n{words[0]} & more\n"
            f"</title>\n<review_text>\n{' '.join(words[1:]).capitalize()}. Don't!\n</review_text>\n</review>\n")


def write_sorted(root: Path, domains=("books", "kitchen_&_housewares"), n=12) -> Path:
    rng = np.random.default_rng(1)
    for domain in domains:
        folder = root / "sorted_data_acl" / domain
        folder.mkdir(parents=True)
        for label, file, rating in ((1, "positive.review", "5.0"), (0, "negative.review", "1.0")):
            text = "".join(_block(_review_words(rng, label, domain.split("_")[0]), rating) for _ in range(n))
            if file == "positive.review" and domain == "books":
                text = "<data>\n" + text + "</data>\n"
            (folder / file).write_text(text)
    return root


def _cfg(root, **kw):
    cfg = dict(name="amazon", root=str(root), release="auto", domains=None, use_unlabeled=True, vocab_size=15,
               train_size=0.5, val_size=0.25, test_size=0.25, unlabeled_size=None, split_seed=0)
    cfg.update(kw)
    return cfg


@pytest.mark.parametrize("writer, release", [(write_processed, "processed_acl"), (write_sorted, "sorted_data_acl")])
def test_both_formats_load_balanced_mixed_splits(tmp_path, writer, release):
    writer(tmp_path)
    data = load_dataset(_cfg(tmp_path, release=release))
    assert data.name == f"amazon/{release}"
    assert data.train_x.shape == (24, 15) and data.val_x.shape == (12, 15) and data.test_x.shape == (12, 15)
    for y in (data.train_y, data.val_y, data.test_y):
        assert y.mean() == 0.5
    assert set(np.unique(data.train_x.toarray())) <= {0, 1}
    assert len(data.vocabulary) == 15 and not any("_" in w for w in data.vocabulary)
    assert "great" in load_dataset(_cfg(tmp_path, release=release, vocab_size=20)).vocabulary
    # Every split mixes the domains: the domain word appears in every split.
    for split in ("train", "val", "test"):
        x = getattr(data, f"{split}_x").toarray()
        assert x[:, data.vocabulary.index("books")].sum() > 0
    dense = data.tensor("train", "cpu")
    assert dense.shape == (24, 15) and float(dense.max()) == 1.0


def test_sorted_release_tokenises_lower_case_words(tmp_path):
    write_sorted(tmp_path)
    data = load_dataset(_cfg(tmp_path, vocab_size=21))
    assert "don't" in data.vocabulary and "more" in data.vocabulary and "Don't" not in data.vocabulary
    assert "&" not in data.vocabulary


def test_counts_vocabulary_on_training_data_only(tmp_path):
    write_processed(tmp_path, n=12)
    data = load_dataset(_cfg(tmp_path, vocab_size=19))
    from scheda.data.amazon import read_domains

    docs, labels, domains, _, _ = read_domains(_cfg(tmp_path))
    from scheda.data.amazon import balanced_split, build_vocabulary

    train, _, _ = balanced_split(labels, domains, [24, 12, 12], 0)
    assert data.vocabulary == build_vocabulary([docs[i] for i in train], 19)


def test_splits_by_count_and_too_large(tmp_path):
    write_processed(tmp_path)
    data = load_dataset(_cfg(tmp_path, train_size=20, val_size=8, test_size=8))
    assert (data.train_x.shape[0], data.val_x.shape[0], data.test_x.shape[0]) == (20, 8, 8)
    with pytest.raises(ConfigError, match="exceeds the 48 labelled reviews"):
        load_dataset(_cfg(tmp_path, train_size=40, val_size=8, test_size=8))
    with pytest.raises(ConfigError, match="dataset.val_size"):
        load_dataset(_cfg(tmp_path, val_size=1.5))


def test_unlabeled_reviews_join_autoencoder_training_only(tmp_path):
    write_processed(tmp_path, unlabeled=6)
    data = load_dataset(_cfg(tmp_path))
    assert data.unlabeled_x.shape == (12, 15) and data.train_x.shape[0] == 24
    assert data.autoencoder_tensor("cpu").shape == (36, 15)
    assert load_dataset(_cfg(tmp_path, use_unlabeled=False)).unlabeled_x is None


def test_domains_select_folders_by_prefix(tmp_path):
    write_sorted(tmp_path)
    data = load_dataset(_cfg(tmp_path, domains=["kitchen"], train_size=0.5, val_size=0.25, test_size=0.25))
    assert data.train_x.shape[0] == 12
    with pytest.raises(DataError, match="domain 'music' not found.*dataset.domains"):
        load_dataset(_cfg(tmp_path, domains=["music"]))
    with pytest.raises(ConfigError, match=r"dataset.domains=\[\] names no domain"):  # it once said the data were missing
        load_dataset(_cfg(tmp_path, domains=[]))


@pytest.mark.parametrize("line, match", [
    ("great:1 bad:2", r"positive.review:2: no #label#"),
    ("great:x #label#:positive", r"positive.review:2: count 'x' of 'great'"),
    ("great #label#:positive", r"positive.review:2: 'great' is not token:count"),
    ("great:1 #label#:maybe", r"positive.review:2: label 'maybe'"),
])
def test_malformed_processed_lines_name_file_and_line(tmp_path, line, match):
    write_processed(tmp_path)
    path = tmp_path / "processed_acl" / "books" / "positive.review"
    lines = path.read_text().splitlines()
    lines[1] = line
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=match):
        load_dataset(_cfg(tmp_path))


def test_truncated_review_block_names_file_and_line(tmp_path):
    write_sorted(tmp_path)
    path = tmp_path / "sorted_data_acl" / "kitchen_&_housewares" / "negative.review"
    text = path.read_text()
    path.write_text(text[: len(text) - 40])
    with pytest.raises(DataError, match=r"negative.review:\d+: <review> block is not closed"):
        load_dataset(_cfg(tmp_path))


def test_missing_rating_is_an_error(tmp_path):
    write_sorted(tmp_path)
    path = tmp_path / "sorted_data_acl" / "books" / "negative.review"
    path.write_text(path.read_text().replace("<rating>\n1.0\n</rating>\n", "", 1))
    with pytest.raises(DataError, match=r"negative.review:1: .*no valid <rating>"):
        load_dataset(_cfg(tmp_path))


def test_empty_domain_and_missing_data_are_errors(tmp_path):
    write_processed(tmp_path)
    for file in ("positive.review", "negative.review"):
        (tmp_path / "processed_acl" / "kitchen" / file).write_text("")
    with pytest.raises(DataError, match="kitchen holds no reviews"):
        load_dataset(_cfg(tmp_path))
    with pytest.raises(DataError, match="Amazon reviews not found.*SCHEDA_DATA"):
        load_dataset(_cfg(tmp_path / "nothing"))


def test_amazon_presets_through_the_entry_point(tmp_path):
    root = write_processed(tmp_path / "data" / "amazon", n=20)
    common = [f"dataset.root={root}", "dataset.vocab_size=15", "trainer.device=cpu", "trainer.progress_bar=false",
              "classifier=torch_lr"]
    raw = run_train(["+experiment=amazon_raw", *common, f"hydra.run.dir={tmp_path / 'raw'}"], cwd=tmp_path)
    assert raw.returncode == 0, raw.stderr
    assert json.loads((tmp_path / "raw" / "results.json").read_text())["evaluations"][0]["test_error"] < 0.2
    da = run_train(["+experiment=amazon_scheda", *common, "model.hidden=6", "schedule.initial_epochs=1",
                    "schedule.K=1", "trainer.batch_size=8", f"hydra.run.dir={tmp_path / 'da'}"], cwd=tmp_path)
    assert da.returncode == 0, da.stderr
    results = json.loads((tmp_path / "da" / "results.json").read_text())
    assert [e["nu"] for e in results["evaluations"]] == [0.7, 0.6]

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(tmp_path / "da" / "tensorboard")).Reload()
    assert "filters/top_words/text_summary" in acc.Tags()["tensors"]
    assert "images" not in acc.Tags() or not acc.Tags()["images"]


def test_a_run_says_when_there_are_no_unlabelled_reviews(tmp_path, caplog):
    write_processed(tmp_path)  # the four labelled files per domain, no unlabeled.review
    with caplog.at_level("WARNING", logger="scheda.data.amazon"):
        load_dataset(_cfg(tmp_path))
    assert "no unlabelled reviews (unlabeled.review)" in caplog.text and "24 labelled training reviews" in caplog.text
    caplog.clear()
    write_processed(tmp_path / "with", unlabeled=6)
    with caplog.at_level("WARNING", logger="scheda.data.amazon"):
        load_dataset(_cfg(tmp_path / "with"))
    assert "no unlabelled" not in caplog.text


@pytest.mark.parametrize("per_group, sizes", [(29, [104, 35, 35]), (7, [20, 11, 11]), (1000, [3600, 1200, 1200]),
                                               (13, [31, 20, 27])])
def test_balanced_splits_get_exactly_their_sizes_when_nothing_divides_evenly(per_group, sizes):
    """Six (domain, label) groups: each split has its own size however the groups round, and the
    splits are disjoint and balanced to within one review per group."""
    from scheda.data.amazon import balanced_split

    domains = np.repeat(np.arange(3), 2 * per_group)
    labels = np.tile(np.repeat([0, 1], per_group), 3)
    parts = balanced_split(labels, domains, sizes, 0)
    assert [len(p) for p in parts] == sizes
    assert len(np.unique(np.concatenate(parts))) == sum(sizes)
    for part, size in zip(parts, sizes):
        counts = np.bincount(domains[part] * 2 + labels[part], minlength=6)
        assert counts.max() - counts.min() <= 1 + (size < 6)
