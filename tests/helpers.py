"""What the tests share: tiny CIFAR-10 data sets written in the real file formats, the tiny
run settings, composing a config, and running the users' command (``from helpers import ...``)."""

from __future__ import annotations

import importlib.util
import os
import pickle
import re
import shlex
import sys
import socket
import subprocess
import tempfile
import textwrap
import weakref
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir

from scheda.config import register_configs
from scheda.utils.fork import ForkedCommand
from scheda.protocol.config import register_protocol_configs

from fixture_data import N_TEST, N_TRAIN, make_cifar_arrays, write_cifar_arrays  # noqa: F401 - the tests' data

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("scheda", "configs", "hydra_plugins")  # the checkout's folders that a build or PYTHONPATH=. needs
N_VAL = 20

register_configs()
register_protocol_configs()


def write_cifar_batches(root: Path, n_train: int = N_TRAIN, n_test: int = N_TEST) -> Path:
    """The official python layout: cifar-10-batches-py/data_batch_1..5 and test_batch."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    train_x, train_y = make_cifar_arrays(n_train, 1)
    test_x, test_y = make_cifar_arrays(n_test, 2)
    parts = np.array_split(np.arange(n_train), 5)
    for i, idx in enumerate(parts, start=1):
        entry = {"batch_label": f"training batch {i} of 5", "labels": train_y[idx].tolist(),
                 "data": train_x[idx], "filenames": [f"{j}.png" for j in idx]}
        with open(folder / f"data_batch_{i}", "wb") as f:
            pickle.dump(entry, f)
    with open(folder / "test_batch", "wb") as f:
        pickle.dump({"batch_label": "testing batch 1 of 1", "labels": test_y.tolist(), "data": test_x}, f)
    return root


TINY = [
    f"dataset.val_size={N_VAL}",
    "model.hidden=8",
    "trainer.batch_size=16",
    "trainer.device=cpu",
    "trainer.progress_bar=false",
    "optim.lr=0.01",
]
# Three epochs: nu 0.5 for two, then 0.2 for one.
STAGES = ["schedule=stages", "schedule.stages=[{nu:0.5,epochs:2},{nu:0.2,epochs:1}]"]


def compose_cfg(overrides: list[str]):
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


def smoke_cfg(*overrides: str):
    """The protocol's config at scale=smoke, as scheda-reproduce composes it."""
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        return compose(config_name="reproduce", overrides=["scale=smoke", *overrides])


def _user_env(extra: dict | None = None) -> dict[str, str]:
    """This environment as a user's shell would have it: no data root unless a test sets one,
    one torch thread."""
    env = {k: v for k, v in os.environ.items() if k != "SCHEDA_DATA"}
    env.update(extra or {})
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_command(module: str, argv0: Path, args: list[str], cwd: Path = REPO, env_extra: dict | None = None,
                timeout: float = 300) -> subprocess.CompletedProcess:
    """The users' command ``python <argv0> ...`` (whose code is ``module``'s ``main``) in a
    process of its own, as the protocol runs its phases (scheda.utils.fork): forked from a server that
    imported the training code once, so a test pays no Python start and torch import (about 2 s
    of CPU each, a third of the suite's); its output, exit code and signals are its own. The
    tests of the interpreter's own start (the entry points, an install) run real subprocesses."""
    env = _user_env(env_extra)
    with tempfile.TemporaryDirectory() as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        proc = ForkedCommand(module, str(argv0), [str(a) for a in args], cwd=cwd, env=env, stdout=out, stderr=err)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        return subprocess.CompletedProcess(proc.args, proc.returncode, out.read_text(), err.read_text())


def run_module(module: str, args: list, cwd: Path = REPO, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m <module> ...`` (see run_command)."""
    return run_command(module, Path(importlib.util.find_spec(module).origin), args, cwd, timeout=timeout)


def run_train(args: list[str], cwd: Path = REPO, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    """The users' entry point ``python train.py ...`` (see run_command)."""
    return run_command("scheda.cli", REPO / "train.py", args, cwd, env_extra)


class Started:
    """start_command's process: a ForkedCommand with the parts of Popen the tests use (stderr as
    a file to read, send_signal, communicate)."""

    def __init__(self, module: str, argv0: Path, args: list[str], cwd: Path, new_session: bool,
                 env_extra: dict | None = None):
        fd, err = tempfile.mkstemp(prefix="scheda-", suffix=".stderr")
        os.close(fd)
        self._err = Path(err)
        weakref.finalize(self, self._err.unlink, missing_ok=True)
        self._proc = ForkedCommand(module, str(argv0), [str(a) for a in args], cwd=cwd, env=_user_env(env_extra),
                                   stdout=Path(os.devnull), stderr=self._err, new_session=new_session)
        self.pid, self.args = self._proc.pid, self._proc.args
        self.stderr = open(self._err)

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    def poll(self) -> int | None:
        return self._proc.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self._proc.wait(timeout)

    def send_signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def communicate(self, timeout: float | None = None) -> tuple[None, str]:
        self.wait(timeout)
        text = self.stderr.read()
        self.stderr.close()
        return None, text


def start_command(module: str, argv0: Path, args: list[str], cwd: Path, new_session: bool = False,
                  env_extra: dict | None = None) -> Started:
    """The users' command ``python <argv0> ...`` started in the background (see run_command), for
    interrupts, kills and second writers; ``new_session``: in its own process group, so that its
    workers can be killed with it."""
    return Started(module, argv0, args, cwd, new_session, env_extra)


def start_train(args: list[str], cwd: Path, new_session: bool = False) -> Started:
    """``python train.py ...`` started in the background (see start_command)."""
    return start_command("scheda.cli", REPO / "train.py", args, cwd, new_session)


def faulty_workers(**faults) -> dict[str, str]:
    """The environment that injects faulty_train's faults into a sweep's joblib workers too
    (tests/reliability/workers/sitecustomize.py), for start_command's ``env_extra``."""
    path = os.pathsep.join(filter(None, [str(REPO / "tests" / "reliability" / "workers"), os.environ.get("PYTHONPATH")]))
    return {"PYTHONPATH": path, **{f"SCHEDA_FAULT_{name.upper()}": str(value) for name, value in faults.items()}}


def start_faulty_train(args: list[str], cwd: Path, **faults) -> Started:
    """``python train.py ...`` with faults injected (tests/reliability/faulty_train.py:
    ``epoch_sleep``, ``hang_write``, ``usr2_handler``), started in the background."""
    return start_command("reliability.faulty_train", REPO / "train.py", args, cwd,
                         env_extra={f"SCHEDA_FAULT_{name.upper()}": str(value) for name, value in faults.items()})


def slurm_cluster_answers() -> bool:
    """A slurmctld listening on this machine (its default port), checked without Slurm's own
    10 s client timeouts."""
    if not Path("/etc/slurm/slurm.conf").exists():
        return False
    try:
        with socket.create_connection(("localhost", 6817), timeout=0.5):
            return True
    except OSError:
        return False


# --- README's commands, as a user runs them (tests/test_readme.py, tests/test_smoke_protocol.py) ----
README = REPO / "README.md"
# What every training command adds on 100 images: a validation split that fits, the CPU, no bar.
TINY_DATA = [f"dataset.val_size={N_VAL}", "trainer.device=cpu", "trainer.progress_bar=false"]
# A sweep's jobs train one epoch of a small model (README's sweeps train 400 epochs of 1000 units)
# and choose C among three.
TINY_SWEEP = [*TINY_DATA, "schedule.epochs=1", "model.hidden=16", "classifier.c_log2_min=-2", "classifier.c_log2_max=0"]
TINY_PROTOCOL = [f"overrides=['dataset.val_size={N_VAL}','trainer.device=cpu']"]


def rows_of(section: str) -> dict[str, list[str]]:
    """A markdown table's rows by their first cell (a report's, read back by a test)."""
    out = {}
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            out[cells[0]] = cells[1:]
    return out


def doc_pages() -> list[Path]:
    """The pages a user reads: README.md (the front page), then docs/ (the results aside)."""
    return [README, *sorted(p for p in (REPO / "docs").glob("*.md"))]


def readme_blocks() -> list[list[list[str]]]:
    """The ``bash`` code blocks of README.md and docs/, each a list of commands (argv lists;
    comments dropped, continued lines joined, ``export`` lines left out: the test sets the
    environment)."""
    blocks = [b for page in doc_pages() for b in re.findall(r"^```bash\n(.*?)^```", page.read_text(), flags=re.S | re.M)]
    commands = []
    for block in blocks:
        text = block.replace("\\\n", " ")
        argvs = [shlex.split(line, comments=True) for line in text.splitlines()]
        commands.append([argv for argv in argvs if argv and argv[0] != "export"])
    return commands


def readme_block(*starts: str, exact: bool = False) -> list[list[str]]:
    """The one block of the docs whose first command starts with (``exact``: is) ``starts``."""
    found = [b for b in readme_blocks() if b and b[0][:len(starts)] == list(starts)
             and (not exact or len(b[0]) == len(starts))]
    assert len(found) == 1, f"README.md and docs/ have {len(found)} bash blocks starting with {' '.join(starts)!r}"
    return found[0]


def readme_commands(*starts: str) -> list[list[str]]:
    """Every command of the docs that starts with ``starts``, README's first, in order."""
    found = [argv for block in readme_blocks() for argv in block if argv[:len(starts)] == list(starts)]
    assert found, f"README.md and docs/ show no command starting with {' '.join(starts)!r}"
    return found


class User:
    """A user's folder outside the checkout, with tiny data (``SCHEDA_DATA`` names it) and their
    shell's environment, in which README's commands run as the installed commands."""

    def __init__(self, root: Path):
        self.data = write_cifar_arrays(root / "data" / "cifar10")
        self.work = root / "work"
        self.work.mkdir()
        self.env = {k: v for k, v in os.environ.items() if k not in ("SCHEDA_DATA", "PYTHONPATH")}
        self.env.update(SCHEDA_DATA=str(root / "data"), OMP_NUM_THREADS="1", TMPDIR=str(root))

    def run(self, argv: list[str], *extra: str, env: dict[str, str] | None = None,
            timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        """``argv`` (a README command) with ``extra`` appended, as the installed command; fails
        the test on a non-zero exit (unless ``check`` is False) or a traceback, with its output."""
        command = Path(sys.executable).parent / argv[0]
        assert command.exists(), f"{argv[0]} is not installed beside {sys.executable}: pip install -e '.[dev]'"
        proc = subprocess.run([str(command), *argv[1:], *extra], cwd=self.work, env={**self.env, **(env or {})},
                              capture_output=True, text=True, timeout=timeout)
        proc.output = output = proc.stdout + proc.stderr
        assert proc.returncode == 0 or not check, f"{shlex.join(argv)} exited {proc.returncode}:\n{output[-4000:]}"
        assert "Traceback" not in output, output[-4000:]
        return proc


def install_package(root: Path, name: str, module_text: str) -> Path:
    """A package ``name`` whose module ``name`` is named in the scheda.components group, installed
    (pip, no network) into its own folder: the returned path goes on PYTHONPATH."""
    src = root / f"{name}_src"
    src.mkdir()
    (src / f"{name}.py").write_text(textwrap.dedent(module_text))
    (src / "pyproject.toml").write_text(textwrap.dedent(f"""
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "{name.replace('_', '-')}"
        version = "0.1"

        [project.entry-points."scheda.components"]
        {name} = "{name}"

        [tool.setuptools]
        py-modules = ["{name}"]
    """))
    target = root / f"{name}_site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--target", str(target), str(src)], check=True, capture_output=True, timeout=300)
    return target


def check_stops(runs: Path, report: str, patience: int) -> set[str]:
    """Issue 52's rule in a protocol's runs and report: each trained run (not fine-tuning, whose own
    rule is finetune.patience, nor the raw baseline) records why it stopped, consistently with its
    own evaluations: by patience ``patience`` evaluations after its best, at its cap with none after
    it; the report's section on the rule has a row per reported model and names those at the cap.
    Returns the stops seen."""
    import json

    seen = set()
    for results_path in runs.glob("*/*/results.json"):
        results = json.loads(results_path.read_text())
        if results_path.parent.parent.name in ("seed_finetune", "finetune") or not results.get("history"):
            continue
        schedule = results["config"]["schedule"]
        cap = results["config"]["trainer"]["max_epochs"] or sum(s["epochs"] for s in schedule.get("stages", [])) \
            or schedule.get("epochs")
        best = min(results["evaluations"], key=lambda e: (e["val_error"], e["epoch"]))
        after = [e for e in results["evaluations"] if e["epoch"] > best["epoch"]]
        assert results["stopped_by"] in ("patience", "cap"), results_path
        seen.add(results["stopped_by"])
        if results["stopped_by"] == "patience":
            assert len(after) == patience and results["epochs"] == after[-1]["epoch"], results_path
        else:
            assert not after and results["epochs"] == cap, results_path
    section = report.split("## Training to convergence", 1)[1].split("\n## ", 1)[0]
    reported = report.split("## Results", 1)[1].split("\n- ", 1)[0]
    labels = [line.split("|")[1].strip() for line in reported.splitlines()
              if line.startswith("| ") and "not run at this scale" not in line][1:]
    rows = {line.split("|")[1].strip(): line for line in section.splitlines()
            if line.startswith("| ") and "hidden units |" not in line}
    for label in labels:  # every trained model of the results (not the raw baseline) has its stop
        label = "Best DA" if label == "DA" else label
        if label not in ("Raw pixels", "Raw words"):
            assert label in rows and re.search(r"\| \d+ \((stopped by patience at \d+|\*\*at the cap\*\*, \d+)\)",
                                               rows[label]), (label, section)
    assert ("- At the cap, not converged by the rule" in section) == any("**at the cap**" in r for r in rows.values())
    assert " was reached it " not in section
    return seen
