"""The package's layers: every import of every module of scheda (those inside functions too)
points to its own layer or one below, never up, and no two packages of one layer import each
other. The old flat import paths still work for one release, with a warning naming the new one."""

import ast
import re
import subprocess
import sys

import pytest

from helpers import REPO

# Bottom to top. A module of one layer imports only from its own package and from lower layers.
LAYERS = [
    {"scheda.utils"},                                  # plumbing: errors, atomic writes, locks, forks, signals
    {"scheda.config"},                                 # the registry of config groups
    {"scheda.commandline"},                            # the command lines around Hydra: one-line errors, patches
    {"scheda.runs", "scheda.data", "scheda.model"},    # run directories (no torch); data sets; the model and its parts
    {"scheda.training"},                               # the steps, the loop, callbacks, checkpoints
    {"scheda.loggers"},
    {"scheda.evaluation"},                             # classifiers, fine-tuning, exports
    {"scheda.analysis"},                               # filters, feature similarity, concatenated features
    {"scheda.planning"},                               # a run's config typed, its rules, its plan (reads every group)
    {"scheda.run", "scheda.protocol"},                 # one run built and run; the paper's protocol
    {"scheda.api", "scheda.cli"},                      # the Python API and the command line
]
FRONT_DOOR = {"scheda"}  # the package itself: its lazy scheda.train


def unit_of(module: str) -> str | None:
    """The package (or top-level module) of ``module`` that LAYERS names."""
    for layer in LAYERS:
        for unit in layer:
            if module == unit or module.startswith(unit + "."):
                return unit
    return None


def rank(unit: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if unit in layer)


def imports_of(path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)  # from scheda import api
    return {m for m in found if m == "scheda" or m.startswith("scheda.")}


def modules():
    for path in sorted((REPO / "scheda").rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, path


def test_every_module_belongs_to_a_layer():
    orphans = [name for name, _ in modules() if name not in FRONT_DOOR and unit_of(name) is None]
    assert orphans == [], f"name these in LAYERS: {orphans}"


def test_no_import_runs_up_a_layer_or_across_one():
    wrong = []
    for name, path in modules():
        if name in FRONT_DOOR:
            continue
        unit = unit_of(name)
        for target in imports_of(path):
            to = unit_of(target)
            if to is None or to == unit:
                continue
            if rank(to) > rank(unit) or (rank(to) == rank(unit)):
                wrong.append(f"{name} imports {target} ({unit} -> {to})")
    assert wrong == []


def test_the_old_flat_paths_are_gone():
    """0.2.0 dropped the flat layout's import paths (``scheda.noise``, ``scheda.results``, ...),
    which 0.1's last changes kept for one release: the package itself imports nothing of them."""
    out = subprocess.run([sys.executable, "-c", "import scheda.noise"], capture_output=True, text=True, cwd=REPO)
    assert out.returncode != 0 and "No module named 'scheda.noise'" in out.stderr
    assert not (REPO / "scheda" / "_moved.py").exists()


@pytest.mark.parametrize("module", ["scheda.runs.rundir", "scheda.runs.gather", "scheda.runs.reentry"])
def test_reading_runs_needs_no_torch(module):
    """``scheda-results`` and the protocol's reading of runs stay light: no torch."""
    out = subprocess.run([sys.executable, "-c", f"import sys, {module}; print('torch' in sys.modules)"],
                         capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_the_contributors_guide_lists_the_layers_this_test_checks():
    """docs/contributing.md's table of layers is the one a newcomer reads: each row's layer number
    and package are those of LAYERS (it once put the planning modules in scheda/training/)."""
    text = (REPO / "docs" / "contributing.md").read_text()
    rows = re.findall(r"^\| (\d+) \| (.+?) \| .+ \|$", text, flags=re.M)
    documented: dict[int, set[str]] = {}
    for layer, packages in rows:
        for path in re.findall(r"`([^`]+)`", packages):
            documented.setdefault(int(layer) - 1, set()).add(path.rstrip("/").removesuffix(".py").replace("/", "."))
    assert documented == dict(enumerate(LAYERS)), documented


def test_no_module_prints_a_line_to_stderr_in_two_writes():
    """A sweep's jobs share one console: ``print(..., file=sys.stderr)`` writes the line and its
    newline apart where stderr is unbuffered (``PYTHONUNBUFFERED=1``), and CI once saw two jobs'
    interrupt lines run into one. Every such line goes through ``scheda.utils.io.print_line``."""
    found = []
    for name, path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print" and any(
                    k.arg == "file" and ast.unparse(k.value) == "sys.stderr" for k in node.keywords):
                found.append(f"{name}:{node.lineno}")
    assert not found, f"print to sys.stderr (use print_line): {', '.join(found)}"
