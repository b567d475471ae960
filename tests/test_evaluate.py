import json
import logging

import numpy as np
import pytest
import torch

from scheda.evaluation.classifiers import KNNConfig, Liblinear, TorchLogReg, TorchLRConfig, objective
from scheda.utils.errors import ConfigError
from scheda.evaluation.evaluate import evaluate_features, select
from scheda.run import run

from helpers import STAGES, TINY, TINY_DATA, compose_cfg, run_train

LIBLINEAR = {"name": "liblinear", "eps": 0.01}
TORCH_LR = {"name": "torch_lr", "eps": 1e-4, "max_newton": 100, "max_cg": 200, "dtype": "float64"}


def _blobs(n, d=20, k=3, spread=1.0, seed=0):
    rng = np.random.default_rng(seed)
    centers = np.random.default_rng(99).normal(0, 1, (k, d))
    y = rng.integers(0, k, n)
    return (centers[y] + rng.normal(0, spread, (n, d))).astype(np.float32), y


def _splits(spread, seed=0):
    parts = [_blobs(n, spread=spread, seed=seed + i) for i, n in enumerate((300, 100, 100))]
    return ({s: x for s, (x, _) in zip(("train", "val", "test"), parts)},
            {s: y for s, (_, y) in zip(("train", "val", "test"), parts)})


@pytest.mark.parametrize("classifier", [LIBLINEAR, TORCH_LR])
def test_separable_fixture_gives_zero_error(classifier):
    features, labels = _splits(spread=0.05)
    result = evaluate_features(features, labels, {**classifier, "c_log2_min": -2, "c_log2_max": 4})
    assert result["val_error"] == 0.0 and result["test_error"] == 0.0


@pytest.mark.parametrize("n_classes, n, d", [(2, 600, 30), (4, 600, 30), (3, 40, 100)])
def test_torch_lr_matches_liblinear_objective(n_classes, n, d):
    x, y = _blobs(n, d=d, k=n_classes, spread=2.0)
    for C in (0.01, 1.0, 20.0):
        lib = Liblinear(x, y, eps=1e-6).fit(C)
        ours = TorchLogReg(x, y, eps=1e-6, dtype=torch.float64).fit(C)
        f_lib, f_ours = objective(lib, x, y, C), objective(ours, x, y, C)
        assert abs(f_ours - f_lib) <= 1e-6 * f_lib, (C, f_lib, f_ours)
        assert np.mean(lib.predict(x) == ours.predict(x)) >= 0.99


def test_torch_lr_float32_warm_start_along_the_grid():
    x, y = _blobs(800, d=40, k=5, spread=3.0)
    solver = TorchLogReg(x, y, eps=1e-3, warm_start=True)
    for C in (0.1, 1.0, 10.0):
        ours = solver.fit(C)
        lib = Liblinear(x, y, eps=1e-6).fit(C)
        assert objective(ours, x, y, C) <= objective(lib, x, y, C) * (1 + 1e-3)


def test_liblinear_warm_start_reaches_the_same_solution():
    x, y = _blobs(500, d=25, k=3, spread=2.0)
    warm = Liblinear(x, y, eps=1e-6, warm_start=True)
    warm.fit(0.1)
    a = warm.fit(5.0)
    b = Liblinear(x, y, eps=1e-6).fit(5.0)
    assert abs(objective(a, x, y, 5.0) - objective(b, x, y, 5.0)) <= 1e-6 * objective(b, x, y, 5.0)


def _encoded_like(n, d=60, k=10, seed=0):
    """Features like a DA's: sigmoids of a shared projection, all in (0, 1), strongly correlated."""
    rng = np.random.default_rng(seed)
    centers = np.random.default_rng(7).normal(0, 1, (k, 30))
    y = np.arange(n) % k
    inputs = centers[y] + rng.normal(0, 2.0, (n, 30))
    proj = np.random.default_rng(8).normal(0, 0.5, (30, d))
    return (1 / (1 + np.exp(-(inputs @ proj + 1.0)))).astype(np.float32), y


@pytest.mark.parametrize("name", ["liblinear", "torch_lr"])
def test_default_solver_matches_a_fresh_tight_solve_at_every_c(name):
    """The configured default along a grid (as an evaluation runs it) must give what a fresh,
    tight solve gives at each C: a warm start that meets a loose tolerance before it moves
    would stall at the previous C's solution."""
    from scheda.evaluation.classifiers import build_classifier

    cfg = dict(compose_cfg([f"classifier={name}"]).classifier)
    x, y = _encoded_like(600)
    solver = build_classifier(cfg, x, y)
    for C in [2.0 ** e for e in range(-4, 9)]:
        model = solver.fit(C)
        tight = TorchLogReg(x, y, eps=1e-9, dtype=torch.float64).fit(C)
        f, f_tight = objective(model, x, y, C), objective(tight, x, y, C)
        assert f <= f_tight * (1 + 1e-4), (C, f, f_tight)
        assert np.mean(model.predict(x) != tight.predict(x)) <= 0.01, C


def test_c_selection_picks_the_validation_minimum():
    assert select([0.3, 0.2, 0.25, 0.2]) == 1  # ties go to the earlier setting (the smaller C)
    features, labels = _splits(spread=3.0)
    result = evaluate_features(features, labels, {**TORCH_LR, "c_log2_min": -8, "c_log2_max": 4, "c_log2_step": 2})
    errors = [g["val_error"] for g in result["grid"]]
    assert result["val_error"] == min(errors)
    assert result["params"] == result["grid"][errors.index(min(errors))]["params"] == {"C": result["C"]}


def test_edge_of_grid_warning(caplog):
    features, labels = _splits(spread=3.0)
    with caplog.at_level(logging.WARNING, logger="scheda.evaluation.evaluate"):
        result = evaluate_features(features, labels, {**TORCH_LR, "c_log2_min": -14, "c_log2_max": -14})
        assert not result["at_edge"] and not caplog.records  # a single C has no edge
        result = evaluate_features(features, labels, {**TORCH_LR, "c_log2_min": -14, "c_log2_max": -13})
    assert result["at_edge"]
    assert "edge of the grid" in caplog.text and "classifier.c_log2_min/max" in caplog.text


def test_the_logistic_regression_owns_its_c_grid():
    assert TorchLRConfig(c_log2_min=-2, c_log2_max=2).grid() == [{"C": c} for c in (0.25, 0.5, 1.0, 2.0, 4.0)]
    assert [p["C"] for p in TorchLRConfig(c_log2_min=0, c_log2_max=1, c_log2_step=0.5).grid()] == [1.0, 2 ** 0.5, 2.0]
    with pytest.raises(ConfigError, match="classifier.c_log2_min"):
        TorchLRConfig(c_log2_min=3, c_log2_max=2).check()
    with pytest.raises(ConfigError, match="classifier.c_log2_step"):
        TorchLRConfig(c_log2_step=0).check()


def _knn_by_hand(train_x, train_y, query, k):
    """Cosine similarity to every training row, the k most similar vote with their similarity."""
    a = train_x / np.linalg.norm(train_x, axis=1, keepdims=True)
    q = query / np.linalg.norm(query, axis=1, keepdims=True)
    sims = q @ a.T
    out = []
    for row in sims:
        top = np.argsort(-row, kind="stable")[:k]
        votes = np.zeros(train_y.max() + 1)
        np.add.at(votes, train_y[top], row[top])
        out.append(votes.argmax())
    return np.array(out)


@pytest.mark.parametrize("chunk_size", [1, 7, 1000])
def test_knn_probe_matches_a_vote_by_hand_in_any_chunking(chunk_size):
    features, labels = _splits(spread=2.0)
    features = {s: np.abs(x) for s, x in features.items()}  # nonnegative, like sigmoid features
    cfg = {"name": "knn", "k": [1, 3, 17], "chunk_size": chunk_size}
    result = evaluate_features(features, labels, cfg)
    solver = KNNConfig(k=[1, 3, 17], chunk_size=chunk_size).build(features["train"], labels["train"])
    for entry in result["grid"]:
        k = entry["params"]["k"]
        expected = _knn_by_hand(features["train"], labels["train"], features["val"], k)
        assert np.array_equal(solver.fit(k).predict(features["val"]), expected)
        assert entry["val_error"] == pytest.approx(np.mean(expected != labels["val"]))
    assert result["params"] == {"k": result["k"]} and result["classifier"] == "knn"
    assert result["test_error"] == pytest.approx(np.mean(
        _knn_by_hand(features["train"], labels["train"], features["test"], result["k"]) != labels["test"]))


def test_knn_k_larger_than_the_training_set_and_bad_values():
    features, labels = _splits(spread=0.05)
    small = {"train": features["train"][:5], "val": features["val"], "test": features["test"]}
    result = evaluate_features(small, {**labels, "train": labels["train"][:5]}, {"name": "knn", "k": [2, 50]})
    assert [g["params"]["k"] for g in result["grid"]] == [2, 50]  # k = 50 votes with all 5
    with pytest.raises(ConfigError, match="classifier.k"):
        KNNConfig(k=[]).check()
    with pytest.raises(ConfigError, match="classifier.k"):
        KNNConfig(k=[0, 5]).check()


FIELDS = {"epoch", "nu", "reason", "classifier", "grid", "params", "C", "at_edge", "val_error", "test_error",
          "test_n", "test_correct", "seconds", "setup_seconds", "encode_seconds"}


@pytest.mark.parametrize("classifier", ["liblinear", "torch_lr"])
def test_results_json_has_every_evaluation_point(cifar_arrays, tmp_path, classifier):
    cfg = compose_cfg([f"dataset.root={cifar_arrays}", *TINY, *STAGES, f"classifier={classifier}",
                       "evaluate.every=1", "classifier.c_log2_min=-4", "classifier.c_log2_max=0"])
    summary = run(cfg, tmp_path / "run")
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results == json.loads(json.dumps(summary))
    evals = results["evaluations"]
    assert [(e["epoch"], e["nu"], e["reason"]) for e in evals] == [(1, 0.5, "every"), (2, 0.5, "stage_end"),
                                                                   (3, 0.2, "stage_end")]
    for e in evals:
        assert FIELDS <= set(e), FIELDS - set(e)
        assert [g["params"] for g in e["grid"]] == [{"C": 2.0 ** k} for k in range(-4, 1)]
        assert all({"params", "val_error", "seconds"} <= set(g) for g in e["grid"])
        assert 0 <= e["test_error"] <= 1 and e["classifier"] == classifier

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(tmp_path / "run" / "tensorboard")).Reload()
    assert [s.step for s in acc.Scalars("eval/val_error")] == [1, 2, 3]
    assert {"eval/test_error", "eval/nu", "eval/log2_C"} <= set(acc.Tags()["scalars"])


def test_resumed_run_keeps_earlier_evaluations(cifar_arrays, tmp_path):
    base = [f"dataset.root={cifar_arrays}", *TINY, *STAGES, "classifier=torch_lr", "logger=none",
            "classifier.c_log2_min=-2", "classifier.c_log2_max=0"]
    run(compose_cfg(base + ["trainer.max_epochs=2"]), tmp_path / "a")
    resumed = run(compose_cfg(base + [f"resume={tmp_path / 'a'}"]), tmp_path / "b")
    assert [e["epoch"] for e in resumed["evaluations"]] == [2, 3]


def test_evaluation_can_be_disabled(cifar_arrays, tmp_path):
    summary = run(compose_cfg([f"dataset.root={cifar_arrays}", *TINY, *STAGES, "evaluate.enabled=false"]),
                  tmp_path / "run")
    assert summary["evaluations"] == [] and summary["status"] == "completed"


def test_a_raw_baseline_takes_the_trainers_process_settings(cifar_arrays, tmp_path):
    """model=raw sets torch's threads from trainer.num_threads as a training run does: the protocol
    evaluates its raw baseline beside other jobs with one thread each, and torch's default count
    there makes the classifier's search many times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run(compose_cfg([f"dataset.root={cifar_arrays}", *TINY_DATA, "model=raw", "logger=none", "trainer.num_threads=3"]),
            tmp_path / "raw")
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


def test_raw_baseline_through_the_entry_point(cifar_arrays, tmp_path):
    out = tmp_path / "raw"
    proc = run_train([f"dataset.root={cifar_arrays}", "dataset.val_size=20", "model=raw", "classifier=torch_lr",
                      "trainer.device=cpu", f"hydra.run.dir={out}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((out / "results.json").read_text())
    (e,) = results["evaluations"]
    assert e["reason"] == "raw" and e["epoch"] == 0 and results["status"] == "completed"
    assert not (out / "checkpoints").exists()
    assert "(the raw inputs evaluated: nothing trained)" in proc.stdout and "0 epochs" not in proc.stdout
    # The fixture's classes are well separated in pixel space.
    assert e["test_error"] < 0.2


def test_torch_lr_stops_iterating_a_class_its_line_search_cannot_improve():
    """float32 cannot meet eps=1e-12: each class stops once a Newton step no longer lowers the
    objective, instead of repeating that step up to max_newton times."""
    x, y = _blobs(2000, d=40, k=4, spread=3.0)
    solver = TorchLogReg(x, y, eps=1e-12, max_newton=100)
    ours = solver.fit(10.0)
    assert solver.stalled_classes == 4 and solver.newton_iterations < 50
    best = TorchLogReg(x, y, eps=1e-10, dtype=torch.float64).fit(10.0)
    assert objective(ours, x, y, 10.0) <= objective(best, x, y, 10.0) * (1 + 1e-5)


def test_knn_probe_gives_error_curves_at_every_epoch(cifar_arrays, tmp_path):
    cfg = compose_cfg([f"dataset.root={cifar_arrays}", *TINY, *STAGES, "classifier=knn", "classifier.k=[1,3,5]",
                       "evaluate.every=1"])
    summary = run(cfg, tmp_path / "run")
    evals = summary["evaluations"]
    assert [e["epoch"] for e in evals] == [1, 2, 3] and all(e["classifier"] == "knn" for e in evals)
    assert all([g["params"]["k"] for g in e["grid"]] == [1, 3, 5] and e["params"] == {"k": e["k"]} for e in evals)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(tmp_path / "run" / "tensorboard")).Reload()
    assert [s.step for s in acc.Scalars("eval/val_error")] == [1, 2, 3]
    assert [s.value for s in acc.Scalars("eval/k")] == [e["k"] for e in evals]


def test_the_reported_evaluation_is_logged_where_a_runs_table_reads_it(cifar_arrays, tmp_path):
    """TensorBoard's HParams and MLflow's run table show a scalar's last value; under the rule the
    last evaluation is the patience past the one the run reports: the run logs that one too, as
    reported/val_error and reported/test_error at its epoch (read here by TensorBoard's own reader
    and from metrics.csv)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    import scheda

    results = run(compose_cfg([f"dataset.root={cifar_arrays}", *TINY, "schedule=constant", "schedule.epochs=5",
                               "optim.lr=1e-30", "trainer.patience=1", "evaluate.every=1", "classifier=torch_lr",
                               "classifier.c_log2_min=-2", "classifier.c_log2_max=0",
                               "logger=[tensorboard,csv]"]), tmp_path / "run")
    assert results["stopped_by"] == "patience" and [e["epoch"] for e in results["evaluations"]] == [1, 2]
    acc = EventAccumulator(str(tmp_path / "run" / "tensorboard")).Reload()
    reported = acc.Scalars("reported/val_error")
    assert [(s.step, round(s.value, 6)) for s in reported] == [(1, round(results["evaluations"][0]["val_error"], 6))]
    assert scheda.load(tmp_path / "run").metrics["reported/test_error"] == {1: results["evaluations"][0]["test_error"]}
