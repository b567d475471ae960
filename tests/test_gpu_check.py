"""scripts/gpu_check.sh in its tiny CPU mode: every step of the device check runs (on fixture
data), so that no device minute is lost to a typo."""

import os
import subprocess

from helpers import REPO


def test_the_gpu_check_runs_every_step_on_the_cpu(tmp_path):
    out = tmp_path / "out"
    env = {**{k: v for k, v in os.environ.items() if k != "SCHEDA_DATA"}, "OUT": str(out),
           "GPU_CHECK_WORK": str(tmp_path / "work"), "GPU_CHECK_RUNS": str(tmp_path / "runs"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), "--tiny"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and {"bench_train.json", "check.log", "jobs.md", "plans.txt", "summary.md",
                                "table1_paper_h1000.md"} <= set(files)
    summary = (out / "summary.md").read_text()
    for step in ("fixture-data", "tests", "bench-train", "reproduce", "row-estimate", "paper-estimate"):
        assert f"| {step} | ok |" in summary, summary
    assert "Tests: 1 passed" in summary  # a Triton step test, its kernels interpreted
    assert "| fp32 | 16 | 20 |" in summary and "FLOOR BEATEN" not in summary
    assert "table=table1 scale=paper: 94 jobs" in summary and "device-hours" in summary
    assert "table=table1 scale=paper_h1000: 30 jobs" in summary  # the whole row's estimate beside its part
    assert "| ScheDA | 16 |" in summary and "| DA | 16 | nu=" in summary
    jobs = (out / "jobs.md").read_text()
    assert "da_h16_lr0.01_fused" in jobs  # every job the protocol ran, gathered
    assert "paper_h1000 part: scale.da.epochs=" in (out / "check.log").read_text()
