import json

import pytest
import torch

import scheda.model.network
import scheda.training.finetune
from scheda.utils.errors import ConfigError
from scheda.run import run

from helpers import STAGES, TINY, compose_cfg

FT = ["finetune.enabled=true", "finetune.lrs=[0.5,0.05]", "finetune.max_epochs=12", "finetune.batch_size=16",
      "classifier=torch_lr", "classifier.c_log2_min=-6", "classifier.c_log2_max=2", "model.hidden=16"]


def _cfg(root, *extra):
    return compose_cfg([f"dataset.root={root}", *TINY, *STAGES, *FT, *extra])


def test_finetuning_beats_frozen_features_and_selects_the_minimum(cifar_arrays, tmp_path):
    summary = run(_cfg(cifar_arrays), tmp_path / "run")
    ft = summary["finetune"]
    assert ft["frozen"]["val_error"] == summary["evaluations"][-1]["val_error"]
    assert ft["chosen"]["val_error"] < ft["frozen"]["val_error"]
    best = min(ft["per_lr"], key=lambda r: r["val_error"])
    assert ft["chosen"]["lr"] == best["lr"] and ft["chosen"]["test_error"] == best["test_error"]
    for r in ft["per_lr"]:
        vals = [h["val_error"] for h in r["history"]]
        assert r["epochs_run"] == 12 and r["val_error"] == min(vals)
        assert r["history"][r["best_epoch"] - 1]["test_error"] == r["test_error"]
    assert json.loads((tmp_path / "run" / "results.json").read_text())["finetune"]["chosen"] == ft["chosen"]
    assert (tmp_path / "run" / "checkpoints" / "finetune_best_lr0.pt").exists()

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(tmp_path / "run" / "tensorboard")).Reload()
    assert len(acc.Scalars("finetune/lr_0.5/val_error")) == 12


def test_patience_stops_early(cifar_arrays, tmp_path):
    summary = run(_cfg(cifar_arrays, "finetune.patience=1", "finetune.max_epochs=50"), tmp_path / "run")
    for r in summary["finetune"]["per_lr"]:
        assert r["epochs_run"] < 50 and r["epochs_run"] - r["best_epoch"] <= 1


def test_resume_mid_finetuning_matches_an_uninterrupted_run(cifar_arrays, tmp_path, monkeypatch):
    golden = run(_cfg(cifar_arrays, "logger=none"), tmp_path / "golden")["finetune"]
    original = scheda.training.finetune.Finetuner.save

    def crash_after_some_epochs(self, current, bests):
        original(self, current, bests)
        if current is not None and len(current["models"][0]["history"]) == 5:
            raise KeyboardInterrupt  # killed in the middle of the learning rates' epochs

    monkeypatch.setattr(scheda.training.finetune.Finetuner, "save", crash_after_some_epochs)
    with pytest.raises(KeyboardInterrupt):
        run(_cfg(cifar_arrays, "logger=none"), tmp_path / "killed")
    assert json.loads((tmp_path / "killed" / "results.json").read_text())["status"] == "interrupted"
    monkeypatch.undo()
    resumed = run(_cfg(cifar_arrays, "logger=none", f"resume={tmp_path / 'killed'}"), tmp_path / "resumed")["finetune"]

    def strip(r):
        return [(x["lr"], x["best_epoch"], x["val_error"], x["test_error"],
                 [(h["train_loss"], h["val_error"]) for h in x["history"]]) for x in r["per_lr"]]

    assert strip(resumed) == strip(golden) and resumed["chosen"] == golden["chosen"]


def test_checkpoints_every_few_epochs_and_an_interrupt_between_them_resumes_exactly(cifar_arrays, tmp_path,
                                                                                     monkeypatch):
    """finetune.checkpoint_every=5 over 12 epochs: the resumable state is written after epochs 5
    and 10 and at the end (not every epoch); a Ctrl-C in epoch 7 writes the state of epoch 6 from
    memory, and the resumed run is the uninterrupted one, best nets included."""
    from scheda.training import checkpoint

    every = ["finetune.checkpoint_every=5", "logger=none"]
    golden = run(_cfg(cifar_arrays, *every), tmp_path / "golden")["finetune"]
    writes = []
    save = checkpoint.save_checkpoint

    def counted(path, state):
        if path.name == "finetune_last.pt":
            writes.append([len(m["history"]) for m in (state["current"] or {}).get("models", [])])
        return save(path, state)

    monkeypatch.setattr(scheda.training.finetune, "save_checkpoint", counted)
    run(_cfg(cifar_arrays, *every), tmp_path / "counted")
    assert writes == [[5, 5], [10, 10], []]
    writes.clear()
    end_epoch = scheda.training.finetune.Finetuner._end_epoch

    def interrupted(self, t, train_loss, seconds):
        if t.epoch == 6:  # in epoch 7, after its minibatches, before its evaluation
            raise KeyboardInterrupt
        end_epoch(self, t, train_loss, seconds)

    monkeypatch.setattr(scheda.training.finetune.Finetuner, "_end_epoch", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(_cfg(cifar_arrays, *every), tmp_path / "killed")
    assert writes == [[5, 5], [6, 6]]
    monkeypatch.undo()
    resumed = run(_cfg(cifar_arrays, *every, f"resume={tmp_path / 'killed'}"), tmp_path / "resumed")["finetune"]
    for a, b in zip(resumed["per_lr"], golden["per_lr"]):
        assert [(h["train_loss"], h["val_error"]) for h in a["history"]] == \
            [(h["train_loss"], h["val_error"]) for h in b["history"]]
    assert resumed["chosen"] == golden["chosen"]
    names = sorted(p.name for p in (tmp_path / "golden" / "checkpoints").glob("finetune_best_lr*.pt"))
    assert names  # a rate whose best is its start (epoch 0) keeps no file
    for name in (f"checkpoints/{n}" for n in names):  # written after the resume, else before: the uninterrupted run's
        found = tmp_path / "resumed" / name if (tmp_path / "resumed" / name).exists() else tmp_path / "killed" / name
        a = torch.load(found, weights_only=False)
        b = torch.load(tmp_path / "golden" / name, weights_only=False)
        assert a["epoch"] == b["epoch"] and all(torch.equal(a["model"][k], b["model"][k]) for k in b["model"])


def test_standalone_finetuning_from_a_checkpoint(cifar_arrays, tmp_path, caplog):
    run(compose_cfg([f"dataset.root={cifar_arrays}", *TINY, *STAGES, "model.hidden=16", "evaluate.enabled=false"]),
        tmp_path / "da")
    caplog.clear()
    with caplog.at_level("INFO", logger="scheda.run"):
        summary = run(_cfg(cifar_arrays, "finetune.standalone=true", f"init_from={tmp_path / 'da'}",
                           "finetune.lrs=[0.5]", "finetune.max_epochs=3"), tmp_path / "ft")
    said = [r.getMessage() for r in caplog.records if r.name == "scheda.run"]
    # no schedule line: a stand-alone fine-tuning trains no autoencoder (it once logged the default's 400 epochs)
    assert not [m for m in said if m.startswith("schedule ")]
    assert f"fine-tuning {tmp_path / 'da'}'s encoder (finetune.standalone: no schedule), device cpu" in said
    assert summary.get("history") is None and not list((tmp_path / "ft" / "checkpoints").glob("epoch_*.pt"))
    assert summary["evaluations"][0]["reason"] == "before_finetune"
    assert summary["finetune"]["per_lr"][0]["epochs_run"] == 3


def test_output_layer_starts_from_the_frozen_classifier(cifar_arrays):
    from scheda.data import load_dataset
    from scheda.evaluation.evaluate import encode_splits, evaluate_features, labels_of
    from scheda.model.autoencoder import DenoisingAutoencoder

    cfg = _cfg(cifar_arrays)
    data = load_dataset(cfg.dataset)
    da = DenoisingAutoencoder(3072, 16, generator=torch.Generator().manual_seed(0))
    features = encode_splits(da, data, torch.device("cpu"), 4096)
    result = evaluate_features(features, labels_of(data), {**cfg.classifier, "c_log2_min": -2, "c_log2_max": 0},
                               keep_model=True)
    net = scheda.model.network.FinetuneNet(da, 10, init=result["model"])
    val_x, val_y = data.tensor("val", "cpu"), torch.as_tensor(data.val_y)
    assert net.error(val_x, val_y) == result["val_error"]
    assert scheda.model.network.FinetuneNet(da, 10).V.abs().sum() == 0


@pytest.mark.parametrize("override, key", [
    ("finetune.lrs=[]", "finetune.lrs"),
    ("finetune.lrs=[-0.1]", "finetune.lrs"),
    ("finetune.max_epochs=0", "finetune.max_epochs"),
    ("finetune.patience=0", "finetune.patience"),
    ("finetune.init_output=random", "finetune.init_output"),
    ("finetune.standalone=true", "init_from"),
])
def test_bad_finetune_config(cifar_arrays, tmp_path, override, key):
    with pytest.raises(ConfigError, match=key):
        run(_cfg(cifar_arrays, override), tmp_path / "bad")


def test_the_learning_rates_fused_train_as_each_would_alone(cifar_arrays, tmp_path):
    """finetune.fused (the default: every rate in one hand-written step) against one rate after
    another with autograd (finetune.fused=false): the same minibatches (each rate's own
    generator), the same losses to float tolerance and the same errors, give or take an image
    that float rounding moves across the decision boundary."""
    from helpers import N_VAL

    fused = run(_cfg(cifar_arrays, "logger=none", "finetune.max_epochs=4"), tmp_path / "fused")["finetune"]
    alone = run(_cfg(cifar_arrays, "logger=none", "finetune.max_epochs=4", "finetune.fused=false"),
                tmp_path / "alone")["finetune"]
    assert [r["lr"] for r in fused["per_lr"]] == [r["lr"] for r in alone["per_lr"]] == [0.5, 0.05]
    for f, a in zip(fused["per_lr"], alone["per_lr"]):
        assert f["epochs_run"] == a["epochs_run"] == 4
        for hf, ha in zip(f["history"], a["history"]):
            assert hf["train_loss"] == pytest.approx(ha["train_loss"], rel=1e-4)
            assert abs(hf["val_error"] - ha["val_error"]) <= 1 / N_VAL + 1e-9


@pytest.mark.parametrize("stop_after", [5, 0], ids=["mid-epochs", "after-the-evaluation"])
def test_standalone_finetuning_run_again_resumes_where_it_stopped(cifar_arrays, tmp_path, monkeypatch, caplog,
                                                                   stop_after):
    """A stand-alone fine-tuning (the protocol's fine-tuning jobs) stopped and run again into its
    directory, as a protocol or a sweep does, resumes from its own checkpoints (fine-tuning's, no
    epoch_*.pt: it trains no autoencoder), keeps its encoder's init_from and does not evaluate
    again; it once ran from the start, saying "with no checkpoint"."""
    run(compose_cfg([f"dataset.root={cifar_arrays}", *TINY, *STAGES, "model.hidden=16", "evaluate.enabled=false"]),
        tmp_path / "da")
    standalone = ["finetune.standalone=true", f"init_from={tmp_path / 'da'}", "logger=none"]
    golden = run(_cfg(cifar_arrays, *standalone), tmp_path / "golden")["finetune"]
    original = scheda.training.finetune.Finetuner.save

    def crash(self, current, bests):
        original(self, current, bests)
        if current is not None and len(current["models"][0]["history"]) == 5:
            raise KeyboardInterrupt

    start = scheda.training.finetune.Finetuner.run

    def crash_before_epochs(self):
        raise KeyboardInterrupt  # after the frozen-feature evaluation, before fine-tuning's first epoch

    if stop_after:
        monkeypatch.setattr(scheda.training.finetune.Finetuner, "save", crash)
    else:
        monkeypatch.setattr(scheda.training.finetune.Finetuner, "run", crash_before_epochs)
    with pytest.raises(KeyboardInterrupt):
        run(_cfg(cifar_arrays, *standalone), tmp_path / "killed")
    monkeypatch.undo()
    assert scheda.training.finetune.Finetuner.run is start
    caplog.clear()
    with caplog.at_level("INFO"):
        summary = run(_cfg(cifar_arrays, *standalone), tmp_path / "killed")
    said = [r.getMessage() for r in caplog.records]
    assert any("interrupted before: resuming from its newest checkpoint" in m for m in said), said
    assert [e["reason"] for e in summary["evaluations"]] == ["before_finetune"]  # the one before the stop
    assert not any(m.startswith("eval epoch") for m in said)
    resumed = summary["finetune"]
    assert [[(h["train_loss"], h["val_error"]) for h in r["history"]] for r in resumed["per_lr"]] == \
        [[(h["train_loss"], h["val_error"]) for h in r["history"]] for r in golden["per_lr"]]
    assert resumed["chosen"] == golden["chosen"]


def test_the_quick_preset_fine_tunes_within_its_own_budget():
    """``+experiment=quick finetune.enabled=true`` promised seconds and fine-tuned the paper's 5
    rates for 2000 epochs without patience (about 50 minutes on 2 cores)."""
    ft = compose_cfg(["+experiment=quick", "finetune.enabled=true"]).finetune
    assert (list(ft.lrs), ft.max_epochs, ft.patience, ft.batch_size) == ([0.1, 0.05], 5, 2, 128)
    assert compose_cfg(["+experiment=quick"]).finetune.enabled is False  # still off unless asked for
