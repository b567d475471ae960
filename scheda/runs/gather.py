"""``scheda-results DIR...``: every run's results.json under the given folders (single runs,
sweeps, the models of a fused sweep, protocol folders) as one table: the config keys that differ
between the runs as columns, then status, epochs (and why each stopped, where the rule of
training to convergence was on), the classifier's chosen setting, validation and test error and
wall time, sorted by validation error.

``--group-by`` folds runs that differ only in other keys (``--group-by all-but-seed``: seeds)
into mean ± sd (n) per group, with the statistics the protocol's report uses (scheda.utils.stats).
``--at`` reads each run where the run itself reports (``kept``, the default: under the rule of
training to convergence its best on validation, else its last evaluation), at its last
evaluation, at its best on validation, or at ``epoch=N``: the protocol's two rules for its
further seeds (the selection seed's epoch, each seed's own best), for any sweep. ``--metric
NAME`` adds a scalar each run logged to its metrics.csv (``logger=[tensorboard,csv]``). The end
of every ``-m`` sweep writes ``summary.csv`` and ``summary.md`` with the same code
(scheda.runs.sweep_summary).

    scheda-results outputs/multirun/2026-11-26/10-00-00
    scheda-results runs/ --group-by all-but-seed --format md
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
from pathlib import Path
from typing import Any, Sequence

from scheda.utils import stats
from scheda.utils.errors import ConfigError
from scheda.utils.interrupt import one_line_on_ctrl_c, quiet_on_a_closed_pipe
from scheda.utils.io import print_line, shown_path
from scheda.runs.rundir import (CAP, FINAL_STATUSES, KILLED, PATIENCE, flatten, kept, params_of, params_text, pick,
                                read_metrics, run_status, status_counts)

COLUMNS = ("status", "epochs", "read at", "classifier", "val_error %", "test_error %", "minutes")
# "read at": the epoch of the evaluation the errors are from (--at picks it), which under the rule of
# training to convergence is not the last epoch trained.
# How a markdown table prints a column's numbers (as the sweep's own lines do: errors in % to two decimals).
DIGITS = {"val_error %": 2, "test_error %": 2, "minutes": 1}
# Keys a run or its launcher sets for its own bookkeeping, never a difference the user made: a
# sweep's job names its records (logger.*: where and how a run logs changes nothing it learns),
# a rerun resumes itself (resume).
BOOKKEEPING = ("resume", "force_resume", "rerun", "requires", "trainer.progress_bar")
BOOKKEEPING_PREFIXES = ("logger.",)
ALL_BUT_SEED = "all-but-seed"
# --env: what each run ran on (results.json's ``environment``, scheda.utils.environment), as columns.
ENV_COLUMNS = ("scheda", "git_commit", "git_dirty", "python", "torch", "cuda", "cudnn", "device_name", "host")


def find_results(folders: Sequence[str | Path]) -> list[Path]:
    """Every run's results.json below ``folders``; a fused sweep counts as its models. An earlier
    attempt a run set aside (``attempts/<n>/``: a rerun's old files, a resumed run's finished
    record) is part of that run, not a run of its own."""
    found = []
    for folder in folders:
        folder = Path(folder)
        candidates = [folder / "results.json"] if (folder / "results.json").exists() else []
        candidates += sorted(p for p in folder.rglob("*/results.json") if not _set_aside(p, folder))
        for path in candidates:
            if path not in found:
                found.append(path)
    return [p for p in found if not (p.parent / "models").is_dir()]


def _set_aside(path: Path, folder: Path) -> bool:
    """Whether ``path`` lies in a run's ``attempts/<n>/`` below ``folder``."""
    parts = path.relative_to(folder).parts
    return any(part == "attempts" and (folder.joinpath(*parts[:i]) / "results.json").exists()
               for i, part in enumerate(parts[:-1]))


def _parses(path: Path) -> bool:
    """Whether ``path`` reads as JSON (a results.json that does not: cut short or damaged)."""
    try:
        json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return True


def at_choice(text: str) -> str:
    """argparse's check of ``--at``."""
    if text in ("kept", "last", "best") or (text.startswith("epoch=") and text[6:].isdigit()):
        return text
    raise argparse.ArgumentTypeError(f"{text!r}: use kept, last, best or epoch=N (an evaluated epoch)")


def metric_value(history: dict[int, float], epoch: int | None) -> float | None:
    """A logged scalar at ``epoch`` (the evaluation a run is read at), else at its last step."""
    if not history:
        return None
    return history[epoch] if epoch in history else history[max(history)]


def read_row(path: Path, at: str = "kept", base: Path | None = None,
             metrics: Sequence[str] = ()) -> dict[str, Any] | None:
    """One run: its flattened config and what it gives at the evaluation ``at`` picks (``kept``: where
    the run reports itself, :func:`kept`; else :func:`pick`);
    None for a file that is not a run's results. The run is named relative to ``base`` (a file
    written there), else as the user would type it."""
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError):  # ValueError: not JSON, or not UTF-8 text
        return None
    if "config" not in results:
        return None
    chosen = kept(results) if at == "kept" else pick(results.get("evaluations") or [], at)
    seconds = results.get("seconds")
    name = str(path.parent.relative_to(base)) if base is not None and path.parent.is_relative_to(base) \
        else shown_path(path.parent)
    config = flatten(results["config"])
    status = run_status(results, path.parent)
    logged = read_metrics(path.parent / str(config.get("logger.csv.file") or "metrics.csv")) if metrics else {}
    return {"run": name, "path": str(path), "config": config,
            "status": status, "epochs": results.get("epochs"),
            "stopped": results.get("stopped_by"),
            "read at": chosen["epoch"] if chosen else None,
            "classifier": params_text(params_of(chosen)) if chosen else None,
            "val_error %": percent(chosen["val_error"]) if chosen else None,
            "test_error %": percent(chosen["test_error"]) if chosen else None,
            "minutes": seconds / 60 if seconds is not None and status not in ("running", KILLED) else None,
            **{f"env.{k}": (results.get("environment") or {}).get(k) for k in ENV_COLUMNS},
            **{m: metric_value(logged.get(m, {}), chosen["epoch"] if chosen else None) for m in metrics}}


def differing_keys(rows: list[dict[str, Any]]) -> list[str]:
    """The config keys whose values are not the same in every run (a key a run lacks differs),
    bookkeeping keys left out."""
    keys = sorted({k for r in rows for k in r["config"]
                   if k not in BOOKKEEPING and not k.startswith(BOOKKEEPING_PREFIXES)})
    return [k for k in keys if len({json.dumps(r["config"].get(k), sort_keys=True) for r in rows}) > 1]


def percent(error: float) -> float:
    """An error rate in %, without the float noise of the product (100 * 0.6014 is
    60.14000000000001; a count over N test images has far fewer than 10 decimals in %)."""
    return round(100 * error, 10)


def table(rows: list[dict[str, Any]], env: bool = False,
          metrics: Sequence[str] = ()) -> tuple[list[str], list[list[Any]]]:
    """Header and body, sorted by validation error (runs without one last); ``env``: each run's
    environment after its results; ``metrics``: logged scalars (metrics.csv) after those."""
    keys = differing_keys(rows)
    columns = [*COLUMNS, *(f"env.{k}" for k in ENV_COLUMNS if env), *metrics]
    if any(r.get("stopped") in (PATIENCE, CAP) for r in rows):  # the rule of training to convergence was on
        columns.insert(columns.index("epochs") + 1, "stopped")
    ordered = sorted(rows, key=lambda r: (r["val_error %"] is None, r["val_error %"] or 0.0, r["run"]))
    return (["run", *keys, *columns],
            [[r["run"], *(r["config"].get(k) for k in keys), *(r[c] for c in columns)] for r in ordered])


def protocol_groups(rows: list[dict[str, Any]], folders: Sequence[str | Path]) -> dict[str, list[dict[str, Any]]] | None:
    """The rows of a protocol folder (one ``scheda-reproduce`` made: it holds ``protocol_id``) by
    phase, model and schedule (raw pixels apart from the DAs of their phase, composites apart
    from DAs, a schedule apart from its controls at a constant nu), in the order they come; None
    when no folder given is a protocol's."""
    protocols = [Path(f).resolve() for f in folders if (Path(f) / "protocol_id").is_file()]
    if not protocols:
        return None
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        where = Path(r["path"]).resolve().parent
        inside = next((where.relative_to(p) for p in protocols if where.is_relative_to(p)), None)
        phase = inside.parts[0] if inside is not None and len(inside.parts) > 1 else "other runs"
        model, schedule = r["config"].get("model.name", "?"), r["config"].get("schedule.name")
        groups.setdefault(f"{phase}: {model}" + (f", {schedule}" if model != "raw" and schedule else ""), []).append(r)
    return groups


def grouped(rows: list[dict[str, Any]], by: Sequence[str]) -> tuple[list[str], list[list[Any]]]:
    """One line per group of ``by``'s values: n, and mean ± sd of validation and test error over its
    finished runs (completed, diverged: a result); runs still going, stopped or failed are counted
    in a column of their own, never averaged in (a half-trained seed would pull the mean)."""
    if list(by) == [ALL_BUT_SEED]:
        by = [k for k in differing_keys(rows) if k != "seed"]
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(json.dumps(r["config"].get(k)) for k in by), []).append(r)
    body = []
    for key, members in groups.items():
        finished = [m for m in members if m["status"] in FINAL_STATUSES]
        line = [json.loads(v) for v in key] + [len(finished)]
        for column in ("val_error %", "test_error %"):
            values = [m[column] for m in finished if m[column] is not None]
            line.append(stats.summarize(values) if values else None)
        body.append(line + [status_counts(m["status"] for m in members if m["status"] not in FINAL_STATUSES) or None])
    body.sort(key=lambda line: (line[-3] is None, line[-3].mean if line[-3] else 0.0))
    header = [*by, "n", "val_error %", "test_error %", "not finished"]
    if all(line[-1] is None for line in body):  # every run finished: no column for it
        header, body = header[:-1], [line[:-1] for line in body]
    return header, body


def cell(value: Any, digits: int | None = None) -> str:
    if isinstance(value, stats.Summary):
        return value.mean_sd(with_n=value.sd is not None)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return f"{value:.{digits}f}" if digits is not None else f"{value:.4g}"
    return "—" if value is None else str(value)


def render(header: list[str], body: list[list[Any]], fmt: str) -> str:
    if fmt == "json":
        return json.dumps([dict(zip(header, (_plain(v) for v in line))) for line in body], indent=2) + "\n"
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(header)
        writer.writerows([[_csv(v) for v in line] for line in body])
        return out.getvalue()
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    digits = [DIGITS.get(h) for h in header]
    lines += ["| " + " | ".join(cell(v, d) for v, d in zip(line, digits)) + " |" for line in body]
    return "\n".join(lines) + "\n"


def _plain(value: Any) -> Any:
    if isinstance(value, stats.Summary):
        return {"n": value.n, "mean": value.mean, "sd": value.sd, "ci95": [value.low, value.high]}
    return value


def _csv(value: Any) -> Any:
    if isinstance(value, stats.Summary):
        return value.mean_sd(4, with_n=value.sd is not None)
    return "" if value is None else value


def gather(folders: Sequence[str | Path], group_by: Sequence[str] = (), fmt: str = "md", at: str = "kept",
           base: Path | None = None, env: bool = False, metrics: Sequence[str] = ()) -> str:
    """The table of every run below ``folders`` (see :func:`main`); a ``group_by`` key no run has is
    a ConfigError naming the keys that tell the runs apart."""
    rows, damaged = [], []
    for path in find_results(folders):
        row = read_row(path, at, base, metrics)
        if row is not None:
            rows.append(row)
        elif not _parses(path):
            damaged.append(shown_path(path))
    if damaged:  # left out with a word, not silently: a results.json is written atomically, so this one is damaged
        print_line(f"note: left out {len(damaged)} results.json that {'is' if len(damaged) == 1 else 'are'} not JSON "
                   f"(cut short or damaged): {', '.join(damaged[:5])}{' ...' if len(damaged) > 5 else ''}")
    if not rows:
        return ""
    unknown = [k for k in group_by if k != ALL_BUT_SEED and all(k not in r["config"] for r in rows)]
    if unknown:
        differ = differing_keys(rows)
        raise ConfigError(f"--group-by {unknown[0]}: no run has that config key"
                          + (f"; these differ between the runs: {', '.join(differ[:8])}" if differ else ""))
    if at.startswith("epoch=") and all(r["read at"] is None for r in rows):
        print_line(f"note: no run has an evaluation at {at}: its errors show as —")
    if group_by:
        return render(*grouped(rows, group_by), fmt)
    parts = protocol_groups(rows, folders) if fmt == "md" else None
    if parts is None or len(parts) == 1:  # csv and json: one table, every column (for a program)
        return render(*table(rows, env, metrics), fmt)
    # a protocol's phases, each with the keys that vary inside it (one table of every key that differs
    # anywhere is dozens of columns wide)
    return "\n".join(f"### {name} ({len(members)} run{'s' if len(members) != 1 else ''})\n\n"
                     + render(*table(members, env, metrics), fmt) for name, members in parts.items())


@quiet_on_a_closed_pipe
@one_line_on_ctrl_c
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scheda-results", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", help="run, sweep or protocol directories")
    parser.add_argument("--format", choices=("md", "csv", "json"), default="md")
    parser.add_argument("--group-by", nargs="+", default=[], metavar="KEY",
                        help=f"config keys (e.g. schedule.nu optim.lr), or {ALL_BUT_SEED}")
    parser.add_argument("--at", type=at_choice, default="kept", metavar="kept|last|best|epoch=N",
                        help="where each run reports itself (under trainer.patience its best on validation, "
                             "else its last evaluation), its last evaluation, its best, or the one at epoch N")
    parser.add_argument("--env", action="store_true",
                        help="also each run's environment: scheda version, git commit, Python, torch, CUDA, device, host")
    parser.add_argument("--metric", nargs="+", default=[], metavar="NAME",
                        help="also these scalars from each run's metrics.csv (logger=csv), e.g. "
                             "train/reconstruction_ce: at the evaluation --at reads, else the last logged")
    args = parser.parse_args(argv)
    for flag, given in (("--env", args.env), ("--metric", args.metric)):
        if given and args.group_by:
            parser.error(f"{flag} shows each run's own values (its environment, its logged scalars): "
                         f"use it without --group-by")
    missing = [f for f in args.folders if not Path(f).is_dir()]
    if missing:
        print_line(f"error: {', '.join(missing)}: no such directory")
        return 1
    try:
        text = gather(args.folders, args.group_by, args.format, args.at, env=args.env, metrics=args.metric)
    except ConfigError as exc:
        print_line(f"error: {exc}")
        return 1
    if not text:
        found = len(find_results(args.folders))
        print_line(f"error: no results.json under {', '.join(args.folders)}" if not found else
                   f"error: none of the {found} results.json under {', '.join(args.folders)} is a run's that can be read")
        return 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
