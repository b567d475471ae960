"""A table cut into blocks that each finish: one block per invocation, its record kept.

A table that declares ``table.blocks`` runs one block per invocation (``block=N``). A block is a
set of values over the table and scale (``table.blocks.list[N].set``: its seeds, say); it trains
every model it reads in its own folder (``<out_dir>/<table>_block_<N>``), so nothing of another
block's folder is needed, and when its jobs and its analysis have ended it writes its **record**:
the numbers every phase's report reads, the commit, device, precision, the plan's estimate and the
measured time, as small JSON in ``<table.blocks.records>/block_<N>/record.json`` (to commit). An
invocation of a block whose record exists runs nothing and says so; an interrupted block resumes
from its folder where that was kept, and starts again where it was not.

With ``table.blocks.selection: K``, block K selects every hyper-parameter on the first of its seeds and
every other block trains further seeds (its ``scale.seeds``) of the models K chose: it plans the table
as one invocation with K's seeds and its own would, restores each phase all of whose jobs K finished
from K's record (nothing of K's folder is needed) and trains the rest: its seeds' replicas.

``phases=[report]`` without ``block=`` builds the table's report from the records alone (no
``out_dir``, no checkpoint): each phase restores what it found from every record present
(``RecordedPhase.record`` / ``restore``), over the blocks' values joined (lists concatenated).
``dry_run=true`` without ``block=`` lists the blocks, which have records, and the estimate of each.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from scheda.protocol.tables import Progress, RecordedPhase, phases_of
from scheda.utils.errors import ConfigError, SchedaError
from scheda.utils.io import shown_path

log = logging.getLogger(__name__)

RECORD = "record.json"
VERSION = 1
GIVEN = "from_block"  # a phase's payload in a block that read it from the selection block's record


@dataclass(frozen=True)
class Block:
    index: int
    name: str
    values: dict[str, Any]  # dotted key -> value, over the invocation's config

    @property
    def folder(self) -> str:
        return f"block_{self.index}"


def settings(cfg: DictConfig) -> DictConfig | None:
    """``table.blocks`` checked against its schema (BlocksConfig); None for a table that runs as one."""
    from omegaconf.errors import OmegaConfBaseException

    from scheda.protocol.config import BlocksConfig

    given = cfg.table.get("blocks")
    if given is None:
        return None
    try:
        blocks = OmegaConf.merge(OmegaConf.structured(BlocksConfig), given)
        OmegaConf.to_container(blocks, throw_on_missing=True)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"table.blocks: {str(exc).splitlines()[0]}: give records (a folder), cut (how the work was "
                          f"cut) and list (the blocks)") from None
    return blocks


def declared(cfg: DictConfig) -> list[Block]:
    """The table's blocks in order; [] for a table that runs as one."""
    blocks = settings(cfg)
    if blocks is None:
        return []
    out = []
    for i, entry in enumerate(blocks.list):
        values = entry.get("set")
        if not entry.get("name") or not isinstance(values, (dict, DictConfig)) or not values:
            raise ConfigError(f"table.blocks.list[{i}]={OmegaConf.to_container(entry) if isinstance(entry, DictConfig) else entry}: "
                              f"give each block a name and the values it sets ({{name: ..., set: {{dotted.key: value}}}})")
        out.append(Block(i, str(entry["name"]), dict(OmegaConf.to_container(values, resolve=True)
                                                     if isinstance(values, DictConfig) else values)))
    if not out:
        raise ConfigError(f"table.blocks.list is empty: declare the blocks of table={cfg.table.name}, or "
                          f"table.blocks=null to run it as one")
    names = [b.name for b in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"table.blocks.list names a block twice ({names}): give each its own name")
    return out


def check(cfg: DictConfig) -> None:
    """Before anything runs: ``block=`` against the table's blocks, and every phase able to keep a record."""
    blocks = declared(cfg)
    if cfg.block is not None and not blocks:
        raise ConfigError(f"block={cfg.block}: table={cfg.table.name} scale={cfg.scale.name} has no blocks "
                          f"(table.blocks): run it without block=")
    if not blocks:
        return
    if cfg.block is not None and not 0 <= cfg.block < len(blocks):
        raise ConfigError(f"block={cfg.block}: table={cfg.table.name} scale={cfg.scale.name} has blocks 0 to "
                          f"{len(blocks) - 1}; {listing_hint(cfg)}")
    unable = [phase.name for phase in phases_of(cfg) if not isinstance(phase, RecordedPhase)]
    if unable:
        raise ConfigError(f"table={cfg.table.name} declares blocks, but its phases {unable} keep no record "
                          f"(RecordedPhase): run it as one (table.blocks=null)")
    for block in blocks:
        for key in block.values:
            if OmegaConf.select(cfg, key, default=_MISSING) is _MISSING:
                raise ConfigError(f"table.blocks.list[{block.index}] ({block.name}) sets {key}, which is no key of "
                                  f"the config: name a key of the table or scale")
    _check_selection(cfg, blocks)


SEEDS = "scale.seeds"


def _check_selection(cfg: DictConfig, blocks: list[Block]) -> None:
    """``table.blocks.selection``: a block of the list; it and every other block set their seeds, no
    seed in two blocks (the others' are further seeds of the selection block's models)."""
    chosen = settings(cfg).selection
    if chosen is None:
        return
    if not 0 <= chosen < len(blocks):
        raise ConfigError(f"table.blocks.selection={chosen}: give the index of the block that selects (0 to "
                          f"{len(blocks) - 1}), or null for blocks that each select their own")
    seen: dict[int, str] = {}
    for block in blocks:
        seeds = block.values.get(SEEDS)
        if not isinstance(seeds, list) or not seeds:
            raise ConfigError(f"table.blocks.list[{block.index}] ({block.name}) sets no {SEEDS}: with "
                              f"table.blocks.selection every block names its seeds (the selection block's first "
                              f"selects; the others are further seeds)")
        for seed in seeds:
            if seed in seen:
                raise ConfigError(f"table.blocks: seed {seed} is in block {seen[seed]} and in block {block.index} "
                                  f"({block.name}): give each seed to one block")
            seen[seed] = str(block.index)


def selecting(cfg: DictConfig, block: Block) -> Block | None:
    """The block whose selection ``block`` reads (``table.blocks.selection``), or None: it selects its own."""
    chosen = settings(cfg).selection
    if chosen is None or chosen == block.index:
        return None
    return declared(cfg)[chosen]


_MISSING = object()


def listing_hint(cfg: DictConfig) -> str:
    return (f"scheda-reproduce table={cfg.table.name} scale={cfg.scale.name} dry_run=true lists them with their "
            f"records and estimates")


def apply(cfg: DictConfig, block: Block, out_dir: Path | None = None) -> DictConfig:
    """The invocation's config for ``block``: its values set (a block that reads another's selection:
    that block's seeds before its own), its own folder under ``out_dir`` (the invocation's, resolved;
    by default ``cfg.out_dir`` as given)."""
    out = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    for key, value in block.values.items():
        OmegaConf.update(out, key, value, merge=False)
    source = selecting(cfg, block)
    if source is not None:  # further seeds of the selection block's models: its seeds first
        OmegaConf.update(out, SEEDS, [*source.values[SEEDS], *block.values[SEEDS]], merge=False)
    out.out_dir = str(Path(out_dir if out_dir is not None else cfg.out_dir) / folder_of(cfg, block))
    out.block = block.index
    return out


def folder_of(cfg: DictConfig, block: Block) -> str:
    """A block's run folder's name, under the invocation's out_dir: ``<table>_block_<N>``."""
    return f"{cfg.table.name}_{block.folder}"


def record_dir(cfg: DictConfig, block: Block) -> Path:
    return Path(settings(cfg).records) / block.folder


def read_record(cfg: DictConfig, block: Block) -> dict[str, Any] | None:
    """The block's record, or None if it has none; a record that cannot be read is said in one line."""
    path = record_dir(cfg, block) / RECORD
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
        record["phases"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SchedaError(f"{shown_path(path)} is not a block's record ({exc}): restore it from git "
                          f"(git checkout -- {shown_path(path)}), or delete its folder to run block {block.index} "
                          f"again") from None
    if record.get("values") != block.values:
        raise SchedaError(f"{shown_path(path)} was written for other values than block {block.index} ({block.name}) "
                          f"sets now ({record.get('values')} against {block.values}): delete its folder to run the "
                          f"block again, or restore table.blocks.list as it was")
    return record


def write_record(cfg: DictConfig, block: Block, progress: Progress, info: dict[str, Any],
                 statuses: list[dict[str, Any]], given: set[str] = frozenset()) -> Path | None:
    """The block's record, if every phase has all it needs (every job finished, the analysis done);
    written whole or not at all (a temporary folder renamed). None, and nothing written, otherwise.
    ``given``: the phases read from the selection block's record (kept there, named here)."""
    payloads: dict[str, Any] = {}
    for phase in phases_of(progress.cfg):
        if phase.name in given:  # read from the selection block's record, which keeps it
            payloads[phase.name] = {GIVEN: progress.given_from}
            continue
        payload = phase.record(progress)
        if payload is None:
            log.info("block %d (%s): phase %s is not complete, so no record yet; run the same command again",
                     block.index, block.name, phase.name)
            return None
        payloads[phase.name] = payload
    invocations = info["invocations"]
    record = {
        "version": VERSION, "table": cfg.table.name, "scale": cfg.scale.name, "block": block.index,
        "name": block.name, "values": block.values, "commit": info["commit"], "date": info["date"],
        "device": info["device"],
        "precisions": sorted({s["precision"] for s in statuses if s.get("precision")}),
        "estimate": {k: v for k, v in info["estimate"].items() if isinstance(v, (int, float, str, dict))},
        "bench": shown_path(info["bench"]) if info.get("bench") else None,
        "measured": {"seconds": sum(i["seconds"] for i in invocations if i["ran_jobs"]),
                     "invocations": sum(1 for i in invocations if i["ran_jobs"]),
                     "stopped_seconds": sum(i.get("stopped_seconds", 0.0) for i in invocations if i["ran_jobs"]),
                     "job_seconds": info["job_seconds"],
                     "launchers": sorted({f"{i['launcher']} n_jobs={i['n_jobs']}" for i in invocations if i["ran_jobs"]})},
        "jobs": [{"name": s["name"], "phase": s["phase"], "status": s["status"],
                  "seconds": round(s["seconds"], 1) if s["seconds"] else None, "precision": s.get("precision")}
                 for s in statuses],
        "phases": payloads,
    }
    folder = record_dir(cfg, block)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        temp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    except OSError as exc:
        raise SchedaError(f"block {block.index}'s record cannot be written to {shown_path(folder)} ({exc.strerror}): "
                          f"give table.blocks.records=<a folder you can write to> and run the same command again "
                          f"(its runs are kept)") from None
    try:
        # in the order found (not sorted): the report from it keeps its rows in that order
        (temp / RECORD).write_text(json.dumps(record, indent=1) + "\n")
        for phase in phases_of(progress.cfg):
            if phase.name not in given:
                for name, data in phase.files(progress).items():
                    if Path(name).name != name or name == RECORD:
                        raise ValueError(f"phase {phase.name} keeps a file named {name!r}: a plain name beside the record")
                    (temp / name).write_bytes(data)
        umask = os.umask(0)
        os.umask(umask)
        temp.chmod(0o777 & ~umask)  # a folder like any other (mkdtemp makes it private)
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(temp, folder)
    except OSError as exc:
        shutil.rmtree(temp, ignore_errors=True)
        raise SchedaError(f"block {block.index}'s record could not be written to {shown_path(folder)} "
                          f"({exc.strerror}): free space there and run the same command again (its runs are kept)") \
            from None
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return folder / RECORD


def present(cfg: DictConfig) -> list[tuple[Block, dict[str, Any]]]:
    """Every block that has a record, with it."""
    return [(block, record) for block in declared(cfg) if (record := read_record(cfg, block)) is not None]


def joined(cfg: DictConfig, blocks: list[Block]) -> DictConfig:
    """The config the blocks make together: each key they set, their lists concatenated (every
    block's seeds, say); a value that is no list must be the same in every block."""
    out = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    keys = {key for block in blocks for key in block.values}
    for key in sorted(keys):
        values = [block.values[key] for block in blocks if key in block.values]
        if all(isinstance(v, list) for v in values):
            value = [item for v in values for item in v]
        elif all(v == values[0] for v in values):
            value = values[0]
        else:
            raise ConfigError(f"table.blocks: the blocks set {key} to different values ({values}), which cannot be "
                              f"reported together: set it in the table or scale instead")
        OmegaConf.update(out, key, value, merge=False)
    return out


def restored(cfg: DictConfig) -> tuple[Progress, list[tuple[Block, dict[str, Any]]]]:
    """What every phase found, from the records present alone, over the blocks' joined values."""
    records = present(cfg)
    if not records:
        folder = Path(settings(cfg).records)
        where = "" if folder.is_absolute() else (
            f", a folder relative to where you run (records are committed in the checkout: run from its root, or give "
            f"table.blocks.records=<checkout>/{folder})")
        raise SchedaError(f"table={cfg.table.name} scale={cfg.scale.name} has no block's record in "
                          f"{folder}{where}: run a block first (block=N; {listing_hint(cfg)})")
    chosen = settings(cfg).selection
    if chosen is not None and chosen not in {block.index for block, _ in records}:
        source = declared(cfg)[chosen]
        raise SchedaError(f"the records of table={cfg.table.name} scale={cfg.scale.name} hold further seeds of block "
                          f"{chosen} ({source.name})'s selection, but not its record ({record_dir(cfg, source)}): "
                          f"restore it from git, or run block={chosen}")
    both = joined(cfg, [block for block, _ in records])
    progress = Progress(both, Path(cfg.out_dir), owner=False)
    for phase in phases_of(both):
        payloads = []
        for block, record in records:
            payload = record["phases"].get(phase.name)
            if payload is None:
                raise SchedaError(f"block {block.index} ({block.name})'s record holds nothing of phase {phase.name}: "
                                  f"delete {shown_path(record_dir(cfg, block))} and run block={block.index} again")
            if not (isinstance(payload, dict) and GIVEN in payload):  # the selection block's is read
                payloads.append(payload)
        phase.restore(progress, payloads)
    return progress, records


def given_record(cfg: DictConfig, block: Block) -> tuple[Block, dict[str, Any]] | None:
    """For a block that reads another's selection: that block and its record (a missing one is one
    line naming the block to run first)."""
    source = selecting(cfg, block)
    if source is None:
        return None
    record = read_record(cfg, source)
    if record is None:
        raise ConfigError(f"block {block.index} ({block.name}) trains further seeds with the selection of block "
                          f"{source.index} ({source.name}), which has no record in {settings(cfg).records}: run "
                          f"block={source.index} first")
    return source, record


def given_jobs(record: dict[str, Any]) -> set[tuple[str, str]]:
    """(launch, name) of every job a block's record says it finished: a block reading its selection
    plans them too, and reads them from the record instead of training them."""
    from scheda.runs.rundir import FINAL_STATUSES

    return {(job["phase"], job["name"]) for job in record["jobs"] if job["status"] in FINAL_STATUSES}


def beyond(cfg: DictConfig, block: Block) -> DictConfig | None:
    """The config of the selection block that ``block`` reads, or None: ``block`` costs what its
    config plans beyond that one (scheda.protocol.estimate)."""
    source = selecting(cfg, block)
    return None if source is None else apply(cfg, source)


def hours_of(record: dict[str, Any]) -> float:
    return record["measured"]["seconds"] / 3600


def listing(cfg: DictConfig, estimate_of) -> list[str]:
    """One line per block: its values, its record (with measured time) or none, and its estimate
    (``estimate_of(block_cfg, beyond)``: the plan's, beyond the selection block's config where it reads
    that one's), flagged where it exceeds table.blocks.hours."""
    limit = float(settings(cfg).hours)
    lines = [f"table={cfg.table.name} scale={cfg.scale.name} runs in {len(declared(cfg))} blocks, one per invocation "
             f"(block=N), each at most {limit:g} hours by the plan; records in {settings(cfg).records}",
             f"  the cut: {' '.join(str(settings(cfg).cut).split())}"]
    for block in declared(cfg):
        est = estimate_of(apply(cfg, block), beyond(cfg, block))
        record = read_record(cfg, block)
        hours = est.get("device_hours")
        planned = (f"{hours:.2f} h planned" + (f" (over {limit:g} h)" if hours > limit else "")
                   if hours is not None else f"{sum(est['model_epochs'].values()):,} model-epochs planned (give bench= "
                   f"for hours)")
        done = (f"record of {record['date']}, {hours_of(record):.2f} h measured" if record else "no record")
        values = ", ".join(f"{k}={v}" for k, v in block.values.items())
        lines.append(f"  block {block.index} {block.name}: {values}; {planned}; {done}")
    return lines


def report_head(cfg: DictConfig, records: list[tuple[Block, dict[str, Any]]]) -> list[str]:
    """The record-built report's head: which blocks are in, each one's commit, device, precision and
    measured time against its estimate, and the benchmark that estimate came from (blocks of one table
    may be planned by different ones, and a ratio means little without it)."""
    total = len(declared(cfg))
    lines = [f"- Built from the records of {len(records)} of {total} blocks ({settings(cfg).records}), "
             f"{datetime.now().strftime('%Y-%m-%d %H:%M')}; no run folder or checkpoint was read",
             f"- The cut: {' '.join(str(settings(cfg).cut).split())}", "",
             "| Block | Values | Commit | Device | Precision | Measured | Plan's estimate | Its benchmark "
             "| Measured / estimate |",
             "|---|---|---|---|---|---|---|---|---|"]
    missing = [block for block in declared(cfg) if block.index not in {b.index for b, _ in records}]
    for block, record in records:
        est = record.get("estimate") or {}
        hours = est.get("device_hours")
        ratio = f"{hours_of(record) / hours:.2f}" if hours else "—"
        values = "; ".join(f"{k}={v}" for k, v in block.values.items())
        lines.append(f"| {block.index} {block.name} | {values} | {record['commit']} | {record['device']} | "
                     f"{', '.join(record['precisions']) or '—'} | {hours_of(record):.2f} h over "
                     f"{record['measured']['invocations']} invocation(s) | "
                     f"{f'{hours:.2f} h' if hours else 'not estimated'} | "
                     f"{Path(record['bench']).name if hours and record.get('bench') else '—'} | {ratio} |")
    lines += [""]
    if missing:
        lines += [f"Blocks without a record yet: {', '.join(f'{b.index} {b.name}' for b in missing)}.", ""]
    return lines


def write_report(cfg: DictConfig, records: list[tuple[Block, dict[str, Any]]], sections: list[str],
                 path: Path) -> Path:
    """The table's report from its blocks' records: which are in, then every phase's section over them."""
    from scheda.utils.io import atomic_write

    lines = [f"# {cfg.table.title} — scale={cfg.scale.name}", "", *report_head(cfg, records),
             f"- Scale: {' '.join(str(cfg.scale.description).split())}", "", *sections,
             "", "## Configuration", "", "```yaml", OmegaConf.to_yaml(cfg.scale).strip(), "```", "",
             "```yaml", OmegaConf.to_yaml(settings(cfg)).strip(), "```", ""]
    atomic_write(path, lambda f: f.write("\n".join(lines).encode()))
    return path
