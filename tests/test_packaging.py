"""The project's metadata agrees with itself: one version (scheda.__version__, which the
installed metadata, CITATION.cff and CHANGELOG.md carry), one licence (LICENSE, pyproject,
CITATION.cff), and the paper's citation in README."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import metadata, version

import yaml

import scheda
from helpers import REPO


def test_the_version_is_in_one_place_and_everything_else_carries_it():
    assert re.fullmatch(r"\d+\.\d+\.\d+", scheda.__version__)
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "scheda.__version__"}
    assert version("scheda") == scheda.__version__  # the installed metadata, read from there
    assert yaml.safe_load((REPO / "CITATION.cff").read_text())["version"] == scheda.__version__
    releases = re.findall(r"^## (\d+\.\d+\.\d+)", (REPO / "CHANGELOG.md").read_text(), flags=re.M)
    assert releases and releases[0] == scheda.__version__


def test_one_licence_everywhere():
    assert (REPO / "LICENSE").read_text().startswith("MIT License\n")
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["license"] == {"text": "MIT"}
    assert metadata("scheda")["License"] == "MIT"
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert cff["license"] == "MIT" and cff["cff-version"] == "1.2.0" and cff["authors"]


def test_readme_cites_the_paper():
    bibtex = re.search(r"```bibtex\n(.*?)```", (REPO / "README.md").read_text(), flags=re.S).group(1)
    assert "@inproceedings{geras2015scheduled," in bibtex
    for field in ("Scheduled denoising autoencoders", "Geras, Krzysztof J. and Sutton, Charles", "2015"):
        assert field in bibtex
