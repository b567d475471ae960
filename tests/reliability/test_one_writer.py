"""One writer per directory (scheda.utils.lock), with real processes: a second resume of a live run,
a second sweep in a live sweep's folder and a second scheda-reproduce on a live out_dir are refused at once with one line naming the
holder; a holder killed with SIGKILL leaves nothing that blocks the next one."""

import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from scheda.utils.errors import BusyError
from scheda.utils.lock import hold

from helpers import TINY, run_train, start_train
from test_reproduce import ENDLESS_DAS, reproduce, start_reproduce

LONG = ["schedule=constant", "schedule.nu=0.3", "schedule.epochs=1500", "trainer.checkpoint_every=100",
        "evaluate.enabled=false", "logger=none"]


def _wait(predicate, proc, what, timeout=120):
    deadline = time.time() + timeout
    while not predicate():
        assert proc.poll() is None, f"the first run ended before {what}: {proc.stderr.read()[-2000:]}"
        assert time.time() < deadline, f"no {what} after {timeout} s"
        time.sleep(0.1)


def test_a_second_resume_of_a_live_run_is_refused_and_a_killed_holder_is_taken_over(cifar_arrays, tmp_path):
    out = tmp_path / "run"
    args = [f"dataset.root={cifar_arrays}", *TINY, *LONG, f"hydra.run.dir={out}"]
    first = start_train(args, tmp_path)
    try:
        _wait(lambda: (out / "checkpoints" / "epoch_00100.pt").exists(), first, "first checkpoint")
        assert f"pid {first.pid} on {socket.gethostname()}" in (out / ".lock").read_text()
        second = run_train([f"resume={out}"], cwd=tmp_path)
        assert second.returncode == 1
        line = second.stderr.strip().splitlines()[-1]
        assert line.startswith("error: ") and f"is in use by pid {first.pid} on {socket.gethostname()}" in line
        assert first.poll() is None  # the holder goes on, untouched
        assert not (out / "results.json").exists() or json.loads((out / "results.json").read_text())["status"] == "running"
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    # The kernel released the dead holder's lock: the next resume takes it and finishes the run.
    third = run_train([f"resume={out}"], cwd=tmp_path)
    assert third.returncode == 0, third.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "completed" and results["epochs"] == 1500


def test_a_second_protocol_on_a_live_out_dir_is_refused(cifar_arrays, tmp_path):
    with hold(tmp_path / "runs", "scheda-reproduce"):
        proc = reproduce(tmp_path, cifar_arrays, "phases=[da,select,report]")
    assert proc.returncode == 1
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("error: runs is in use by pid ") and f"pid {os.getpid()} on " in line
    assert not (tmp_path / "runs" / "da").exists() and not (tmp_path / "reports").exists()
    # Released (the holder's block ended): the same command runs.
    again = reproduce(tmp_path, cifar_arrays, "phases=[da,select,report]")
    assert again.returncode == 0, again.stderr[-2000:]


def _files(folder: Path) -> dict[str, tuple[int, bytes]]:
    """Every file below ``folder`` but the lock (which the test's holder rewrites) and the
    protocol's log (to which every invocation appends its lines)."""
    return {str(f.relative_to(folder)): (f.stat().st_mtime_ns, f.read_bytes()) for f in folder.rglob("*")
            if f.is_file() and f.name not in (".lock", "reproduce.log")}


def test_a_report_while_the_table_runs_is_interim_and_writes_nothing_in_its_folder(cifar_arrays, tmp_path):
    """``phases=[report]`` while another invocation holds the out_dir: a report of the jobs
    finished so far, saying it is one and by whom the table runs, and not a byte changed in the
    out_dir but its lines appended to the protocol's log (the selection, the records, .hydra/ and
    the invocations belong to the running invocation)."""
    first = reproduce(tmp_path, cifar_arrays, "phases=[da,select]")  # the DA grid finished, nothing after it
    assert first.returncode == 0, first.stderr[-2000:]
    runs, report = tmp_path / "runs", tmp_path / "reports" / "table1_smoke.md"
    assert "- phases=[da,select]" in (runs / ".hydra" / "overrides.yaml").read_text()  # the holder's record
    before, log = _files(runs), (runs / "reproduce.log").read_text()
    with hold(runs, "scheda-reproduce"):
        proc = reproduce(tmp_path, cifar_arrays, "phases=[report]")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"pid {os.getpid()} on {socket.gethostname()}" in proc.stdout and "interim report: " in proc.stdout
    text = report.read_text()
    interim = [line for line in text.splitlines() if line.startswith("- **Interim report**")]
    assert len(interim) == 1 and f"written while another invocation (pid {os.getpid()} on " in interim[0], text[:3000]
    assert " jobs not finished (not run " in interim[0] and "every number below is from the " in interim[0]
    assert "| DA | 16 |" in text  # the finished grid's best DA is reported
    assert _files(runs) == before and (runs / "reproduce.log").read_text().startswith(log)
    # A phase that trains is still refused while the table runs.
    with hold(runs, "scheda-reproduce"):
        refused = reproduce(tmp_path, cifar_arrays, "phases=[continue,report]")
    assert refused.returncode == 1 and "is in use by pid " in refused.stderr.strip().splitlines()[-1]
    assert _files(runs) == before  # .hydra/ too: the record of the invocation that holds the folder
    # The owner's own report of the unfinished table says what is missing, not "interim".
    owned = reproduce(tmp_path, cifar_arrays, "phases=[report]")
    assert owned.returncode == 0, owned.stderr[-2000:]
    text = report.read_text()
    assert "- **Interim report**" not in text and "- **Not finished**: " in text, text[:3000]
    assert "- phases=[report]" in (runs / ".hydra" / "overrides.yaml").read_text()


def test_the_same_sweep_run_again_while_it_still_runs_is_refused(cifar_arrays, tmp_path):
    """A sweep folder has one sweep at a time: the same command run again (in another terminal)
    went on to the jobs the first had not reached, each sweep ending with half a summary."""
    args = ["-m", f"dataset.root={cifar_arrays}", *TINY, "schedule=constant", "schedule.epochs=1", "seed=1,2",
            "evaluate.enabled=false", "logger=none", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    with hold(tmp_path / "sweep", "sweep"):
        proc = run_train(args, cwd=tmp_path)
    assert proc.returncode == 1
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("error: ") and f"sweep is in use by pid {os.getpid()} on " in line, proc.stderr[-2000:]
    assert "one sweep writes there at a time" in line and not (tmp_path / "sweep" / "0").exists()
    again = run_train(args, cwd=tmp_path)  # released: the same command runs
    assert again.returncode == 0, again.stderr[-2000:]
    assert "jobs: 2 ran" in again.stdout


def test_a_phase_forked_from_the_protocol_does_not_keep_the_protocols_lock(cifar_arrays, tmp_path):
    """The protocol forks its phases from itself (scheda.utils.fork): a phase inherits its descriptors,
    the out_dir lock among them, and lets that one go. So a protocol killed with SIGKILL frees its
    out_dir at once, while its orphaned phase still holds (only) its job's run."""
    proc = start_reproduce(tmp_path, cifar_arrays, *ENDLESS_DAS, new_session=True)
    run = tmp_path / "runs" / "da" / "da_h16_nu0.5_lr0.1"
    try:
        _wait(lambda: "epoch" in ((run / "train.log").read_text() if (run / "train.log").exists() else ""), proc,
              "a DA's first epoch")
        stage = int((run / ".lock").read_text().split()[1])
        assert int(Path(f"/proc/{stage}/stat").read_text().rsplit(")", 1)[1].split()[1]) == proc.pid  # forked here
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        with hold(tmp_path / "runs", "scheda-reproduce"):
            pass
        with pytest.raises(BusyError, match=f"in use by pid {stage} "):
            with hold(run):
                pass
    finally:
        os.killpg(proc.pid, signal.SIGKILL)


def test_the_lock_file_names_its_holder_and_is_reusable(tmp_path):
    with hold(tmp_path / "d") as path:
        assert path.read_text().startswith(f"pid {os.getpid()} on {socket.gethostname()} since ")
    with hold(tmp_path / "d"):  # released at the block's end, taken again
        pass
    assert Path(tmp_path / "d" / ".lock").exists()


def test_a_holder_killed_outright_is_gone_once_dead_even_unreaped(tmp_path):
    """What reads a run as killed (scheda.runs.rundir.run_status): the lock file's holder, a live
    process, is not gone; SIGKILLed it is, before its parent has reaped it (a zombie) and after;
    a holder on another host cannot be told and is not."""
    import subprocess

    from scheda.utils.lock import holder_gone

    assert not holder_gone(tmp_path)  # no lock file
    child = subprocess.Popen(["sleep", "60"])
    try:
        (tmp_path / ".lock").write_text(f"pid {child.pid} on {socket.gethostname()} since 2026-11-29 10:00:00\n")
        assert not holder_gone(tmp_path)
        child.send_signal(signal.SIGKILL)
        deadline = time.time() + 10
        while Path(f"/proc/{child.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
            assert time.time() < deadline
            time.sleep(0.01)
        assert holder_gone(tmp_path)  # a zombie: dead, not yet reaped
    finally:
        child.kill()
        child.wait()
    assert holder_gone(tmp_path)
    (tmp_path / ".lock").write_text(f"pid {child.pid} on another-host-{socket.gethostname()} since 2026-11-29\n")
    assert not holder_gone(tmp_path)
    with hold(tmp_path):  # this live process
        assert not holder_gone(tmp_path)
