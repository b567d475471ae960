"""Checkpoints and results.json are written to a temporary file and renamed: a crash in the
middle of a write leaves the previous file intact and loadable."""

import errno
import json

import pytest
import torch

import scheda.utils.io
from scheda.training.checkpoint import load_checkpoint, save_checkpoint
from scheda.utils.errors import CheckpointError
from scheda.utils.io import atomic_write, atomic_write_json
from scheda.model.autoencoder import DenoisingAutoencoder
from scheda.runs.rundir import RunResults


class Boom(RuntimeError):
    pass


def _crash_mid_write(f):
    f.write(b"the first half of a file")
    raise Boom("killed mid-write")


def test_checkpoint_survives_a_crash_mid_write(tmp_path):
    path = tmp_path / "epoch_00001.pt"
    model = DenoisingAutoencoder(6, 3)
    save_checkpoint(path, {"model": model.state_dict(), "epoch": 1})
    with pytest.raises(Boom):
        atomic_write(path, _crash_mid_write)
    assert torch.equal(load_checkpoint(path)["model"]["W"], model.W)
    assert [p.name for p in tmp_path.iterdir()] == ["epoch_00001.pt"]


def test_results_json_survives_a_crash_mid_write(tmp_path, monkeypatch):
    results = RunResults(tmp_path / "results.json", config={})
    results.add_evaluation({"epoch": 1, "val_error": 0.5})

    def crashing(path, obj):
        return atomic_write(path, _crash_mid_write)

    monkeypatch.setattr("scheda.runs.rundir.atomic_write_json", crashing)
    with pytest.raises(Boom):
        results.add_evaluation({"epoch": 2, "val_error": 0.4})
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["evaluations"] == [{"epoch": 1, "val_error": 0.5}]


def test_a_failed_rename_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "results.json"
    atomic_write_json(path, {"v": 1})

    def broken_replace(src, dst):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(scheda.utils.io.os, "replace", broken_replace)
    with pytest.raises(OSError):
        atomic_write_json(path, {"v": 2})
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_disk_full_names_the_file_and_keeps_the_previous_one(tmp_path):
    path = tmp_path / "epoch_00001.pt"
    save_checkpoint(path, {"model": {}, "epoch": 1})

    def full(f):
        f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(CheckpointError, match="disk full while writing .*epoch_00001.pt.*free space"):
        atomic_write(path, full)
    assert load_checkpoint(path)["epoch"] == 1


def test_written_files_get_the_usual_permissions(tmp_path):
    """Not mkstemp's 0600: results and checkpoints stay readable as the umask allows."""
    import stat

    path = atomic_write_json(tmp_path / "results.json", {"a": 1})
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~scheda.utils.io._UMASK


def test_a_place_that_cannot_be_written_names_the_file_and_the_fix(tmp_path):
    """A folder that cannot be made (a file stands where it would go): the user's to fix, in one
    line, as a full disk is (it was an OSError's traceback)."""
    (tmp_path / "reports").write_text("a file, not a folder")
    with pytest.raises(CheckpointError, match=r"cannot write .*reports/table1_cpu.md: a file stands where its "
                                              r"folder would go \(.*reports\): choose a folder you can write to"):
        atomic_write_json(tmp_path / "reports" / "table1_cpu.md", {})
    with pytest.raises(OSError):  # anything else stays itself (a writer's own error, a bug)
        atomic_write(tmp_path / "x.json", lambda f: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error")))
