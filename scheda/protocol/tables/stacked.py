"""table=stacked: two-layer stacked DAs and ScheDAs trained greedily, then fine-tuned whole (the
paper's first named extension; Vincent et al. 2010), every model of every seed trained to
convergence under the scale's rule.

Layer 1 is the grid tables' best DA and best ScheDA of one hidden size (``table.stacked.hidden``):
the table's first phases are table1's (``da`` ... ``seeds``, in the same out_dir), so where table1
ran at this scale its models are read, not trained again, and each seed's layer 1 is the model
table1 reports for that seed (``stack_on`` reads it at its best validation epoch); a third base is
the ScheDA's same start trained on (table1's control, which keeps its best epoch's checkpoint), which
tells the first layer's schedule from its epochs. On each, layer 2 is the same protocol on the
layer's codes, one ``stack_<phase>`` per grid phase: the scale's DA grid over nu and lr on each
(``on_da_*``, ``on_scheda_*``, ``on_same_start_*``), the scale's ScheDA grid from the layer-2
DA(nu0)s of the ScheDA and the controls of its best, the fine-tuning of the stacks (DA + DA, ScheDA +
DA, ScheDA + ScheDA), and every further seed's replicas of the reported ones
(scheda.protocol.seeds, each on that seed's own layer 1). The report answers the issue's four
questions, each comparison paired by seed with its interval.

Every phase keeps a block's record (scheda.protocol.blocks): the table runs in blocks by seed
(``table.blocks.selection``), the selection block training layer 2's grid on seed 0's layer 1 and
every other block its seeds' replicas of what it chose; ``table.stacked.layer2`` gives layer 2 a grid
of its own where the scale pins layer 1's to table1's choice.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from scheda.protocol import phases, recorded_runs, selection as select
from scheda.protocol.compare import Between, between, between_header
from scheda.protocol.jobs import JobSpec, pct
from scheda.protocol.kinds import CONTROL, control_kinds, kind_of, of_role
from scheda.protocol.seeds import BEST, SUBPHASES, Replicas, read_outcome
from scheda.protocol.tables.base import REGISTRY, Progress, RecordedPhase, register_phase
from scheda.runs.rundir import checkpoint_name, kept, read_results
from scheda.utils import stats
from scheda.utils.errors import ConfigError, SchedaError
from scheda.utils.io import shown_path

# Layer 1: table1's best DA and best ScheDA, and the ScheDA's same start trained on (its control: the
# epochs without the schedule)
BASES = ("da", "scheda", "same_start")
CONTINUES = {"da": [], "scheda": ["scheda"], "same_start": []}  # the layer-2 continuations planned on each base
FINETUNED = ("da", "scheda", "same_start")  # the bases whose stacks are fine-tuned (each its best DA, a ScheDA its best too)
SAME_START = "control"  # the control kind the same_start base is (scheda.protocol.kinds.control.SameStart)


@dataclass(frozen=True)
class Settings:
    hidden: int  # layer 1's units
    top: int  # layer 2's
    rows: dict[str, str]  # the report's rows, key -> label (table.stacked.rows)
    questions: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]  # (question, its (a, b)s: a - b)


def settings(cfg: DictConfig) -> Settings:
    st, scale = cfg.table.stacked, cfg.scale
    if st is None:
        raise ConfigError(f"table={cfg.table.name} runs the stacked phases but has no table.stacked")
    hidden = int(st.hidden if st.hidden is not None else scale.hidden[0])
    if hidden not in scale.hidden:
        raise ConfigError(f"table.stacked.hidden={hidden}: layer 1 is the grid's best DA and ScheDA of one of "
                          f"scale.hidden={list(scale.hidden)}: give one of those")
    top = int(st.top if st.top is not None else hidden)
    if top < 1:
        raise ConfigError(f"table.stacked.top={top}: layer 2 needs at least one unit")
    layer2 = st.get("layer2")
    if layer2 is not None and not OmegaConf.is_dict(layer2):
        raise ConfigError(f"table.stacked.layer2={layer2}: give layer 2's grid as a mapping of the scale's dotted keys, "
                          f"e.g. table.stacked.layer2={{da.nu: [0.7, 0.3]}}, or null for layer 1's")
    for key in layer2 or {}:
        if OmegaConf.select(scale, key, default=None) is None or key.split(".")[0] in ("hidden", "seeds", "train"):
            raise ConfigError(f"table.stacked.layer2 sets {key}: give a key of layer 2's grid in the scale (da.nu, "
                              f"da.lr, da.epochs, scheda.nu0, scheda.K, ...)")
    if "scheda" not in cfg.table.continuations:
        raise ConfigError(f"table.continuations={list(cfg.table.continuations)}: a stacked table's layer 1 "
                          f"includes the best ScheDA: keep scheda")
    if SAME_START not in [kind.name for kind in control_kinds(scale)]:
        raise ConfigError(f"scale.control={scale.control}: a stacked table's layer 1 includes the ScheDA's same start "
                          f"(its control {SAME_START}): give scale.control=true or a list with {SAME_START}")
    rows, questions = _report_rows(st)
    beside(cfg, rows)
    return Settings(hidden, top, rows, questions)


def _report_rows(st: DictConfig) -> tuple[dict[str, str], tuple]:
    """``table.stacked.rows`` and ``questions`` checked: labels, and questions that compare rows."""
    rows = dict(st.get("rows") or {})
    if not rows:
        raise ConfigError("table.stacked.rows is empty: give the report's rows, key: label (configs/table/stacked.yaml)")
    questions = []
    for i, q in enumerate(st.get("questions") or []):
        where = f"table.stacked.questions[{i}]"
        pairs = q.get("compare") if OmegaConf.is_dict(q) else None
        if not (OmegaConf.is_dict(q) and q.get("question") and pairs and all(len(p) == 2 for p in pairs)):
            raise ConfigError(f"{where}: give {{question: <words>, compare: [[a, b], ...]}} (a - b, rows of "
                              f"table.stacked.rows)")
        for a, b in pairs:
            for key in (a, b):
                if key not in rows:
                    raise ConfigError(f"{where} compares {key}, which is not a row of table.stacked.rows: use one of "
                                      f"{', '.join(rows)}")
        questions.append((str(q.question), tuple((str(a), str(b)) for a, b in pairs)))
    return rows, tuple(questions)


@dataclass(frozen=True)
class Beside:
    """Another report's numbers for layer 1 alone (``table.stacked.beside``), set beside this table's."""

    source: str  # that report, as the config names it
    note: str  # why the two may differ
    rows: dict[str, dict[int, float]]  # a row of table.stacked.rows (l1.*) -> seed -> test error %


def beside(cfg: DictConfig, labels: dict[str, str]) -> Beside | None:
    """``table.stacked.beside`` checked: a source, and per layer-1 row a test error % per seed."""
    given = cfg.table.stacked.get("beside")
    if given is None:
        return None
    where = "table.stacked.beside"
    if not OmegaConf.is_dict(given) or not given.get("source") or not OmegaConf.is_dict(given.get("rows")):
        raise ConfigError(f"{where}={given}: give {{source: <the report>, note: <why they may differ>, rows: "
                          f"{{l1.da: {{<seed>: <test error %>}}, ...}}}}, or null")
    layer1_rows = [key for key in labels if key.startswith("l1.")]
    rows: dict[str, dict[int, float]] = {}
    for key, by_seed in given.rows.items():
        if key not in layer1_rows:
            raise ConfigError(f"{where}.rows has {key}: give rows of layer 1 alone ({', '.join(layer1_rows)})")
        if not OmegaConf.is_dict(by_seed) or not by_seed:
            raise ConfigError(f"{where}.rows.{key}={by_seed}: give each seed's test error in %, e.g. {{0: 51.73}}")
        rows[key] = {}
        for seed, value in by_seed.items():
            try:
                number = float(value)
                rows[key][int(seed)] = number
            except (TypeError, ValueError):
                number = float("nan")
            if not 0 <= number <= 100:
                raise ConfigError(f"{where}.rows.{key}.{seed}={value}: give a seed (an integer) its test error in % "
                                  f"(0 to 100)")
    return Beside(str(given.source), str(given.get("note") or ""), rows)


def layer_view(cfg: DictConfig, continuations: list[str]) -> DictConfig:
    """``cfg`` as the grid phases would see a table of layer 2 alone: ``top`` hidden units, its grid
    (``table.stacked.layer2`` over the scale's), no raw baseline, ``continuations`` (what the layer-2
    jobs and their estimate are planned from)."""
    view = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    for key, value in (cfg.table.stacked.get("layer2") or {}).items():
        OmegaConf.update(view.scale, key, value, merge=False)
    view.scale.hidden = [settings(cfg).top]
    view.table.raw = False
    view.table.continuations = continuations
    return view


def layer1(p: Progress) -> dict[str, dict[int, Path]]:
    """Per base, each seed's layer-1 run: the selection seed's selected one (the same start: its
    ScheDA's control, which keeps its best epoch's checkpoint), the further seeds' the replicas
    table1's seeds phase planned (runs not finished yet included: their layer 2 fails in one line
    until they are)."""
    h, s0 = str(settings(p.cfg).hidden), int(p.cfg.scale.seeds[0])
    sel = p.selection.get("hidden", {}).get(h)
    scheda = p.continued.get(h, {}).get("scheda", {})
    firsts = {"da": sel["best"] if sel else None, "scheda": scheda.get("best"),
              "same_start": scheda.get("controls", {}).get(SAME_START)}
    runs = {base: {s0: Path(e["run"])} for base, e in firsts.items() if e}
    bases = {"da": "da", "scheda": "scheda", f"scheda.{SAME_START}": "same_start"}  # a seeds row's key -> its base
    for row in p.seed_plan.rows if p.seed_plan else []:
        if row.hidden == h and bases.get(row.key) in runs:
            runs[bases[row.key]].update({seed: run for seed, (run, _) in row.replicas.items()})
    return runs


def check_kept(run: Path) -> None:
    """A finished layer-1 run keeps the checkpoint of the epoch it reports, which its layer 2 stands
    on (a control trained before controls kept theirs has none: one line naming the fix)."""
    results = read_results(run) if run.is_dir() else None  # a run a record holds has its folder elsewhere
    if results is None or results.get("status") != "completed":
        return
    at = kept(results)
    if at is not None and not (run / "checkpoints" / checkpoint_name(at["epoch"])).exists():
        raise SchedaError(f"{shown_path(run)} reports its model at epoch {at['epoch']} and kept no checkpoint there "
                          f"(trained before its kind kept one), so no layer can stand on it: delete that run to "
                          f"train it again")


def prefix(base: str) -> str:
    """What a layer 2 on ``base`` puts before its jobs' names: ``on_scheda_da_h500_nu0.5_lr0.05``."""
    return f"on_{base}_"


def on(base: str, job: JobSpec, below: Path) -> JobSpec:
    """A grid phase's job as a layer 2 on ``below``: its name after ``on_<base>_``, in ``stack_<its folder>``."""
    return JobSpec(f"{prefix(base)}{job.name}", f"stack_{job.phase}", dict(job.groups),
                   {**job.values, "stack_on": str(below)}, {**job.meta, "base": base})


@dataclass
class Layer2:
    """What a base's layer 2 found so far, as the grid phases keep it for layer 1."""

    selection: dict[str, Any]
    continued: dict[str, Any]
    jobs: list[JobSpec]
    replicas: Replicas | None = None  # the further seeds' (stack_seeds)


def _state(p: Progress) -> dict[str, Layer2]:
    return p.found.setdefault("stacked", {})


def _restore_layers(p: Progress, phase: str, payloads: list[Any]) -> dict[str, Any]:
    """Several blocks' ``base -> found`` of one phase as one; a base two blocks both selected on is refused."""
    out: dict[str, Any] = {}
    for payload in payloads:
        for base, found in recorded_runs.restored(payload, p).items():
            if base in out:
                raise SchedaError(f"two blocks' records both hold {phase} on the {base} base: a stacked table's "
                                  f"blocks select once (table.blocks.selection)")
            out[base] = found
    return out


def layer_estimate(cfg: DictConfig, grid: str, phase: str) -> list[dict[str, Any]]:
    """The grid phase's estimate of layer 2 on every base, as ``phase``'s, its inputs layer 1's units
    (a launch of its own, as the stacked phases name theirs: stack_seed_da ...)."""
    return [{**item, "phase": phase, "inputs": settings(cfg).hidden,
             **({"stage": f"stack_{item['stage']}"} if "stage" in item else {})}
            for base in BASES for item in REGISTRY[grid].estimate(layer_view(cfg, CONTINUES[base]))]


class StackPhase(RecordedPhase):
    """One grid phase (``grid``) run as layer 2 on each base that has one; its record is what it found
    on each base (``found``/``keep``), read back into each base's layer (:func:`_restore_layers`)."""

    grid: str  # the grid phase it runs on the layer's codes

    @abstractmethod
    def found(self, layer: Layer2) -> dict[str, Any]:
        """What it found on one base (hidden -> ...), as its record keeps it."""

    @abstractmethod
    def keep(self, layer: Layer2, found: dict[str, Any]) -> None:
        """One base's ``found`` read back into its layer."""

    def record(self, p: Progress) -> dict[str, Any] | None:
        return recorded_runs.payload({base: self.found(layer) for base, layer in _state(p).items()}, p)

    def restore(self, p: Progress, payloads: list[Any]) -> None:
        for base, found in _restore_layers(p, self.name, payloads).items():
            self.keep(_state(p).setdefault(base, Layer2({"hidden": {}}, {}, [])), found)

    def check(self, cfg: DictConfig) -> None:
        settings(cfg)

    @abstractmethod
    def jobs(self, p: Progress, base: str, layer: Layer2) -> list[JobSpec]:
        """The grid phase's jobs for layer 2 on ``base``, from what ``layer`` found so far."""

    def plan(self, p: Progress) -> dict[str, list[JobSpec]]:
        runs, s0 = layer1(p), int(p.cfg.scale.seeds[0])
        planned = []
        for base in BASES:
            if base not in runs:
                continue
            layer = _state(p).setdefault(base, Layer2({"hidden": {}}, {}, []))
            check_kept(runs[base][s0])
            jobs = [on(base, job, runs[base][s0]) for job in self.jobs(p, base, layer)]
            layer.jobs += jobs
            planned += jobs
        return {f"stack_{self.grid}": planned}

    def estimate(self, cfg: DictConfig) -> list[dict[str, Any]]:
        return layer_estimate(cfg, self.grid, self.name)


def _mine(layer: Layer2, folder: str) -> list[JobSpec]:
    """The layer's jobs of one launch."""
    return [job for job in layer.jobs if job.phase == folder]


@register_phase
class StackDA(StackPhase):
    """Layer 2's DA grid (the scale's nu and lr) on each base's selection-seed layer 1."""

    name, grid = "stack_da", "da"

    def jobs(self, p: Progress, base: str, layer: Layer2) -> list[JobSpec]:
        return phases.da_jobs(layer_view(p.cfg, CONTINUES[base]).scale, raw=False)

    def collect(self, p: Progress) -> None:
        for layer in _state(p).values():
            layer.selection = select.select_das(_mine(layer, "stack_da"), p.out_dir)

    def found(self, layer: Layer2) -> dict[str, Any]:
        return layer.selection

    def keep(self, layer: Layer2, found: dict[str, Any]) -> None:
        layer.selection = found


@register_phase
class StackContinue(StackPhase):
    """Layer 2's ScheDA grid from the ScheDA base's layer-2 DA(nu0)s."""

    name, grid = "stack_continue", "continue"

    def jobs(self, p: Progress, base: str, layer: Layer2) -> list[JobSpec]:
        if not layer.selection["hidden"]:
            return []
        return phases.continuation_jobs(layer_view(p.cfg, CONTINUES[base]).scale, CONTINUES[base], layer.selection)

    def collect(self, p: Progress) -> None:
        for layer in _state(p).values():
            layer.continued = select.select_continuations(_mine(layer, "stack_continue"), p.out_dir)

    def found(self, layer: Layer2) -> dict[str, Any]:
        """Each continuation kind's runs and best (its controls are StackControl's)."""
        return select.continuations_of(layer.continued)

    def keep(self, layer: Layer2, found: dict[str, Any]) -> None:
        layer.continued = found


@register_phase
class StackControl(StackPhase):
    """The controls of layer 2's best ScheDA: the same start at its nu0, the one jump."""

    name, grid = "stack_control", "control"

    def jobs(self, p: Progress, base: str, layer: Layer2) -> list[JobSpec]:
        return phases.control_jobs(layer_view(p.cfg, CONTINUES[base]).scale, CONTINUES[base], layer.continued)

    def collect(self, p: Progress) -> None:
        for base, layer in _state(p).items():
            view = layer_view(p.cfg, CONTINUES[base]).scale
            select.attach_controls(view, CONTINUES[base], layer.continued,
                                   select.select_continuations(_mine(layer, "stack_control"), p.out_dir),
                                   prefix=prefix(base))

    def found(self, layer: Layer2) -> dict[str, Any]:
        return select.controls_of(layer.continued)

    def keep(self, layer: Layer2, found: dict[str, Any]) -> None:
        select.put_controls(layer.continued, found)


@register_phase
class StackFinetune(StackPhase):
    """The stacks fine-tuned whole (``scale.finetune``): DA + DA, ScheDA + DA, ScheDA + ScheDA."""

    name, grid = "stack_finetune", "finetune"

    def jobs(self, p: Progress, base: str, layer: Layer2) -> list[JobSpec]:
        preset = p.cfg.scale.finetune
        if preset is None or base not in FINETUNED:
            return []
        return phases.finetune_jobs(preset, layer.selection, layer.continued)

    def collect(self, p: Progress) -> None:
        for layer in _state(p).values():
            for h, found in select.select_continuations(_mine(layer, "stack_finetune"), p.out_dir).items():
                layer.continued.setdefault(h, {}).update(found)

    def found(self, layer: Layer2) -> dict[str, Any]:
        """Each fine-tuned stack's chosen result."""
        return select.finetuned_of(layer.continued)

    def keep(self, layer: Layer2, found: dict[str, Any]) -> None:
        for h, by_kind in found.items():
            layer.continued.setdefault(h, {}).update(by_kind)

    def estimate(self, cfg: DictConfig) -> list[dict[str, Any]]:
        """Per seed, a stack per fine-tuned base and one more per layer-2 continuation on it (DA + DA,
        ScheDA + DA, ScheDA + ScheDA, same start + DA), each costed as a fine-tuning of layer 1's
        size (the stack's layer 2 adds a fraction of layer 1's work)."""
        if cfg.scale.finetune is None:
            return []
        stacks, first = sum(1 + len(CONTINUES[base]) for base in FINETUNED), cfg.scale.seeds[0]
        return [{"phase": self.name, "finetune": True, "hidden": settings(cfg).hidden,
                 **({} if seed == first else {"stage": f"stack_{SUBPHASES[2]}"})}
                for seed in cfg.scale.seeds for _stack in range(stacks)]


@register_phase
class StackSeeds(RecordedPhase):
    """Every further seed's replicas of each base's reported layer 2, on that seed's own layer 1; it
    reads every row of the report (``models``), which its record keeps."""

    name = "stack_seeds"

    def collect(self, p: Progress) -> None:
        p.found[self.name] = models(p)

    def record(self, p: Progress) -> dict[str, Any] | None:
        """Every row per seed and what layer 2 chose; a block that reads another's selection keeps its
        own seeds only (the selection seed's rows and choices are that block's)."""
        found = p.found[self.name]
        s0 = found["seeds"][0]
        mine = [s for s in found["seeds"] if p.given_from is None or s != s0]
        rows = {key: {str(seed): o for seed, o in by_seed.items() if seed in mine} for key, by_seed in found["rows"].items()}
        return recorded_runs.payload({"seeds": mine, "rows": rows,
                                      "chosen": found["chosen"] if p.given_from is None else None}, p)

    def restore(self, p: Progress, payloads: list[Any]) -> None:
        """The blocks' rows as one (each seed one block's), the choices of the block that made them."""
        seeds: list[int] = []
        rows: dict[str, dict[int, Any]] = {}
        chosen = None
        for payload in payloads:
            found = recorded_runs.restored(payload, p)
            seeds += [int(s) for s in found["seeds"] if int(s) not in seeds]
            for key, by_seed in found["rows"].items():
                row = rows.setdefault(key, {})
                twice = sorted(set(row) & {int(s) for s in by_seed})
                if twice:
                    raise SchedaError(f"two blocks' records both hold seed {twice[0]} of the stacked row {key}: a "
                                      f"table's blocks share no seed (table.blocks.list)")
                row.update({int(s): o for s, o in by_seed.items()})
            if found["chosen"] is not None:
                if chosen is not None:
                    raise SchedaError("two blocks' records both hold layer 2's choices: a stacked table's blocks "
                                      "select once (table.blocks.selection)")
                chosen = found["chosen"]
        p.found[self.name] = {"settings": settings(p.cfg), "seeds": seeds, "rows": rows, "chosen": chosen or {}}

    def check(self, cfg: DictConfig) -> None:
        settings(cfg)

    def estimate(self, cfg: DictConfig) -> list[dict[str, Any]]:
        return layer_estimate(cfg, "seeds", self.name)

    def plan(self, p: Progress) -> dict[str, list[JobSpec]]:
        runs = layer1(p)
        launches: dict[str, list[JobSpec]] = {}
        for base, layer in _state(p).items():
            if not layer.selection["hidden"]:
                continue
            missing = [s for s in p.cfg.scale.seeds if int(s) not in runs[base]]
            if missing:  # table1's seeds phase plans every seed's layer 1: only an unfinished selection lacks one
                continue
            for seed in p.cfg.scale.seeds[1:]:
                check_kept(runs[base][int(seed)])
            layer.replicas = Replicas(layer_view(p.cfg, CONTINUES[base]).scale, p.out_dir, layer.selection,
                                      layer.continued, layer.jobs, prefix=prefix(base), folders="stack_",
                                      per_seed=lambda seed, base=base: {"stack_on": str(runs[base][seed])})
            for launch, jobs in layer.replicas.jobs.items():
                launches.setdefault(launch, []).extend(jobs)
        return launches

    def report(self, p: Progress, path: Path) -> list[str]:
        return section(p.cfg, p.found[self.name])


# --- the report ---------------------------------------------------------------------------------

def _per_seed(first: dict[str, Any] | None, replicas: dict[int, tuple[Path, Any]], s0: int,
              finetuned: bool) -> dict[int, dict[str, Any]]:
    """A row's outcome per seed, each at its own best validation epoch (a fine-tuning at its own
    chosen epoch): the rule a stack reads the layer below at."""
    runs = {s0: Path(first["run"])} if first else {}
    runs.update({seed: run for seed, (run, _) in replicas.items()})
    out = {seed: read_outcome(run, None if finetuned else BEST) for seed, run in runs.items()}
    return {seed: o for seed, o in out.items() if o is not None}


def _rows_of(first: dict[str, dict[str, Any] | None], plan: Replicas | None, hidden: str,
             s0: int) -> dict[str, dict[int, dict[str, Any]]]:
    """One layer's rows (``da``, ``scheda``, ``scheda.<control>``, the fine-tuned) per seed."""
    replicas = {row.key: row.replicas for row in (plan.rows if plan else []) if row.hidden == hidden}
    keys = set(first) | set(replicas)
    return {key: _per_seed(first.get(key), replicas.get(key, {}), s0, key.startswith("finetune"))
            for key in keys}


def _firsts(selection: dict[str, Any], continued: dict[str, Any], hidden: str) -> dict[str, dict[str, Any] | None]:
    sel, found = selection.get("hidden", {}).get(hidden), continued.get(hidden, {})
    out: dict[str, dict[str, Any] | None] = {"da": sel["best"] if sel else None}
    for name, entry in found.items():
        if "runs" in entry:  # a continuation kind: its best, and its controls
            out[name] = entry.get("best")
            out.update({f"{name}.{c}": e for c, e in entry.get("controls", {}).items()})
        else:  # a fine-tuning's chosen result
            out[name] = entry
    return out


def models(p: Progress) -> dict[str, Any]:
    """Every row of the report per seed (``rows``), and what layer 2 selected on each base."""
    s, s0 = settings(p.cfg), int(p.cfg.scale.seeds[0])
    rows = {f"l1.{k}": v for k, v in _rows_of(_firsts(p.selection, p.continued, str(s.hidden)), p.seed_plan,
                                               str(s.hidden), s0).items()}
    copies = layer1(p).get("same_start", {})
    rows["l1.same_start"] = _per_seed(None, {seed: (run, None) for seed, run in copies.items()}, s0, False)
    chosen = {}
    for base, layer in _state(p).items():
        firsts = _firsts(layer.selection, layer.continued, str(s.top))
        rows.update({f"{base}.{k}": v for k, v in _rows_of(firsts, layer.replicas, str(s.top), s0).items()})
        chosen[base] = firsts
    return {"settings": s, "seeds": [int(x) for x in p.cfg.scale.seeds], "rows": rows, "chosen": chosen}


def comparison(rows: dict[str, dict[int, dict[str, Any]]], a: str, b: str, s0: int) -> Between:
    """``a - b`` in test error points, the selection seed apart (scheda.protocol.compare.between)."""
    def errors(key: str) -> dict[int, float]:
        return {seed: 100 * e["test_error"] for seed, e in rows.get(key, {}).items()}
    return between(errors(a), errors(b), s0)


def answer(rows: dict[str, dict[int, dict[str, Any]]], pairs: list[tuple[str, str]], s0: int,
           labels: dict[str, str]) -> str:
    """A question's answer in words: its first comparison's verdict, with its mean and interval."""
    a, b = pairs[0]
    c = comparison(rows, a, b, s0)
    m = c.compared.summary
    if m is None:
        return f"not yet ({labels[a]} against {labels[b]}: {c.verdict})."
    return (f"{labels[a]} against {labels[b]}: {m.mean:+.2f} points over {m.n} further seed{'s' if m.n != 1 else ''} "
            f"(95 % interval {m.interval_text()}): {c.verdict}.")


def not_run(cfg: DictConfig) -> set[str]:
    """The report's rows of control kinds layer 2's scale does not run (``scale.control=[control]``: no jump)."""
    run = {kind.name for kind in control_kinds(layer_view(cfg, CONTINUES["scheda"]).scale)}
    return {key for key in settings(cfg).rows if key.split(".")[-1] in {kind.name for kind in of_role(CONTROL)} - run}


NUMBER_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def section(cfg: DictConfig, found: dict[str, Any]) -> list[str]:
    s, seeds, rows = found["settings"], found["seeds"], found["rows"]
    s0, further = seeds[0], seeds[1:]
    skipped = not_run(cfg)
    lines = ["", "## Stacked DA and stacked ScheDA", "",
             f"Two layers trained greedily: layer 1 ({s.hidden} units) is the best DA and the best ScheDA above "
             f"(each seed's own); layer 2 ({s.top} units, on layer 1's clean codes, noise on its own input) is the "
             f"scale's DA grid over nu and lr on each, selected on validation with seed {s0}, and on the ScheDA the "
             f"scale's ScheDA grid from the layer-2 DA(nu0)s with the controls of its best; the stacks are "
             f"fine-tuned whole (`scale.finetune={cfg.scale.finetune}`). Every model is read at its own best "
             f"validation epoch (a fine-tuning at its chosen one), as a stack reads the layer below; the further "
             f"seeds ({', '.join(map(str, further)) or 'none'}) train each reported model again on their own "
             f"layer 1 with the selection seed's hyper-parameters. Statistics use the further seeds only; "
             f"intervals are 95 % paired t-intervals; a difference is *resolved* when its interval excludes 0.",
             ""]
    lines += ["### What layer 2 selected (seed {})".format(s0), "", "| Stack | Layer 2 | Val error % | Test error % |",
              "|---|---|---|---|"]
    for base, firsts in found["chosen"].items():
        for key, entry in firsts.items():
            if entry is None or key.startswith("finetune"):
                continue
            kind = kind_of(key.split(".")[-1] if "." in key else key)
            lines.append(f"| {s.rows.get(f'{base}.{key}', f'{base}.{key}')} | {kind.describe(entry)} | "
                         f"{pct(entry['val_error'])} | {pct(entry['test_error'])} |")
    if lines[-1] == "|---|---|---|---|":
        lines.append("| — | nothing selected yet | — | — |")
    lines += ["", "### Every model over seeds (test error %)", "",
              f"| Model | Seed {s0} (selection) | Further seeds, each | n | Mean ± sd | 95 % interval |",
              "|---|---|---|---|---|---|"]
    for key, label in s.rows.items():
        if key in skipped:
            continue
        per_seed = rows.get(key, {})
        rest = [100 * per_seed[x]["test_error"] for x in further if x in per_seed]
        first = pct(per_seed[s0]["test_error"]) if s0 in per_seed else "—"
        if not rest:
            lines.append(f"| {label} | {first} | {'not run yet' if further else '—'} | 0 | — | — |")
            continue
        m = stats.summarize(rest)
        lines.append(f"| {label} | {first} | {', '.join(f'{v:.2f}' for v in rest)} | {m.n} | {m.mean_sd()} | "
                     f"{m.interval_text(signed=False)} |")
    n = len(s.questions)
    named = "The question" if n == 1 else f"The {NUMBER_WORDS[n] if n < len(NUMBER_WORDS) else n} questions"
    lines += ["", f"### {named} (test error, points; negative: the first is better)", ""]
    for question, pairs in s.questions:
        pairs = [(a, b) for a, b in pairs if a not in skipped and b not in skipped]
        lines += [f"**{question}**", "",
                  "| Comparison | " + " | ".join(between_header(s0)) + " |", "|---|---|---|---|---|---|---|---|"]
        for a, b in pairs:
            lines.append(f"| {s.rows[a]} − {s.rows[b]} | {' | '.join(comparison(rows, a, b, s0).cells())} |")
        lines += ["", f"Answer: {answer(rows, pairs, s0, s.rows)}", ""]
    lines.append("The same start of layer 1 is table1's control of its best ScheDA (`control/`, each further seed's "
                 "replica in `seed_continue/`), read at its own best validation epoch; only a DA is stacked on it, and "
                 "that stack is fine-tuned as the others are.")
    return lines + beside_section(beside(cfg, s.rows), rows, s0, s.rows)


def beside_section(other: Beside | None, rows: dict[str, dict[int, dict[str, Any]]], s0: int,
                   labels: dict[str, str]) -> list[str]:
    """Layer 1 alone here against another report's (``table.stacked.beside``), seed by seed: paired over
    the further seeds both have, ``here - there`` (the same seed is the same initialisation and
    minibatch order in both, so a difference is what the two protocols do, not seed noise)."""
    if other is None:
        return []
    lines = ["", f"### Layer 1 beside {other.source}", "",
             *([other.note.strip(), ""] if other.note.strip() else []),
             f"Test error % of each layer-1 model here and in {other.source}, each seed at its own best validation "
             f"epoch; the difference here − there, paired over the further seeds both have (negative: here better).",
             "", f"| Model | Seed {s0} (selection): here / there | Further seeds: here / there | Here − there, each | "
                 f"n | Mean ± sd | 95 % interval | Verdict |", "|---|---|---|---|---|---|---|---|"]

    def shown(seed: int, by_seed: dict[int, dict[str, Any]]) -> str:
        return f"{100 * by_seed[seed]['test_error']:.2f}" if seed in by_seed else "—"

    differ, not_shown = [], []
    for key, numbers in other.rows.items():
        here, there = rows.get(key, {}), {seed: {"test_error": v / 100} for seed, v in numbers.items()}
        c = comparison({"here": here, "there": there}, "here", "there", s0)
        both = ", ".join(f"{x}: {shown(x, here)} / {shown(x, there)}" for x in c.seeds) or "none both have"
        verdict = None if c.seeds else "not compared: no further seed in both"
        lines.append(f"| {labels[key]} | {shown(s0, here)} / {shown(s0, there)} | {both} | "
                     f"{' | '.join(c.cells(sign_flip=False, verdict=verdict)[1:])} |")
        if c.seeds:
            (differ if c.compared.resolved else not_shown).append(labels[key])
    lines.append("")
    if differ:
        lines.append(f"- Beyond seed noise, layer 1 here differs from {other.source}'s: {'; '.join(differ)}.")
    if not_shown:
        lines.append(f"- Not shown to differ (an interval that holds 0 is no proof that they agree): "
                     f"{'; '.join(not_shown)}.")
    return lines
