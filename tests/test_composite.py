import json

import pytest
import torch

from scheda.training.checkpoint import load_checkpoint
from scheda.utils.errors import ConfigError
from scheda.model.autoencoder import CompositeDA
from scheda.run import run
from scheda.utils.seeding import derive_seed

from helpers import TINY, compose_cfg

BASE = [*TINY, "logger=none", "evaluate.enabled=false", "trainer.step=autograd", "schedule=constant",
        "schedule.nu=0.3", "schedule.epochs=3"]


def test_composite_with_one_group_equals_a_plain_da(cifar_arrays, tmp_path):
    run(compose_cfg([f"dataset.root={cifar_arrays}", *BASE]), tmp_path / "da")
    run(compose_cfg([f"dataset.root={cifar_arrays}", *BASE, "model=composite", "model.hidden=8",
                     "model.group_nus=[0.3]", "model.update=joint"]), tmp_path / "composite")
    da, comp = load_checkpoint(tmp_path / "da")["model"], load_checkpoint(tmp_path / "composite")["model"]
    for key in da:
        torch.testing.assert_close(comp[key], da[key], rtol=1e-5, atol=1e-6)


def test_alternating_updates_train_one_group_per_epoch(cifar_arrays, tmp_path):
    cfg = compose_cfg([f"dataset.root={cifar_arrays}", *BASE, "model=composite", "model.hidden=8",
                       "model.group_nus=[0.7,null]", "schedule.epochs=1"])
    init = CompositeDA(3072, 8, [0.7, None], generator=torch.Generator().manual_seed(derive_seed(cfg.seed, "init")))
    run(cfg, tmp_path / "one_epoch")
    after = load_checkpoint(tmp_path / "one_epoch")["model"]
    assert not torch.equal(after["W"][:4], init.W[:4])  # group 0 trained in epoch 0
    assert torch.equal(after["W"][4:], init.W[4:]) and torch.equal(after["b"][4:], init.b[4:])
    assert not torch.equal(after["b_prime"], init.b_prime)
    run(compose_cfg([f"dataset.root={cifar_arrays}", *BASE, "model=composite", "model.hidden=8",
                     "model.group_nus=[0.7,null]", "schedule.epochs=2"]), tmp_path / "two_epochs")
    two = load_checkpoint(tmp_path / "two_epochs")["model"]
    assert torch.equal(two["W"][:4], after["W"][:4]) and not torch.equal(two["W"][4:], init.W[4:])


@pytest.mark.parametrize("step", ["autograd", "auto"])
def test_alternating_groups_switch_every_given_epochs(cifar_arrays, tmp_path, step):
    """model.switch_every=2 over 5 epochs: group 0 trains epochs 1-2, group 1 epochs 3-4, group 0 epoch 5,
    with autograd and with the composite's own step (auto), checkpoint by checkpoint."""
    from scheda.runs.rundir import checkpoint_name

    base = [o for o in BASE if not o.startswith("trainer.step")]
    cfg = compose_cfg([f"dataset.root={cifar_arrays}", *base, f"trainer.step={step}", "model=composite",
                       "model.hidden=8", "model.group_nus=[0.7,0.2]", "model.switch_every=2", "schedule.epochs=5",
                       "trainer.checkpoint_every=1"])
    init = CompositeDA(3072, 8, [0.7, 0.2], generator=torch.Generator().manual_seed(derive_seed(cfg.seed, "init")))
    run(cfg, tmp_path / "run")
    before = init.state_dict()
    for epoch, group in zip(range(1, 6), (0, 0, 1, 1, 0)):
        after = load_checkpoint(tmp_path / "run" / "checkpoints" / checkpoint_name(epoch))["model"]
        moved, still = slice(4 * group, 4 * group + 4), slice(4 * (1 - group), 4 * (1 - group) + 4)
        assert not torch.equal(after["W"][moved], before["W"][moved]), (epoch, group)
        assert torch.equal(after["W"][still], before["W"][still]) and torch.equal(after["b"][still], before["b"][still])
        before = after


def test_composite_is_evaluated_on_all_groups(cifar_arrays, tmp_path, caplog):
    summary = run(compose_cfg([f"dataset.root={cifar_arrays}", *TINY, "logger=none", "schedule=constant",
                               "schedule.epochs=2", "model=composite", "model.hidden=8", "classifier=torch_lr",
                               "classifier.c_log2_min=-2", "classifier.c_log2_max=0"]), tmp_path / "run")
    assert len(summary["evaluations"]) == 1 and 0 <= summary["evaluations"][0]["test_error"] <= 1
    assert json.loads((tmp_path / "run" / "results.json").read_text())["config"]["model"]["group_nus"] == [0.7, 0.1]
    # group_nus fixes both groups' noise: said once per run, not at every check of the config
    assert sum("model.group_nus fixes every group's noise level" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize("overrides, match", [
    (["model.group_nus=[]"], "model.group_nus is empty"),
    (["model.group_nus=[0.5,-1.5]"], r"model.group_nus\[1\]"),
    (["model.group_nus=[0.5,1.5]"], r"model.group_nus\[1\]=1.5 is outside noise=masking's range"),
    (["model.hidden=9"], "divisible"),
    (["model.update=sometimes"], "model.update"),
    (["model.switch_every=0"], "model.switch_every"),
])
def test_bad_composite_config(cifar_arrays, tmp_path, overrides, match):
    with pytest.raises(ConfigError, match=match):
        run(compose_cfg([f"dataset.root={cifar_arrays}", *BASE, "model=composite", "model.hidden=8", *overrides]),
            tmp_path / "bad")


@pytest.mark.parametrize("update", ["joint", "alternating"])
@pytest.mark.parametrize("activation", ["sigmoid", "relu"])
def test_the_composite_step_is_the_autograd_steps_update(update, activation):
    """CompositeStep against autograd on the model's own loss and after_backward: the same
    corruptions (each group's from the shared generator, in order), the same updates (to
    summation order) over minibatches of two epochs, a partial last one included, and the same
    losses; alternating moves only the epoch's group."""
    from scheda.model.network import CompositeDA as Net
    from scheda.model.noise import build_noise
    from scheda.model.optim import SGD
    from scheda.training.step import AutogradStep, CompositeStep, OneModel

    x_all = torch.rand(70, 48, generator=torch.Generator().manual_seed(0))
    noise, models, steps = build_noise({"name": "masking"}), [], []
    for kind in ("autograd", "composite"):
        model = Net(48, 12, [0.6, None, 0.2], update, activation=activation,
                    generator=torch.Generator().manual_seed(1))
        optimizer = SGD(model.parameters(), lr=0.05)
        steps.append(OneModel(AutogradStep(model, optimizer, noise), torch.device("cpu")) if kind == "autograd"
                     else CompositeStep(model, optimizer, noise, 32, torch.device("cpu")))
        models.append(model)
    start = models[0].W.detach().clone()
    generators = [torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)]
    order = torch.Generator().manual_seed(3)
    for epoch in range(2):
        for model in models:
            model.set_epoch(epoch)
        for idx in torch.randperm(70, generator=order).split(32):  # 32, 32, 6
            losses = [step(x_all, idx.unsqueeze(0), [0.4], [g]) for step, g in zip(steps, generators)]
            torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-5)
        if update == "alternating" and epoch == 0:  # group 0 moved, groups 1 and 2 did not
            assert not torch.equal(models[1].W[:4], start[:4]) and torch.equal(models[1].W[4:], start[4:])
    for name in ("W", "b", "b_prime"):
        torch.testing.assert_close(getattr(models[1], name), getattr(models[0], name), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(steps[1].take_loss_sums(), steps[0].take_loss_sums(), rtol=1e-5, atol=1e-4)


def test_a_composite_run_trains_by_its_own_step_as_autograd_would(cifar_arrays, tmp_path):
    """trainer.step=auto picks the composite's hand-written step under plain SGD (recorded in
    results.json) and the run ends where the autograd run of the same seed does, alternating over
    three epochs; with momentum it trains by autograd, and trainer.step=fused then is one line."""
    common = [f"dataset.root={cifar_arrays}", *TINY, "logger=none", "evaluate.enabled=false", "schedule=constant",
              "schedule.nu=0.3", "schedule.epochs=3", "model=composite", "model.hidden=8", "model.group_nus=[0.5,null]"]
    run(compose_cfg(common), tmp_path / "own")
    run(compose_cfg([*common, "trainer.step=autograd"]), tmp_path / "autograd")
    own = json.loads((tmp_path / "own" / "results.json").read_text())
    assert own["step"]["kind"] == "fused" and own["status"] == "completed"
    for key, value in load_checkpoint(tmp_path / "autograd")["model"].items():
        torch.testing.assert_close(load_checkpoint(tmp_path / "own")["model"][key], value, rtol=1e-4, atol=1e-5)
    run(compose_cfg([*common, "optim.momentum=0.9"]), tmp_path / "momentum")
    assert json.loads((tmp_path / "momentum" / "results.json").read_text())["step"]["kind"] == "autograd"
    with pytest.raises(ConfigError, match="trainer.step=fused trains a composite DA of cross-entropy alone, with plain SGD"):
        run(compose_cfg([*common, "optim.momentum=0.9", "trainer.step=fused"]), tmp_path / "refused")
