"""The users' command, ``python train.py ...``, end to end on tiny fixture data."""

import json
import sys

import pytest

from helpers import STAGES, TINY, run_train


def _common(out):
    return [*TINY, *STAGES, f"hydra.run.dir={out}"]


@pytest.mark.parametrize("layout", ["cifar_arrays", "cifar_batches"])
def test_train_end_to_end(layout, request, tmp_path):
    root = request.getfixturevalue(layout)
    out = tmp_path / "run"
    proc = run_train([f"dataset.root={root}", *_common(out)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (out / ".hydra" / "config.yaml").exists() and (out / "train.log").exists()
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["epoch_00002.pt", "epoch_00003.pt"]
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    results = json.loads((out / "results.json").read_text())
    assert results["epochs"] == 3 and results["config"]["dataset"]["root"] == str(root)
    # Nothing is written outside the run directory.
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["run", root.relative_to(tmp_path).parts[0]])


def test_scheda_data_sets_the_default_root(cifar_arrays, tmp_path):
    out = tmp_path / "run"
    proc = run_train(_common(out), cwd=tmp_path, env_extra={"SCHEDA_DATA": str(cifar_arrays.parent)})
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "results.json").read_text())["config"]["dataset"]["root"] == str(cifar_arrays)


def test_overrides_of_the_users_commands(cifar_arrays, tmp_path):
    out = tmp_path / "run"
    proc = run_train([f"dataset.root={cifar_arrays}", *TINY, f"hydra.run.dir={out}", "schedule=decreasing_0.7",
                      "model.hidden=12", "optim.lr=0.05", "trainer.max_epochs=2"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["config"]["model"]["hidden"] == 12 and results["config"]["optim"]["lr"] == 0.05
    assert results["schedule"] == "0.7x2" and results["switches"] == [{"epoch": 0, "nu": 0.7}]


def test_multirun_writes_one_directory_per_job(cifar_arrays, tmp_path):
    sweep = tmp_path / "sweep"
    proc = run_train(["-m", f"dataset.root={cifar_arrays}", *TINY, "schedule=decreasing", "schedule.K=1",
                      "schedule.initial_epochs=1", "schedule.T=1", "schedule.nu0=0.7,0.5",
                      "optim.lr=0.01,0.05", f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir() and p.name.isdigit())
    assert len(jobs) == 4
    seen = set()
    for job in jobs:
        cfg = json.loads((job / "results.json").read_text())["config"]
        seen.add((cfg["schedule"]["nu0"], cfg["optim"]["lr"]))
        assert (job / "checkpoints" / "epoch_00002.pt").exists()
    assert seen == {(0.7, 0.01), (0.7, 0.05), (0.5, 0.01), (0.5, 0.05)}
    # resume= names one run: the sweep's folder is continued by its own command
    proc = run_train([f"resume={sweep}"], cwd=tmp_path)
    assert (proc.returncode, proc.stderr.strip()) == (
        1, f"error: resume={sweep} is a -m sweep's folder: run the sweep's command again to continue all its jobs "
           f"(finished ones are skipped), or resume one of them: resume={sweep}/<job>")


@pytest.mark.parametrize("override, expected", [
    ("schedule.nu0=1.5", "schedule.nu0=1.5 is outside noise=masking's range: its nu is a probability in [0, 1)"),
    ("schedule.nu0=-0.5", "schedule.nu0=-0.5 is not a noise level: nu must be a finite number >= 0"),
    ("optim.lr=-1", "optim.lr=-1.0 must be > 0"),
])
def test_bad_values_fail_with_one_line(cifar_arrays, tmp_path, override, expected):
    proc = run_train([f"dataset.root={cifar_arrays}", *TINY, "schedule=decreasing", override,
                      f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [f"error: {proc.stderr.strip()[7:]}"]
    assert expected in proc.stderr and "Traceback" not in proc.stderr


def test_missing_data_fails_with_one_line(tmp_path):
    proc = run_train([*_common(tmp_path / "run"), "dataset.download=false"], cwd=tmp_path)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "CIFAR-10 not found" in lines[0] and "SCHEDA_DATA" in lines[0]


def test_no_network_fails_with_one_line(tmp_path):
    # Nothing listens on port 1 here: the download fails as it does without a network.
    proc = run_train([*_common(tmp_path / "run"), "dataset.download_url=http://127.0.0.1:1/cifar-10-python.tar.gz"],
                     cwd=tmp_path)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: downloading CIFAR-10 from http://127.0.0.1:1/")
    assert "check the network" in lines[0] and "Traceback" not in proc.stderr
    assert "SCHEDA_DATA" in lines[0] and "dataset.download=true" not in lines[0]  # it was downloading


def test_typo_in_a_key_is_rejected_at_composition(tmp_path):
    proc = run_train(["schedule.nu_0=0.5", f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path)
    assert proc.returncode == 1 and "nu_0" in proc.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_resume_through_the_entry_point(cifar_arrays, tmp_path):
    first = run_train([f"dataset.root={cifar_arrays}", *_common(tmp_path / "a"), "trainer.max_epochs=2"], cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    # The run's own trainer.max_epochs=2 would be kept: lift it to train the rest of the schedule.
    second = run_train([f"dataset.root={cifar_arrays}", *_common(tmp_path / "b"), f"resume={tmp_path / 'a'}",
                        "trainer.max_epochs=null"], cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    results = json.loads((tmp_path / "b" / "results.json").read_text())
    assert results["epochs"] == 3 and len(results["history"]) == 3
    assert "resumed from" in (tmp_path / "b" / "train.log").read_text()


@pytest.mark.parametrize("args, message", [
    (["+experiment=table1_scheda"], "init_from is required by this preset and was not given: add "
                                    "init_from=<the DA's run directory or checkpoint to continue>"),
    (["+model.hiden=5"], "model.hiden is not a setting of model (DAConfig): did you mean model.hidden?"),
    (["+schedule.nu=0.3"], "schedule.nu is not a setting of schedule (LevelScheduleConfig): did you mean schedule.nu0?"),
    (["optim.lr=-1"], "optim.lr=-1.0 must be > 0"),
    (["logger=csv", "+logger.foo=1"], "logger.foo: foo is not a logger: choose loggers with logger=[...] (csv, mlflow, "
                                      "tensorboard), and set one's settings as logger.<name>.<key>"),
    (["hydra.job.env_set.FOO=1"], "hydra.job.env_set.FOO is not in the config yet: add it with "
                                  "+hydra.job.env_set.FOO=1"),
])
def test_refused_configs_fail_with_one_line_and_leave_no_run_directory(cifar_arrays, tmp_path, args, message):
    out = tmp_path / "outputs" / "runs" / "day" / "time"
    proc = run_train([f"dataset.root={cifar_arrays}", *TINY, *args, f"hydra.run.dir={out}"], cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [f"error: {message}"]
    assert not out.exists() and not out.parent.exists()


def test_a_swept_nu_is_rounded_where_it_is_read(cifar_arrays, tmp_path):
    from scheda.run import run
    from helpers import compose_cfg

    cfg = compose_cfg([f"dataset.root={cifar_arrays}", *TINY, "schedule=constant", "schedule.epochs=1",
                       "schedule.nu=0.30000000000000004", "evaluate.enabled=false", "logger=none"])
    results = run(cfg, tmp_path / "run")
    assert results["history"][0]["nu"] == 0.3 and results["switches"] == [{"epoch": 0, "nu": 0.3}]


def test_help_and_completion_list_only_real_options(tmp_path):
    help_text = run_train(["--help"], cwd=tmp_path).stdout
    assert "schedule: constant, decreasing, decreasing_0.7" in help_text and "base_" not in help_text
    completion = run_train(["-sc", "query=bash"], cwd=tmp_path, env_extra={"COMP_LINE": "python train.py model="})
    assert completion.stdout.split() == ["model=composite", "model=da", "model=raw"], completion.stderr[-2000:]


# A process that claims a GPU and holds it until its stdin closes (only scheda.utils.devices imported).
CLAIM = ("import sys; from pathlib import Path; from scheda.utils.devices import claim_gpu; "
         "print(claim_gpu(Path(sys.argv[1])), flush=True); sys.stdin.read()")


def test_claiming_gpus_gives_each_holder_its_own(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "3,5"}
    holders = [subprocess.Popen([sys.executable, "-c", CLAIM, str(tmp_path)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, env=env) for _ in range(3)]
    try:
        claimed = [p.stdout.readline().strip() for p in holders]  # each holds its claim meanwhile
    finally:
        for p in holders:
            p.stdin.close()
            p.wait(timeout=60)
    assert sorted(claimed) == ["3", "5", "None"]  # a third process finds both taken


def test_a_regular_install_trains_and_reproduces_outside_the_checkout(cifar_arrays, tmp_path):
    """A wheel (not the editable install) on its own: the configs travel inside the package, the
    installed commands exist, and the protocol launches training through the installed module."""
    import os
    import shutil
    import subprocess
    import sys

    from helpers import N_VAL, REPO, SOURCES

    wheel_dir, target, source = tmp_path / "wheel", tmp_path / "site", tmp_path / "source"
    for part in SOURCES:  # built from a copy: a build writes build/ beside the sources
        shutil.copytree(REPO / part, source / part, ignore=shutil.ignore_patterns("__pycache__"))
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / part, source / part)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(wheel_dir), str(source)], check=True, capture_output=True, timeout=300)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                    *map(str, wheel_dir.glob("scheda-*.whl"))], check=True, capture_output=True, timeout=300)
    env = {**{k: v for k, v in os.environ.items() if k != "SCHEDA_DATA"}, "PYTHONPATH": str(target),
           "OMP_NUM_THREADS": "1"}
    work = tmp_path / "elsewhere"
    work.mkdir()
    # Every module of the checkout comes from the wheel: one the wheel lacks would be found in the
    # checkout by the editable install's finder, and the run would pass without it.
    names = sorted(".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
                   for p in (REPO / "scheda").rglob("*.py"))
    code = (f"import importlib, scheda\nprint(scheda.__file__)\nfor name in {names!r}:\n"
            f"    m = importlib.import_module(name)\n    assert m.__file__.startswith({str(target)!r}), (name, m.__file__)")
    check = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True)
    assert check.returncode == 0, check.stderr[-2000:]
    assert check.stdout.strip() == str(target / "scheda" / "__init__.py")
    train = subprocess.run([sys.executable, "-m", "scheda.cli", f"dataset.root={cifar_arrays}", *_common(work / "run")],
                           cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert train.returncode == 0, train.stderr
    results = json.loads((work / "run" / "results.json").read_text())
    assert results["status"] == "completed"
    assert results["environment"]["git_commit"] is None  # an installed copy: no checkout to name
    reproduce = subprocess.run(
        [sys.executable, "-m", "scheda.protocol.reproduce", "scale=smoke", "out_dir=runs", "phases=[da,select]",
         f"overrides=['dataset.root={cifar_arrays}','dataset.val_size={N_VAL}','trainer.device=cpu']"],
        cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert reproduce.returncode == 0, reproduce.stderr
    assert (work / "runs" / "selection.json").exists()
    assert "scheda-train" in [p.name for p in (target / "bin").iterdir()] and shutil.which("scheda-train")


@pytest.mark.parametrize("argv0, typed", [
    ("/home/u/.venv/bin/scheda-train", "scheda-train"),
    ("train.py", "python train.py"),
    ("cli", "python -m scheda.cli"),
    ("/home/u/notebook/ipykernel_launcher.py", "scheda-train"),  # the Python API: the installed command
])
def test_a_hint_names_the_command_as_the_user_typed_it(monkeypatch, argv0, typed):
    import scheda.cli
    from scheda.utils.environment import invoked_as

    monkeypatch.setattr(sys, "argv", [scheda.cli.__file__ if argv0 == "cli" else argv0, "resume=run"])
    assert invoked_as("scheda-train", "scheda.cli", "train.py") == typed


@pytest.mark.parametrize("args, line", [
    (["dataset=nope"], "error: dataset=nope is not an option of dataset: use amazon, arrays or cifar10"),
    (["-m", "logger=[tensorboard,csvv]"], "error: logger=csvv is not an option of logger: use csv, mlflow, none or "
                                          "tensorboard"),
    (["+experiment=quik"], "error: experiment=quik is not an option of experiment: use amazon_da, amazon_raw, "),
])
def test_a_mistyped_option_answers_in_one_line_with_the_options(tmp_path, args, line):
    proc = run_train(args, cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr.strip().startswith(line), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "outputs").exists()


@pytest.mark.parametrize("args, line", [
    (["trainer.max_epoch=3"], "error: trainer.max_epoch is not a setting of trainer (TrainerConfig): did you mean "
                              "trainer.max_epochs?"),
    (["optim.lr=abc"], "error: optim.lr: Value 'abc' of type 'str' could not be converted to Float"),
    (["model.hidden=1.5"], "error: model.hidden: Value '1.5' of type 'float' could not be converted to Integer"),
    (["schedule=stages", "schedule.stages=[1"], "error: an override does not parse (no viable alternative at input "
                                                "'[1'): quote a value"),
    # a logger's setting without its logger's name, a logger not chosen
    (["logger=mlflow", "logger.tracking_uri=x"], "error: logger.tracking_uri: each chosen logger has its own settings: "
                                                 "logger.mlflow.tracking_uri"),
    (["logger=mlflow", "logger.csv.file=x"], "error: logger.csv.file: the csv logger is not chosen: add it to the "
                                             "others, e.g. logger=[tensorboard,csv]"),
    # a preset's key that the group's other choice has no field for: Hydra chains no cause to its error
    (["+experiment=quick", "schedule=constant"], "error: experiment/quick.yaml sets schedule.nu0, which is not a "
                                                 "setting of schedule (ConstantScheduleConfig): the preset is written "
                                                 "for another choice of schedule"),
])
def test_a_command_line_hydra_cannot_compose_answers_in_one_line(tmp_path, args, line):
    """Hydra's own report of these is five to seven lines ending in "Set the environment variable
    HYDRA_FULL_ERROR=1" (scheda.commandline.one_line_composition_errors); with it set, Hydra's trace."""
    proc = run_train(args, cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr.strip().startswith(line), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "outputs").exists()
    if args == ["optim.lr=abc"]:
        full = run_train(args, cwd=tmp_path, env_extra={"HYDRA_FULL_ERROR": "1"})
        assert full.returncode == 1 and "Traceback" in full.stderr


@pytest.mark.parametrize("module, args, line", [
    ("scheda.cli", ["-m", "schedule.nu0=0.5,0.7", "--cfg", "job"],
     "error: --multirun (-m) and --cfg cannot go together: give one of them (--cfg shows one job's config: drop -m "
     "and the sweep's commas)"),
    ("scheda.cli", ["--resolve"], "error: --resolve goes with --cfg (or --help): add --cfg job"),
    ("scheda.protocol.reproduce", ["-m", "--info"], "error: --multirun (-m) and --info cannot go together: give one "
                                                     "of them"),
])
def test_hydra_flags_that_cannot_go_together_answer_in_one_line(tmp_path, module, args, line):
    """Hydra raises these as a ValueError with its traceback, before any config is composed."""
    from helpers import run_module

    proc = run_module(module, args, cwd=tmp_path)
    assert (proc.returncode, proc.stderr.strip()) == (1, line)
    assert not (tmp_path / "outputs").exists()


def test_a_users_own_preset_on_the_search_path_is_an_option(tmp_path):
    """A preset in the user's own config folder (``hydra.searchpath=[file://...]`` or
    ``--config-dir``) is picked like a shipped one, not refused as an unknown option; its bad value
    is one line naming the file, and a misspelt name lists it among the options."""
    folder = tmp_path / "mine" / "experiment"
    folder.mkdir(parents=True)
    (folder / "fast.yaml").write_text("# @package _global_\noptim:\n  lr: abc\n")
    for extra in ([f"hydra.searchpath=[file://{tmp_path / 'mine'}]"], ["--config-dir", str(tmp_path / "mine")]):
        proc = run_train(["+experiment=fast", *extra], cwd=tmp_path)
        assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [
            "error: optim.lr: Value 'abc' of type 'str' could not be converted to Float (set by experiment/fast.yaml)"
        ], proc.stderr
    proc = run_train(["+experiment=fats", f"hydra.searchpath=[file://{tmp_path / 'mine'}]"], cwd=tmp_path)
    assert proc.returncode == 1 and "is not an option of experiment: use" in proc.stderr and " fast," in proc.stderr


def test_a_run_directory_that_cannot_be_made_answers_in_one_line(tmp_path):
    """Hydra makes the run's directory before any scheda code runs: a folder that cannot hold one
    (here a file) is one line, for a run, a sweep and the protocol."""
    from helpers import run_module

    (tmp_path / "a_file").write_text("")
    for module, args, folder in [("scheda.cli", ["hydra.run.dir=a_file/run"], "a_file/run"),
                                 ("scheda.cli", ["-m", "hydra.sweep.dir=a_file/s"], "a_file/s"),
                                 ("scheda.protocol.reproduce", ["scale=smoke", "out_dir=a_file/p"], "a_file/p")]:
        proc = run_module(module, args, cwd=tmp_path)
        assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [
            f"error: cannot write {folder}: Not a directory: choose a folder you can write to (hydra.run.dir, "
            f"hydra.sweep.dir, or the protocol's out_dir)"], proc.stderr


def test_a_mistyped_table_or_scale_answers_in_one_line(tmp_path):
    from helpers import run_module

    proc = run_module("scheda.protocol.reproduce", ["table=nope"], cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip() == "error: table=nope is not an option of table: use amazon, features, increasing, paper_settings, random_nu, stacked or table1"
    proc = run_module("scheda.protocol.reproduce", ["scale=smoke,cpuu", "dry_run=true"], cwd=tmp_path)
    assert proc.stderr.strip() == "error: scale=cpuu is not an option of scale: use cpu, gpu, paper, paper_h1000 or smoke"
    proc = run_module("scheda.protocol.reproduce", ["scale.hidden=abc", "dry_run=true"], cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip() == "error: scale.hidden: Invalid value assigned: str is not a ListConfig, list or tuple."


@pytest.mark.parametrize("module, args, line", [
    ("scheda.cli", ["scale=cpu"], "error: scale=cpu is an option of scheda-reproduce (the paper's protocol), not of "
                                  "a training run: scheda-reproduce scale=cpu (docs/protocol.md)"),
    ("scheda.cli", ["+table=table1"], "error: table=table1 is an option of scheda-reproduce (the paper's protocol), "),
    ("scheda.cli", ["experiment=quick"], "error: experiment=quick is not chosen by default: add it with "
                                         "+experiment=quick"),
    ("scheda.protocol.reproduce", ["dataset=amazon"], "error: dataset=amazon is a training run's setting, not the "
                                                      "protocol's: give it to every job as \"overrides=['dataset=amazon']\""
                                                      " (or choose the table of that data: table=amazon)"),
    ("scheda.protocol.reproduce", ["+dataset=amazon"], "error: dataset=amazon is a training run's setting, "),
    ("scheda.protocol.reproduce", ["model.hidden=3"], "error: model.hidden=3 is a training run's setting, not the "
                                                      "protocol's: give it to every job as \"overrides=['model.hidden=3']\""),
    ("scheda.protocol.reproduce", ["+experiment=quick"], "error: +experiment=quick is a training run's setting, "),
    ("scheda.protocol.reproduce", ["table=table1", "table_scale=amazon_cpu"],
     "error: table_scale follows from table= and scale= (configs/table_scale/<table>_<scale>.yaml): give those"),
])
def test_a_group_of_the_other_command_names_the_command_that_takes_it(tmp_path, module, args, line):
    """Each command's config groups are its own: scheda-train scale=cpu named no command (Hydra's
    "Could not override 'scale'" in three lines), scheda-reproduce dataset=amazon not the overrides
    list, and table_scale=... composed Amazon's scale under table1."""
    from helpers import run_module

    proc = run_module(module, [*args, "dry_run=true"] if module.endswith("reproduce") else args, cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr.strip().startswith(line), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "outputs").exists()


def test_the_python_api_names_the_protocols_groups_too(tmp_path):
    import scheda
    from scheda.utils.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^scale=cpu is an option of scheda-reproduce"):
        scheda.train(["scale=cpu"], output_dir=tmp_path / "run")


@pytest.mark.parametrize("command", [["scheda-train", "--help"], ["scheda-reproduce", "--help"],
                                     ["scheda-results", "RUNS"], ["-m", "scheda.config"]],
                         ids=["train", "reproduce", "results", "config"])
def test_a_reader_that_goes_away_ends_the_command_as_it_would_cat(tmp_path, command):
    """``scheda-train --help | head``: the installed commands (real processes) write into a pipe
    whose reader has closed it, and end with the shell's status for SIGPIPE (141), with nothing on
    stderr, where they printed a BrokenPipeError traceback."""
    import os
    import subprocess
    from pathlib import Path

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.json").write_text(json.dumps({
        "config": {"seed": 1}, "status": "completed", "epochs": 1,
        "evaluations": [{"epoch": 1, "val_error": 0.5, "test_error": 0.5}]}))
    argv = [sys.executable, *command] if command[0] == "-m" else \
        [str(Path(sys.executable).parent / command[0]), *command[1:]]
    argv = [str(tmp_path) if a == "RUNS" else a for a in argv]
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command writes a line
    try:
        proc = subprocess.run(argv, stdout=write, stderr=subprocess.PIPE, text=True, timeout=120, cwd=tmp_path)
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (141, "")


def test_a_broken_pipe_that_is_not_stdouts_is_reported():
    """A broken pipe of anything else (a socket to an MLflow server) while stdout's reader is
    there is an error like any other, not a quiet 141."""
    from scheda.utils.interrupt import quiet_on_a_closed_pipe

    @quiet_on_a_closed_pipe
    def command():
        raise BrokenPipeError(32, "Broken pipe")

    with pytest.raises(BrokenPipeError):
        command()
