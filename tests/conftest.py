"""Fixtures: tiny CIFAR-10 data sets written in the real file formats (tests/helpers.py); how
xdist spreads the suite when a Slurm cluster answers."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

# One thread per worker (before torch loads, and inherited by every subprocess): xdist already
# runs one worker per core, and torch's own threads on top of them only wait for each other.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# A suite started in the background by a shell without job control (``python -m pytest &`` in a
# script) inherits SIGINT ignored, and so would every command the tests start: the tests that
# press Ctrl-C need what a terminal gives its commands.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

from helpers import slurm_cluster_answers, write_cifar_arrays, write_cifar_batches


def pytest_configure(config) -> None:
    """The Triton step's kernels run in Triton's interpreter on CPU tensors (tests/test_triton_step.py),
    set before anything imports triton (scheda.training.step imports it only to build that step); the CUDA
    tests (``-m cuda``, scripts/gpu_check.sh) compile them for the GPU."""
    if (config.getoption("markexpr") or "").strip() != "cuda":
        os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_xdist_auto_num_workers(config) -> int | None:
    """``-n auto``: one worker per core, and one more when the Slurm tests will run. They share
    one worker (one queue, one node they may down) and spend most of their time waiting on
    Slurm, so that worker needs no core of its own."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cores + 1 if slurm_cluster_answers() else None


def pytest_collection_modifyitems(config, items) -> None:
    """The Slurm tests first: xdist hands out groups in collection order, and theirs is the
    longest chain of the suite, so it starts at once on its worker."""
    items.sort(key=lambda item: item.get_closest_marker("slurm") is None)


@pytest.fixture
def cifar_arrays(tmp_path) -> Path:
    return write_cifar_arrays(tmp_path / "data" / "cifar10")


@pytest.fixture
def cifar_batches(tmp_path) -> Path:
    return write_cifar_batches(tmp_path / "data_batches" / "cifar10")
