"""The paper's protocol in one command: DA grid -> best DA per nu -> ScheDA continuations ->
report beside the paper's numbers.

    SCHEDA_DATA=../shared/data scheda-reproduce table=table1 scale=cpu
    scheda-reproduce table=table1 scale=paper launcher=submitit_slurm \\
        "launcher_overrides=['hydra.launcher.partition=gpu','hydra.launcher.gpus_per_node=1']"

Rerunning the same command resumes: finished jobs are read, killed ones continue from their
checkpoints. ``phases=[report]`` rewrites the report from the runs on disk; while another
invocation still runs the table, it writes an interim report from the jobs finished so far and
nothing in the out_dir (the running invocation owns it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from scheda.commandline import (conflicting_flags, list_groups_from_one_copy, one_line_composition_errors,
                                unknown_choice)
from scheda.config import CONFIGS, register_configs
from scheda.utils.errors import BusyError, ConfigError, SchedaError
from scheda.utils.environment import invoked_as
from scheda.utils.interrupt import Interrupted, quiet_on_a_closed_pipe, terminate_as_interrupt
from scheda.utils.io import atomic_write, print_line, shown_path
from scheda.utils.lock import hold
from scheda.protocol import blocks, estimate, launch, phases, recorded_runs
from scheda.protocol.config import register_protocol_configs
from scheda.runs.rundir import FINAL_STATUSES, read_results
from scheda.protocol.report import folder_id, report_path, write_report
from scheda.protocol.jobs import JobSpec
from scheda.protocol.tables import REPORT, Progress, chosen_phases, phases_of
from scheda.utils.lazy import lazy

torch = lazy("torch", globals())

log = logging.getLogger("reproduce")

try:
    register_configs()
except SchedaError as exc:  # a component package that fails to load: one line, before Hydra starts
    sys.exit(f"error: {exc}")
register_protocol_configs()


def reproduce(cfg: DictConfig, out_dir: Path) -> Path | None:
    started = time.time()
    commit = git_commit()  # the code that runs: the checkout may change while the jobs do
    if cfg.stages is not None:  # 0.2's name (CHANGELOG)
        log.warning("stages= is called phases= now: read as phases=%s", list(cfg.stages))
        cfg.phases = cfg.stages
    cfg.phases = chosen_phases(cfg)  # null: every phase of the table, and its report
    blocks.check(cfg)
    given, beyond = None, None  # a block reading another's selection: that block's record, and its config
    if blocks.declared(cfg):
        if cfg.block is None:
            return _without_block(cfg)
        block = blocks.declared(cfg)[cfg.block]
        record = blocks.read_record(cfg, block)
        if record is not None and not cfg.dry_run:
            log.info("block %d (%s) has its record (%s, %s): nothing to run; the table's report from the records: "
                     "phases=[report] without block= (delete that folder to run the block again)", block.index,
                     block.name, shown_path(blocks.record_dir(cfg, block)), record["date"])
            return None
        _report_dir_writable(str(blocks.settings(cfg).records), "table.blocks.records")
        given = blocks.given_record(cfg, block)
        beyond = blocks.beyond(cfg, block)
        cfg = blocks.apply(cfg, block, out_dir)
        out_dir = Path(cfg.out_dir)  # absolute, as the jobs' init_from paths must be
        log.info("block %d (%s): %s; its runs in %s", block.index, block.name,
                 ", ".join(f"{k}={v}" for k, v in block.values.items()), shown_path(out_dir))
    phases.check(cfg)
    for phase in phases_of(cfg):  # whatever each phase plans from, before any job
        phase.check(cfg)
    batch = int(phases.job_config(cfg).trainer.batch_size)  # as the runs compose it
    bench = estimate.load_bench(cfg.bench) if cfg.bench else None
    estimated = estimate.estimate(cfg, bench, batch, beyond)
    log.info("%s", estimate.describe(cfg, estimated, cfg.bench))
    launches = estimate.by_launch(estimated)
    if launches:
        log.info("%s", launches)
    if given is not None:
        log.info("block %d reads the selection of block %d (%s, its record of %s): it trains only seeds %s of the "
                 "models that block chose", cfg.block, given[0].index, given[0].name, given[1]["date"],
                 blocks.declared(cfg)[cfg.block].values[blocks.SEEDS])
    if cfg.dry_run:
        return None
    _report_dir_writable(cfg.report_dir)  # the report comes at the end: a folder it cannot go to is said now
    with terminate_as_interrupt(), contextlib.ExitStack() as held:
        try:
            held.enter_context(hold(out_dir, "scheda-reproduce"))
            _record_invocation_config(cfg, out_dir)
            folder_id(out_dir)  # made now, not by an interim report read meanwhile
        except BusyError as busy:
            if set(cfg.phases) != {REPORT}:
                raise
            log.info("%s runs jobs in %s: a report of the jobs finished so far, writing nothing there",
                     busy.holder, shown_path(out_dir))
            return _run_phases(cfg, out_dir, started, estimated, bench, batch, commit, running=busy.holder,
                               given=given)
        return _run_phases(cfg, out_dir, started, estimated, bench, batch, commit, given=given)


def _record_invocation_config(cfg: DictConfig, out_dir: Path) -> None:
    """``<out_dir>/.hydra/``: this invocation's config, Hydra's and its overrides, as Hydra writes
    them for a run (configs/reproduce.yaml leaves it to the invocation that holds out_dir)."""
    from hydra.core.hydra_config import HydraConfig

    hydra_cfg = HydraConfig.get()
    for name, node in (("config.yaml", cfg), ("hydra.yaml", OmegaConf.create({"hydra": hydra_cfg})),
                       ("overrides.yaml", hydra_cfg.overrides.task)):
        atomic_write(out_dir / ".hydra" / name, lambda f, node=node: f.write(OmegaConf.to_yaml(node).encode()))


def _run_phases(cfg: DictConfig, out_dir: Path, started: float, estimated: dict[str, Any],
                bench: dict[str, Any] | None, batch: int, commit: str, running: str | None = None,
                given: tuple[blocks.Block, dict[str, Any]] | None = None) -> Path | None:
    """Every phase planned, the chosen ones launched, every one collected; the report (its time
    beside ``estimated``, the plan's estimate, and the runs' epochs beside ``bench``'s).
    ``running``: another invocation, which holds ``out_dir`` and runs the table; this one only
    reads it, for an interim report. ``given``: the block whose selection this block reads, and its
    record: each phase it recorded is restored from it, and each job it finished is planned but not
    launched (:func:`_plan_given`)."""
    owner = running is None
    phases.check_scale_unchanged(cfg.scale, out_dir, keep=owner)
    progress = Progress(cfg, out_dir, owner=owner)
    invocation = launch.Invocation(out_dir, cfg, started, keep=owner)
    table = phases_of(cfg)
    launched: set[str] = set()  # the launches of the phases this invocation was asked to run
    restored: set[str] = set()  # the phases read from the selection block's record
    record: dict[str, Any] = {}
    finished: set[tuple[str, str]] = set()
    if given is not None:  # every run that block's record keeps is read from it
        source, record = given
        progress.given_from, progress.given_dir = source.index, out_dir_of(progress, source)
        for payload in record["phases"].values():
            if isinstance(payload, dict) and "runs" in payload:
                recorded_runs.remember(payload, progress)
        finished = blocks.given_jobs(record)
    try:
        for phase in table:
            planned = _plan_given(phase, progress, record, finished, restored) if given else phase.plan(progress)
            for launch_name, jobs in planned.items():
                if phase.name in cfg.phases:
                    launched.add(launch_name)
                    if jobs:
                        progress.launching = True
                        progress.counts.append(launch.run_phase(cfg, out_dir, launch_name, jobs, invocation))
                        progress.launching = False
                progress.jobs.setdefault(launch_name, []).extend(jobs)
            if phase.name not in restored:
                phase.collect(progress)
    finally:  # a stopped or failed invocation's time counts in the protocol's wall time too
        invocations = invocation.end(ran_jobs=progress.ran_jobs)
    statuses = launch.job_statuses(progress.all_jobs(), out_dir)
    checked = []
    if bench is not None:
        runs = [read_results(out_dir / job.phase / job.name) for job in progress.all_jobs()]
        checked = estimate.against_runs(cfg, bench, batch, [r for r in runs if r], shown_path(cfg.bench))
    info = {"device": describe_device(statuses), "invocations": invocations,
            "job_seconds": sum(s["seconds"] or 0 for s in statuses), "out_dir": shown_path(out_dir),
            "protocol_id": folder_id(out_dir), "running": running, "estimate": estimated, "bench": cfg.bench,
            "checked": checked,
            "date": datetime.now().strftime("%Y-%m-%d %H:%M"), "commit": commit}
    path = report_path(cfg, out_dir)
    block = blocks.declared(cfg)[cfg.block] if owner and cfg.get("block") is not None else None
    if block is not None and not [s for s in statuses if s["status"] not in FINAL_STATUSES]:
        written = blocks.write_record(cfg, block, progress, info, statuses, restored)
        if written is not None:
            log.info("block %d (%s): its record is %s: commit it; the table's report from every record: "
                     "phases=[report] without block=", block.index, block.name, shown_path(written))
    if REPORT in cfg.phases:
        write_report(cfg, [line for phase in table for line in phase.report(progress, path)], statuses, info, path)
        interim = not owner and any(s["status"] not in FINAL_STATUSES for s in statuses)
        log.info("%s: %s", "interim report" if interim else "report", path)
    unfinished = [s for s in statuses if s["phase"] in launched and s["status"] not in FINAL_STATUSES]
    if unfinished:
        listed = "; ".join(f"{s['name']} ({s['status']}{': ' + s['error'] if s['error'] else ''})"
                           for s in unfinished[:5])
        more = f" and {len(unfinished) - 5} more" if len(unfinished) > 5 else ""
        retry = " ".join([invoked_as("scheda-reproduce", "scheda.protocol.reproduce", "scripts/reproduce.py"),
                          *map(shlex.quote, sys.argv[1:])])
        raise SchedaError(f"{len(unfinished)} job{'s' if len(unfinished) > 1 else ''} did not finish: {listed}{more}; "
                          f"the report lists them; rerun to retry them (finished jobs are kept): {retry}")
    return path


def _plan_given(phase, progress: Progress, record: dict[str, Any], finished: set[tuple[str, str]],
                restored: set[str]) -> dict[str, list[JobSpec]]:
    """A phase's plan in a block that reads another block's selection (its ``record``): the jobs it
    ``finished`` are set apart (``progress.given``: read, not trained); a phase all of whose jobs it
    finished is restored from what its record keeps (``restored`` gains its name: it collects nothing
    here), any other plans the rest here (the further seeds' jobs)."""
    planned = phase.plan(progress)
    payload = record["phases"].get(phase.name)
    if payload is not None and not (isinstance(payload, dict) and blocks.GIVEN in payload) and \
            all((job.phase, job.name) in finished for jobs in planned.values() for job in jobs):
        phase.restore(progress, [payload])
        restored.add(phase.name)
    out = {}
    for launch_name, jobs in planned.items():
        progress.given += [job for job in jobs if (job.phase, job.name) in finished]
        out[launch_name] = [job for job in jobs if (job.phase, job.name) not in finished]
    return out


def out_dir_of(progress: Progress, block: blocks.Block) -> Path:
    """Another block's folder, beside this block's."""
    return recorded_runs.blocks_root(progress) / blocks.folder_of(progress.cfg, block)


def _without_block(cfg: DictConfig) -> Path | None:
    """A table in blocks, invoked without block=: the listing (dry_run), the report from the
    records alone (phases=[report]), or one line saying how to run it."""
    if cfg.dry_run:
        bench = estimate.load_bench(cfg.bench) if cfg.bench else None

        def estimate_of(block_cfg: DictConfig, beyond: DictConfig | None) -> dict[str, Any]:
            return estimate.estimate(block_cfg, bench, int(phases.job_config(block_cfg).trainer.batch_size), beyond)
        for line in blocks.listing(cfg, estimate_of):
            log.info("%s", line)
        return None
    if set(cfg.phases) != {REPORT}:
        raise ConfigError(f"table={cfg.table.name} scale={cfg.scale.name} runs in blocks, one per invocation: give "
                          f"block=N (0 to {len(blocks.declared(cfg)) - 1}); {blocks.listing_hint(cfg)}")
    _report_dir_writable(cfg.report_dir)
    progress, records = blocks.restored(cfg)
    path = Path(cfg.report_dir) / f"{cfg.table.name}_{cfg.scale.name}.md"
    table = phases_of(progress.cfg)
    sections = [line for phase in table for line in phase.report(progress, path)]
    blocks.write_report(progress.cfg, records, sections, path)
    log.info("report from %d block records: %s", len(records), path)
    return path


def describe_device(statuses: list[dict]) -> str:
    """The devices the jobs recorded, with this machine's GPU or thread count (a cluster's
    jobs ran elsewhere: their results.json says where)."""
    used = sorted({s["device"] for s in statuses if s.get("device")}) or ["no job has run"]
    here = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"CPU, {torch.get_num_threads()} threads"
    return f"jobs ran on {', '.join(used)} (this machine: {here})"


def _report_dir_writable(report_dir: str, key: str = "report_dir") -> None:
    """A ConfigError if ``report_dir`` (the value of ``key``) could not be made or written to: the
    report (or a block's record) comes after the jobs, hours later. Nothing is made here (a refused
    run leaves no folder behind)."""
    folder = Path(report_dir).absolute()
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if not existing.is_dir():
        raise ConfigError(f"{key}={report_dir} cannot be made ({shown_path(existing)} is a file): give a folder "
                          f"you can write to")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{key}={report_dir} cannot be written to ({shown_path(existing)}: no permission, or a "
                          f"read-only file system): give a folder you can write to")


def git_commit() -> str:
    """The checkout's short commit, ``-dirty`` when its tracked files differ from it; "unknown" for an
    installed copy or without git (scheda.utils.environment.source_revision)."""
    from scheda.utils.environment import source_revision

    commit, dirty = source_revision()
    return "unknown" if commit is None else commit[:7] + ("-dirty" if dirty else "")


@hydra.main(version_base="1.3", config_path=CONFIGS, config_name="reproduce")
def _main(cfg: DictConfig) -> None:
    try:
        reproduce(cfg, Path(cfg.out_dir).resolve())  # the jobs' init_from paths must not depend on a cwd
    except SchedaError as exc:
        print_line(f"error: {exc}")
        sys.exit(1)
    except KeyboardInterrupt as exc:
        print_line("interrupted: finished jobs are kept and a stopped one resumes from its checkpoint: "
                   "run the same command again")
        sys.exit(exc.exit_code if isinstance(exc, Interrupted) else 130)


@quiet_on_a_closed_pipe
def main() -> None:
    if any(a.lstrip("+~").partition("=")[0] == "table_scale" for a in sys.argv[1:]):
        sys.exit("error: table_scale follows from table= and scale= (configs/table_scale/<table>_<scale>.yaml): give "
                 "those, e.g. table=amazon scale=cpu")
    wrong = conflicting_flags(sys.argv) or unknown_choice(sys.argv, ["table", "scale"])
    if wrong:  # one line naming the options (Hydra's own: 15 lines with its search path)
        sys.exit(f"error: {wrong}")
    list_groups_from_one_copy(sys.argv)  # --help: one copy of Hydra's repository for every group
    one_line_composition_errors("reproduce")
    _main()


if __name__ == "__main__":
    main()
