"""A stacked DA, one layer a run (``stack_on=<run>``, scheda.training.stack): the layer trains,
is evaluated, resumes and exports as a one-layer DA on the clean codes of the layers below, each
read at its run's reported model; a bad stack is one line before any training."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from scheda import load
from scheda.planning.plan import make_plan
from scheda.run import run
from scheda.utils.errors import ConfigError

from helpers import TINY, compose_cfg, run_train

LAYER = [*TINY, "logger=none", "schedule=constant", "schedule.epochs=2", "classifier.c_log2_min=-1",
         "classifier.c_log2_max=0"]


def _layer(root, out, *overrides):
    return run(compose_cfg([f"dataset.root={root}", *LAYER, *overrides]), out)


def test_a_second_layer_trains_on_the_first_layers_codes_and_encodes_through_the_stack(cifar_arrays, tmp_path):
    """Layer 2 (7 units on 8) trains and is evaluated on layer 1's clean codes; a third layer (5 on
    7) on both below; scheda.load(...).encode(x) is the codes of every layer in turn."""
    first = _layer(cifar_arrays, tmp_path / "l1")
    second = _layer(cifar_arrays, tmp_path / "l2", f"stack_on={tmp_path / 'l1'}", "model.hidden=7",
                    "schedule.nu=0.2")
    third = _layer(cifar_arrays, tmp_path / "l3", f"stack_on={tmp_path / 'l2'}", "model.hidden=5")
    assert [r["status"] for r in (first, second, third)] == ["completed"] * 3
    assert second["evaluations"] and 0 <= second["evaluations"][-1]["test_error"] <= 1
    l1, l2, l3 = load(tmp_path / "l1"), load(tmp_path / "l2"), load(tmp_path / "l3")
    assert (l2.model.n_input, l3.model.n_input, l3.n_input) == (8, 7, 3072)
    assert [p.name for p in l3.stack.runs] == ["l1", "l2"]
    x = np.random.default_rng(0).integers(0, 256, size=(13, 3072), dtype=np.uint8)
    codes = l3.model.encode(l2.model.encode(l1.model.encode(torch.from_numpy(x).float() / 255)))
    np.testing.assert_allclose(l3.encode(x), codes.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert l3.encode(x).shape == (13, 5)


def test_a_layer_trains_on_the_codes_once_on_the_device(cifar_arrays, tmp_path):
    """What layer 2 trains on is layer 1's codes of the training split, made once, before its epochs."""
    _layer(cifar_arrays, tmp_path / "l1")
    plan = make_plan(compose_cfg([f"dataset.root={cifar_arrays}", *LAYER, f"stack_on={tmp_path / 'l1'}"]))
    data = plan.load_data()
    raw = make_plan(compose_cfg([f"dataset.root={cifar_arrays}", *LAYER])).load_data()
    codes = load(tmp_path / "l1").model.encode(torch.from_numpy(raw.train_x).float() / 255)
    assert plan.n_input == 8 and data.image_shape is None and data.train_x.shape == (raw.train_x.shape[0], 8)
    np.testing.assert_allclose(data.train_x, codes.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(data.val_y, raw.val_y)


def test_a_stopped_layer_resumes_as_itself(cifar_arrays, tmp_path):
    _layer(cifar_arrays, tmp_path / "l1")
    stacked = [f"stack_on={tmp_path / 'l1'}", "schedule.epochs=3"]
    cut = _layer(cifar_arrays, tmp_path / "l2", *stacked, "trainer.max_epochs=1")
    saved = tmp_path / "l2" / "results.json"
    saved.write_text(json.dumps({**json.loads(saved.read_text()), "status": "interrupted"}))
    again = _layer(cifar_arrays, tmp_path / "l2", *stacked)
    assert cut["epochs"] == 1 and again["epochs"] == 3 and again["attempts"][-1]["action"] == "resumed"
    with pytest.raises(ConfigError, match="holds a run of another config"):  # what it is stacked on is what it trains
        _layer(cifar_arrays, tmp_path / "l2", f"stack_on={tmp_path / 'l2'}", "schedule.epochs=3")


@pytest.mark.parametrize("case", ["no_dir", "not_a_run", "raw", "unfinished", "itself", "other_data"])
def test_a_bad_stack_is_one_line_before_any_training(cifar_arrays, tmp_path, case):
    _layer(cifar_arrays, tmp_path / "l1")
    (tmp_path / "empty").mkdir()
    below, extra, message = tmp_path / "l1", [], ""
    if case == "no_dir":
        below, message = tmp_path / "nowhere", "no such run directory"
    elif case == "not_a_run":
        below, message = tmp_path / "empty", "holds no scheda run"
    elif case == "raw":
        run(compose_cfg([f"dataset.root={cifar_arrays}", *[o for o in LAYER if not o.startswith("model.")],
                         "model=raw"]), tmp_path / "raw")
        below, message = tmp_path / "raw", "trained no model"
    elif case == "unfinished":
        saved = tmp_path / "l1" / "results.json"
        saved.write_text(json.dumps({**json.loads(saved.read_text()), "status": "interrupted"}))
        message = "is interrupted, not completed: finish it first"
    elif case == "itself":
        saved = tmp_path / "l1" / "results.json"
        record = json.loads(saved.read_text())
        saved.write_text(json.dumps({**record, "config": {**record["config"], "stack_on": str(tmp_path / "l1")}}))
        message = "is stacked on itself"
    elif case == "other_data":  # 48 inputs a row, where layer 1 took CIFAR-10's 3072
        small = tmp_path / "small"
        small.mkdir()
        rng = np.random.default_rng(1)
        np.save(small / "train_x.npy", rng.integers(0, 256, size=(90, 48), dtype=np.uint8))
        np.save(small / "train_y.npy", rng.integers(0, 3, size=90))
        extra, message = ["dataset=arrays", f"dataset.root={small}"], "starts from 3072 inputs, and dataset=arrays has 48"
    out = tmp_path / "l2"
    with pytest.raises(ConfigError, match=message) as exc:
        _layer(cifar_arrays, out, f"stack_on={below}", *extra)
    assert "\n" not in str(exc.value)
    assert not (out / "checkpoints").exists()


def test_the_command_line_says_a_bad_stack_in_one_line(tmp_path):
    proc = run_train([f"stack_on={tmp_path / 'nowhere'}", "trainer.device=cpu", f"hydra.run.dir={tmp_path / 'run'}"],
                     cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"error: stack_on={tmp_path / 'nowhere'}: no such run directory: give the directory " \
                                  f"of a finished DA or ScheDA run"


def test_export_and_filters_of_a_stacked_run(cifar_arrays, tmp_path):
    """scheda-export --features of a layer 2 writes its codes of every split; scheda-plot-filters
    draws its first layer's filters (in input space)."""
    from scheda.analysis import plot_filters
    from scheda.evaluation import export

    _layer(cifar_arrays, tmp_path / "l1")
    _layer(cifar_arrays, tmp_path / "l2", f"stack_on={tmp_path / 'l1'}", "model.hidden=6")
    assert export.main([str(tmp_path / "l2"), "--features", str(tmp_path / "f.npz")]) == 0
    features = np.load(tmp_path / "f.npz")
    raw = make_plan(compose_cfg([f"dataset.root={cifar_arrays}", *LAYER])).load_data()
    np.testing.assert_allclose(features["test_x"], load(tmp_path / "l2").encode(raw.test_x), rtol=1e-5, atol=1e-6)
    assert plot_filters.main([str(tmp_path / "l2"), "--n", "4", "--out", str(tmp_path / "filters.png")]) == 0
    assert (tmp_path / "filters.png").stat().st_size > 0


FINETUNE = ["finetune.enabled=true", "finetune.lrs=[0.1,0.05]", "finetune.max_epochs=3", "finetune.batch_size=16"]


def test_fine_tuning_a_stack_trains_every_layer_from_the_inputs(cifar_arrays, tmp_path):
    """finetune.enabled on layer 2: one net x -> layer 1 -> layer 2 -> softmax, every layer's weights
    fine-tuned (every rate at once by the fused step), its errors read on the inputs themselves; the
    frozen-feature baseline is layer 2's codes'."""
    _layer(cifar_arrays, tmp_path / "l1")
    result = _layer(cifar_arrays, tmp_path / "l2", f"stack_on={tmp_path / 'l1'}", "model.hidden=6", *FINETUNE)
    tuned = result["finetune"]
    assert result["status"] == "completed" and result["plan"]["finetune_step"]["kind"] == "fused"
    assert [r["epochs_run"] for r in tuned["per_lr"]] == [3, 3] and 0 <= tuned["chosen"]["test_error"] <= 1
    assert tuned["frozen"]["test_error"] == result["evaluations"][-1]["test_error"]
    first, second = load(tmp_path / "l1").model, load(tmp_path / "l2").model
    for path in sorted((tmp_path / "l2" / "checkpoints").glob("finetune_best_lr*.pt")):  # a rate's best net
        net = torch.load(path, weights_only=False)["model"]
        assert net["below_W.0"].shape == first.W.shape and net["W"].shape == second.W.shape == (6, 8)
        assert not torch.equal(net["below_W.0"], first.W.detach())  # the first layer was fine-tuned too


def test_the_fine_tuning_net_of_a_stack_backpropagates_into_every_layer():
    from scheda.model.network import DenoisingAutoencoder, FinetuneNet

    g = torch.Generator().manual_seed(0)
    low, top = DenoisingAutoencoder(12, 7, generator=g), DenoisingAutoencoder(7, 5, generator=g)
    net = FinetuneNet(top, 3, below=[low])
    with torch.no_grad():  # an output layer started from a classifier (zeros would pass no gradient down)
        net.V.normal_(generator=g)
    x = torch.rand(4, 12, generator=g)
    torch.testing.assert_close(net(x), torch.nn.functional.linear(top.encode(low.encode(x)), net.V, net.c))
    torch.nn.functional.cross_entropy(net(x), torch.tensor([0, 1, 2, 0])).backward()
    net.V.grad = None
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in (net.below_W[0], net.below_b[0], net.W, net.b))
    assert set(FinetuneNet(top, 3).state_dict()) == {"W", "b", "V", "c"}  # a one-layer net's checkpoint as before


def test_a_stack_fine_tuning_cut_short_resumes_to_the_uninterrupted_result(cifar_arrays, tmp_path, monkeypatch):
    import scheda.training.finetune

    _layer(cifar_arrays, tmp_path / "l1")
    stacked = [f"stack_on={tmp_path / 'l1'}", "model.hidden=6", *FINETUNE, "finetune.max_epochs=6"]
    golden = _layer(cifar_arrays, tmp_path / "golden", *stacked)["finetune"]
    original = scheda.training.finetune.Finetuner.save

    def crash(self, current, bests):
        original(self, current, bests)
        if current is not None and len(current["models"][0]["history"]) == 4:
            raise KeyboardInterrupt  # Ctrl-C in the middle of the first rate's epochs

    monkeypatch.setattr(scheda.training.finetune.Finetuner, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        _layer(cifar_arrays, tmp_path / "cut", *stacked)
    monkeypatch.undo()
    resumed = _layer(cifar_arrays, tmp_path / "resumed", *stacked, f"resume={tmp_path / 'cut'}")["finetune"]
    assert [(r["lr"], r["best_epoch"], r["val_error"], r["test_error"]) for r in resumed["per_lr"]] == \
        [(r["lr"], r["best_epoch"], r["val_error"], r["test_error"]) for r in golden["per_lr"]]


@pytest.mark.parametrize("activations", [("sigmoid", "sigmoid"), ("relu", "sigmoid", "relu")], ids=["2 layers", "3 layers"])
def test_the_fused_fine_tuning_step_of_a_stack_is_sgd_on_every_layer(activations):
    """FusedFinetune on stacks of 2 and 3 layers (sigmoid and ReLU units) against plain SGD by
    autograd on the same nets and minibatches: every layer's parameters agree, each rate its own,
    over a partial last minibatch too."""
    from scheda.model.network import DenoisingAutoencoder, FinetuneNet
    from scheda.training.finetune import FusedFinetune

    g = torch.Generator().manual_seed(0)
    sizes = [11, 9, 7, 5][:len(activations) + 1]
    layers = [DenoisingAutoencoder(a, b, generator=g, activation=act) for a, b, act in zip(sizes, sizes[1:], activations)]
    x, y, lrs = torch.rand(23, 11, generator=g), torch.randint(0, 3, (23,), generator=g), [0.5, 0.1]

    def net():
        n = FinetuneNet(layers[-1], 3, below=layers[:-1])
        with torch.no_grad():
            n.V.copy_(torch.randn(3, sizes[-1], generator=torch.Generator().manual_seed(1)))
        return n

    fused, alone = [net() for _ in lrs], [net() for _ in lrs]
    step = FusedFinetune(fused, lrs, x, y, batch_size=8)
    order = torch.randperm(23, generator=g)
    for start in range(0, 23, 8):  # 8, 8 and a partial 7
        idx = order[start:start + 8]
        step(idx.expand(len(lrs), -1).contiguous())
        for n, lr in zip(alone, lrs):
            n.zero_grad()
            torch.nn.functional.cross_entropy(n(x[idx]), y[idx]).backward()
            with torch.no_grad():
                for p in n.parameters():
                    p -= lr * p.grad
    for f, a in zip(fused, alone):
        for (name, pf), (_, pa) in zip(f.named_parameters(), a.named_parameters()):
            torch.testing.assert_close(pf, pa, rtol=1e-5, atol=1e-6, msg=name)
        assert not torch.equal(f.below_W[0], layers[0].W)  # the bottom layer moved


def test_a_stack_fine_tunes_every_rate_at_once_as_each_would_alone(cifar_arrays, tmp_path):
    """A stack's fine-tuning takes the fused step (finetune.fused, the default) and gives what one
    rate after another by autograd gives (finetune.fused=false): the same losses to float tolerance."""
    _layer(cifar_arrays, tmp_path / "l1")
    stacked = [f"stack_on={tmp_path / 'l1'}", "model.hidden=6", *FINETUNE]
    fused = _layer(cifar_arrays, tmp_path / "fused", *stacked)
    alone = _layer(cifar_arrays, tmp_path / "alone", *stacked, "finetune.fused=false")
    assert fused["plan"]["finetune_step"]["kind"] == "fused" and alone["plan"]["finetune_step"]["kind"] == "autograd"
    for f, a in zip(fused["finetune"]["per_lr"], alone["finetune"]["per_lr"]):
        assert f["lr"] == a["lr"] and f["epochs_run"] == a["epochs_run"] == 3
        for hf, ha in zip(f["history"], a["history"]):
            assert hf["train_loss"] == pytest.approx(ha["train_loss"], rel=1e-4)


def test_every_layer_s_codes_concatenated_are_evaluated_and_exported(cifar_arrays, tmp_path):
    """evaluate.layers=all on a third layer (5 on 7 on 8 units): the classifier reads 8 + 7 + 5
    features, layer 1's, layer 2's and its own, bottom first, the same evaluation as of those
    features by hand; scheda-export --features writes them; layers=top reads its own 5."""
    from scheda.evaluation import export
    from scheda.evaluation.evaluate import evaluate_features, labels_of

    _layer(cifar_arrays, tmp_path / "l1")
    _layer(cifar_arrays, tmp_path / "l2", f"stack_on={tmp_path / 'l1'}", "model.hidden=7")
    every = _layer(cifar_arrays, tmp_path / "all", f"stack_on={tmp_path / 'l2'}", "model.hidden=5",
                   "evaluate.layers=all")
    assert export.main([str(tmp_path / "all"), "--features", str(tmp_path / "f.npz")]) == 0
    features = np.load(tmp_path / "f.npz")
    raw = make_plan(compose_cfg([f"dataset.root={cifar_arrays}", *LAYER])).load_data()
    l1, l2, l3 = (load(tmp_path / name).model for name in ("l1", "l2", "all"))
    by_hand = {}
    for split in ("train", "val", "test"):
        a = l1.encode(raw.tensor(split, "cpu"))
        b = l2.encode(a)
        by_hand[split] = torch.cat([a, b, l3.encode(b)], dim=1).detach()
        np.testing.assert_allclose(features[f"{split}_x"], by_hand[split].numpy(), rtol=1e-5, atol=1e-6)
    assert features["train_x"].shape[1] == 8 + 7 + 5
    cfg = compose_cfg([f"dataset.root={cifar_arrays}", *LAYER])
    again = evaluate_features(by_hand, labels_of(raw), cfg.classifier)
    last = every["evaluations"][-1]
    assert (last["val_error"], last["test_error"]) == pytest.approx((again["val_error"], again["test_error"]), abs=2e-3)
    _layer(cifar_arrays, tmp_path / "top", f"stack_on={tmp_path / 'l2'}", "model.hidden=5")
    assert export.main([str(tmp_path / "top"), "--features", str(tmp_path / "t.npz")]) == 0
    assert np.load(tmp_path / "t.npz")["train_x"].shape[1] == 5


@pytest.mark.parametrize("override, message", [
    (["evaluate.layers=every"], "evaluate.layers='every' is unknown"),
    (["evaluate.layers=all", "finetune.enabled=true"], "fine-tune with evaluate.layers=top"),
])
def test_bad_layers_settings_are_one_line(cifar_arrays, tmp_path, override, message):
    _layer(cifar_arrays, tmp_path / "l1")
    with pytest.raises(ConfigError, match=message):
        make_plan(compose_cfg([f"dataset.root={cifar_arrays}", *LAYER, f"stack_on={tmp_path / 'l1'}", *override]))


def test_a_whole_stack_trains_in_one_call_and_a_second_call_reads_every_layer(cifar_arrays, tmp_path):
    """scheda.train_stack: each layer its own overrides (a list or a dict) after the common ones, into
    layer<i>/ on the one before; called again, every finished layer is read, not trained again."""
    import scheda

    common = [f"dataset.root={cifar_arrays}", *LAYER]
    layers = [["model.hidden=8"], {"model.hidden": 5, "schedule.nu": 0.2}]
    first, second = scheda.train_stack(layers, tmp_path / "s", common=common)
    assert (first.dir.name, second.dir.name) == ("layer1", "layer2")
    assert second.stack.runs == (first.dir,) and second.results["config"]["schedule"]["nu"] == 0.2
    x = np.random.default_rng(0).integers(0, 256, size=(13, 3072), dtype=np.uint8)
    assert second.encode(x).shape == (13, 5)
    again = scheda.train_stack(layers, tmp_path / "s", common=common)
    assert [r.results["attempts"][-1]["action"] for r in again] == ["skipped", "skipped"]
    for bad, message in (([], "one list of overrides per layer"), ("model.hidden=5", "one list of overrides"),
                         ([["model.hidden=5", f"stack_on={first.dir}"]], "layer 1 sets stack_on")):
        with pytest.raises(ConfigError, match=message):
            scheda.train_stack(bad, tmp_path / "bad", common=common)
