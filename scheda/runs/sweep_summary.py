"""After a ``train.py -m`` sweep: one line per job (its overrides, status, errors) and the
best job on validation, read from each job's results.json, and the sweep's table in
``summary.csv`` and ``summary.md`` (scheda.runs.gather, as ``scheda-results`` prints it); a Hydra
callback, registered in configs/hydra/default.yaml."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from scheda.runs.reentry import INVOCATION
from scheda.runs.rundir import FINAL_STATUSES, kept, read_at_text, run_status
from scheda.utils.io import atomic_write, shown_path


def job_line(job_dir: Path, invocation: str | None = None) -> tuple[str, float | None, str | None]:
    """One job's summary line, its validation error (None without an evaluation, and for a job that
    has not finished: the sweep's best is a finished one) and what this invocation did with it
    (scheda.runs.rundir.ACTIONS; None when it did not get to it: its last attempt names another
    ``invocation``, the id this one gave its jobs)."""
    overrides_file = job_dir / ".hydra" / "overrides.yaml"
    overrides = " ".join(str(o) for o in OmegaConf.load(overrides_file)) if overrides_file.exists() else ""
    results_file = job_dir / "results.json"
    if not results_file.exists():
        return f"{job_dir.name}: {overrides}: no results.json", None, None
    try:
        results: dict[str, Any] = json.loads(results_file.read_text())
    except ValueError:  # not JSON, or not UTF-8 text
        return f"{job_dir.name}: {overrides}: unreadable results.json", None, None
    read = kept(results)  # a fused sweep's run has none of its own: its best model's validation error
    val = results.get("best_val_error") if read is None else read["val_error"]
    test = read["test_error"] if read else None
    at = read_at_text(results.get("stopped_by"), read["epoch"]) if read else ""
    errors = f", {at}" if at else ""
    errors += f", val {100 * val:.2f} %" if val is not None else ""
    errors += f", test {100 * test:.2f} %" if test is not None else ""
    last = (results.get("attempts") or [{}])[-1]
    action = last.get("action")
    if invocation is not None and last.get("invocation") != invocation:
        action = None  # a job this invocation did not touch (an earlier trial of a continued search)
    done = f" ({action})" if action else ""
    if results.get("status") != "completed" and results.get("error"):  # what stopped it, as its results.json says
        errors += f": {results['error']}"
    status = run_status(results, job_dir)
    return f"{job_dir.name}: {overrides}: {status}{done}{errors}", val if status in FINAL_STATUSES else None, action


def swept_label(sweep_dir: Path, job_overrides: list[str]) -> str:
    """What tells this job apart in its sweep: its values of the keys the sweep varies (those
    given with several values, read from the sweep's multirun.yaml), as ``key=value,...``;
    "" outside a sweep or when nothing varies. TensorBoard names the job's curves by it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    saved = sweep_dir / "multirun.yaml"
    if not saved.is_file():
        return ""
    parser = OverridesParser.create()
    try:
        swept = {o.get_key_element() for o in parser.parse_overrides(list(OmegaConf.load(saved).hydra.overrides.task))
                 if o.is_sweep_override()}
        mine = parser.parse_overrides(job_overrides)
    except Exception:  # noqa: BLE001 - a label is a convenience: never fail a job over it
        return ""
    return ",".join(f"{o.get_key_element()}={o.value()}" for o in mine if o.get_key_element() in swept)


class SweepSummary(Callback):
    invocation: str | None = None
    _before: str | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Give this invocation an id that every job it launches records in its attempt
        (scheda.runs.reentry.INVOCATION): in this process's environment, which launched processes inherit."""
        self.invocation = uuid.uuid4().hex
        self._before = os.environ.get(INVOCATION)
        os.environ[INVOCATION] = self.invocation

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self._before is None:  # a later sweep of this process (the Python API) gets its own
            os.environ.pop(INVOCATION, None)
        else:
            os.environ[INVOCATION] = self._before
        summarise(Path(config.hydra.sweep.dir), self.invocation)


def summarise(sweep_dir: Path, invocation: str | None) -> None:
    """Print the sweep's job lines, its counts and best job, and write its summary.csv/.md. Hydra
    calls it at a sweep's end (:class:`SweepSummary`); the sweeper calls it itself when a job failed
    (hydra_plugins.scheda_sweeper), since Hydra then raises the failure before its callbacks."""
    jobs = sorted((p for p in sweep_dir.iterdir() if (p / ".hydra").is_dir()),
                  key=lambda p: (0, int(p.name), "") if p.name.isdigit() else (1, 0, p.name)) \
        if sweep_dir.is_dir() else []
    if not jobs:
        return
    from scheda.runs.rundir import ACTIONS

    lines = [job_line(job, invocation) for job in jobs]
    print(f"sweep of {len(jobs)} jobs in {shown_path(sweep_dir)}:")
    for text, _, _ in lines:
        print(f"  {text}")
    counts = {a: sum(1 for _, _, action in lines if action == a) for a in ACTIONS}
    earlier = sum(1 for _, _, action in lines if action is None)
    print("jobs: " + ", ".join(f"{n} {a}" for a, n in counts.items())
          + (f", {earlier} not run by this invocation" if earlier else "")
          + " (skipped: completed or diverged before with the same config; resumed: from its newest "
            "checkpoint; reran: failed before, or rerun=true)")
    scored = [(val, text) for text, val, _ in lines if val is not None]
    if scored:
        print(f"best on validation: {min(scored)[1]}")
    from scheda.runs.gather import gather  # torch, only once a sweep has run

    for fmt in ("csv", "md"):
        text = gather([sweep_dir], fmt=fmt, base=sweep_dir)  # runs named inside the sweep
        if text:
            atomic_write(sweep_dir / f"summary.{fmt}", lambda f, t=text: f.write(t.encode()))
    print(f"table: {shown_path(sweep_dir / 'summary.md')} (scheda-results {shown_path(sweep_dir)})")
