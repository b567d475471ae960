"""The sweeper of ``scheda-train -m``: Hydra's basic sweeper, composing each job's config once.

Hydra's basic sweeper composes every job's config to refuse a bad job before any job runs, and
its launcher composes each config again to run it: about 0.15 s of CPU per job, twice. Here a
launcher that runs the jobs in this process (Hydra's basic launcher) takes the config the check
composed; one that runs them in other processes (joblib, Slurm) composes there, as before. The
configs of a batch wait for their jobs in memory (about 0.2 MB each; ``hydra.sweeper.max_batch_size``
bounds a batch).

This package is in ``hydra_plugins`` because Hydra instantiates sweepers from there only.
``scheda.config.register_configs`` registers it with Hydra: an editable install (setuptools'
default import hook) hides it from Hydra's scan of the namespace (facebookresearch/hydra#2359).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from hydra._internal.core_plugins.basic_launcher import BasicLauncher
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_loader import ConfigLoader
from hydra.core.config_store import ConfigStore
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


@dataclass
class ComposeOnceSweeperConf:
    """``hydra/sweeper=compose_once``: the basic sweeper's settings (``hydra.sweeper.params``)."""

    _target_: str = "hydra_plugins.scheda_sweeper.ComposeOnceSweeper"
    max_batch_size: Optional[int] = None
    params: Optional[Dict[str, str]] = None


ConfigStore.instance().store(group="hydra/sweeper", name="compose_once", node=ComposeOnceSweeperConf,
                             provider="scheda")


class ComposedAhead(ConfigLoader):
    """Hydra's config loader, whose ``load_sweep_config`` hands out, once, the config that
    ``compose_ahead`` composed for the same job; anything else goes to Hydra's loader."""

    def __init__(self, loader: ConfigLoader) -> None:
        self.loader = loader
        self.ahead: dict[tuple[int, tuple[str, ...]], DictConfig] = {}

    def compose_ahead(self, master_config: DictConfig, sweep_overrides: Sequence[str]) -> None:
        config = self.loader.load_sweep_config(master_config, list(sweep_overrides))
        self.ahead[(id(master_config), tuple(sweep_overrides))] = config

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: List[str]) -> DictConfig:
        config = self.ahead.pop((id(master_config), tuple(sweep_overrides)), None)
        return config if config is not None else self.loader.load_sweep_config(master_config, sweep_overrides)

    def __getstate__(self) -> dict[str, Any]:
        """A launcher that sends its context to other processes sends the loader without the
        configs composed here (those processes compose their own)."""
        return {"loader": self.loader, "ahead": {}}

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


class ComposeOnceSweeper(BasicSweeper):
    """Hydra's basic sweeper (the same jobs, batches and check), whose launcher reuses the
    configs the check composed."""

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.composed = ComposedAhead(hydra_context.config_loader)
        super().setup(hydra_context=HydraContext(config_loader=self.composed, callbacks=hydra_context.callbacks),
                      task_function=task_function, config=config)

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        """Composes every job of the batch before any runs (a bad one fails the sweep here), and
        keeps the configs for a launcher that runs the jobs in this process."""
        if not isinstance(self.launcher, BasicLauncher):
            return super().validate_batch_is_legal(batch)
        for overrides in batch:
            self.composed.compose_ahead(self.config, overrides)
