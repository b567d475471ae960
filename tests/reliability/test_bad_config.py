"""Every parameter outside its domain fails before any work, with one line naming the key and
the allowed range; any schedule either yields nu in [0, 1) under the masking noise or such an error."""

import math

import pytest
from hypothesis import given, settings, strategies as st

from scheda.utils.errors import ConfigError
from scheda.run import run
from scheda.config import typed
from scheda.model.noise import Masking
from scheda.model.schedule import build_schedule

from helpers import STAGES, TINY, compose_cfg, run_train

CASES = [
    (["schedule=constant", "schedule.nu=1.0"], "schedule.nu=1.0", "[0, 1)"),
    (["schedule=constant", "schedule.nu=-0.1"], "schedule.nu=-0.1", ">= 0"),
    (["schedule=constant", "schedule.epochs=0"], "schedule.epochs=0", ">= 1"),
    (["schedule=decreasing", "schedule.nu0=1.2"], "schedule.nu0=1.2", "[0, 1)"),
    (["schedule=decreasing", "schedule.delta_nu=0"], "schedule.delta_nu=0", "[1e-06, 1)"),
    (["schedule=decreasing", "schedule.delta_nu=-0.1"], "schedule.delta_nu=-0.1", "[1e-06, 1)"),
    (["schedule=decreasing", "schedule.K=0"], "schedule.K=0", ">= 1"),
    (["schedule=decreasing", "schedule.T=20"], "schedule.T=20", "below 0: use T <= 7"),
    (["schedule=increasing", "schedule.nu_final=0.05"], "schedule.nu_final=0.05", ">="),
    (["schedule=stages", "schedule.stages=[]"], "schedule.stages", "at least one"),
    (["schedule=stages", "schedule.stages=[{nu:0.3,epochs:0}]"], "schedule.stages[0].epochs=0", ">= 1"),
    (["schedule=random_uniform", "schedule.high=1.5"], "schedule.high=1.5", "[0, 1)"),
    (["schedule=random_discrete", "schedule.values=[0.2,1.0]"], "schedule.values[1]=1.0", "[0, 1)"),
    (["schedule.name=cosine"], "schedule.name='cosine'", "decreasing"),
    (["noise.name=dropout"], "noise.name='dropout'", "masking"),
    (["model.hidden=0"], "model.hidden=0", ">= 1"),
    (["model.hidden=-5"], "model.hidden=-5", ">= 1"),
    (["model.activation=tanh"], "model.activation='tanh'", "sigmoid"),
    (["model.loss=hinge"], "model.loss='hinge'", "cross_entropy"),
    (["model.name=vae"], "model.name='vae'", "da"),
    (["optim.lr=0"], "optim.lr=0.0", "> 0"),
    (["optim.lr=-0.01"], "optim.lr=-0.01", "> 0"),
    (["optim.momentum=1"], "optim.momentum=1.0", "[0, 1)"),
    (["optim.name=adam"], "optim.name='adam'", "sgd"),
    (["trainer.batch_size=0"], "trainer.batch_size=0", ">= 1"),
    (["trainer.batch_size=81"], "trainer.batch_size=81", "80 training examples"),
    (["trainer.max_epochs=0"], "trainer.max_epochs=0", ">= 1"),
    (["trainer.checkpoint_every=-1"], "trainer.checkpoint_every=-1", ">= 0"),
    (["trainer.keep_checkpoints=0"], "trainer.keep_checkpoints=0", ">= 1 (the newest kept; a resume needs one)"),
    (["trainer.device=tpu"], "trainer.device='tpu'", "auto, cpu, cuda"),
    (["trainer.cuda_graph=true"], "trainer.cuda_graph=true", "needs a CUDA device"),
    (["trainer.step=triton"], "trainer.step=triton", "needs a CUDA device"),
    (["dataset.val_size=0"], "dataset.val_size=0", "1..99"),
    (["dataset.name=mnist"], "dataset.name='mnist'", "cifar10"),
    (["logger.tensorboard.name=wandb"], "logger.tensorboard.name='wandb'", "tensorboard"),
    (["logger=[tensorboard,csv]", "logger.csv.file=/tmp/m.csv"], "logger.csv.file='/tmp/m.csv'", "inside the run directory"),
    (["classifier.c_log2_step=0"], "classifier.c_log2_step=0", "> 0"),
    (["classifier.c_log2_min=5", "classifier.c_log2_max=1"], "classifier.c_log2_min=5", "<="),
    (["classifier.eps=0"], "classifier.eps=0", "> 0"),
    (["classifier=torch_lr", "classifier.dtype=float16"], "classifier.dtype='float16'", "float32 or float64"),
    (["classifier=knn", "classifier.k=[0]"], "classifier.k=[0]", ">= 1"),
    (["classifier=knn", "finetune.enabled=true"], "finetune.init_output=classifier", "classifier=knn has none"),
]


@pytest.mark.parametrize("overrides, key, allowed", CASES, ids=[c[1] for c in CASES])
def test_out_of_domain_value_fails_before_any_work(cifar_arrays, tmp_path, overrides, key, allowed):
    schedule = [] if any(o.startswith("schedule=") for o in overrides) else STAGES
    cfg = compose_cfg([f"dataset.root={cifar_arrays}", *TINY, *schedule, *overrides])
    with pytest.raises(ConfigError) as exc:
        run(cfg, tmp_path / "run")
    message = str(exc.value)
    assert "\n" not in message and key in message and allowed in message, message
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_out_of_domain_value_through_the_entry_point_is_one_line(tmp_path):
    # Fails before the data are looked for: no data root is needed.
    proc = run_train(["schedule=decreasing", "schedule.delta_nu=0", f"hydra.run.dir={tmp_path / 'run'}"],
                     cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "error: schedule.delta_nu=0.0 must be in [1e-06, 1)"]


@pytest.mark.parametrize("override", ["model.hidden=many", "optim.lr=fast", "schedule.K=0.5", "trainer.batchsize=3"])
def test_wrong_type_or_unknown_key_fails_at_composition(tmp_path, override):
    proc = run_train([override, f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path)
    assert proc.returncode == 1 and override.split("=")[0] in proc.stderr
    assert not (tmp_path / "run").exists()


values = st.one_of(st.floats(-2, 2), st.just(math.nan), st.just(math.inf), st.integers(-3, 3), st.none(),
                   st.text(max_size=3))
epochs = st.one_of(st.integers(-3, 50), st.floats(-1, 5), st.none())


@settings(max_examples=300, deadline=None)
@given(
    schedule=st.one_of(
        st.fixed_dictionaries({"name": st.just("constant"), "nu": values, "epochs": epochs}),
        st.fixed_dictionaries({"name": st.sampled_from(["decreasing", "increasing"]), "nu0": values,
                               "delta_nu": values, "K": epochs, "initial_epochs": epochs,
                               "T": st.one_of(st.none(), epochs), "nu_final": st.one_of(st.none(), values)}),
        st.fixed_dictionaries({"name": st.just("stages"), "stages": st.lists(
            st.fixed_dictionaries({"nu": values, "epochs": epochs}), max_size=4)}),
        st.fixed_dictionaries({"name": st.just("random_uniform"), "low": values, "high": values,
                               "epochs": epochs}),
        st.fixed_dictionaries({"name": st.just("random_discrete"), "values": st.lists(values, max_size=4),
                               "epochs": epochs}),
        st.fixed_dictionaries({"name": st.text(max_size=5)}),
    ),
    max_epochs=st.one_of(st.none(), st.integers(-2, 60)),
)
def test_any_schedule_is_valid_or_one_clear_error(schedule, max_epochs):
    try:
        s = build_schedule(schedule, max_epochs)
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith(("schedule", "trainer.max_epochs")) and "\n" not in message
        return
    nus = s.epoch_nus()
    assert len(nus) == (max_epochs or s.total_epochs) and nus
    assert all(nu is None or 0 <= nu < math.inf for nu in nus)
    try:  # the masking noise (the default) takes a probability: what it allows stays in [0, 1)
        Masking().check_levels(typed("schedule", schedule).nu_settings())
    except ConfigError as exc:
        assert str(exc).startswith("schedule") and "\n" not in str(exc) and "[0, 1)" in str(exc)
        return
    assert all(nu is None or 0 <= nu < 1 for nu in nus)
