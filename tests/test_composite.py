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
])
def test_bad_composite_config(cifar_arrays, tmp_path, overrides, match):
    with pytest.raises(ConfigError, match=match):
        run(compose_cfg([f"dataset.root={cifar_arrays}", *BASE, "model=composite", "model.hidden=8", *overrides]),
            tmp_path / "bad")
