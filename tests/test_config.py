"""The config registry: every registered option composes, builds, and is documented in
configs/README.md; unknown names list the known ones; typed objects reach the builders."""

import os
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from scheda.config import GROUPS, MANY, NONE, groups_text, load_components, typed, typed_many
from scheda.utils.errors import ConfigError

from helpers import REPO, SOURCES, TINY, compose_cfg

load_components()
OPTIONS = [(group, name) for group, schemas in GROUPS.items() for name in schemas]


def test_configs_readme_names_every_group_and_its_module():
    readme = (REPO / "configs" / "README.md").read_text()
    for group, schemas in GROUPS.items():
        for cls in schemas.values():
            module = cls.__module__.replace(".", "/")
            home = next((f"scheda/{pkg}/" for pkg in ("data", "loggers") if module.startswith(f"scheda/{pkg}/")),
                        module + ".py")
            assert f"| `{group}` | `{home}`" in readme, (group, home)


def test_the_training_guides_table_of_groups_names_every_option_each_has():
    """docs/training.md's table of groups, row by row (a row of two groups splits its options at
    ';'), lists exactly the options a command line can pick: the registered schemas and the YAML
    files of configs/<group>/ (it had missed a schedule, a preset, a table and a scale)."""
    import re

    from scheda.commandline import group_choices

    rows = {}
    for line in (REPO / "docs" / "training.md").read_text().splitlines():
        found = re.match(r"\| (`[a-z_]+`(?:, `[a-z_]+`)?) \| (.*?) \|", line)
        if found:
            groups = re.findall(r"`([a-z_]+)`", found.group(1))
            for group, cell in zip(groups, found.group(2).split(";"), strict=True):
                rows[group] = sorted(re.findall(r"`([^`]+)`", cell))
    choosable = {group for group in (*GROUPS, "experiment", "table", "scale", "hydra")}
    assert choosable <= set(rows), sorted(choosable - set(rows))
    for group in choosable:
        assert rows[group] == group_choices(group), group


def test_every_setting_is_listed_with_its_module_and_default():
    import subprocess
    import sys

    text = subprocess.run([sys.executable, "-m", "scheda.config"], capture_output=True, text=True, check=True).stdout
    assert text.strip() == groups_text().strip()
    assert "schedule=decreasing  (scheda/model/schedule.py, LevelScheduleConfig)" in text
    assert "    schedule.delta_nu = 0.1" in text and "    trainer.batch_size = 20" in text


@pytest.mark.parametrize("group, name", OPTIONS, ids=[f"{g}={n}" for g, n in OPTIONS])
def test_every_registered_option_composes_to_its_checked_schema(group, name):
    cfg = compose_cfg([f"{group}={name}"])
    if group in MANY:  # several options at once, each under its own name; none selects nothing
        specs = typed_many(group, cfg[group])
        assert [type(s) for s in specs] == ([] if name == NONE else [GROUPS[group][name]])
        assert typed_many(group, OmegaConf.to_container(cfg[group], resolve=True)) == specs
        return
    spec = typed(group, cfg[group])
    assert isinstance(spec, GROUPS[group][name])
    # what a run's saved config.yaml holds (a plain mapping) gives the same object
    assert typed(group, OmegaConf.to_container(cfg[group], resolve=True)) == spec


@pytest.mark.parametrize("group", sorted(g for g, schemas in GROUPS.items() if "default" not in schemas))
def test_an_unknown_name_lists_the_known_ones(group):
    with pytest.raises(ConfigError) as exc:
        typed(group, {"name": "nonesuch"})
    assert str(exc.value) == f"{group}.name='nonesuch' is unknown: use one of {', '.join(GROUPS[group])}"


def test_every_component_module_is_named_once_under_the_group_it_fills():
    """COMPONENT_MODULES is how scheda finds its components: each schema lives in a module named
    under its own group, every named module registers something there, and every module of
    scheda/data/ and scheda/loggers/ but their __init__ is one of theirs, found without a list."""
    from scheda.config import COMPONENT_MODULES, component_modules

    homes = {(group, cls.__module__) for group, schemas in GROUPS.items() for cls in schemas.values()}
    named = {(group, module) for group in COMPONENT_MODULES for module in component_modules(group)}
    assert homes == named
    for group, folder in (("dataset", "data"), ("logger", "loggers")):
        found = {f"scheda.{folder}.{p.stem}" for p in (REPO / "scheda" / folder).glob("*.py") if p.stem != "__init__"}
        assert set(component_modules(group)) == found
    assert sorted(GROUPS) == sorted(COMPONENT_MODULES)


def test_a_wrong_type_in_a_saved_config_is_one_line():
    with pytest.raises(ConfigError, match="schedule") as exc:
        typed("schedule", {"name": "constant", "nu": "high", "epochs": 3})
    assert "\n" not in str(exc.value)


def test_the_fork_preload_asks_no_cuda_holds_no_protocol_and_leaves_a_run_little_to_import(cifar_arrays, tmp_path):
    """What scheda.utils.fork imports before forking (``PRELOAD``) asks CUDA nothing (CUDA started
    before a fork fails in every child) and holds no part of the protocol layer; and a run
    started from there imports little of its own, TensorBoard's writer least (360 modules, about
    0.3 s of CPU in every forked run)."""
    import ast
    import subprocess
    import sys

    code = ("import importlib, sys, torch, torch.cuda\n"
            "asked = {name: getattr(torch.cuda, name) for name in ('is_available', 'init', 'device_count')}\n"
            "count = torch._C._cuda_getDeviceCount\n"
            "def touched(*args, **kwargs): raise SystemExit('CUDA asked at import')\n"
            "for name in asked: setattr(torch.cuda, name, touched)\n"
            "torch._C._cuda_getDeviceCount = touched\n"
            "from scheda.utils.fork import PRELOAD\n"
            "for name in PRELOAD: importlib.import_module(name)\n"
            "print(sorted(m for m in sys.modules if m.startswith('scheda.protocol')))\n"
            "for name, f in asked.items(): setattr(torch.cuda, name, f)\n"
            "torch._C._cuda_getDeviceCount = count\n"
            "before = set(sys.modules)\n"
            "sys.argv = ['train.py', *sys.argv[1:]]\n"
            "import scheda.cli\n"
            "try:\n    scheda.cli.main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
            "print(sorted(set(sys.modules) - before))")
    out = subprocess.run([sys.executable, "-c", code, f"dataset.root={cifar_arrays}", *TINY, "schedule=constant",
                          "schedule.epochs=1", f"hydra.run.dir={tmp_path / 'run'}"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    protocol, imported = ast.literal_eval(lines[0]), ast.literal_eval(lines[-1])
    assert protocol == []
    assert (tmp_path / "run" / "tensorboard").is_dir()  # the run wrote its curves, with the preloaded writer
    assert not [m for m in imported if m.startswith(("torch.utils.tensorboard", "tensorboard.compat"))], imported
    assert len(imported) < 100, imported


def test_a_process_with_threads_or_cuda_started_forks_through_the_server(monkeypatch):
    """scheda.utils.fork forks the calling process itself only when that is safe; a test runner's
    threads or a CUDA context send it to the fork server."""
    import sys
    import threading

    import torch

    from scheda.utils.fork import fork_is_safe

    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert fork_is_safe() == (sys.platform == "linux")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert not fork_is_safe()
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(threading, "active_count", lambda: 2)
    assert not fork_is_safe()


def test_a_thread_pool_started_after_the_first_fork_sends_later_ones_to_the_server():
    """A process that forked itself, then computed on several threads (torch's OpenMP workers now
    live in it), must not fork itself again: the child would wait for ever on the pool's threads."""
    import subprocess
    import sys

    code = ("import torch\n"
            "from scheda.utils import fork\n"
            "c = fork.ForkedCommand('scheda.cli', 'scheda-train', ['--help'], stdout=__import__('pathlib').Path('/dev/null'))\n"
            "c.wait(); before = fork.fork_is_safe()\n"
            "torch.set_num_threads(2); a = torch.rand(600, 600); (a @ a).sum()\n"
            "print(c.returncode, before, fork.fork_is_safe(), bool(fork.native_threads() - fork._SAFE_NATIVE))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["0", "True", "False", "True"], proc.stdout + proc.stderr[-2000:]


def test_a_checkout_imported_without_installing_reads_its_configs_folder(tmp_path):
    """PYTHONPATH=<checkout> with no install (a bare GPU machine): no scheda.configs package, so
    Hydra reads the checkout's configs/ folder itself."""
    import shutil
    import subprocess
    import sys

    checkout = tmp_path / "checkout"
    for part in SOURCES:
        shutil.copytree(REPO / part, checkout / part, ignore=shutil.ignore_patterns("__pycache__"))
    code = ("import scheda.config as c; print(c.CONFIGS); "
            "from hydra import compose, initialize_config_dir; c.register_configs(); "
            "initialize_config_dir(config_dir=c.CONFIGS, version_base='1.3').__enter__(); "
            "print(compose(config_name='train', overrides=['schedule=decreasing_0.7']).schedule.nu_final)")
    import sysconfig

    # -S: site-packages on the path as a plain folder, its .pth files (this checkout's editable
    # install among them) not run
    site = sysconfig.get_paths()["purelib"]
    out = subprocess.run([sys.executable, "-S", "-c", code], cwd=checkout, capture_output=True, text=True,
                         env={"PYTHONPATH": f"{checkout}:{site}", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == [str(checkout / "configs"), "0.1"]


def test_help_lists_every_groups_options_from_one_copy_of_the_repository(monkeypatch):
    """scheda-train --help answers each group's options from one copy of Hydra's config
    repository (scheda.cli.list_groups_from_one_copy): the same answers as a copy per question."""
    from hydra import initialize_config_module
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.global_hydra import GlobalHydra

    from scheda.commandline import list_groups_from_one_copy

    def groups(loader, parent=""):
        found = {}
        for group in loader.list_groups(parent):
            name = f"{parent}/{group}" if parent else group
            found[name] = loader.get_group_options(name)
            found.update(groups(loader, name))
        return found

    with initialize_config_module("scheda.configs", version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        each = groups(loader)
        monkeypatch.setattr(ConfigLoaderImpl, "_parse_overrides_and_create_caching_repo",
                            ConfigLoaderImpl._parse_overrides_and_create_caching_repo)  # undone after the test
        list_groups_from_one_copy()
        assert getattr(ConfigLoaderImpl._parse_overrides_and_create_caching_repo, "shared", False)
        assert groups(loader) == each
    assert each["table_scale"] == ["amazon_cpu", "amazon_paper", "amazon_smoke", "features_cpu", "features_paper",
                                   "features_smoke", "paper_settings_cpu", "paper_settings_smoke", "stacked_cpu"]
    assert "hydra/launcher" in each


def test_help_prints_the_groups_and_the_config():
    """--help opens with what the command does and how to start (not Hydra's 'train is powered by
    Hydra'), then Hydra's list of groups and the composed config."""
    proc = subprocess.run([sys.executable, "-m", "scheda.cli", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("scheda-train (in a checkout also python train.py): train a denoising")
    assert "  scheda-train +experiment=quick " in proc.stdout
    assert "table_scale: amazon_cpu, amazon_paper, amazon_smoke" in proc.stdout
    assert "step: auto" in proc.stdout and "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "scheda.protocol.reproduce", "--help"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("scheda-reproduce: the paper's protocol for one table at one scale")
    assert "scale: cpu, gpu, paper, paper_h1000, smoke" in proc.stdout


TORCH_AT_EXIT = ("import atexit, sys\n"
                 "atexit.register(lambda: print('torch imported:', 'torch' in sys.modules, file=sys.stderr))\n"
                 "from scheda.cli import main\n"
                 "main()\n")


@pytest.mark.parametrize("args, env", [(["--help"], {}), (["-sc", "query=bash"], {"COMP_LINE": "scheda-train noise="})],
                         ids=["help", "completion"])
def test_help_and_completion_do_not_import_torch(args, env):
    """--help and shell completion compose the config from the schemas alone: torch (1.2 s of a
    2.2 s --help on 2 cores) is imported where it is used (scheda.utils.lazy), which they never reach."""
    proc = subprocess.run([sys.executable, "-c", TORCH_AT_EXIT, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert ("noise=masking" if env else "step: auto") in proc.stdout
    assert proc.stderr.strip().splitlines()[-1] == "torch imported: False"
