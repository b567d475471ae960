"""The sweeper of ``scheda-train -m``: Hydra's basic sweeper, composing each job's config once.

Hydra's basic sweeper composes every job's config to refuse a bad job before any job runs, and
its launcher composes each config again to run it: about 0.15 s of CPU per job, twice. Here a
launcher that runs the jobs in this process (Hydra's basic launcher) takes the config the check
composed; one that runs them in other processes (joblib, Slurm) composes there, as before. The
configs of a batch wait for their jobs in memory (about 0.2 MB each; ``hydra.sweeper.max_batch_size``
bounds a batch).

It wraps Hydra's basic sweeper instead of subclassing it. Hydra's plugin scan executes the
modules of ``hydra._internal.core_plugins`` again when they are already imported, which makes a
new ``BasicSweeper`` class; a subclass made from the class imported before the scan then fails
in ``BasicSweeper.__init__`` (``super(type, obj): obj must be an instance or subtype of type``).
That happened whenever this module was imported before Hydra's first scan: in every installed
``scheda-train -m`` and ``scheda-reproduce`` outside a checkout. The classes it needs are taken
from Hydra's modules when a sweep starts, after any scan.

This package is in ``hydra_plugins`` because Hydra instantiates sweepers from there only.
``scheda.config.register_configs`` registers it with Hydra: an editable install (setuptools'
default import hook) hides it from Hydra's scan of the namespace (facebookresearch/hydra#2359).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_loader import ConfigLoader
from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from scheda.utils.errors import SchedaError

IN_PROCESS_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"


def runs_in_process(launcher: Any) -> bool:
    """Whether ``launcher`` runs the jobs in this process (Hydra's basic launcher)."""
    kind = type(launcher)
    return f"{kind.__module__}.{kind.__qualname__}" == IN_PROCESS_LAUNCHER


def stopping_jobs(launcher: Any) -> Any:
    """While a sweep's jobs run: where they run in processes of their own (joblib, submitit_local),
    a signal stops them with their checkpoints first (scheda.utils.sweep_signals.jobs_stop_first);
    a Slurm sweep's jobs, in Slurm's queue, are cancelled (each running one checkpoints first)
    rather than left running with nobody to collect them; jobs in this process (Hydra's basic
    launcher) answer it themselves."""
    import time
    from contextlib import nullcontext
    from functools import partial

    from scheda.utils.sweep_signals import jobs_stop_first
    from scheda.utils.slurm import cancel_submitted

    if runs_in_process(launcher):
        return nullcontext()
    kind = type(launcher)
    if kind.__module__.startswith("hydra_plugins.hydra_submitit_launcher") and kind.__name__ == "SlurmLauncher":
        folder = Path(str(launcher.params["submitit_folder"]))  # <sweep dir>/.submitit/%j: a job's folder
        while "%" in folder.name:
            folder = folder.parent
        return jobs_stop_first(cancel=partial(cancel_submitted, folder, time.time()))
    return jobs_stop_first(joblib="joblib" in kind.__module__)


@dataclass
class ComposeOnceSweeperConf:
    """``hydra/sweeper=compose_once``: the basic sweeper's settings (``hydra.sweeper.params``)."""

    _target_: str = "hydra_plugins.scheda_sweeper.ComposeOnceSweeper"
    max_batch_size: Optional[int] = None
    params: Optional[Dict[str, str]] = None


ConfigStore.instance().store(group="hydra/sweeper", name="compose_once", node=ComposeOnceSweeperConf,
                             provider="scheda")


class ComposedAhead(ConfigLoader):
    """Hydra's config loader that, once ``keep`` is set, keeps each job's config that the sweeper's
    check composes and hands it, once, to the launcher that asks for the same job; anything
    else goes to Hydra's loader."""

    def __init__(self, loader: ConfigLoader) -> None:
        self.loader = loader
        self.keep = False
        self.ahead: dict[tuple[int, tuple[str, ...]], DictConfig] = {}

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: List[str]) -> DictConfig:
        key = (id(master_config), tuple(sweep_overrides))
        config = self.ahead.pop(key, None)
        if config is None:
            config = self.loader.load_sweep_config(master_config, list(sweep_overrides))
            if self.keep:  # the check's composition: the launcher's call takes it
                self.ahead[key] = config
        return config

    def __getstate__(self) -> dict[str, Any]:
        """A launcher that sends its context to other processes sends the loader without the
        configs composed here (those processes compose their own)."""
        return {"loader": self.loader, "keep": False, "ahead": {}}

    def load_configuration(self, *args: Any, **kwargs: Any) -> DictConfig:
        return self.loader.load_configuration(*args, **kwargs)

    def get_search_path(self) -> Any:
        return self.loader.get_search_path()

    def get_sources(self) -> Any:
        return self.loader.get_sources()

    def list_groups(self, parent_name: str) -> List[str]:
        return self.loader.list_groups(parent_name)

    def get_group_options(self, *args: Any, **kwargs: Any) -> List[str]:
        return self.loader.get_group_options(*args, **kwargs)

    def compute_defaults_list(self, *args: Any, **kwargs: Any) -> Any:
        return self.loader.compute_defaults_list(*args, **kwargs)


class ComposeOnceSweeper(Sweeper):
    """Hydra's basic sweeper (the same jobs, batches and check), whose in-process launcher reuses
    the configs the check composed."""

    def __init__(self, max_batch_size: Optional[int] = None, params: Optional[Dict[str, str]] = None) -> None:
        self.max_batch_size, self.params = max_batch_size, params
        self.basic: Optional[Sweeper] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper  # as Hydra's last scan left it

        composed = ComposedAhead(hydra_context.config_loader)
        self.basic = BasicSweeper(max_batch_size=self.max_batch_size, params=self.params)
        self.basic.setup(hydra_context=HydraContext(config_loader=composed, callbacks=hydra_context.callbacks),
                         task_function=task_function, config=config)
        composed.keep = runs_in_process(self.basic.launcher)

    def sweep(self, arguments: List[str]) -> Any:
        """The basic sweep, one at a time in its folder (the same command run again while the first
        still runs is refused in one line: it went on to the jobs the first had not reached, and
        each ended with half a summary); where its jobs run in processes of their own (joblib,
        Slurm), a signal stops them with their checkpoints first (jobs in this process answer it
        themselves)."""
        from scheda.utils.lock import hold

        assert self.basic is not None, "setup() first"
        folder = Path(self.basic.config.hydra.sweep.dir)
        folder.mkdir(parents=True, exist_ok=True)  # as Hydra would: one that cannot be made is Hydra's one line
        with hold(folder, "sweep"), stopping_jobs(self.basic.launcher):
            try:
                return self.basic.sweep(arguments)
            except Exception as exc:  # a job failed: Hydra raises it once every job ran, before its callbacks
                summarise_ended(folder)  # so the summary of the jobs comes here
                line = killed_worker(exc)
                if line is not None:
                    raise SchedaError(line) from None
                raise


def summarise_ended(folder: Path) -> None:
    """The sweep's job lines and summary.md, where the sweep ends by an error (Hydra's end-of-sweep
    callbacks, which write them, do not run after one)."""
    import os

    from scheda.runs.reentry import INVOCATION
    from scheda.runs.sweep_summary import summarise

    summarise(folder, os.environ.get(INVOCATION))


def killed_worker(exc: BaseException) -> str | None:
    """One line for a joblib worker killed outright (SIGKILL: the OOM killer, ``kill -9``), after
    which joblib kills the sweep's other workers too (their jobs stop where their last checkpoint
    stands) and raises loky's TerminatedWorkerError, a page of traceback; None for anything else."""
    if type(exc).__name__ != "TerminatedWorkerError":
        return None
    codes = re.search(r"exit codes of the workers are \{([^}]*)\}", str(exc))
    return (f"a joblib worker was killed (exit {codes.group(1) if codes else 'code not given'}: the OOM killer, or "
            f"kill -9) and joblib stopped the sweep's other jobs with it: the same command resumes each from its "
            f"newest checkpoint (if memory ran out, fewer jobs at once: hydra.launcher.n_jobs, or "
            f"scheda-reproduce's n_jobs)")
