"""``hydra/sweeper=optuna``: a search beyond grids, with Optuna, whose study lives in the sweep folder.

    scheda-train -m hydra/sweeper=optuna hydra.sweeper.n_trials=30 \\
        'schedule.nu0=interval(0.3,0.8)' 'schedule.delta_nu=choice(0.05,0.1)' 'optim.lr=tag(log,interval(0.001,0.1))'

Each trial is one job of the sweep (its folder ``<sweep dir>/<job number>``), with the values the
study's sampler (TPE, seeded by ``hydra.sweeper.seed``) asked for; its objective is the run's
final validation error, which ``scheda-train`` returns (a trial whose run fails, or evaluates
nothing, is a failed trial). The study is SQLite in ``<sweep dir>/optuna.db``: the same command
run again continues it, running only the trials that ``n_trials`` still asks for (completed ones
are not run again; a trial that a stopped or killed sweep left running goes on first, with its
own values in its own folder, so its run resumes from its checkpoint; the sampler's seed moves on
by the trials already asked, so a continuation asks new values).

Search spaces use Hydra's sweep syntax: ``interval(a,b)`` (floats; ints when both are ints),
``tag(log,interval(a,b))`` (log scale), ``choice(a,b,...)`` and ``range(a,b[,step])``. Given on
the command line or as ``hydra.sweeper.params``.

Scheda's own: the ``hydra-optuna-sweeper`` plugin caps Optuna below 3, whose SQLite storage no
longer works with SQLAlchemy 2 (and pinning SQLAlchemy breaks Alembic), and it runs
``n_trials`` more on every invocation. Needs Optuna: ``pip install 'scheda[optuna]'``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from hydra_plugins.scheda_sweeper import killed_worker, stopping_jobs, summarise_ended
from scheda.utils.errors import SchedaError

log = logging.getLogger(__name__)


@dataclass
class OptunaSweeperConf:
    """``hydra/sweeper=optuna``: the study's size, direction, sampler seed and search space."""

    _target_: str = "hydra_plugins.scheda_sweeper.optuna_sweeper.OptunaSweeper"
    n_trials: int = 20  # in all, over every invocation of the same command
    n_jobs: int = 1  # trials asked and launched at once (a parallel launcher runs them together)
    direction: str = "minimize"  # the final validation error
    seed: Optional[int] = 0  # the TPE sampler's seed
    study_name: str = "scheda"
    storage: Optional[str] = None  # null: sqlite:///<sweep dir>/optuna.db
    params: Dict[str, str] = field(default_factory=dict)  # key: sweep syntax, as on the command line


ConfigStore.instance().store(group="hydra/sweeper", name="optuna", node=OptunaSweeperConf, provider="scheda")


def _space(overrides: List[Override]) -> tuple[list[str], dict[str, Any]]:
    """The fixed overrides (as given) and the searched keys with their sweep values."""
    fixed, space = [], {}
    for o in overrides:
        if o.is_sweep_override():
            space[o.get_key_element()] = o.value()
        else:
            fixed.append(o.input_line)
    return fixed, space


def _suggest(trial, key: str, sweep: Any) -> Any:
    if isinstance(sweep, ChoiceSweep):
        return trial.suggest_categorical(key, list(sweep.list))
    if isinstance(sweep, RangeSweep):
        step = sweep.step or 1
        values, v = [], sweep.start
        while (v < sweep.stop) if step > 0 else (v > sweep.stop):
            values.append(v)
            v += step
        return trial.suggest_categorical(key, values)
    if isinstance(sweep, IntervalSweep):
        log_scale = "log" in sweep.tags
        if isinstance(sweep.start, int) and isinstance(sweep.end, int):
            return trial.suggest_int(key, sweep.start, sweep.end, log=log_scale)
        return trial.suggest_float(key, float(sweep.start), float(sweep.end), log=log_scale)
    raise ValueError(f"{key}: use interval(a,b), tag(log,interval(a,b)), choice(...) or range(...) to search it")


def _consecutive(trials: list, size: int) -> list[list]:
    """``trials`` in launches of at most ``size`` with consecutive numbers (a launch numbers its
    jobs' folders from its first)."""
    launches: list[list] = []
    for trial in sorted(trials, key=lambda t: t.number):
        if launches and len(launches[-1]) < size and launches[-1][-1].number + 1 == trial.number:
            launches[-1].append(trial)
        else:
            launches.append([trial])
    return launches


class OptunaSweeper(Sweeper):
    def __init__(self, n_trials: int = 20, n_jobs: int = 1, direction: str = "minimize", seed: Optional[int] = 0,
                 study_name: str = "scheda", storage: Optional[str] = None, params: Optional[Dict[str, str]] = None):
        self.n_trials, self.n_jobs, self.direction, self.seed = n_trials, max(1, n_jobs), direction, seed
        self.study_name, self.storage, self.params = study_name, storage, dict(params or {})
        self.launcher = self.config = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context,
                                                                task_function=task_function, config=config)

    def sweep(self, arguments: List[str]) -> Any:
        try:
            import optuna
        except ImportError:
            raise SystemExit("error: hydra/sweeper=optuna needs Optuna: pip install 'scheda[optuna]'") from None
        from hydra.core.utils import JobStatus

        parser = OverridesParser.create()
        given = [f"{k}={v}" for k, v in self.params.items()]
        fixed, space = _space(parser.parse_overrides(given + list(arguments)))
        if not space:
            raise SystemExit("error: hydra/sweeper=optuna has nothing to search: give a key a sweep, e.g. "
                             "'schedule.nu=interval(0.1,0.7)'")
        folder = Path(self.config.hydra.sweep.dir)
        folder.mkdir(parents=True, exist_ok=True)
        storage = self.storage or f"sqlite:///{folder.resolve() / 'optuna.db'}"
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(study_name=self.study_name, storage=storage, direction=self.direction,
                                    load_if_exists=True)
        # The sampler's seed moves on by the trials the study holds: a continued search seeded as the
        # first invocation was would draw the first trial's values again (its startup trials are random).
        asked = len(study.get_trials(deepcopy=False))
        study.sampler = optuna.samplers.TPESampler(seed=None if self.seed is None else self.seed + asked)
        stopped = []  # a stopped (or killed) sweep's trials: they go on, in their own folders
        for stale in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            if self.storage is not None and not (folder / str(stale.number)).is_dir():
                continue  # another sweep's, maybe running now: it shares the study through hydra.sweeper.storage
            if set(stale.params) == set(space):
                stopped.append(stale)
            else:  # another search now: its values no longer make a job of this one
                study.tell(stale.number, state=optuna.trial.TrialState.FAIL)
        done = len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))
        left = max(0, self.n_trials - done - len(stopped))
        log.info("optuna study %s in %s: %d trials completed, %d stopped before to go on, %d new to run",
                 self.study_name, storage, done, len(stopped), left)
        returns = []

        def launch(numbers: list[int], values: list[dict[str, Any]]) -> None:
            batch = [fixed + [f"{k}={v[k]}" for k in space] for v in values]
            results = self.launcher.launch(batch, initial_job_idx=numbers[0])  # job folder = trial number
            for trial, result in zip(numbers, results):
                value = result.return_value if result.status == JobStatus.COMPLETED else None
                if value is None:
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
                else:
                    study.tell(trial, float(value))
            returns.append(results)

        try:
            with stopping_jobs(self.launcher):  # a signal: the running trials' jobs checkpoint first
                for trials in _consecutive(stopped, self.n_jobs):
                    launch([t.number for t in trials], [t.params for t in trials])
                while left > 0:
                    trials = [study.ask() for _ in range(min(self.n_jobs, left))]
                    launch([t.number for t in trials],
                           [{k: _suggest(t, k, s) for k, s in space.items()} for t in trials])
                    left -= len(trials)
        except Exception as exc:  # noqa: BLE001 - only a killed worker is reworded
            line = killed_worker(exc)
            if line is None:
                raise
            summarise_ended(folder)  # its trials stay running in the study: the same command resumes them first
            raise SchedaError(line) from None
        complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        if not complete:  # nothing to report: say so and exit 1, as a grid sweep with a failed job does
            summarise_ended(folder)
            raise SystemExit(f"error: no trial of the search completed ({len(study.trials)} failed): the job lines "
                             f"above say why")
        best = study.best_trial
        log.info("optuna best: trial %d, value %.6g, %s", best.number, best.value,
                 " ".join(f"{k}={v}" for k, v in best.params.items()))
        return returns

