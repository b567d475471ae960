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
        loader.keep = True
        ahead = loader.load_sweep_config(master, ["model.hidden=8"])  # the sweeper's check
        assert len(compositions) == 2 and ahead.model.hidden == 8

        sent = pickle.loads(pickle.dumps(loader))  # as joblib's and Slurm's launchers send it
        assert sent.ahead == {} and not sent.keep
        assert sent.load_sweep_config(master, ["model.hidden=8"]).model.hidden == 8
        assert len(compositions) == 3

        assert loader.load_sweep_config(master, ["model.hidden=8"]) is ahead  # the launcher's call
        assert len(compositions) == 3
        loader.keep = False
        again = loader.load_sweep_config(master, ["model.hidden=8"])  # a job run a second time composes anew
        assert again is not ahead and again.model.hidden == 8
        assert len(compositions) == 4 and loader.ahead == {}


# The order of an installed ``scheda-train -m`` outside a checkout: the sweeper's module (and with
# it any Hydra core plugin it imports) is imported before Hydra's first plugin scan, which executes
# the core plugins' modules again, and the scan does not see the sweeper itself (an editable install
# hides it; here a path without the checkout's hydra_plugins stands for that).
IMPORTED_BEFORE_THE_SCAN = """
import sys
sys.path = [p for p in sys.path if p not in ("", {repo!r})]
import hydra_plugins.scheda_sweeper as sweeper
from hydra.core.plugins import Plugins
Plugins.instance().register(sweeper.ComposeOnceSweeper)
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from scheda.config import register_configs
register_configs()
ran = []
with initialize_config_dir(config_dir={configs!r}, version_base="1.3"):
    GlobalHydra.instance().hydra.multirun(config_name="train", task_function=lambda cfg: ran.append(cfg.model.hidden),
                                          overrides=["model.hidden=8,16", "hydra.sweep.dir={sweep}", *{quiet!r}],
                                          with_log_configuration=False)
print(sorted(ran))
"""


def test_the_sweeper_works_when_imported_before_hydras_plugin_scan(tmp_path):
    """Hydra's scan makes a new BasicSweeper class; a sweeper subclassing the class imported
    before it failed every installed sweep (``super(type, obj)``)."""
    import subprocess
    import sys

    code = IMPORTED_BEFORE_THE_SCAN.format(repo=str(REPO), configs=str(REPO / "configs"),
                                           sweep=str(tmp_path / "sweep"), quiet=QUIET)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "[8, 16]"
