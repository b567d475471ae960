"""The protocol's report: a markdown table of our errors beside the paper's, the selected
hyper-parameters, what the controls show in words, every job's status, and the sections of
scheda.protocol.seed_report (statistics over seeds) and scheda.protocol.figures (Figures 2, 5)."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from scheda.utils.errors import SchedaError
from scheda.utils.io import atomic_write, shown_path
from scheda.protocol.convergence import classifier_edges, section as convergence_section, stopped_text
from scheda.protocol.figures import figure2, figure5
from scheda.protocol.jobs import fmt, pct
from scheda.protocol.kinds import CONTINUATION, FINETUNE, kind_of, of_role
from scheda.protocol.kinds.da import DA, Raw
from scheda.protocol.phases import finetune_preset
from scheda.protocol.seed_report import budget, seed_cell, seeds_section
from scheda.protocol.sensitivity import section as sensitivity_section
from scheda.runs.rundir import FINAL_STATUSES, params_of, params_text, status_counts


def chosen(entry: dict[str, Any]) -> str:
    """The classifier setting a selected evaluation chose (``C=0.125``)."""
    return params_text(params_of(entry))


def paper_value(paper: DictConfig, row: str, hidden: int | None = None) -> str:
    value = paper.get(row) if paper else None
    if value is not None and hidden is not None:
        value = value.get(str(hidden))
        if value is None:
            known = "/".join(f"{h}: {v}" for h, v in paper[row].items())
            return f"— (paper, by hidden units: {known})"
    return "—" if value is None else f"{value}"


log = logging.getLogger(__name__)
OWNER = "<!-- scheda-reproduce protocol folder: {} -->"  # the report's last line: whose runs it reports


def folder_id(out_dir: Path) -> str:
    """The protocol folder's own id (``<out_dir>/protocol_id``, made by its first invocation): moved
    or reached by another path, a folder is the same one; the report names no absolute path."""
    path = out_dir / "protocol_id"
    if not path.exists():
        atomic_write(path, lambda f: f.write(uuid.uuid4().hex.encode()))
    return path.read_text().strip()


def report_path(cfg: DictConfig, out_dir: Path) -> Path:
    """``report_dir/<table>_<scale>.md`` (``..._block_<N>.md`` for one block), unless that file reports another protocol folder's runs
    (another ``out_dir`` of the same table and scale): then ``<table>_<scale>_<out_dir's name>.md``
    (numbered if that too is another's). A report never overwrites another folder's."""
    stem = f"{cfg.table.name}_{cfg.scale.name}"
    if cfg.get("block") is not None:  # one block of a table in blocks: the table's report is its records'
        stem += f"_block_{cfg.block}"
    owner = OWNER.format(folder_id(out_dir))
    candidates = [stem, f"{stem}_{out_dir.name}", *(f"{stem}_{out_dir.name}_{i}" for i in range(2, 1000))]
    for name in candidates:
        path = Path(cfg.report_dir) / f"{name}.md"
        if not path.exists():
            return path
        lines = path.read_text(errors="replace").rstrip("\n").splitlines()
        if not lines or not lines[-1].startswith(OWNER.format("")[:-4]) or lines[-1] == owner:
            if name != stem:
                log.info("%s reports another out_dir's runs: this report is %s", Path(cfg.report_dir) / f"{stem}.md",
                         path)
            return path  # its own report, or one from before the owner line: rewritten as before
    raise SchedaError(f"{cfg.report_dir} holds 1000 reports of {stem} for other out_dirs: give report_dir=...")


def write_report(cfg: DictConfig, sections: list[str], statuses: list[dict], info: dict[str, Any], path: Path) -> Path:
    """``path`` (markdown): the table's title and what ran, then its phases' ``sections``
    (scheda.protocol.tables: each phase writes its own, figures beside ``path``), every job's
    status and the scale's configuration; returns the report's path."""
    table, scale = cfg.table, cfg.scale
    lines = [f"# {table.title} — scale={scale.name}", "",
             f"- Device: {info['device']}; launcher: {_launchers(info['invocations'])}",
             f"- Wall time: {_wall_time(info['invocations'])}; training and evaluation time summed over all "
             f"jobs: {info['job_seconds'] / 60:.1f} min",
             _against_estimate(info, table.name), *info.get("checked", []),
             f"- Runs: `{info['out_dir']}`; written {info['date']}; commit {info['commit']}",
             *_precisions(statuses),
             *_unfinished(statuses, info.get("running")),
             f"- Scale: {scale.description.strip()}", "", *sections]
    lines += ["", "## Jobs", "", "| Job | Phase | Status | Minutes | Step | Error |", "|---|---|---|---|---|---|"]
    for row in statuses:
        minutes = f"{row['seconds'] / 60:.1f}" if row["seconds"] else "—"
        lines.append(f"| {row['name']} | {row['phase']} | {row['status']} | {minutes} | {row.get('step', '')} | "
                     f"{row['error'] or ''} |")
    lines += ["", "## Configuration", "", "```yaml", OmegaConf.to_yaml(cfg.scale).strip(), "```", "",
              OWNER.format(info["protocol_id"]), ""]
    atomic_write(path, lambda f: f.write("\n".join(lines).encode()))
    return path


def _precisions(statuses: list[dict[str, Any]]) -> list[str]:
    """The line naming the precisions the table's jobs trained in (trainer.precision; fine-tuning
    computes in fp32): one table can mix them only if it was resumed under another setting."""
    counts: dict[str, int] = {}
    for row in statuses:
        if row.get("precision"):
            counts[row["precision"]] = counts.get(row["precision"], 0) + 1
    if not counts:
        return []
    named = {"bf16": "bf16 products over fp32 weights"}
    return ["- Trained in: " + ", ".join(f"{named.get(p, p)} ({n} job{'s' if n != 1 else ''})"
                                         for p, n in sorted(counts.items()))]


def results_section(cfg: DictConfig, selection: dict[str, Any], continued: dict[str, Any], seeded: dict[str, Any],
                    path: Path) -> list[str]:
    """The grid tables' Results: our errors beside the paper's, the verdicts, the seeds' statistics,
    the rule's and the classifier's diagnostics, the detail tables and Figures 2 and 5 (beside
    ``path``). ``seeded``: each reported model's errors per seed (scheda.protocol.seeds)."""
    table, scale, paper = cfg.table, cfg.scale, cfg.table.paper
    over_seeds = len(seeded["seeds"]) > 1
    seeds_head = " Further seeds: test % mean ± sd (n) |" if over_seeds else ""
    lines = ["## Results", "",
             f"| Model | Hidden units | Selected hyper-parameters | Val error % | Test error % |{seeds_head} "
             f"Paper test error % |",
             "|---|---|---|---|---|---|" + ("---|" if over_seeds else "")]
    if over_seeds:
        lines[-2:-2] = [f"Val and test error: the selection seed ({seeded['selection_seed']}), on which every "
                        f"hyper-parameter was chosen; the column beside them: the same models trained again with "
                        f"the further seeds {', '.join(map(str, seeded['seeds'][1:]))}, read at the selection seed's "
                        f"epochs (section Seeds reads them at their own best validation epochs too).", ""]

    def cell(hidden: str, key: str) -> str:
        return f" {seed_cell(seeded, hidden, key)} |" if over_seeds else ""
    raw = selection.get("raw")
    if table.raw:
        none = " — (no training noise) |" if over_seeds else ""
        base = kind_of(Raw.name)
        lines.append(f"| {table.raw_label} | — | {chosen(raw)} | {pct(raw['val_error'])} | {pct(raw['test_error'])} |{none} "
                     f"{paper_value(paper, base.paper_row)} |" if raw else
                     f"| {table.raw_label} | — | not completed | — | — |{none} {paper_value(paper, base.paper_row)} |")
    verdicts = []
    for hidden, sel in selection["hidden"].items():
        da, found = sel["best"], continued.get(hidden, {})
        grid = kind_of(DA.name)
        lines.append(f"| {grid.label} | {hidden} | {grid.describe(da)}, {chosen(da)} "
                     f"| {pct(da['val_error'])} | {pct(da['test_error'])} |{cell(hidden, grid.name)} "
                     f"{paper_value(paper, grid.paper_row, int(hidden))} |")
        if da.get("stopped_by") == "cap":
            verdicts.append(f"The best DA ({hidden} hidden units, nu={fmt(da['nu'])}) had not converged by the rule at its cap "
                            f"(scale.da.epochs={scale.da.epochs}; best at epoch {da['epoch']}): at the cap, not "
                            f"converged.")
        elif da.get("last_of_grid") and da.get("stopped_by") != "patience":
            verdicts.append(f"The best DA ({hidden} hidden units, nu={fmt(da['nu'])}) was selected at epoch {da['epoch']}, "
                            f"the last of the grid (scale.da.epochs): it may be under-trained, and a longer grid "
                            f"could lower its error.")
        for name, runs in found.items():
            kind = kind_of(name)
            if kind.role != CONTINUATION:
                continue
            best = runs["best"]
            lines.append(f"| {kind.label} | {hidden} | {kind.describe(best)}, {chosen(best)} | "
                         f"{pct(best['val_error'])} | {pct(best['test_error'])} |{cell(hidden, name)} "
                         f"{paper_value(paper, kind.paper_row, int(hidden))} |")
            verdicts.append(_verdict(kind.label, hidden, best, da))
            for control_name, control in runs.get("controls", {}).items():
                control_kind = kind_of(control_name)
                lines.append(f"| {control_kind.label} | {hidden} | {control_kind.describe(control)}, {chosen(control)} | "
                             f"{pct(control['val_error'])} | {pct(control['test_error'])} |"
                             f"{cell(hidden, f'{name}.{control_name}')} — |")
            if runs.get("controls"):
                verdicts.append(_control_verdict(kind.label, best, runs["controls"]))
        for kind in of_role(FINETUNE):
            ft = found.get(kind.name)
            if ft:
                lines.append(f"| {kind.label} | {hidden} | {kind.describe(ft)} | "
                             f"{pct(ft['val_error'])} | {pct(ft['test_error'])} |{cell(hidden, kind.name)} "
                             f"{paper_value(paper, kind.paper_row, int(hidden))} |")
            elif scale.finetune is None and paper and paper.get(kind.paper_row):
                lines.append(f"| {kind.label} | {hidden} | not run at this scale | — | — |{' — |' if over_seeds else ''} "
                             f"{paper_value(paper, kind.paper_row, int(hidden))} |")
    lines += [""] + [f"- {'On the selection seed alone: ' if over_seeds else ''}{v}" for v in verdicts]
    lines += seeds_section(seeded, ruled=scale.get("patience") is not None, declared=table.get("comparisons") or (),
                           trained_for=budget(scale, table.continuations, _finetune(cfg)))
    lines += convergence_section(scale, selection, continued, seeded)
    lines += classifier_edges(selection, continued, seeded)
    lines += sensitivity_section(paper, selection, continued, seeded)
    for hidden, sel in selection["hidden"].items():
        lines += _detail_tables(hidden, sel, continued.get(hidden, {}))
        for name, draw in (("figure2", figure2), ("figure5", figure5)):
            png = path.with_name(f"{path.stem}_{name}_h{hidden}.png")
            if draw(sel, continued.get(hidden, {}), seeded, png, int(hidden)):
                lines += ["", f"![{name}, {hidden} hidden units]({png.name})"]
    return lines


def _finetune(cfg: DictConfig) -> DictConfig | None:
    """The fine-tuning preset the table's fine-tuning jobs composed (None where it fine-tunes nothing)."""
    if cfg.scale.finetune is None or "finetune" not in cfg.table.phases:
        return None
    return finetune_preset(cfg)


def _unfinished(statuses: list[dict], running: str | None) -> list[str]:
    """The report's line on the jobs that have not finished, if any: every number in it reads the
    finished ones. ``running``: the invocation that holds the out_dir and runs jobs there (an interim report)."""
    left = [row["status"] for row in statuses if row["status"] not in FINAL_STATUSES]
    if not left:
        return []
    n, counts = len(left), status_counts(left)
    said = f"{n} of {len(statuses)} jobs not finished ({counts}): every number below is from the " \
           f"{len(statuses) - n} finished"
    if running:  # the holder may run this table or another of the same scale (they share the DA grid)
        return [f"- **Interim report**, written while another invocation ({running}) runs jobs in this folder: "
                f"{said}, and the wall time counts the running one to its last minute; the same command gives a newer "
                f"one, and the table's own invocation writes the report again when it ends."]
    return [f"- **Not finished**: {said}; the section Jobs lists them, and the table's command with every phase "
            f"(no phases=) runs them."]


def _launchers(invocations: list[dict]) -> str:
    """The launchers of the invocations that ran jobs, each once (an invocation from before the
    record: "not recorded")."""
    named = []
    for i in (i for i in invocations if i["ran_jobs"]):
        name = i.get("launcher")
        text = "not recorded" if name is None else name + (f" ({i['n_jobs']} jobs at once)" if name == "joblib" else "")
        if text not in named:
            named.append(text)
    return ", ".join(named) or "no invocation ran jobs"


def _wall_time(invocations: list[dict]) -> str:
    """The sum over the invocations that trained anything; runs shared with other tables of the
    scale (the DA grid, say) count where they ran. One killed outright counts to its last record
    (a minute at most before its end), one running to now; time stopped (``kill -STOP``) is left
    out and said."""
    working = [i for i in invocations if i["ran_jobs"]]
    if not working:
        return "no invocation ran jobs"
    by_table: dict[str, float] = {}
    for i in working:
        by_table[i.get("table", "?")] = by_table.get(i.get("table", "?"), 0.0) + i["seconds"] / 60
    parts = ", ".join(f"{t} {m:.1f} min" for t, m in by_table.items())
    open_ = sum(not i.get("ended", True) for i in working)  # "ended" came later: an older entry ended
    stopped = sum(i.get("stopped_seconds", 0.0) for i in working) / 60
    notes = (f"; {open_} of them cut off or still running, counted to their last record" if open_ else "") + \
        (f"; {stopped:.1f} min stopped, not counted" if stopped >= 0.05 else "")
    return (f"{sum(by_table.values()):.1f} min over {len(working)} invocation{'s' if len(working) != 1 else ''} "
            f"that ran jobs in this scale's directory ({parts}; the first started {working[0]['started']}{notes})")


def _against_estimate(info: dict[str, Any], table: str) -> str:
    """The hours this table's own invocations ran jobs beside the plan's estimate, which counts
    every model at its cap (an upper bound under a patience rule) on the benchmark's device."""
    hours = sum(i["seconds"] for i in info["invocations"] if i["ran_jobs"] and i.get("table") == table) / 3600
    ran = f"{hours:.2f} hours" if hours >= 1 else f"{60 * hours:.1f} min"
    est = info.get("estimate") or {}
    if "device_hours" not in est:
        return (f"- Time against the plan: this table's invocations ran {ran}; give "
                f"bench=<scripts/bench_train.py --json output> to set the plan's estimate beside it")
    return (f"- Time against the plan: this table's invocations ran {ran}; the plan's estimate, every "
            f"model at its cap, {est['device_hours']:.2f} device-hours ({shown_path(info['bench'])}): measured / "
            f"estimate = {hours / est['device_hours']:.2g} (a model the rule stops early takes less)")


def _verdict(label: str, hidden: str, best: dict, da: dict) -> str:
    diff_test, diff_val = 100 * (da["test_error"] - best["test_error"]), 100 * (da["val_error"] - best["val_error"])
    word = "beat" if diff_test > 0 else "did not beat"
    return (f"{label} ({hidden} hidden units) {word} the best DA: test {pct(best['test_error'])} % vs "
            f"{pct(da['test_error'])} % ({diff_test:+.2f} points, positive in its favour), validation {diff_val:+.2f} points.")


def _control_verdict(label: str, best: dict, controls: dict) -> str:
    """What the controls of one schedule show, in words: a clause per control, by its kind."""
    parts = [f"Controls of the best {label} (nu0={fmt(best['nu0'])} -> {fmt(best['nu'])}, {best['epoch']} epochs "
             f"from the DA's epoch {best['start_epoch']}; same checkpoint and training stream):"]
    parts += [kind_of(name).verdict(best, control) for name, control in controls.items()]
    return " ".join(parts)


def _detail_tables(hidden: str, sel: dict, continued: dict) -> list[str]:
    lines = ["", f"## {hidden} hidden units: the best DA per noise level (over lr and epochs)", "",
             "| nu | lr | epochs | Classifier | Val error % | Test error % |", "|---|---|---|---|---|---|"]
    for nu, e in sorted(sel["by_nu"].items(), key=lambda kv: -float(kv[0])):
        epoch = stopped_text(e) if e.get("stopped_by") else \
            f"{e['epoch']}{' (last of the grid)' if e.get('last_of_grid') else ''}"
        epoch += " (diverged later)" if e.get("status") == "diverged" else ""
        lines.append(f"| {nu} | {fmt(e['lr'])} | {epoch} | {chosen(e)} | {pct(e['val_error'])} | "
                     f"{pct(e['test_error'])} |")
    for name, found in continued.items():
        kind = kind_of(name)
        if kind.role != CONTINUATION:
            continue
        lines += ["", f"### {hidden} hidden units: {kind.label} runs (each at its best evaluation on validation)", "",
                  "| Run | Selected | Val error % | Test error % |", "|---|---|---|---|"]
        for e in sorted(found["runs"], key=lambda e: e["val_error"]):
            stop = f"; best epoch {stopped_text(e)}" if e.get("stopped_by") else ""
            lines.append(f"| {Path(e['run']).name} | {kind.describe(e)}{stop} | {pct(e['val_error'])} | "
                         f"{pct(e['test_error'])} |")
    return lines
