"""dataset=arrays: a user's own data as a folder of .npy files or one .npz, any width, uint8 or
float, with or without labels, a test split or unlabelled rows; every bad input refused in one
line that names the fix (scheda/data/arrays.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from scheda.data import load_dataset
from scheda.utils.errors import ConfigError, DataError
from scheda.run import run
from helpers import compose_cfg

RUN = ["dataset=arrays", "model.hidden=8", "schedule=constant", "schedule.epochs=2", "trainer.device=cpu",
       "trainer.progress_bar=false", "trainer.batch_size=16", "logger=none", "classifier.c_log2_min=-2",
       "classifier.c_log2_max=0"]
RNG = np.random.default_rng(0)


def _dataset(root, **kw):
    return {"name": "arrays", "root": str(root), "scale": None, "val_fraction": 0.1, "val_size": None,
            "split_seed": 0, "train_limit": None, "image_shape": None, **kw}


def test_an_npz_of_floats_with_labels_trains_and_evaluates_on_splits_it_carves(tmp_path):
    """No test_x: a tenth of the 203 rows for validation, as many again for the test split."""
    np.savez(tmp_path / "mine.npz", train_x=RNG.random((203, 17)).astype(np.float32),
             train_y=RNG.integers(0, 3, 203))
    data = load_dataset(_dataset(tmp_path / "mine.npz"))
    assert (data.train_x.shape, data.val_x.shape, data.test_x.shape) == ((163, 17), (20, 17), (20, 17))
    assert data.max_value == 1.0 and data.image_shape is None and data.labelled
    result = run(compose_cfg([f"dataset.root={tmp_path / 'mine.npz'}", *RUN]), tmp_path / "run")
    assert result["status"] == "completed" and result["evaluations"][-1]["test_n"] == 20


def test_a_folder_of_npy_files_memory_mapped_with_a_test_split_and_unlabelled_rows(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    arrays = {"train_x": RNG.integers(0, 256, (150, 12), dtype=np.uint8), "train_y": RNG.integers(0, 4, 150),
              "test_x": RNG.integers(0, 256, (31, 12), dtype=np.uint8), "test_y": RNG.integers(0, 4, 31),
              "unlabelled_x": RNG.integers(0, 256, (40, 12), dtype=np.uint8)}
    for name, value in arrays.items():
        np.save(folder / f"{name}.npy", value)
    data = load_dataset(_dataset(folder, val_size=30, image_shape=[3, 2, 2]))
    assert (data.train_x.shape, data.val_x.shape, data.test_x.shape) == ((120, 12), (30, 12), (31, 12))
    assert data.max_value == 255.0 and data.image_shape == (3, 2, 2)
    assert data.autoencoder_tensor("cpu").shape == (160, 12)  # the autoencoder also sees the unlabelled rows
    assert np.array_equal(data.test_x, arrays["test_x"])
    result = run(compose_cfg([f"dataset.root={folder}", *RUN]), tmp_path / "run")
    assert result["evaluations"][-1]["test_n"] == 31


def test_without_labels_the_run_trains_and_skips_evaluation_saying_so(tmp_path, caplog):
    np.savez(tmp_path / "mine.npz", train_x=RNG.random((90, 10)))
    with caplog.at_level("INFO", logger="scheda.data.arrays"):
        result = run(compose_cfg([f"dataset.root={tmp_path / 'mine.npz'}", *RUN]), tmp_path / "run")
    assert result["status"] == "completed" and result["epochs"] == 2 and not result.get("evaluations")
    said = [r.getMessage() for r in caplog.records if "no train_y" in r.getMessage()]
    assert len(said) == 1 and "the run trains the autoencoder and skips evaluation" in said[0]
    with pytest.raises(ConfigError, match="finetune.enabled=true needs labels"):
        run(compose_cfg([f"dataset.root={tmp_path / 'mine.npz'}", *RUN, "finetune.enabled=true"]), tmp_path / "ft")


BAD = [
    ({"train_x": RNG.random((20, 5)), "train_y": RNG.integers(0, 2, 19)}, "train_y has shape (19,) for 20 rows"),
    ({"train_x": RNG.random((20, 5, 2))}, "train_x must be a matrix of N rows x d inputs"),
    ({"train_x": np.full((20, 5), np.nan)}, "train_x holds NaN"),
    ({"train_x": RNG.random((20, 5)) * 3}, "the inputs must lie in [0, 1]; set dataset.scale"),
    ({"train_x": RNG.random((20, 5)), "train_y": RNG.random(20)}, "train_y holds float64 values that are not integers"),
    ({"train_x": RNG.random((20, 5)), "train_y": RNG.integers(0, 2, 20), "test_x": RNG.random((4, 6)),
      "test_y": RNG.integers(0, 2, 4)}, "test_x has 6 inputs a row and train_x 5"),
    ({"train_x": RNG.random((20, 5)), "train_y": RNG.integers(0, 2, 20), "test_x": RNG.random((4, 5))},
     "has test_x without test_y"),
    ({"train_y": RNG.integers(0, 2, 20)}, "has no train_x"),
]


@pytest.mark.parametrize("arrays, message", BAD)
def test_bad_arrays_are_refused_in_one_line(tmp_path, arrays, message):
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(DataError) as exc:
        load_dataset(_dataset(tmp_path / "bad.npz"))
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_labels_of_one_class_are_said_to_tell_nothing(tmp_path, caplog):
    np.savez(tmp_path / "one.npz", train_x=RNG.random((30, 6)), train_y=np.full(30, 3))
    with caplog.at_level("WARNING"):
        load_dataset(_dataset(tmp_path / "one.npz"))
    assert "train_y holds one class (3): every evaluation's error is 0" in caplog.text


def test_bad_settings_and_files_are_refused_in_one_line(tmp_path):
    (tmp_path / "broken.npz").write_bytes(b"not a zip")
    with pytest.raises(DataError, match="cannot read its arrays"):
        load_dataset(_dataset(tmp_path / "broken.npz"))
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "train_x.npy").write_bytes(b"not numpy's header")  # numpy reads it as pickled objects
    with pytest.raises(DataError, match=r"cannot read its arrays \(not numpy's .npy/.npz format, or Python objects\)"):
        load_dataset(_dataset(tmp_path / "folder"))
    with pytest.raises(DataError, match="no such folder or .npz file"):
        load_dataset(_dataset(tmp_path / "absent"))
    np.savez(tmp_path / "ok.npz", train_x=RNG.random((20, 6)), train_y=RNG.integers(0, 2, 20))
    with pytest.raises(ConfigError, match=r"dataset.image_shape=\[3, 2, 2\] holds 12 inputs and train_x rows 6"):
        load_dataset(_dataset(tmp_path / "ok.npz", image_shape=[3, 2, 2]))
    with pytest.raises(ConfigError, match="leaves no training rows"):
        load_dataset(_dataset(tmp_path / "ok.npz", val_size=10))
    with pytest.raises(ConfigError, match="dataset.val_fraction"):
        run(compose_cfg([f"dataset.root={tmp_path / 'ok.npz'}", *RUN, "dataset.val_fraction=1.5"]), tmp_path / "run")
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["status"] == "failed"
