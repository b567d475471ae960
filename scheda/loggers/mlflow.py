"""``logger=mlflow``: each run as an MLflow run (``pip install 'scheda[mlflow]'``): its
hyper-parameters as params, every scalar as a metric, its run directory as the tag
``scheda.run_dir``; images and text stay with TensorBoard (MLflow would write them as artifacts
outside the run directory). The default store is ``outputs/mlflow.db`` (SQLite, beside the runs:
``mlflow ui --backend-store-uri sqlite:///outputs/mlflow.db``); ``$MLFLOW_TRACKING_URI`` or
``logger.mlflow.tracking_uri`` name another. A resumed run continues its own MLflow run (found by that tag)."""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

from scheda.config import register
from scheda.loggers.base import GROUP, LoggerConfig, MetricLogger

RUN_DIR_TAG = "scheda.run_dir"
DEFAULT_URI = "sqlite:///outputs/mlflow.db"  # relative to the working directory, where Hydra's outputs/ is
STATUS = {"completed": "FINISHED", "interrupted": "KILLED"}  # anything else: FAILED


@register(GROUP)
@dataclass
class MLflowConfig(LoggerConfig):
    name: str = "mlflow"
    tracking_uri: Optional[str] = None  # null: $MLFLOW_TRACKING_URI, else sqlite:///outputs/mlflow.db
    experiment: str = "scheda"
    run_name: Optional[str] = None  # null: a sweep job's swept values, else the run directory's name

    def check(self) -> None:
        if importlib.util.find_spec("mlflow") is None:
            raise self.invalid("name", "needs MLflow, which is not installed: pip install 'scheda[mlflow]'")
        if not self.experiment:
            raise self.invalid("experiment", "must name an MLflow experiment")

    def uri(self) -> str:
        return self.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_URI

    def where(self, run_dir: Path) -> str | None:
        return f"MLflow: experiment {self.experiment} in {self.uri()} (mlflow ui --backend-store-uri {self.uri()})"

    def build(self, run_dir: Path, purge_epoch: int | None) -> "MLflowLogger":
        return MLflowLogger(self.uri(), self.experiment, self.run_name or Path(run_dir).resolve().name, Path(run_dir))

    @classmethod
    def label(cls, node, label: str) -> None:
        node.run_name = label if not node.get("run_name") else f"{node.run_name}/{label}"


@contextlib.contextmanager
def _first_use(uri: str) -> Iterator[None]:
    """One process at a time starts on a SQLite store: a new store's first users each create its
    tables (MLflow's migrations), and parallel jobs of a sweep (joblib) would clash ("duplicate
    column"). A file lock beside the database, held while the client, the experiment and the run
    are made; other stores need none."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    db = Path(uri[len("sqlite:///"):])
    db.parent.mkdir(parents=True, exist_ok=True)  # SQLite makes the file, not its folder
    with open(db.with_name(db.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class MLflowLogger(MetricLogger):
    """MLflow's client, started at the first record (no server, no global active run)."""

    def __init__(self, tracking_uri: str, experiment: str, run_name: str, run_dir: Path):
        self.tracking_uri, self.experiment, self.run_name = tracking_uri, experiment, run_name
        self.run_dir = str(Path(run_dir).resolve())
        self._client: Any = None
        self.run_id: str | None = None

    @property
    def client(self):
        if self._client is None:
            with _first_use(self.tracking_uri):
                self._client = self._start()
        return self._client

    def _start(self):
        """The client, its experiment and this run's MLflow run (a resumed run's own, found by its tag)."""
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=self.tracking_uri)
        experiment_id = self._experiment(client)
        quoted = self.run_dir.replace("'", "\\'")
        earlier = client.search_runs([experiment_id], filter_string=f"tags.`{RUN_DIR_TAG}` = '{quoted}'",
                                     max_results=1, order_by=["attributes.start_time DESC"])
        if earlier:  # a resumed run: continue its records
            self.run_id = earlier[0].info.run_id
            client.update_run(self.run_id, status="RUNNING")
        else:
            self.run_id = client.create_run(experiment_id, run_name=self.run_name,
                                            tags={RUN_DIR_TAG: self.run_dir}).info.run_id
        return client

    def _experiment(self, client) -> str:
        """The experiment's id, created by the first run (a parallel job may create it first)."""
        from mlflow.exceptions import MlflowException

        found = client.get_experiment_by_name(self.experiment)
        if found is not None:
            return found.experiment_id
        try:
            return client.create_experiment(self.experiment)
        except MlflowException:
            found = client.get_experiment_by_name(self.experiment)
            if found is None:
                raise
            return found.experiment_id

    def log(self, name, value, epoch):
        self.log_dict({name: value}, epoch)

    def log_dict(self, payload, epoch):
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        client = self.client
        client.log_batch(self.run_id, metrics=[Metric(k, float(v), now, int(epoch)) for k, v in payload.items()])

    def log_config(self, config):
        from mlflow.entities import Param

        client = self.client
        logged = client.get_run(self.run_id).data.params
        params = [Param(k, str(v)) for k, v in config.items() if k not in logged]  # a param is written once
        if params:
            client.log_batch(self.run_id, params=params)

    def close(self, status: str = "completed") -> None:
        if self._client is not None:
            self._client.set_terminated(self.run_id, status=STATUS.get(status, "FAILED"))
            self._client = None
