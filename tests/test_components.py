"""Components from another package: a noise in a tiny package that the test installs, found
through the entry point group ``scheda.components`` and trained with like scheda's own; a
package whose module fails to import, or that takes a name scheda already has, is refused in
one line (scheda.config.load_components)."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers import STAGES, TINY, install_package

FLIP = '''
from dataclasses import dataclass

import torch

from scheda.config import register
from scheda.model.noise import Noise


@register("noise")
@dataclass
class Flip(Noise):
    """Flip each input x to 1 - x with probability nu."""

    name: str = "flip"

    def corrupt(self, x, nu, generator, out):
        u = torch.empty_like(x).uniform_(generator=generator)
        return torch.where(u < nu, 1 - x, x, out=out)
'''


def _train(site, cifar_arrays, tmp_path, *overrides):
    env = {**os.environ, "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "scheda.cli", f"dataset.root={cifar_arrays}", *TINY, *STAGES,
                           "evaluate.enabled=false", f"hydra.run.dir={tmp_path / 'run'}", *overrides],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_a_noise_from_another_package_is_found_by_its_entry_point_and_trains(cifar_arrays, tmp_path):
    site = install_package(tmp_path, "scheda_flip", FLIP)
    proc = _train(site, cifar_arrays, tmp_path, "noise=flip")
    assert proc.returncode == 0, proc.stderr[-2000:]
    config = (tmp_path / "run" / ".hydra" / "config.yaml").read_text()
    assert "name: flip" in config
    listed = subprocess.run([sys.executable, "-m", "scheda.config"], env={**os.environ, "PYTHONPATH": str(site)},
                            capture_output=True, text=True, timeout=120)
    assert "flip" in listed.stdout and "scheda_flip" in listed.stdout


def test_a_component_package_that_fails_or_clashes_is_refused_in_one_line(cifar_arrays, tmp_path):
    broken = install_package(tmp_path, "scheda_broken", "raise ImportError('needs a package that is not here')\n")
    proc = _train(broken, cifar_arrays, tmp_path)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert ("the scheda.components entry point 'scheda_broken' of scheda-broken (scheda_broken) failed to load "
            "(ImportError: needs a package that is not here): fix that package or uninstall it") in proc.stderr
    clash = install_package(tmp_path, "scheda_clash", FLIP.replace('"flip"', '"masking"'))
    proc = _train(clash, cifar_arrays, tmp_path)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "registers noise=masking, which scheda.model.noise.Masking already is: give it another name" in proc.stderr
