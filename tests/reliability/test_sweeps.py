"""Multirun jobs write to their own directories; a failing job does not stop the others.

Hydra's basic launcher runs every job of the sweep, records a job's exception, and reports
the first failure after all jobs ran (exit code 1). Each job's results.json says whether it
completed or failed.
"""

import json

from helpers import STAGES, TINY, run_train, start_train


def test_a_failing_job_does_not_stop_the_others(cifar_arrays, tmp_path):
    sweep = tmp_path / "sweep"
    proc = run_train(["-m", f"dataset.root={cifar_arrays}", *TINY, *STAGES, "evaluate.enabled=false",
                      "optim.lr=0.01,-1,0.05", f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert proc.returncode == 1
    assert "optim.lr=-1.0 must be > 0" in proc.stderr
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert [p.name for p in jobs] == ["0", "1", "2"]
    status = {}
    for job in jobs:
        results = json.loads((job / "results.json").read_text())
        status[results["config"]["optim"]["lr"]] = results["status"]
    assert status == {0.01: "completed", -1.0: "failed", 0.05: "completed"}
    assert (jobs[0] / "checkpoints" / "epoch_00003.pt").exists() and (jobs[2] / "checkpoints" / "epoch_00003.pt").exists()
    assert not (jobs[1] / "checkpoints").exists()


def test_two_sweeps_started_together_get_distinct_directories(cifar_arrays, tmp_path):
    args = ["-m", f"dataset.root={cifar_arrays}", *TINY, *STAGES, "evaluate.enabled=false", "logger=none", "seed=1,2"]
    procs = [start_train(args, tmp_path) for _ in range(2)]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()
    job_dirs = sorted(p.parent for p in (tmp_path / "outputs" / "multirun").rglob("results.json"))
    assert len(job_dirs) == 4 and len(set(job_dirs)) == 4
