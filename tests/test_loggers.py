"""Loggers as a list: ``logger=[tensorboard,csv,mlflow]`` writes every backend, each read back
by its own reader (TensorBoard's event reader, the csv module, MLflow's client)."""

import csv
import json
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from scheda.config import typed_many
from scheda.utils.errors import ConfigError
from scheda.loggers import Loggers, MetricLogger
from scheda.loggers.csv import CSVLogger
from scheda.runs.rundir import read_metrics
from scheda.run import run

from helpers import STAGES, TINY, TINY_SWEEP, compose_cfg, run_train

mlflow = pytest.importorskip("mlflow")


def _scalars(tb_dir, tag):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    return {e.step: e.value for e in EventAccumulator(str(tb_dir)).Reload().Scalars(tag)}


def _mlflow_runs(uri):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("scheda")
    return client, client.search_runs([experiment.experiment_id], order_by=["attributes.run_name ASC"])


def test_a_sweep_logs_to_tensorboard_csv_and_mlflow_and_scheda_results_reads_the_csv(cifar_arrays, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sweep = tmp_path / "sweep"
    proc = run_train(["-m", f"dataset.root={cifar_arrays}", *TINY_SWEEP, "trainer.batch_size=23", "schedule=constant",
                      "schedule.nu=0.3,0.5", "schedule.epochs=2", "evaluate.every=1", "logger=[tensorboard,csv,mlflow]",
                      f"logger.mlflow.tracking_uri={uri}", f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = (sweep / "0" / "train.log").read_text()  # a run's last lines say where each logger put its records
    for line in ("curves: tensorboard --logdir sweep/0", "metrics: sweep/0/metrics.csv (scheda-results --metric NAME)",
                 f"MLflow: experiment scheda in {uri}"):
        assert line in said, line
    client, runs = _mlflow_runs(uri)
    assert [r.info.run_name for r in runs] == ["schedule.nu=0.3", "schedule.nu=0.5"]  # named by the swept values
    for job, nu, mlflow_run in ((0, 0.3, runs[0]), (1, 0.5, runs[1])):
        job_dir = sweep / str(job)
        logged = read_metrics(job_dir / "metrics.csv")
        curves = _scalars(job_dir / "tensorboard" / f"schedule.nu={nu}", "train/reconstruction_ce")
        assert sorted(logged["train/reconstruction_ce"]) == sorted(curves) == [1, 2]
        for step, value in curves.items():  # the same number in both files (TensorBoard stores float32)
            assert logged["train/reconstruction_ce"][step] == pytest.approx(value, rel=1e-6)
        evaluations = json.loads((job_dir / "results.json").read_text())["evaluations"]
        assert logged["eval/val_error"] == {e["epoch"]: e["val_error"] for e in evaluations}
        assert mlflow_run.info.status == "FINISHED"
        assert mlflow_run.data.tags["scheda.run_dir"] == str(job_dir.resolve())
        assert mlflow_run.data.params["schedule.nu"] == str(nu) and mlflow_run.data.params["model.hidden"] == "16"
        history = client.get_metric_history(mlflow_run.info.run_id, "eval/val_error")
        assert {m.step: m.value for m in history} == logged["eval/val_error"]

    read = subprocess.run([sys.executable, "-m", "scheda.runs.gather", str(sweep), "--format", "json", "--at", "best",
                           "--metric", "train/reconstruction_ce", "eval/log2_C"], capture_output=True, text=True,
                          cwd=tmp_path)
    assert read.returncode == 0, read.stderr
    for row in json.loads(read.stdout):
        job_dir = tmp_path / row["run"]  # named as the user would type it here
        evaluations = json.loads((job_dir / "results.json").read_text())["evaluations"]
        best = min(evaluations, key=lambda e: (e["val_error"], e["epoch"]))
        logged = read_metrics(job_dir / "metrics.csv")
        assert row["train/reconstruction_ce"] == logged["train/reconstruction_ce"][best["epoch"]]
        assert row["eval/log2_C"] == logged["eval/log2_C"][best["epoch"]]


def test_a_resumed_run_continues_its_mlflow_run_and_its_csv(cifar_arrays, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    base = [f"dataset.root={cifar_arrays}", *TINY, *STAGES, "evaluate.enabled=false", "trainer.checkpoint_every=1",
            "logger=[csv,mlflow]", f"logger.mlflow.tracking_uri={uri}"]
    out = tmp_path / "run"
    run(compose_cfg([*base, "trainer.max_epochs=2"]), out)
    with open(out / "metrics.csv", "a") as f:  # what a killed run logged after its last checkpoint
        f.write("train/nu,3,0.9,0\n")
    run(compose_cfg([*base, f"resume={out}"]), out)
    logged = read_metrics(out / "metrics.csv")
    assert logged["train/nu"] == {1: 0.5, 2: 0.5, 3: 0.2}
    with open(out / "metrics.csv", newline="") as f:
        assert [r["epoch"] for r in csv.DictReader(f) if r["name"] == "train/nu"] == ["1", "2", "3"]  # purged, not duplicated
    client, runs = _mlflow_runs(uri)
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"  # one run, continued
    history = client.get_metric_history(runs[0].info.run_id, "train/nu")
    assert sorted((m.step, m.value) for m in history) == [(1, 0.5), (2, 0.5), (3, pytest.approx(0.2))]


def test_the_csv_logger_keeps_fine_tuning_rows_and_reads_a_torn_last_line(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("name,step,value,time\ntrain/nu,1,0.5,0\ntrain/nu,2,0.5,0\nfinetune/lr_0.1/val_error,4,0.3,0\n"
                    "train/nu,3,0.")
    logger = CSVLogger(path, purge_epoch=2)
    logger.log_dict({"train/nu": 0.25}, 2)
    logger.close()
    assert read_metrics(path) == {"train/nu": {1: 0.5, 2: 0.25}, "finetune/lr_0.1/val_error": {4: 0.3}}


def test_closing_several_loggers_closes_each_and_raises_the_first_failure():
    closed = []

    class Broken(MetricLogger):
        def log(self, name, value, step):
            pass

        def close(self, status="completed"):
            closed.append("broken")
            raise OSError("disk full")

    class Fine(MetricLogger):
        def log(self, name, value, step):
            pass

        def close(self, status="completed"):
            closed.append(status)

    loggers = Loggers([Broken(), Fine()])
    with pytest.raises(OSError, match="disk full"):
        loggers.close("failed")
    assert closed == ["broken", "failed"] and not loggers


def test_logger_none_the_empty_list_and_a_run_saved_with_one_logger(tmp_path):
    assert typed_many("logger", compose_cfg(["logger=none"]).logger) == []
    assert typed_many("logger", compose_cfg(["logger=[]"]).logger) == []
    both = typed_many("logger", compose_cfg(["logger=[tensorboard,csv]", "logger.csv.file=m.csv"]).logger)
    assert [(c.name, getattr(c, "file", None)) for c in both] == [("tensorboard", None), ("csv", "m.csv")]
    old = OmegaConf.create({"name": "tensorboard", "log_dir": "tb", "n_filters": 3})  # a config.yaml of before
    assert [(c.name, c.log_dir) for c in typed_many("logger", old)] == [("tensorboard", "tb")]


def test_mlflow_not_installed_is_one_line_naming_the_extra(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    with pytest.raises(ConfigError) as exc:
        typed_many("logger", compose_cfg(["logger=mlflow"]).logger)
    assert str(exc.value) == ("logger.mlflow.name='mlflow' needs MLflow, which is not installed: "
                              "pip install 'scheda[mlflow]'")



def test_parallel_jobs_start_on_a_new_mlflow_store_together(tmp_path):
    """A sweep's parallel jobs (joblib) meet a new SQLite store at once: each would create its
    tables, and all but one failed ("duplicate column"). Two processes start together here."""
    uri = f"sqlite:///{tmp_path / 'new' / 'mlflow.db'}"
    go = tmp_path / "go"
    code = ("import sys, time, pathlib\nfrom scheda.loggers.mlflow import MLflowLogger\nimport mlflow.tracking\n"
            "go = pathlib.Path(sys.argv[2])\n(go.parent / ('ready' + sys.argv[3])).touch()\n"
            "while not go.exists(): time.sleep(0.01)\n"
            "logger = MLflowLogger(sys.argv[1], 'scheda', 'job' + sys.argv[3], pathlib.Path(sys.argv[2]).parent / sys.argv[3])\n"
            "logger.log_dict({'train/nu': 0.5}, 1)\nlogger.close()\n")
    jobs = [subprocess.Popen([sys.executable, "-c", code, uri, str(go), str(k)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for k in range(2)]
    import time

    deadline = time.time() + 60
    while len(list(tmp_path.glob("ready*"))) < 2 and time.time() < deadline:  # every process imported MLflow
        time.sleep(0.05)
    go.touch()
    errors = [job.communicate(timeout=120)[1] for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0], [e[-1500:] for e in errors]
    _, runs = _mlflow_runs(uri)
    assert sorted(r.info.run_name for r in runs) == ["job0", "job1"]
    assert {r.info.status for r in runs} == {"FINISHED"}


def test_a_metrics_file_of_0_2_reads_its_step_column_as_the_epoch(tmp_path):
    """0.2 named the epoch column ``step``; scheda-results reads such a file for one release."""
    from scheda.runs.rundir import read_metrics

    path = tmp_path / "metrics.csv"
    path.write_text("name,step,value,time\ntrain/nu,1,0.5,1.0\ntrain/nu,2,0.4,2.0\n")
    assert read_metrics(path) == {"train/nu": {1: 0.5, 2: 0.4}}
