"""The protocol's schemas: a table (which continuations, the paper's numbers), a scale (the
grid and budget of every phase) and the invocation (``configs/reproduce.yaml``). The files in
``configs/table/`` and ``configs/scale/`` are their values."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING



@dataclass
class DAGridConfig:
    """Phase 1: one DA per (nu, lr), each evaluated every ``eval_every`` epochs (checkpointed
    there too, so a ScheDA can continue from the selected epoch), for ``epochs``: with
    ``scale.patience`` that is the cap, and the rule stops a DA earlier."""

    nu: List[float] = field(default_factory=list)
    lr: List[float] = field(default_factory=list)
    epochs: int = 2000
    eval_every: int = 100
    fused: bool = False


@dataclass
class LevelGridConfig:
    """Phase 3: decreasing (ScheDA) or increasing schedules continued from the best DA(nu0)."""

    nu0: List[float] = field(default_factory=list)
    delta_nu: List[float] = field(default_factory=list)
    K: List[int] = field(default_factory=list)
    nu_final: float = 0.05
    lr: float = 0.01
    # With scale.patience: the cap of a continuation's whole length (its levels before the last run K
    # epochs each; the last runs on until the rule stops it, evaluated every K). Its controls share it.
    # null: the schedule's own length.
    max_epochs: Optional[int] = None


@dataclass
class RandomNuConfig:
    """Phase 3 of table=random_nu: nu drawn per minibatch, trained from scratch at every lr of
    the DA grid (``da.lr``), the best chosen on validation like the DA's."""

    hidden: Optional[int] = None
    epochs: int = 2000
    low: float = 0.1
    high: float = 0.7
    values: List[float] = field(default_factory=lambda: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])


@dataclass
class ScheduleGridConfig:
    """Phase 3 for any registered schedule that ``table.continuations`` names: from the best
    DA(nu0) of each ``nu0``, one run per combination of ``grid`` (the schedule's own keys, e.g.
    ``{gamma: [0.9, 0.95], epochs: [50]}``) at ``lr``; nu0 goes to the schedule's ``nu_key``."""

    nu0: List[float] = field(default_factory=list)
    grid: Dict[str, List[Any]] = field(default_factory=dict)
    lr: float = 0.01
    max_epochs: Optional[int] = None  # with scale.patience: as LevelGridConfig.max_epochs


@dataclass
class ScaleConfig:
    name: str = MISSING
    description: str = MISSING
    hidden: List[int] = field(default_factory=list)
    da: DAGridConfig = field(default_factory=DAGridConfig)
    scheda: LevelGridConfig = field(default_factory=LevelGridConfig)
    increasing: LevelGridConfig = field(default_factory=LevelGridConfig)
    random_nu: RandomNuConfig = field(default_factory=RandomNuConfig)
    schedules: Dict[str, Any] = field(default_factory=dict)  # name -> ScheduleGridConfig (typed by the protocol's check)
    # The controls: true (every kind), false, or a list of kinds, e.g. [control] (kinds/base.py control_kinds)
    control: Any = False
    # Training to convergence (every trained model: the DA grid, continuations, controls, the further
    # seeds): stop once this many evaluations brought no new best validation error, up to the caps
    # (da.epochs, <continuation>.max_epochs, random_nu.epochs); a model the rule has not stopped by its cap is
    # reported "at the cap". null: every model trains its fixed length.
    patience: Optional[int] = None
    finetune: Optional[str] = None
    # The first seed selects every hyper-parameter; each further one trains the reported models
    # again with them (scheda/protocol/seeds.py): the report's means, intervals and paired tests.
    seeds: List[int] = field(default_factory=lambda: [0])
    train: List[str] = field(default_factory=list)


@dataclass
class FeaturesConfig:
    """table=features (the paper's Sections 4.1.2-5): the models whose features are compared,
    every one trained to convergence under the scale's rule, each seed a new initialisation of
    every model. Consecutive seeds pair up (the first with the second, ...): each one's DAs are the
    other's DA* (Table 2) and the two are an initialisation pair of Figure 6."""

    nu: List[float] = field(default_factory=lambda: [0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1])  # a DA at each
    # ScheDA from DA(max nu) down by delta_nu to min nu, K = scale.scheda.K's first, at scale.scheda's lr and
    # cap; from the same checkpoint the one jump to min nu and the same start trained on at max nu
    delta_nu: float = 0.1
    seeds: List[int] = field(default_factory=lambda: [0, 1, 2, 3])  # an even count: pairs
    hidden: Optional[int] = None  # null: scale.hidden's first
    lr: Optional[float] = None  # the DAs' (and the composite's); null: scale.da.lr's first
    composite_nus: List[float] = field(default_factory=lambda: [0.2, 0.4])  # Section 5: one group per nu, equal sizes
    composite_updates: List[str] = field(default_factory=lambda: ["joint", "alternating"])
    double: bool = True  # DA(max nu) and its ScheDA with twice the units: Figure 6's fair comparison
    # The summary fixed before any run: the share of a model's units whose closest DA has nu >= this
    summary_nu: float = 0.4
    # How the seeds' models are laid out: null pairs ``seeds`` (each seed every model, each pair both
    # ways); else a list of groups, each ``{layout: <name>, seeds: [...]}`` (scheda.protocol.tables.features
    # LAYOUTS), e.g. ``{layout: table2, seeds: [1, 2]}``: seed 1's references against seed 2's DAs.
    groups: Optional[List[Dict[str, Any]]] = None


@dataclass
class StackedConfig:
    """table=stacked (the paper's first named extension): two layers, greedily. Layer 1 is the
    grid tables' best DA and best ScheDA of one hidden size (every seed's, as table1 reports
    them) and the ScheDA's same start; on each, layer 2 is the scale's DA grid over nu (and lr)
    and, on the ScheDA, the scale's ScheDA grid from the layer-2 DA(nu0)s with its controls; the
    stacks on the DA and the ScheDA are fine-tuned whole."""

    hidden: Optional[int] = None  # layer 1's units (one of scale.hidden); null: scale.hidden's first
    top: Optional[int] = None  # layer 2's units; null: layer 1's
    # Layer 2's grid where it is not layer 1's: scale values by dotted key, e.g. {da.nu: [0.7, 0.3]} (a
    # scale whose layer-1 grid is pinned to table1's choice still searches layer 2's); null: layer 1's.
    # Typed Any, not Dict, so that table.stacked.layer2={da.nu: [0.7]} sets it from the command line (a
    # typed mapping of the struct config refuses keys it does not hold); a non-mapping is refused in
    # scheda.protocol.tables.stacked.settings
    layer2: Any = None
    # Another report's numbers for layer 1 alone, set beside this table's own (a table in blocks trains
    # its layer 1 again, capped): {source: <that report>, note: <why they may differ>, rows: {l1.da: {<seed>:
    # <test error %>, ...}, ...}}, the rows of ``rows`` that start with l1.;
    # null: none (a table that shares table1's out_dir reads table1's own runs as its layer 1)
    beside: Any = None
    # The report's rows, key -> label: <base>.<row of that base's layer 2> (da.da, scheda.scheda.control, ...)
    # or l1.<row of table1's> (l1.da); a row with no label here is not reported. And its questions, each
    # {question: <words>, compare: [[a, b], ...]} (a - b in test error, paired over the further seeds;
    # the first one answers it in words). configs/table/stacked.yaml holds the table's own.
    rows: Dict[str, str] = field(default_factory=dict)
    questions: List[Dict[str, Any]] = field(default_factory=list)


@dataclass
class PaperGridConfig:
    """table=paper_settings' DAs that fill the scale's nu grid: each (nu, seed) at the scale's DA
    settings until its rule stops it, read beside another table's committed numbers of the same seeds
    (a seed fixes a DA's initialisation and minibatches, so they pair)."""

    nu: List[float] = field(default_factory=lambda: [0.2, 0.4])
    seeds: List[int] = field(default_factory=list)


@dataclass
class PaperCompositeConfig:
    """table=paper_settings' composite DAs (Section 5): groups at ``nus``, alternating with each
    ``switch_every`` (chosen on ``selection_seed``'s validation) and joint, at the scale's DA settings
    until the rule stops them; the rule's patience covers a whole turn of the groups."""

    nus: List[float] = field(default_factory=lambda: [0.2, 0.4])
    switch_every: List[int] = field(default_factory=lambda: [10, 50])
    seeds: List[int] = field(default_factory=list)
    selection_seed: int = 0  # whose validation error chooses switch_every


@dataclass
class PaperLengthConfig:
    """table=paper_settings' DA(nu) trained at length: no rule, ``epochs`` run out, its training loss
    every epoch, against ScheDA's at the same nu in another table's block records (``against``)."""

    nu: float = 0.1
    epochs: int = 600
    eval_every: int = 20
    seeds: List[int] = field(default_factory=list)
    against: Optional[str] = None  # a records folder whose feature_continue holds each seed's ScheDA


@dataclass
class PaperSettingsConfig:
    """table=paper_settings: the gradual schedule against one jump at the paper's continuation
    settings (scheda.protocol.tables.paper_settings). Per seed: DA(nu0) at the scale's DA settings
    until its rule stops it; from its best checkpoint at ``lr``: ScheDA nu0 -> nu_final by delta_nu
    every K epochs, one jump to nu_final for as many epochs, the same start at nu0 (at most as long,
    under the rule)."""

    nu0: float = 0.7
    nu_final: float = 0.3
    delta_nu: float = 0.1
    K: List[int] = field(default_factory=lambda: [50])  # epochs a level (the paper: 50, 100)
    lr: float = 0.01  # the continuations' (the paper's)
    eval_every: int = 10  # and after each level, and stage_epochs into each (the paper's Figure 2)
    stage_epochs: List[int] = field(default_factory=lambda: [1, 3, 5])
    seeds: List[int] = field(default_factory=lambda: [20])
    # Fixed before any run: "on par" when the 95 % interval of ScheDA (read as the paper reads it) minus
    # the jump (at its best validation epoch) lies within +-margin points
    margin: float = 0.5
    grid: PaperGridConfig = field(default_factory=lambda: PaperGridConfig())
    length: PaperLengthConfig = field(default_factory=lambda: PaperLengthConfig())
    composite: PaperCompositeConfig = field(default_factory=lambda: PaperCompositeConfig())
    # Another report's numbers, set beside the grid's and the composite's: {source: <its reports>, note: <how
    # they were read>, val: {<nu>: <seed 0's best validation error % of that table's DA(nu)>}, best: <the
    # row of the DA best there>, rows: {<row>: {<seed>: <test error %>}}}; null: none
    beside: Any = None
    # Comparisons over the further seeds (not seed 0, which selects): {a: <row>, b: <row>, question: ...}, a
    # row being one of beside.rows, da_<nu> (the grid's DA(nu)), best_da (the DA best on seed 0's validation
    # among beside.val and the grid's), composite_joint, composite_alternating (switch_every chosen on
    # validation) or composite_alternating_S<n>
    compare: List[Dict[str, Any]] = field(default_factory=list)


@dataclass
class BlocksConfig:
    """A table cut into blocks (scheda.protocol.blocks): each runs in one invocation (``block=N``),
    trains every model it reads in its own folder, and writes a small record to ``records``
    (committed); the report is built from the records alone."""

    records: str = MISSING  # the folder of every block's record (block_<N>/), e.g. docs/results/features_cpu
    cut: str = MISSING  # how the table's work was cut to fit, and why (printed in the listing and the report)
    hours: float = 2.0  # what a block may take by the plan's estimate (the listing checks each against it)
    # Each block: ``{name: ..., set: {dotted.key: value, ...}}``, the values it sets over the table and scale
    list: List[Dict[str, Any]] = field(default_factory=list)
    # null: every block selects its own hyper-parameters (its own seeds, hidden sizes); else the index of
    # the block that selects them (on the first of its scale.seeds): every other block trains further
    # seeds (its scale.seeds, after the selection block's) with that block's choices, read from its record
    selection: Optional[int] = None


@dataclass
class ComparisonConfig:
    """A comparison of the seeds' tables declared in a table's config (``table.comparisons``):
    ``a - b`` in test error points, paired over the further seeds, its verdict by
    scheda.protocol.compare. Every value is fixed before any run (a margin chosen after the
    results would tune the protocol toward its answer)."""

    # a row of the seeds' tables: da (the best DA), a continuation kind (scheda), <kind>.<control>
    # (scheda.control, scheda.jump), a fine-tuning kind (finetune_scheda)
    a: str = MISSING
    b: str = MISSING
    question: Optional[str] = None  # what it asks, in the report's list of questions; null: a − b
    expect: Optional[str] = None  # what the paper says of a - b: lower, higher, not lower, parity
    margin: Optional[float] = None  # points: "on par" when the 95 % interval lies within ±margin
    paper: Optional[str] = None  # the paper's number or words, beside the question


@dataclass
class TableConfig:
    name: str = MISSING
    title: str = MISSING
    continuations: List[str] = field(default_factory=list)
    raw: bool = True
    raw_label: str = "Raw pixels"  # the raw baseline's row in the report
    # The scales the table runs at (empty: any). A table on other data than CIFAR-10 specialises
    # each of them (configs/table_scale/<table>_<scale>.yaml) and refuses the others.
    scales: List[str] = field(default_factory=list)
    # The phases it runs, in order (scheda.protocol.tables: each one class in a table's module).
    phases: List[str] = field(default_factory=lambda: ["da", "continue", "control", "finetune", "seeds"])
    inputs: int = 3072  # the raw baseline's features (the estimate's C search on them)
    train_examples: int = 45000  # an epoch's examples (the estimate), unless the runs set dataset.train_limit
    paper: Any = field(default_factory=dict)
    features: Optional[FeaturesConfig] = None  # table=features' models (its phases read it)
    stacked: Optional[StackedConfig] = None  # table=stacked's layers (its phases read it)
    paper_settings: Optional[PaperSettingsConfig] = None  # table=paper_settings' arms (its phases read it)
    # The seeds' tables' comparisons beyond those every table makes (each continuation against the best
    # DA and its controls, a fine-tuned row against its pair): a declared one with the same a and b
    # replaces that one (to give it the paper's expectation or a margin).
    comparisons: List[ComparisonConfig] = field(default_factory=list)
    # null: the table runs as one; else in blocks (block=N), a BlocksConfig (checked by scheda.protocol.blocks;
    # a plain dict here, so that a config file or the command line can give it whole)
    blocks: Any = None


@dataclass
class ReproduceConfig:
    table: TableConfig = MISSING
    scale: ScaleConfig = MISSING
    out_dir: str = MISSING
    report_dir: str = "outputs/reports"
    overrides: List[str] = field(default_factory=list)
    launcher: str = "basic"
    n_jobs: int = 1
    launcher_overrides: List[str] = field(default_factory=list)
    scheduler_wait_min: float = 30.0
    bench: Optional[str] = None  # scripts/bench_train.py --json output: device-hours in the plan it prints
    dry_run: bool = False  # print the plan (jobs, model-epochs, device-hours) and stop
    # Which of the table's phases launch (table.phases; each phase collects and reports either way)
    # and "report"; null: all of them (scheda.protocol.tables).
    phases: Optional[List[str]] = None
    # A table with blocks (table.blocks) runs one per invocation: its index in table.blocks.list
    block: Optional[int] = None
    stages: Optional[List[str]] = None  # 0.2's name of ``phases``: read as it until 0.4


def register_protocol_configs() -> None:
    """The protocol's schemas, which ``configs/reproduce.yaml``, ``scale/`` and ``table/`` extend."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="reproduce_schema", node=ReproduceConfig)
    cs.store(name="base_scale", node=ScaleConfig)
    cs.store(name="base_table", node=TableConfig)
