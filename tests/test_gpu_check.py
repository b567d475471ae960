"""scripts/gpu_check.sh in its tiny CPU mode: both calls of the device check run every step (on
fixture data), so that no device minute is lost to a typo; its benchmark step is also the suite's run
of scripts/bench_train.py. And each call's plan (scripts/device_plan.py) fits its budget."""

import json
import os
import subprocess

import pytest

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
    for step in ("fixture-data", "tests", "bench-train", "plan-call2", "reproduce", "paper-estimate"):
        assert f"| {step} | ok |" in summary, summary
    assert "Tests: 1 passed" in summary  # an epoch of the Triton step, its kernels interpreted
    assert "| fp32 | 16 | 24 |" in summary and "FLOOR BEATEN" not in summary
    assert "table=table1 scale=paper: 94 jobs" in summary and "device-hours" in summary
    assert "Call 2's plan: the DA 3 epochs" in summary
    assert "| ScheDA | 16 |" in summary and "| DA | 16 | nu=0.7" in summary
    _bench_measured_what_ran(json.loads((out / "bench_train.json").read_text()))
    jobs = (out / "jobs.md").read_text()
    assert "da_h16_lr0.01_fused" in jobs  # every job the protocol ran, gathered
    log = (out / "check.log").read_text()
    assert "call1: planned" in log and "call 2 (--tiny): the pair, the DA 3 epochs" in log


def test_each_device_call_is_planned_within_its_budget(tmp_path):
    """Call 1 by the last measured check's step times, call 2 by a benchmark (the H100's, committed): each
    planned time, margin included, within its budget; a slower device gets fewer of the DA's epochs, never
    a longer call, and one too slow for any is told so (exit 1: the check does not run call 2)."""
    import sys

    plan = subprocess.run([sys.executable, str(REPO / "scripts" / "device_plan.py"), "call1"], capture_output=True,
                          text=True)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    sizes = []
    for slower in (1, 1.5, 3):
        bench = json.loads((REPO / "docs" / "results" / "bench_train_h100.json").read_text())
        for row in bench["rows"]:
            for key in [k for k in row if k.endswith("_s") and isinstance(row[k], float)]:
                row[key] *= slower
        path = tmp_path / f"bench{slower}.json"
        path.write_text(json.dumps(bench))
        out = tmp_path / f"plan{slower}.json"
        proc = subprocess.run([sys.executable, str(REPO / "scripts" / "device_plan.py"), "call2", str(path), "--json",
                               str(out)], capture_output=True, text=True)
        if slower == 3:
            assert proc.returncode == 1 and "OVER BUDGET" in proc.stdout
            continue
        assert proc.returncode == 0, proc.stdout + proc.stderr
        planned = json.loads(out.read_text())
        assert planned["planned_s"] <= planned["budget_s"] == 420
        sizes.append(planned["da_epochs"])
    assert 100 <= sizes[1] < sizes[0] <= 2000


def _bench_measured_what_ran(report: dict) -> None:
    """scripts/bench_train.py on the CPU: each time covers the minibatches that ran (40 asked
    for, an epoch of 17: 400 / 24), no CUDA-only row, and no time below its own floor."""
    for row in report["rows"]:
        assert row["timed_batches"] == 17 and row["default_step"] == "eager" and row["precision"] == "fp32"
        floors = [row[f"{k}_floor_s"] for k in ("product", "shape", "peak", "bytes")]
        assert min(floors) > 0 and row["floor_s"] == max(floors) and "launch_floor_s" not in row  # CUDA only
        # each product at its own rate: never below charging all FLOPs at the best of them
        assert set(row["product_gflops"]) == {"encode", "decode", "dh", "update"}
        assert row["product_floor_s"] >= row["shape_floor_s"] * (1 - 1e-9)
        assert row["default_over_floor"] == pytest.approx(row["eager_s"] / row["floor_s"])
        # A benchmark that beats its own floor measures wrong.
        assert min(row["eager_s"], row["autograd_s"], row["naive_s"]) >= row["floor_s"], row
        assert row["grid_s"] >= row["grid_floor_s"] > 0 and row["finetune_s"] > 0
        assert "graphed_s" not in row and "triton_s" not in row  # CUDA graphs and Triton: CUDA only
    assert report["beaten_floors"] == [] and report["peak_tflops"]["fp32"] > 0
    assert report["blas"] and report["vector_extension"]  # what a CPU row's rates depend on
    assert report["grid"]["models"] == 2 and report["lr_search"]["seconds"] > 0
