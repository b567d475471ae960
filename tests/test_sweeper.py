"""The sweeper of ``-m`` (hydra_plugins/scheda_sweeper): Hydra's basic sweeper whose launcher
reuses the configs its check composed, so a job's config is composed once, and a bad job is
still refused before any job runs. Hydra's own multirun, with a task that records its configs."""

from __future__ import annotations

import pickle

import pytest
from hydra import compose, initialize_config_dir
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import ConfigCompositionException

from helpers import REPO
from hydra_plugins.scheda_sweeper import ComposedAhead

QUIET = ["hydra.job_logging.root=null", "hydra.hydra_logging.root=null",  # leave the test runner's logging be
         "~hydra.callbacks.sweep_summary"]  # it summarises results.json files this task does not write


@pytest.fixture
def compositions(monkeypatch) -> list[list[str]]:
    """The overrides of every config Hydra composes from now on."""
    composed: list[list[str]] = []
    real = ConfigLoaderImpl.load_configuration

    def counting(self, config_name, overrides, *args, **kwargs):
        composed.append(list(overrides))
        return real(self, config_name, overrides, *args, **kwargs)

    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", counting)
    return composed


def multirun(tmp_path, overrides: list[str]) -> list[int]:
    """``scheda-train -m overrides`` with a task that records each job's model.hidden."""
    ran: list[int] = []
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        GlobalHydra.instance().hydra.multirun(
            config_name="train", task_function=lambda cfg: ran.append(cfg.model.hidden),
            overrides=[*overrides, f"hydra.sweep.dir={tmp_path / 'sweep'}", *QUIET], with_log_configuration=False)
    return ran


def test_each_job_is_composed_once_and_runs_its_own_config(tmp_path, compositions):
    ran = multirun(tmp_path, ["model.hidden=8,16,32", "optim.lr=0.01,0.05"])
    assert sorted(ran) == [8, 8, 16, 16, 32, 32]
    assert len(compositions) == 1 + 6  # the sweep's own config, then each job's once (Hydra's basic sweeper: 1 + 12)
    jobs = [c for c in compositions if any(o.startswith("model.hidden=") and "," not in o for o in c)]
    assert len({tuple(c) for c in jobs}) == 6


def test_a_bad_job_fails_the_sweep_before_any_job_runs(tmp_path, compositions):
    ran: list[int] = []
    with pytest.raises(ConfigCompositionException, match="many"):
        ran = multirun(tmp_path, ["model.hidden=8,many,16"])
    assert ran == []
    assert not (tmp_path / "sweep" / "0").exists()


def test_a_config_composed_ahead_is_handed_out_once_and_never_sent_to_another_process(compositions):
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        master = compose(config_name="train", return_hydra_config=True)
        loader = ComposedAhead(GlobalHydra.instance().config_loader())
        loader.compose_ahead(master, ["model.hidden=8"])
        assert len(compositions) == 2
        ahead = loader.ahead[(id(master), ("model.hidden=8",))]

        sent = pickle.loads(pickle.dumps(loader))  # as joblib's and Slurm's launchers send it
        assert sent.ahead == {}
        assert sent.load_sweep_config(master, ["model.hidden=8"]).model.hidden == 8
        assert len(compositions) == 3

        assert loader.load_sweep_config(master, ["model.hidden=8"]) is ahead
        assert len(compositions) == 3
        again = loader.load_sweep_config(master, ["model.hidden=8"])  # a job run a second time composes anew
        assert again is not ahead and again.model.hidden == 8
        assert len(compositions) == 4
