"""scheda-results on a real sweep (two noise levels x two seeds): the differing keys as columns,
sorted by validation error, every format, groups over seeds with scheda.utils.stats; the sweep's own
summary.csv / summary.md; a fused sweep counts as its models."""

from __future__ import annotations

import csv
import io
import json
import subprocess
from pathlib import Path

import pytest

from scheda.utils import stats
from scheda.runs.gather import gather
from scheda.utils.lock import hold
from helpers import STAGES, TINY, run_module, run_train


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    from helpers import write_cifar_arrays

    root = tmp_path_factory.mktemp("gather")
    data = write_cifar_arrays(root / "data" / "cifar10")
    proc = run_train(["-m", f"dataset.root={data}", *TINY, "schedule=constant", "schedule.epochs=2",
                      "schedule.nu=0.2,0.5", "seed=1,2", "logger=none", "evaluate.every=1", "classifier.c_log2_min=-2",
                      "classifier.c_log2_max=0", f"hydra.sweep.dir={root / 'sweep'}"], cwd=root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return root / "sweep"


def _rows(sweep, *args):
    proc = run_module("scheda.runs.gather", [sweep, "--format", "csv", *args], timeout=120)
    assert proc.returncode == 0, proc.stderr
    return list(csv.DictReader(io.StringIO(proc.stdout)))


def test_a_sweep_is_one_table_of_its_differing_keys_sorted_by_validation(sweep):
    rows = _rows(sweep)
    assert len(rows) == 4
    assert {"schedule.nu", "seed"} <= set(rows[0]) and "model.hidden" not in rows[0]  # the same in every run
    assert {(r["schedule.nu"], r["seed"]) for r in rows} == {(nu, s) for nu in ("0.2", "0.5") for s in ("1", "2")}
    vals = [float(r["val_error %"]) for r in rows]
    assert vals == sorted(vals) and all(r["status"] == "completed" and r["epochs"] == "2" for r in rows)
    for r in rows:
        results = json.loads((sweep / r["run"].rstrip("/").split("/")[-1] / "results.json").read_text())
        assert float(r["test_error %"]) == pytest.approx(100 * results["evaluations"][-1]["test_error"])
        assert r["classifier"] == f"C={results['evaluations'][-1]['C']:g}"


def test_at_reads_every_run_at_its_best_on_validation_or_at_an_epoch(sweep):
    """--at best|epoch=N: the protocol's two rules for its further seeds, for any sweep."""
    picks = {"best": lambda ev: min(ev, key=lambda e: (e["val_error"], e["epoch"])),
             "epoch=1": lambda ev: next(e for e in ev if e["epoch"] == 1)}
    for at, pick in picks.items():
        for r in _rows(sweep, "--at", at):
            results = json.loads((sweep / r["run"].rstrip("/").split("/")[-1] / "results.json").read_text())
            assert len(results["evaluations"]) >= 2
            assert float(r["test_error %"]) == pytest.approx(100 * pick(results["evaluations"])["test_error"])
    proc = run_module("scheda.runs.gather", [sweep, "--at", "epoch=x"], timeout=120)
    assert proc.returncode == 2 and "use kept, last, best or epoch=N" in proc.stderr
    proc = run_module("scheda.runs.gather", [sweep, "--at", "epoch=7"], timeout=120)  # evaluated at 1 and 2 only
    assert proc.returncode == 0 and proc.stderr.strip() == "note: no run has an evaluation at epoch=7: its errors show as —"


def test_groups_average_finished_runs_only_and_count_the_others(sweep, tmp_path):
    """A seed still training, or killed half way, is not averaged in with finished ones (it would
    pull the mean toward a half-trained model): the group says how many are not finished."""
    import shutil

    copy = tmp_path / "sweep"
    shutil.copytree(sweep, copy)
    rows = _rows(copy)
    job = next(r for r in rows if r["seed"] == "2" and r["schedule.nu"] == rows[0]["schedule.nu"])
    path = Path(job["run"]) / "results.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "status": "running"}))  # what a SIGKILL leaves
    groups = json.loads(gather([copy], ["all-but-seed"], "json"))
    hit = next(g for g in groups if g["schedule.nu"] == float(job["schedule.nu"]))
    other = next(r for r in rows if r["seed"] == "1" and r["schedule.nu"] == job["schedule.nu"])
    assert hit["n"] == 1 and hit["not finished"] == "killed 1" and hit["test_error %"]["sd"] is None
    assert hit["test_error %"]["mean"] == pytest.approx(float(other["test_error %"]))
    assert all(g["n"] == 2 and g["not finished"] is None for g in groups if g is not hit)
    assert "| n | val_error % | test_error % | not finished |" in gather([copy], ["all-but-seed"], "md")


def test_a_group_by_key_no_run_has_is_one_line_naming_the_keys_that_differ(sweep):
    """It grouped every run under one row of "—" without a word."""
    proc = run_module("scheda.runs.gather", [sweep, "--group-by", "schedule.nuu"], timeout=120)
    assert proc.returncode == 1 and proc.stderr.strip() == (
        "error: --group-by schedule.nuu: no run has that config key; these differ between the runs: schedule.nu, seed")


def test_groups_over_seeds_give_mean_sd_and_n(sweep):
    as_json = json.loads(gather([sweep], ["all-but-seed"], "json"))
    assert [g["schedule.nu"] for g in as_json] and all(g["n"] == 2 for g in as_json)
    flat = {r["seed"] + "/" + r["schedule.nu"]: float(r["test_error %"]) for r in _rows(sweep)}
    for g in as_json:
        expected = stats.summarize([flat[f"{s}/{g['schedule.nu']}"] for s in ("1", "2")])
        assert g["test_error %"]["mean"] == pytest.approx(expected.mean)
        assert g["test_error %"]["sd"] == pytest.approx(expected.sd)
    md = gather([sweep], ["schedule.nu"], "md")
    assert md.startswith("| schedule.nu | n | val_error % | test_error % |") and " ± " in md


def test_the_sweep_writes_its_own_summary(sweep):
    assert (sweep / "summary.md").read_text() == gather([sweep], fmt="md", base=sweep)
    assert str(sweep) not in (sweep / "summary.md").read_text()  # runs named inside the sweep
    assert list(csv.DictReader(io.StringIO((sweep / "summary.csv").read_text())))[0].keys() >= {"seed", "val_error %"}


def test_a_fused_sweep_counts_as_its_models(cifar_arrays, tmp_path):
    proc = run_train([f"dataset.root={cifar_arrays}", *TINY, *STAGES, "logger=none", "trainer.parallel.seed=[3,4]",
                      "classifier.c_log2_min=-1", "classifier.c_log2_max=0", f"hydra.run.dir={tmp_path / 'fused'}"],
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = list(csv.DictReader(io.StringIO(gather([tmp_path / "fused"], fmt="csv"))))
    assert sorted(r["seed"] for r in rows) == ["3", "4"] and all("models" in r["run"] for r in rows)


def test_no_results_is_one_line(tmp_path):
    proc = run_module("scheda.runs.gather", [tmp_path])
    assert proc.returncode == 1 and proc.stderr.strip() == f"error: no results.json under {tmp_path}"


def test_the_command_answers_without_the_training_code(sweep):
    """``scheda-results`` reads results.json files: a user's table of a sweep costs no torch import
    (2 s of CPU, four times the rest of the command)."""
    import subprocess
    import sys

    code = ("import sys\nfrom scheda.runs.gather import main\nsys.argv = ['scheda-results', *sys.argv[1:]]\n"
            "try:\n    main()\nfinally:\n    print('torch' in sys.modules, file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code, str(sweep), "--format", "csv"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(list(csv.DictReader(io.StringIO(proc.stdout)))) == 4 and proc.stderr.strip() == "False"


def test_each_run_records_its_environment_and_env_shows_it(sweep):
    """results.json's environment (scheda.utils.environment) traces a number to its code and machine;
    ``--env`` shows it as columns."""
    import platform
    import socket
    import subprocess

    import torch

    import scheda
    from helpers import REPO

    rows = _rows(sweep, "--env")
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    for r in rows:
        env = json.loads((sweep / r["run"].rstrip("/").split("/")[-1] / "results.json").read_text())["environment"]
        assert env["scheda"] == scheda.__version__ == r["env.scheda"]
        assert env["torch"] == torch.__version__ == r["env.torch"] and env["python"] == platform.python_version()
        assert env["host"] == socket.gethostname() == r["env.host"] and env["device"] == "cpu"
        assert env["cuda"] is None and r["env.cuda"] == ""  # a CPU run names no CUDA
        assert env["git_commit"] == commit == r["env.git_commit"] and env["git_dirty"] in (True, False)
    assert "env.torch" not in _rows(sweep)[0]  # only when asked for


def test_env_is_per_run_not_per_group(sweep):
    proc = run_module("scheda.runs.gather", [sweep, "--env", "--group-by", "all-but-seed"])
    assert proc.returncode == 2 and "--env shows each run's own values" in proc.stderr


def test_runs_under_the_rule_of_training_to_convergence_say_why_they_stopped(cifar_arrays, tmp_path):
    """With trainer.patience, each run's stop (patience, or its cap) is a column beside its epochs; a
    sweep without the rule has no such column."""
    proc = run_train(["-m", f"dataset.root={cifar_arrays}", *TINY, "schedule=constant", "schedule.epochs=3",
                      "optim.lr=1e-30,0.5", "trainer.patience=1", "evaluate.every=1", "logger=none",
                      f"hydra.sweep.dir={tmp_path / 'rule'}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = _rows(tmp_path / "rule")
    assert list(rows[0])[list(rows[0]).index("epochs") + 1] == "stopped"
    by_lr = {row["optim.lr"]: row for row in rows}
    assert by_lr["1e-30"]["stopped"] == "patience" and by_lr["1e-30"]["epochs"] == "2"  # no new best at 2
    assert by_lr["0.5"]["stopped"] in ("patience", "cap")
    # Read where the run reports itself (--at kept, the default; it read the last evaluation, past the
    # best the rule kept, while the sweep's own job lines read the best): --at last still gives that one.
    assert by_lr["1e-30"]["read at"] == "1"
    assert {row["optim.lr"]: row for row in _rows(tmp_path / "rule", "--at", "best")}["1e-30"]["read at"] == "1"
    assert {row["optim.lr"]: row for row in _rows(tmp_path / "rule", "--at", "last")}["1e-30"]["read at"] == "2"
    # ... so the sweep's own job line and its summary.md (the same code as scheda-results) agree
    job_line = next(line for line in proc.stdout.splitlines() if "optim.lr=1e-30" in line and "completed" in line)
    assert f"best on validation at epoch 1, val {float(by_lr['1e-30']['val_error %']):.2f} %" in job_line, job_line
    table = (tmp_path / "rule" / "summary.md").read_text()
    assert "| 1 | C=" in next(line for line in table.splitlines() if "| 1e-30 |" in line)


def test_a_run_still_running_shows_no_minutes_yet(cifar_arrays, tmp_path):
    """results.json of a run in progress holds only earlier attempts' seconds (0 for a first one):
    no minutes rather than a wrong 0.0."""
    proc = run_train([f"dataset.root={cifar_arrays}", *TINY, "schedule=constant", "schedule.epochs=1", "logger=none",
                      f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "min (1 epoch)" in proc.stdout  # its last lines, in English
    assert _rows(tmp_path / "run")[0]["minutes"] != ""
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    (tmp_path / "run" / "results.json").write_text(json.dumps({**results, "status": "running", "seconds": 0.0}))
    # nobody holds it: its lock names the process that ran it, which has ended (a SIGKILL:
    # tests/reliability/test_kill_resume.py)
    row = _rows(tmp_path / "run")[0]
    assert row["status"] == "killed" and row["minutes"] == ""
    with hold(tmp_path / "run"):  # a live process holds the run, as the run itself does
        row = _rows(tmp_path / "run")[0]
    assert row["status"] == "running" and row["minutes"] == ""


def test_errors_in_percent_carry_no_float_noise(sweep, tmp_path):
    """CSV and JSON give an error in % as its decimal (60.14, not 100 * 0.6014's 60.14000000000001),
    which a spreadsheet or a diff of two tables reads as the same number the table shows."""
    import shutil

    run = shutil.copytree(sweep / "0", tmp_path / "run")
    results = json.loads((run / "results.json").read_text())
    for e in results["evaluations"]:
        e.update(val_error=0.6014, test_error=0.0007)
    (run / "results.json").write_text(json.dumps(results))
    row = _rows(run)[0]
    assert (row["val_error %"], row["test_error %"]) == ("60.14", "0.07")
    (read,) = json.loads(gather([run], fmt="json"))
    assert (read["val_error %"], read["test_error %"]) == (60.14, 0.07)


def test_a_damaged_results_json_is_left_out_with_a_note(sweep, tmp_path):
    """One results.json cut short and one not even UTF-8 text, beside a good run: the table shows
    the good one and a note names the two (not a UnicodeDecodeError traceback, nor a silent
    gap); with only damaged ones the error says so rather than 'no results.json'."""
    import shutil

    for name, damage in (("good", None), ("cut", b'{"status": "compl'), ("binary", b"\xa9\x00")):
        shutil.copytree(sweep / "0", tmp_path / "runs" / name)
        if damage is not None:
            (tmp_path / "runs" / name / "results.json").write_bytes(damage)
    proc = run_module("scheda.runs.gather", [tmp_path / "runs"])
    assert proc.returncode == 0 and [line.split(" | ")[0] for line in proc.stdout.splitlines()[2:]] == \
        [f"| {tmp_path}/runs/good"]
    assert proc.stderr.strip() == (f"note: left out 2 results.json that are not JSON (cut short or damaged): "
                                   f"{tmp_path}/runs/binary/results.json, {tmp_path}/runs/cut/results.json")
    shutil.rmtree(tmp_path / "runs" / "good")
    proc = run_module("scheda.runs.gather", [tmp_path / "runs"])
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == \
        f"error: none of the 2 results.json under {tmp_path / 'runs'} is a run's that can be read"


def test_reading_the_checkout_takes_no_git_lock(tmp_path, monkeypatch):
    """A run records its checkout's commit and whether it is dirty (git status). git status takes
    the index's lock to refresh it, and a run killed meanwhile left .git/index.lock behind: the
    user's next git commit failed. Read without git's optional locks, the index is not rewritten."""
    import os
    import time

    from scheda.utils import environment

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "a")
    time.sleep(0.05)
    os.utime(tmp_path / "a.py")  # the same content, a newer stat: git status would refresh the index
    index = tmp_path / ".git" / "index"
    before = index.stat().st_mtime_ns
    monkeypatch.setattr(environment, "SOURCE", tmp_path)
    commit, dirty = environment.source_revision()
    assert commit and dirty is False
    assert index.stat().st_mtime_ns == before and not (tmp_path / ".git" / "index.lock").exists()
