"""README's commands as a user runs them, read from README's own code blocks: each one a fresh
interpreter of the installed commands (``scheda-train``, ``scheda-results``, ``scheda-reproduce``
beside this Python), in a folder outside the checkout, with ``SCHEDA_DATA`` naming tiny data the
test writes. No fork server and no preload: the order of imports is the user's. The suite's
shortcuts (scheda.utils.fork, the sweeper that composes once) are judged here; README's commands are
only lengthened by the settings tiny data need (``TINY_DATA``), never changed. README's
``scheda-reproduce scale=smoke`` and its rerun run in tests/test_smoke_protocol.py, whose phases
are asserted on that run."""

from __future__ import annotations

import csv
import io
import json
import sys
import subprocess
import os
import re

import pytest

from helpers import TINY_DATA, TINY_PROTOCOL, TINY_SWEEP, User, readme_block, readme_commands


@pytest.fixture
def user(tmp_path):
    return User(tmp_path)


def test_the_quick_start_prints_what_readme_shows(user):
    install, quick = readme_block("pip", "install")  # two commands on a bare machine (installed here)
    assert quick == ["scheda-train", "+experiment=quick"]
    output = user.run(quick, *TINY_DATA).output
    run_dir = re.search(r"run directory: (\S+)", output).group(1)
    assert run_dir.startswith("outputs/runs/")
    evals = re.findall(r"eval epoch (\d+) nu=([\d.]+): C=\S+ val [\d.]+ test [\d.]+", output)
    assert evals == [("4", "0.5"), ("6", "0.4"), ("8", "0.3")], output[-2000:]
    for line in ("done in", "val error", f"results: {run_dir}/results.json", f"checkpoints: {run_dir}/checkpoints/",
                 f"curves: tensorboard --logdir {run_dir}"):
        assert line in output, line
    assert json.loads((user.work / run_dir / "results.json").read_text())["status"] == "completed"


def test_your_own_data_from_a_made_up_array(user):
    """README's dataset=arrays example: the array written by its python line, then trained and
    evaluated on splits carved from it."""
    make, train = readme_block("python", "-c")
    subprocess.run([sys.executable, *make[1:]], cwd=user.work, env=user.env, check=True, timeout=120)
    output = user.run(train, "trainer.device=cpu", "trainer.progress_bar=false").output  # README's sizes
    run_dir = re.search(r"run directory: (\S+)", output).group(1)
    results = json.loads((user.work / run_dir / "results.json").read_text())
    assert results["status"] == "completed" and results["epochs"] == 20
    assert results["evaluations"][-1]["test_n"] == 100  # a tenth of the 1000 rows: no test_x in mine.npz


def test_the_python_example_trains_encodes_and_loads(user):
    """README's "Use from Python" block, run as a user's script: train from arrays, encode, load."""
    from helpers import README

    [example] = re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)
    script = example + ("\nassert features.shape == (1000, 100)\nassert (again.encode(x) == features).all()"
                        "\nassert run.results['status'] == 'completed'\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=user.work, env=user.env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "outputs/runs/" in proc.stdout


def test_a_run_cut_short_is_resumed_to_its_end(user):
    cut, resume = readme_block("scheda-train", "+experiment=quick", "trainer.max_epochs=4")
    first = user.run(cut, *TINY_DATA).output
    run_dir = re.search(r"run directory: (\S+)", first).group(1)
    results = user.work / run_dir / "results.json"
    assert json.loads(results.read_text())["epochs"] == 4
    resume = [a.replace("RUN_DIR", run_dir) for a in resume]
    user.run(resume)
    after = json.loads(results.read_text())
    assert after["status"] == "completed" and after["epochs"] == 8 and len(after["history"]) == 8
    assert [s["nu"] for s in after["switches"]] == [0.5, 0.4, 0.3]
    log = (user.work / run_dir / "train.log").read_text()
    assert "resumed from" in log and "schedule differs" not in log  # the same schedule, no longer cut short


def test_a_sweep_run_again_skips_its_jobs_and_its_results_are_gathered(user):
    first, again, joblib = readme_block("scheda-train", "-m", "schedule=constant", "schedule.nu=0.3,0.5,0.7",
                                        "seed=1,2,3", "hydra.sweep.dir=outputs/nu_sweep")
    assert first == again
    out = user.run(first, *TINY_SWEEP).stdout
    assert "jobs: 9 ran, 0 skipped, 0 resumed, 0 reran" in out, out[-2000:]
    out = user.run(again, *TINY_SWEEP).stdout
    assert "jobs: 0 ran, 9 skipped, 0 resumed, 0 reran" in out, out[-2000:]

    table, grouped, export = readme_block("scheda-results", "outputs/nu_sweep")
    lines = user.run(table).stdout.splitlines()
    assert lines[0] == ("| run | schedule.nu | seed | status | epochs | read at | classifier | val_error % | "
                        "test_error % | minutes |")
    rows = [line.split(" | ") for line in lines[2:]]
    assert len(rows) == 9 and all(r[4] == r[5] and re.fullmatch(r"\d+\.\d\d", r[7])  # read at the last epoch
                                  and re.fullmatch(r"\d+\.\d\d", r[8]) and re.fullmatch(r"\d+\.\d \|", r[9])
                                  for r in rows), lines
    means = user.run(grouped).stdout
    assert len([line for line in means.splitlines() if "(3)" in line]) == 3, means

    # the export reads the folders of the block's sweeps, the joblib one's too, as they stand after them
    assert export[-2:] == [">", "runs.csv"], export
    user.run(joblib, *TINY_SWEEP)
    rows = list(csv.DictReader(io.StringIO(user.run(export[:-2]).stdout)))
    assert len(rows) == 9 + 3 and {r["run"].split("/")[1] for r in rows} == {"nu_sweep", "nu_sweep_joblib"}, rows
    assert all(r["status"] == "completed" and float(r["test_error %"]) > 0 for r in rows), rows


def test_the_optuna_search_runs_and_keeps_its_study_in_the_sweep_folder(user):
    """README's hydra/sweeper=optuna command, lengthened to two trials of a tiny decreasing schedule."""
    [search] = readme_block("scheda-train", "-m", "hydra/sweeper=optuna")
    user.run(search, *TINY_DATA, "model.hidden=8", "classifier.c_log2_min=-1", "classifier.c_log2_max=0",
             "schedule.K=1", "schedule.initial_epochs=1", "schedule.nu_final=0.25", "hydra.sweeper.n_trials=2")
    folder = user.work / next(a.split("=", 1)[1] for a in search if a.startswith("hydra.sweep.dir="))
    assert (folder / "optuna.db").exists() and sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["0", "1"]


def test_a_sweep_of_local_parallel_jobs_gives_each_its_own_gpu(user):
    """The joblib sweep of README, with two GPUs visible: each worker pins itself to one, so two
    jobs at once never share a GPU (checked on the CPU by what each job saw)."""
    joblib = readme_commands("scheda-train", "-m", "hydra/launcher=joblib")[0]
    out = user.run(joblib, *TINY_SWEEP, env={"CUDA_VISIBLE_DEVICES": "0,1"}).stdout
    assert "jobs: 3 ran" in out, out[-2000:]
    sweep = user.work / next(a.split("=", 1)[1] for a in joblib if a.startswith("hydra.sweep.dir="))
    seen = [json.loads((sweep / str(k) / "results.json").read_text())["cuda_visible_devices"] for k in range(3)]
    assert set(seen) == {"0", "1"}, seen


def test_the_protocol_at_smoke_scale_with_local_parallel_jobs(user):
    """README's protocol with joblib's workers, its first phase: every phase launches the same way
    (scheda.protocol.launch), and the basic launcher's run checks them all (test_smoke_protocol)."""
    joblib = readme_commands("scheda-reproduce", "scale=smoke", "launcher=joblib")[0]
    out = user.run(joblib, *TINY_PROTOCOL, "phases=[da,select,report]").output
    assert "Joblib.Parallel" in out
    out_dir = user.work / next(a.split("=", 1)[1] for a in joblib if a.startswith("out_dir="))
    n_jobs = int(next(a.split("=", 1)[1] for a in joblib if a.startswith("n_jobs=")))
    assert (out_dir / "selection.json").exists()
    runs = sorted(out_dir.glob("*/*/results.json"))
    assert len(runs) == 3 and all(json.loads(p.read_text())["status"] == "completed" for p in runs)
    trained = [json.loads(p.read_text())["config"] for p in runs if "raw" not in p.parent.name]
    assert {c["trainer"]["num_threads"] for c in trained} == {max(1, (os.cpu_count() or 1) // n_jobs)}


def test_ci_installs_as_the_quick_start_says_and_builds_the_docs_strictly(tmp_path):
    """.ci/run installs with README's command, and the docs site builds with no broken link
    and no page left out of its nav (``mkdocs build --strict``, the docs' own check)."""
    import shlex

    from helpers import REPO

    install, _ = readme_block("pip", "install")
    ci = [shlex.split(line) for line in (REPO / ".ci" / "run").read_text().splitlines() if line.startswith("pip ")]
    assert ci == [install]
    site = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          capture_output=True, text=True, cwd=REPO, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert site.returncode == 0, site.stderr[-3000:]


def test_every_file_of_the_repository_a_page_names_is_there():
    """A path into the repository that README, docs/ (its results too) or configs/README.md names
    in backticks leads to a file or folder (docs/results/gpu_h100.md named scheda/step.py, gone
    when the package took its layers)."""
    from helpers import REPO, doc_pages

    pages = [*doc_pages(), *sorted((REPO / "docs" / "results").glob("*.md")), REPO / "configs" / "README.md"]
    named = {(page.relative_to(REPO).as_posix(), path.rstrip("/.")) for page in pages
             for path in re.findall(r"`((?:scheda|docs|configs|scripts|tests|\.ci)/[\w./-]+)`", page.read_text())}
    assert len(named) > 50  # the pattern reads the pages' paths
    assert [(page, path) for page, path in sorted(named) if not (REPO / path).exists()] == []
