"""scripts/bench_train.py keeps what it measured and never times one step under another's name: a
step that falls back fails its row in one line, the JSON is on disk after every row (a crash keeps
the rows before it), and the two-pass step's occupancy floor is computed from its kernels' grids on
any device."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from scheda.training.products import bf16_refusal
from helpers import REPO


@pytest.fixture
def bench(monkeypatch):
    spec = importlib.util.spec_from_file_location("bench_train", REPO / "scripts" / "bench_train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "N", 96)
    return module


def test_a_step_that_falls_back_is_refused_not_timed(bench, monkeypatch):
    from scheda.training import kernels

    def fails(*args, **kwargs):
        raise RuntimeError("Failed to compile the launcher: cc not found")

    monkeypatch.setattr(kernels, "corrupt", fails)
    data = torch.rand(96, bench.D)
    with pytest.raises(bench.Fallback, match="the Triton step could not run here"):
        bench.scheda_epoch(data, 2, 8, 16, torch.device("cpu"), kind="triton")


def test_the_json_holds_every_row_measured_before_a_crash(bench, monkeypatch, tmp_path):
    calls = {"n": 0}
    real = bench.scheda_epoch

    def crashes_in_the_second_row(data, n_batches, bs, *args, **kwargs):
        if bs == 12:
            raise MemoryError("out of memory in the second row")
        calls["n"] += 1
        return real(data, n_batches, bs, *args, **kwargs)

    monkeypatch.setattr(bench, "scheda_epoch", crashes_in_the_second_row)
    out = tmp_path / "bench.json"
    with pytest.raises(MemoryError):
        bench.main(["--device", "cpu", "--hidden", "16", "--batch-sizes", "8", "12", "--batches", "2", "--n", "96",
                    "--skip-naive", "--rate-seconds", "0.01", "--job-tries", "1", "--json", str(out)])
    saved = json.loads(out.read_text())
    assert [r["batch_size"] for r in saved["rows"]] == [8] and calls["n"] >= 1
    assert not out.with_name("bench.json.tmp").exists()


def test_a_fallback_fails_its_row_in_one_line_and_the_run(bench, monkeypatch, tmp_path, capsys):
    def falls_back(*args, **kwargs):
        raise bench.Fallback("the Triton step could not run here (RuntimeError: cc not found)")

    monkeypatch.setattr(bench, "scheda_epoch", falls_back)
    monkeypatch.setattr(bench, "job_costs", lambda *a, **k: {"job_start_s": 0.0, "data_load_s": 0.0, "build_s": 0.0})
    out = tmp_path / "bench.json"
    code = bench.main(["--device", "cpu", "--hidden", "16", "--batch-sizes", "8", "--batches", "2", "--n", "96",
                       "--skip-naive", "--rate-seconds", "0.01", "--job-tries", "1", "--json", str(out)])
    assert code == 1
    [row] = json.loads(out.read_text())["rows"]
    assert row["error"].startswith("the Triton step could not run here")
    assert "fp32 H 16 batch 8: FAILED, the Triton step could not run here" in capsys.readouterr().err


def test_the_occupancy_floor_counts_the_sms_each_grid_can_fill(bench):
    """At H 1000, minibatch 20, one model, every kernel fills an H100's 132 SMs: the decode's 192
    programs (16 columns each); pass (ii)'s 63 row tiles split in 3 column chunks (189), its dh
    partial sums (189) and the encode's sum (20 rows x 8). The floor is then the five products'
    padded FLOPs at the whole card's FMA rate: below issue 51's 0.04 s goal, where the unsplit
    pass (63 programs) held it at 0.063 s."""
    floor, launches = bench.occupancy_floor(1, 1000, 20, 2250, "H100")
    programs = {k["kernel"]: k["programs"] for k in launches}
    assert programs == {"decode_pass": 192, "dh_part": 189, "rows_pass": 189, "encode_finish": 160}
    assert min(programs.values()) >= 132
    per_sm = 2 * 128 * 1.98e9
    n, Hp, d = 32, 1008, 3072  # 20 rows padded to 32, H to 16s, d whole tiles of 16
    assert sum(k["flops"] for k in launches) == 5 * 2 * n * Hp * d  # encode, decode, dh, the update's two
    expected = 2250 * 5 * 2 * n * Hp * d / (132 * per_sm)
    assert floor == pytest.approx(expected)
    assert 0.03 < floor < 0.04


def test_models_that_fill_the_card_keep_pass_ii_whole(bench):
    """Four models at H 1000 have 252 row tiles: no split, one rows-pass kernel with four products."""
    _, launches = bench.occupancy_floor(4, 1000, 20, 2250, "H100")
    assert [(k["kernel"], k["programs"]) for k in launches] == [("decode_pass", 768), ("rows_pass", 252)]
    assert launches[1]["flops"] == 4 * launches[0]["flops"]

def test_side_by_side_times_each_of_k_copies_at_once_and_keeps_the_slowest(tmp_path):
    """--side-by-side 2: two copies of the benchmark started together with half the threads each (as two
    protocol jobs share a CPU); the report is the slower copy's whole, with both copies' times. --alone:
    then one copy alone on every thread (a launch of one job), its first row's timings kept apart."""
    import subprocess
    import sys

    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_train.py"), "--device", "cpu", "--hidden", "16",
                           "--batch-sizes", "8", "--batches", "2", "--n", "96", "--skip-naive", "--rate-seconds", "0.01",
                           "--job-tries", "1", "--side-by-side", "2", "--alone", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads(out.read_text())
    side = report["side_by_side"]
    assert side["jobs"] == 2 and side["threads"] == max(1, torch.get_num_threads() // 2) == report["threads"]
    assert len(side["default_s"]) == 2 and report["rows"][0]["default_s"] == max(side["default_s"])
    assert "side by side: 2 jobs of" in proc.stdout
    alone = report["alone"]
    assert alone["threads"] == torch.get_num_threads() and (alone["hidden"], alone["batch_size"]) == (16, 8)
    assert alone["default_s"] > 0 and f"alone on {alone['threads']}: " in proc.stdout


def test_an_evaluation_is_timed_on_a_trained_runs_own_features(bench, cifar_arrays, tmp_path):
    """--lr-search-run: the run's model encodes its data set's splits and the default C search runs on
    those features, as every evaluation of a job does; the estimate reads it as it reads --lr-search."""
    from scheda.run import run

    from helpers import TINY, compose_cfg

    run_dir = tmp_path / "run"
    run(compose_cfg([f"dataset.root={cifar_arrays}", *TINY, "schedule=constant", "schedule.epochs=1",
                     "evaluate.enabled=false", "logger=none"]), run_dir)
    search = bench.lr_search_of_run(str(run_dir), torch.device("cpu"))
    hidden = json.loads((run_dir / "results.json").read_text())["config"]["model"]["hidden"]
    assert search["features"] == hidden and search["n"] > 0 and search["run"].endswith("epoch_00001.pt")
    assert 0 < search["encode_seconds"] < search["seconds"]


def test_the_similarity_benchmark_times_the_tables_own_code_above_its_floor(tmp_path):
    """scripts/bench_similarity.py, small: it runs compare_all as the features table does, and a
    time under its float64 floor would fail it."""
    import subprocess
    import sys

    out = tmp_path / "similarity.json"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_similarity.py"), "--n", "2000", "--hidden",
                           "48", "--references", "2", "--candidates", "3", "--burst-seconds", "0.2", "--json", str(out)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = json.loads(out.read_text())
    assert row["pairs"] == 2 * 4 + 3 and row["over_floor"] >= 1 and row["seconds"] >= row["floor_s"] > 0
    assert "x the floor" in proc.stdout


def test_bench_stack_times_a_stacked_layer_beside_a_one_layer_da_of_its_shape(tmp_path):
    """scripts/bench_stack.py, small: both runs go through scheda.train (the stacked one reads layer 1
    by stack_on), and it records the ratio it measured (its floor loosened: tiny epochs are noise)."""
    import subprocess
    import sys

    out = tmp_path / "stack.json"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_stack.py"), "--n", "300", "--inputs", "48",
                           "--hidden", "12", "7", "--epochs", "2", "--repeats", "1", "--floor", "0", "--json", str(out)],
                          capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = json.loads(out.read_text())
    assert row["hidden"] == [12, 7] and row["ratio"] == pytest.approx(row["stacked_epoch_s"] / row["plain_epoch_s"])
    assert len(row["timed"]["stacked"]) == len(row["timed"]["plain"]) == 1 and "a one-layer DA 12 -> 7" in proc.stdout


@pytest.mark.skipif(bf16_refusal(torch.device("cpu")) is not None, reason="this CPU has no bf16 arithmetic")
def test_bf16_rows_and_their_interleaved_ratio_to_fp32_are_measured_in_one_run(bench, monkeypatch, tmp_path):
    """``--precisions fp32 bf16`` on a CPU: a row per precision (bf16's products timed in bf16, its
    step the torch step in bf16), then every row's default step timed in both precisions in turn,
    ``--rounds`` times, with the median of the per-round ratios and its spread."""
    built = []
    real = bench.scheda_epoch

    def records_the_step(*args, **step):
        built.append(step.get("precision", "fp32") + ("+compiled" if step.get("compiled") else ""))
        return real(*args, **step)

    monkeypatch.setattr(bench, "scheda_epoch", records_the_step)
    monkeypatch.setattr(bench, "job_costs", lambda *a, **k: {"job_start_s": 0.0, "data_load_s": 0.0, "build_s": 0.0})
    out = tmp_path / "bench.json"
    bench.main(["--device", "cpu", "--hidden", "16", "--batch-sizes", "8", "--batches", "2", "--n", "96",
                "--skip-naive", "--rate-seconds", "0.01", "--job-tries", "1", "--precisions", "fp32", "bf16",
                "--rounds", "3", "--json", str(out)])
    saved = json.loads(out.read_text())
    assert [r["precision"] for r in saved["rows"]] == ["fp32", "bf16"]
    bf16 = saved["rows"][1]
    assert bf16["default_step"] == "eager" and set(bf16["product_gflops"]) == {"encode", "decode", "dh", "update"}
    assert "autograd_s" not in bf16 and "composite_s" in bf16  # bf16's own steps only
    [entry] = saved["interleaved"]
    ratios = entry["over_fp32"]["bf16"]
    assert len(entry["epoch_s"]["fp32"]) == len(entry["epoch_s"]["bf16"]) == len(ratios["per_round"]) == 3
    assert ratios["per_round"] == pytest.approx([b / f for b, f in zip(entry["epoch_s"]["bf16"], entry["epoch_s"]["fp32"])])
    assert ratios["min"] <= ratios["median"] <= ratios["max"]
    # bf16 on a CPU as a long run trains it: its update in one compiled pass (trainer.compile=null)
    assert built.count("bf16+compiled") >= 1 + 3 + 1  # the row's step, three rounds, the composite's


def test_bf16_rows_are_refused_in_one_line_where_the_cpu_has_no_bf16(bench, monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    with pytest.raises(SystemExit):
        bench.main(["--device", "cpu", "--precisions", "fp32", "bf16"])


@pytest.fixture
def bench_step(monkeypatch):
    """scripts/bench_step.py on any CPU: torch multiplies in bf16 everywhere (emulated where the CPU has no
    AVX512-BF16 or AMX, which the script refuses to time as a rate; its refusal is tested on its own)."""
    spec = importlib.util.spec_from_file_location("bench_step", REPO / "scripts" / "bench_step.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "bf16_refusal", lambda device: None)
    return module


def test_the_step_benchmark_times_the_three_steps_interleaved_and_fails_under_a_floor(bench_step, tmp_path,
                                                                                     monkeypatch):
    """scripts/bench_step.py: fp32, bf16 eager and bf16 one-pass steps (as a run builds them) in one run,
    their ratios and floors in the JSON; a step timed under its floor fails the run, not the floor."""
    module = bench_step
    monkeypatch.setattr(module, "best_seconds", lambda run, seconds=0.5: (run(), 1e-6)[1])  # tiny floors: fast
    out = module.main(["--hidden", "7", "--batch-sizes", "3", "--minibatches", "2", "--repeats", "2",
                       "--no-compile-time", "--json", str(tmp_path / "b.json")])
    [row] = json.loads((tmp_path / "b.json").read_text())["rows"]
    assert row == out["rows"][0] and set(row["steps"]) == {"fp32", "bf16_eager", "bf16_one_pass"}
    assert all(len(s["repeats_ms"]) == 2 for s in row["steps"].values())
    med = {k: s["median_ms"] for k, s in row["steps"].items()}
    assert row["ratios"]["bf16_one_pass/fp32"] == pytest.approx(med["bf16_one_pass"] / med["fp32"])
    assert row["floors"]["bf16_ms"] == pytest.approx(row["floors"]["bf16_products"]["ms"] + row["floors"]["one_pass_ms"])
    monkeypatch.setattr(module, "best_seconds", lambda run, seconds=0.5: 10.0)  # floors no step can reach
    with pytest.raises(module.BelowFloor, match="under its floor"):
        module.main(["--hidden", "7", "--batch-sizes", "3", "--minibatches", "2", "--repeats", "1", "--no-compile-time"])


def test_the_step_benchmark_refuses_a_cpu_without_bf16_arithmetic_in_one_line(bench_step, monkeypatch, capsys):
    monkeypatch.setattr(bench_step, "bf16_refusal", lambda device: "this CPU has neither AVX512-BF16 nor AMX")
    with pytest.raises(SystemExit) as exc:
        bench_step.main(["--hidden", "7", "--no-compile-time"])
    assert exc.value.code == 1
    assert capsys.readouterr().err == "error: this CPU has neither AVX512-BF16 nor AMX: no bf16 step to time\n"
