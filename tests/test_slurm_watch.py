"""When the protocol stops a Slurm launcher that waits on jobs Slurm no longer has: never from
squeue's silence (an error, no submission yet), never while a job is queued or every job has
its result. The real cluster runs the same code in tests/test_slurm.py; here a stand-in squeue
on PATH answers, so each case is exact."""

import json
import time

import pytest

from scheda.protocol.slurm import NodeWatch


@pytest.fixture
def squeue(tmp_path, monkeypatch):
    """Make ``squeue`` print ``out`` and exit with ``code``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")

    def answer(out: str, code: int = 0) -> None:
        script = bin_dir / "squeue"
        script.write_text(f"#!/bin/sh\nprintf '{out}'\nexit {code}\n")
        script.chmod(0o755)

    return answer


def _phase(tmp_path, finished: dict[str, str]):
    phase = tmp_path / "da"
    (phase / ".submitit" / "77_0").mkdir(parents=True)
    (phase / ".submitit" / "77_1").mkdir()
    for name, status in finished.items():
        (phase / name).mkdir()
        (phase / name / "results.json").write_text(json.dumps({"status": status}))
    return phase


def test_a_launcher_is_stranded_only_when_the_queue_is_empty_and_a_job_has_no_result(tmp_path, squeue):
    phase = _phase(tmp_path, {"da_a": "completed"})  # da_b: cancelled before it wrote anything
    watch = NodeWatch(phase, ["da_a", "da_b"], since=time.time() - 60, bound=60, grace=0.2)
    squeue("77_1|debug\n")
    assert not watch.launcher_stranded()  # still queued
    squeue("", code=1)
    assert not watch.launcher_stranded()  # squeue failed: nothing concluded
    time.sleep(0.3)
    assert not watch.launcher_stranded()
    squeue("")
    assert not watch.launcher_stranded()  # empty, but for less than the grace
    time.sleep(0.3)
    assert watch.launcher_stranded()
    squeue("77_1|debug\n")
    assert not watch.launcher_stranded()  # back in the queue (requeued): the clock starts again


def test_a_launcher_whose_jobs_all_finished_is_left_to_end_itself(tmp_path, squeue):
    phase = _phase(tmp_path, {"da_a": "completed", "da_b": "diverged"})
    watch = NodeWatch(phase, ["da_a", "da_b"], since=time.time() - 60, bound=60, grace=0.0)
    squeue("")
    assert not watch.launcher_stranded()


def test_no_submission_yet_is_not_an_empty_queue(tmp_path, squeue):
    phase = tmp_path / "da"
    phase.mkdir()
    watch = NodeWatch(phase, ["da_a"], since=time.time(), bound=60, grace=0.0)
    squeue("")
    assert not watch.launcher_stranded()
