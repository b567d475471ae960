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
    assert len(files) <= 8 and {"bench_train.json", "check.log", "jobs.md", "plans.txt", "summary.md", "table1_smoke.md"} <= set(files)
    summary = (out / "summary.md").read_text()
    for step in ("fixture-data", "cuda-tests", "bench-train", "reproduce", "paper-estimate"):
        assert f"| {step} | ok |" in summary, summary
    import torch

    # on a CPU the CUDA tests are collected and skipped; on a GPU they run
    assert ("12 passed" if torch.cuda.is_available() else "CUDA tests: 12 skipped") in summary
    assert "| 16 | 20 |" in summary and "Fused sweep of 2 models" in summary
    assert "table=table1 scale=paper: 94 jobs" in summary and "device-hours" in summary
    assert "| ScheDA | 16 |" in summary
    assert "da_h16_nu0.5_lr0.1" in (out / "jobs.md").read_text()  # every job the protocol ran, gathered
