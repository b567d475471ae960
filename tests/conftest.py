"""Fixtures: tiny CIFAR-10 data sets written in the real file formats (tests/helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import write_cifar_arrays, write_cifar_batches


@pytest.fixture
def cifar_arrays(tmp_path) -> Path:
    return write_cifar_arrays(tmp_path / "data" / "cifar10")


@pytest.fixture
def cifar_batches(tmp_path) -> Path:
    return write_cifar_batches(tmp_path / "data_batches" / "cifar10")
