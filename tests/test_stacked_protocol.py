"""table=stacked: README's smoke command end to end on tiny arrays the test writes, with two
further seeds: layer 1 is table1's (its runs shared), every layer 2 stands on its own seed's layer 1,
the report's numbers are the runs' own, a rerun trains nothing, and bad settings are one line."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import TINY_PROTOCOL, User, readme_commands, rows_of, smoke_cfg

pytestmark = pytest.mark.xdist_group("stacked_protocol")  # one worker: the fixture runs once
SEEDS = "scale.seeds=[0,1,2]"  # two further seeds: the report's intervals exist


@pytest.fixture(scope="module")
def stacked(tmp_path_factory):
    user = User(tmp_path_factory.mktemp("stacked"))
    [command] = readme_commands("scheda-reproduce", "table=stacked", "scale=smoke")
    first = user.run(command, *TINY_PROTOCOL, SEEDS, "report_dir=reports")
    return user, command, first, user.work / "outputs" / "reproduce" / "smoke"


def config_of(run: Path) -> dict:
    return json.loads((run / "results.json").read_text())["config"]


def best_test(run: Path) -> float:
    evals = json.loads((run / "results.json").read_text())["evaluations"]
    return min(evals, key=lambda e: (e["val_error"], e["epoch"]))["test_error"]


def test_each_layer_2_stands_on_its_own_seed_s_layer_1(stacked):
    _, _, _, runs = stacked
    selection = json.loads((runs / "selection.json").read_text())["hidden"]["16"]["best"]
    best_scheda = json.loads((runs / "continuations_stacked.json").read_text())["16"]["scheda"]["best"]
    for job in sorted((runs / "stack_da").glob("on_da_*/")):  # the selection seed's grid on the best DA
        assert config_of(job)["stack_on"] == selection["run"]
    for job in sorted((runs / "stack_da").glob("on_scheda_*/")):
        assert config_of(job)["stack_on"] == best_scheda["run"]
    replicas = sorted((runs / "stack_seed_da").glob("on_*_seed*/"))
    assert len(replicas) == 6  # the layer 2 on the best DA, the best ScheDA and its same start; seeds 1 and 2
    below_of = {"da": ("seed_da", "da_"), "scheda": ("seed_continue", "scheda_"), "same": ("seed_continue", "control_")}
    for job in replicas:
        base, seed = job.name.split("_")[1], job.name.rsplit("_seed", 1)[1]
        below = Path(config_of(job)["stack_on"])
        folder, start = below_of[base]
        assert below.name.endswith(f"_seed{seed}") and below.parent.name == folder and below.name.startswith(start)
        assert config_of(job)["seed"] == int(seed)
    for job in (runs / "stack_seed_continue").glob("on_scheda_*_seed*/"):  # ScheDA and its controls on layer 2
        seed = job.name.rsplit("_seed", 1)[1]
        cfg = config_of(job)
        assert Path(cfg["stack_on"]).name.endswith(f"_seed{seed}")
        assert Path(cfg["init_from"]).parent.parent.name.startswith("on_scheda_da_")
    # the same start of layer 1: table1's control of its best ScheDA and each seed's replica, which keep
    # their newest checkpoint and their best epoch's (the one the layer above stands on)
    control = json.loads((runs / "continuations_stacked.json").read_text())["16"]["scheda"]["controls"]["control"]
    same = [runs / "control" / Path(control["run"]).name,
            *sorted((runs / "seed_continue").glob("control_*_seed*/"))]
    assert len(same) == 3 and not list(runs.glob("*/ckpt_*"))
    for run in same:
        best = min(json.loads((run / "results.json").read_text())["evaluations"], key=lambda e: (e["val_error"], e["epoch"]))
        kept = sorted(p.name for p in (run / "checkpoints").glob("epoch_*.pt"))
        assert f"epoch_{best['epoch']:05d}.pt" in kept and len(kept) <= 2, kept
    tuned = sorted(p.name for p in (runs / "stack_seed_finetune").glob("on_*/"))
    assert tuned == sorted(f"on_{b}_finetune_{k}_h16_seed{s}" for b, k in (
        ("da", "da"), ("scheda", "da"), ("scheda", "scheda"), ("same_start", "da")) for s in (1, 2))


def test_the_report_s_numbers_are_the_runs_own(stacked):
    user, _, _, runs = stacked
    report = (user.work / "reports" / "stacked_smoke.md").read_text()
    assert "## Results" in report  # layer 1: table1's own section
    section = report.split("## Stacked DA and stacked ScheDA")[1].split("\n## ")[0]
    models = rows_of(section.split("### Every model over seeds")[1].split("### ")[0])
    chosen = json.loads((runs / "continuations_stacked.json").read_text())["16"]["scheda"]["best"]
    assert float(models["ScheDA (layer 1 alone)"][0]) == pytest.approx(100 * chosen["test_error"], abs=0.006)
    on_da = sorted((runs / "stack_da").glob("on_da_*/"), key=lambda r: min(
        (e["val_error"], e["epoch"]) for e in json.loads((r / "results.json").read_text())["evaluations"]))[0]
    assert float(models["DA + DA"][0]) == pytest.approx(100 * best_test(on_da), abs=0.006)
    for name, cells in models.items():
        if name == "Model":
            continue
        assert cells[2] == "2", (name, cells)  # both further seeds finished, controls and fine-tunings too
    per_seed = {name: [float(x) for x in cells[1].split(", ")] for name, cells in models.items() if name != "Model"}
    questions = section.split("### The four questions")[1]
    comparisons = rows_of(questions)
    assert len([c for c in comparisons if c != "Comparison"]) == 13
    for name, cells in comparisons.items():
        if name == "Comparison":
            continue
        a, b = name.split(" − ")
        first = float(models[a][0]) - float(models[b][0])
        assert float(cells[0]) == pytest.approx(first, abs=0.011)  # each cell rounded to 0.01
        diffs = [float(x) for x in cells[1].split(", ")]
        assert diffs == pytest.approx([x - y for x, y in zip(per_seed[a], per_seed[b])], abs=0.011)
        low, high = (float(x) for x in cells[4].strip("[]").split(", "))
        assert low <= sum(diffs) / 2 <= high
        assert cells[-1].startswith(("resolved", "not resolved"))
    answers = re.findall(r"^Answer: (.*) against (.*?): ([+-]\d+\.\d+) points over 2 further seeds", questions, re.M)
    assert [(a, b) for a, b, _ in answers] == [("DA + DA", "DA (layer 1 alone)"), ("ScheDA + DA", "DA + DA"),
                                              ("ScheDA + ScheDA", "ScheDA + DA"),
                                              ("ScheDA + ScheDA, fine-tuned", "DA + DA, fine-tuned")]
    for a, b, mean in answers:
        assert float(mean) == pytest.approx(float(comparisons[f"{a} − {b}"][3].split(" ± ")[0]), abs=0.006)


# The same table in blocks by seed: block 0 selects on seed 0, block 1 trains seeds 1 and 2 of what it chose,
# reading block 0's choices from its record; the report from the two records against the one invocation's
SEED_BLOCKS = ("table.blocks={records: records, cut: 'by seed, for the test', selection: 0, list: ["
               "{name: s0, set: {scale.seeds: [0]}}, {name: s12, set: {scale.seeds: [1, 2]}}]}")


@pytest.fixture(scope="module")
def stacked_blocks(stacked):
    user, command, _, _ = stacked
    blocks = [command[0], *command[1:], SEED_BLOCKS, "out_dir=blocks", "report_dir=block_reports"]
    early = user.run(blocks, *TINY_PROTOCOL, "block=1", check=False)
    runs = [user.run(blocks, *TINY_PROTOCOL, f"block={b}") for b in range(2)]
    shutil.rmtree(user.work / "blocks")  # a new machine: only the committed records are left
    user.run(blocks, "phases=[report]")
    return user, early, runs


def _phases_sections(report: str, end: str) -> str:
    """A report's sections from its Results to ``end``: what its phases wrote."""
    return report.split("## Results", 1)[1].split(end, 1)[0]


def test_a_seed_block_needs_the_selection_block_s_record_first(stacked_blocks):
    _, early, _ = stacked_blocks
    assert early.returncode == 1 and early.output.strip().splitlines()[-1] == (
        "error: block 1 (s12) trains further seeds with the selection of block 0 (s0), which has no record in "
        "records: run block=0 first")


def test_the_stacked_table_in_blocks_reports_what_one_invocation_does(stacked_blocks):
    """Block 1 trains only seeds 1 and 2 (layer 1's replicas, their same starts, every layer 2 and stack
    on them), each phase seed 0 finished read from block 0's record; the report from the records alone
    is the one invocation's, section for section."""
    user, _, runs = stacked_blocks
    assert "block 1 reads the selection of block 0 (s0, its record of " in runs[1].output
    assert "it trains only seeds [1, 2] of the models that block chose" in runs[1].output
    zero, one = (json.loads((user.work / "records" / f"block_{b}" / "record.json").read_text()) for b in range(2))
    assert all(re.search(r"_seed[12]$", job["name"]) for job in one["jobs"]), [j["name"] for j in one["jobs"]]
    assert {job["phase"] for job in one["jobs"]} == {"seed_da", "seed_continue", "seed_finetune", "stack_seed_da",
                                                     "stack_seed_continue", "stack_seed_finetune"}
    given = {"da", "continue", "control", "finetune", "stack_da", "stack_continue", "stack_control", "stack_finetune"}
    assert {name for name, payload in one["phases"].items() if payload == {"from_block": 0}} == given
    assert one["phases"]["stack_seeds"]["found"]["seeds"] == [1, 2] and one["phases"]["stack_seeds"]["found"]["chosen"] is None
    assert zero["phases"]["stack_seeds"]["found"]["seeds"] == [0]
    for b in range(2):
        text = (user.work / "records" / f"block_{b}" / "record.json").read_text()
        assert len(text) < 200_000 and str(user.work) not in text  # small, and no path of its machine
    report = (user.work / "block_reports" / "stacked_smoke.md").read_text()
    golden = (user.work / "reports" / "stacked_smoke.md").read_text()
    assert "Built from the records of 2 of 2 blocks (records)" in report
    assert _phases_sections(report, "\n## Configuration") == _phases_sections(golden, "\n## Jobs")
    assert (user.work / "block_reports" / "stacked_smoke_figure2_h16.png").stat().st_size > 1000


def test_blocks_that_both_hold_one_model_s_seed_are_refused_in_the_report(stacked_blocks, tmp_path):
    """Two records that both hold seed 0's rows (blocks that each selected on it): one line."""
    user, _, _ = stacked_blocks
    shutil.copytree(user.work / "records", tmp_path / "records")
    both = SEED_BLOCKS.replace("selection: 0, ", "").replace("scale.seeds: [1, 2]", "scale.seeds: [0]")
    zero = json.loads((tmp_path / "records" / "block_0" / "record.json").read_text())
    (tmp_path / "records" / "block_1" / "record.json").write_text(json.dumps({**zero, "block": 1, "name": "s12",
                                                                             "values": {"scale.seeds": [0]}}))
    proc = subprocess.run([sys.executable, "-m", "scheda.protocol.reproduce", "table=stacked", "scale=smoke", both,
                           "phases=[report]"], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == (
        "error: two blocks' records both hold the DA grid of 16 hidden units: a table's blocks share no hidden size "
        "(table.blocks.list)"), proc.stderr[-2000:]


@pytest.mark.parametrize("moved", [False, True], ids=["in place", "moved"])
def test_a_rerun_trains_nothing_in_place_or_moved(stacked, tmp_path, moved):
    """The same command again reads every job; so does it on a copy of the folder elsewhere (each
    layer's stack_on and init_from compared inside out_dir)."""
    user, command, _, runs = stacked
    where = []
    if moved:
        shutil.copytree(runs, tmp_path / "moved")
        where = [f"out_dir={tmp_path / 'moved'}"]
    again = user.run(command, *TINY_PROTOCOL, SEEDS, f"report_dir={tmp_path / 'reports'}", *where)
    launches = re.findall(r"phase (\w+): (\d+) jobs, (\d+) already done, (\d+) to run", again.output)
    assert {name for name, *_ in launches} >= {"stack_da", "stack_continue", "stack_control", "stack_finetune",
                                               "stack_seed_da", "stack_seed_continue", "stack_seed_finetune"}
    assert all(todo == "0" for *_, todo in launches), launches


@pytest.mark.parametrize("override, message", [
    ("table.stacked.hidden=17", "table.stacked.hidden=17"),
    ("table.stacked.top=0", "table.stacked.top=0"),
    ("table.continuations=[]", "keep scheda"),
    ("table.stacked.layer2=3", "table.stacked.layer2=3: give layer 2's grid as a mapping"),
    ("table.stacked.layer2={dx.nu: [0.3]}", "table.stacked.layer2 sets dx.nu: give a key of layer 2's grid"),
    ("scale.control=[jump]", "scale.control=['jump']: a stacked table's layer 1 includes the ScheDA's same start "
                             "(its control control): give scale.control=true or a list with control"),
])
def test_bad_stacked_settings_are_refused_before_any_job(tmp_path, override, message):
    proc = subprocess.run([sys.executable, "-m", "scheda.protocol.reproduce", "table=stacked", "scale=smoke",
                           f"out_dir={tmp_path / 'out'}", override], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "da").exists()  # no job ran


def test_layer_2_s_grid_is_set_from_the_command_line_and_leaves_layer_1_s():
    """``table.stacked.layer2={da.nu: [...]}`` as a user types it (a new mapping, not keys appended
    with +): layer 2 plans its grid, layer 1 the scale's."""
    from scheda.protocol.tables.stacked import layer_view

    cfg = smoke_cfg("table=stacked", "table.stacked.layer2={da.nu: [0.3], da.epochs: 5}")
    view = layer_view(cfg, [])
    assert list(view.scale.da.nu) == [0.3] and view.scale.da.epochs == 5
    assert list(cfg.scale.da.nu) == [0.5, 0.3] and cfg.scale.da.epochs != 5


def test_a_layer_1_run_without_its_reported_epoch_s_checkpoint_is_one_line(tmp_path):
    """A same start finished before controls kept their best epoch's checkpoint: no layer can stand on
    it, so the stacked table names it and the fix; one that kept it, or has not finished, passes."""
    from scheda.protocol.tables.stacked import check_kept
    from scheda.utils.errors import SchedaError

    run = tmp_path / "control" / "control_h16_nu0.5_4ep"
    (run / "checkpoints").mkdir(parents=True)
    evaluations = [{"epoch": e, "val_error": v, "test_error": 0.5} for e, v in ((1, 0.4), (2, 0.3), (3, 0.35), (4, 0.36))]
    results = {"status": "running", "stopped_by": "patience", "evaluations": evaluations}
    (run / "results.json").write_text(json.dumps(results))
    (run / "checkpoints" / "epoch_00004.pt").write_bytes(b"x")
    check_kept(run)  # not finished: its layer 2 waits for it
    (run / "results.json").write_text(json.dumps({**results, "status": "completed"}))
    with pytest.raises(SchedaError, match=r"control_h16_nu0.5_4ep reports its model at epoch 2 and kept no checkpoint "
                                          r"there \(trained before its kind kept one\), so no layer can stand on it: "
                                          r"delete that run to train it again"):
        check_kept(run)
    (run / "checkpoints" / "epoch_00002.pt").write_bytes(b"x")
    check_kept(run)
    check_kept(tmp_path / "elsewhere")  # a run a block's record holds, its folder on another machine


def test_the_report_leaves_out_the_controls_its_scale_does_not_run():
    from scheda.protocol.tables.stacked import not_run

    assert not_run(smoke_cfg("table=stacked")) == set()
    assert not_run(smoke_cfg("table=stacked", "scale.control=[control]")) == {"scheda.scheda.jump"}


def test_the_estimate_counts_every_stack_the_table_fine_tuned(stacked):
    """The plan's fine-tunings of stacks are the ones the table ran: four stacks (DA + DA, ScheDA + DA,
    ScheDA + ScheDA, same start + DA) for each of the three seeds."""
    from scheda.protocol.tables import phases_of

    _, _, _, runs = stacked
    ran = [p.name for folder in ("stack_finetune", "stack_seed_finetune") for p in (runs / folder).glob("on_*/")]
    cfg = smoke_cfg("table=stacked", SEEDS)
    planned = [i for phase in phases_of(cfg) if phase.name == "stack_finetune" for i in phase.estimate(cfg)]
    assert len(planned) == len(ran) == 4 * 3, ran


def test_the_estimate_costs_layer_2_on_layer_1_s_units():
    from scheda.protocol import estimate

    cfg = smoke_cfg("table=stacked", "scale=cpu")
    items = estimate.items(cfg)["items"]
    stacked = [i for i in items if i["phase"].startswith("stack_")]
    assert {i["phase"] for i in stacked} == {"stack_da", "stack_continue", "stack_control", "stack_seeds"}
    assert all(i["inputs"] == 500 for i in stacked)
    da = next(i for i in items if i["phase"] == "da" and i["hidden"])
    on = next(i for i in stacked if i["phase"] == "stack_da")
    bench = {"rows": [{"hidden": 500, "batch_size": 20, "eager_s": 10.0}], "n": 45000, "inputs": 3072}
    train_da, _ = estimate.item_seconds(da, bench, 20, False)
    train_on, _ = estimate.item_seconds(on, bench, 20, False, inputs=on["inputs"])
    assert train_on / on["epochs"] == pytest.approx(train_da / da["epochs"] * 500 / 3072)  # an epoch each


# --- layer 1 beside another report (table.stacked.beside) ---------------------------------------

BESIDE = "{source: there.md, note: 'capped here.', rows: {l1.da: {0: 51.0, 1: 52.0, 2: 53.5, 3: 50.0}}}"


def _section_with(beside_value: str, da: dict[int, float]) -> str:
    from scheda.protocol.tables.stacked import section, settings

    cfg = smoke_cfg("table=stacked", f"table.stacked.beside={beside_value}")
    rows = {"l1.da": {seed: {"test_error": e / 100} for seed, e in da.items()}}
    return "\n".join(section(cfg, {"settings": settings(cfg), "seeds": [0, 1, 2, 4], "rows": rows, "chosen": {}}))


def test_layer_1_is_set_beside_another_report_seed_by_seed():
    """Here − there over the further seeds both have (seed 3 only there, seed 4 only here), seed 0
    shown apart; the paired interval is the t-interval of those differences."""
    from scipy import stats as sp

    text = _section_with(BESIDE, {0: 53.25, 1: 54.0, 2: 54.75, 4: 49.0})
    part = text.split("### Layer 1 beside there.md", 1)[1]
    assert "capped here." in part
    [row] = [line for line in part.splitlines() if line.startswith("| DA (layer 1 alone) |")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "53.25 / 51.00" and cells[2] == "1: 54.00 / 52.00, 2: 54.75 / 53.50"
    assert cells[3] == "+2.00, +1.25" and cells[4] == "2" and cells[5] == "+1.62 ± 0.53"
    half = sp.t.ppf(0.975, 1) * sp.tstd([2.0, 1.25]) / 2 ** 0.5
    assert cells[6] == f"[{1.625 - half:+.2f}, {1.625 + half:+.2f}]" and cells[7] == "not resolved"
    assert "Not shown to differ (an interval that holds 0 is no proof that they agree): DA (layer 1 alone)." in part
    none_both = _section_with(BESIDE.replace("1: 52.0, 2: 53.5, ", ""), {0: 53.25, 1: 54.0})
    assert "| none both have | — | 0 | — | — | not compared: no further seed in both |" in none_both
    assert "### Layer 1 beside" not in _section_with("null", {0: 53.25})


@pytest.mark.parametrize("value, message", [
    ("{source: x.md}", "table.stacked.beside={'source': 'x.md'}: give {source: <the report>"),
    ("{source: x.md, rows: {da.da: {0: 50}}}", "table.stacked.beside.rows has da.da: give rows of layer 1 alone (l1.da,"),
    ("{source: x.md, rows: {l1.da: {0: 150}}}", "table.stacked.beside.rows.l1.da.0=150: give a seed (an integer) its "
                                                "test error in % (0 to 100)"),
    ("{source: x.md, rows: {l1.da: {zero: 50}}}", "table.stacked.beside.rows.l1.da.zero=50: give a seed"),
    ("{source: x.md, rows: {l1.da: 50}}", "table.stacked.beside.rows.l1.da=50: give each seed's test error in %"),
])
def test_bad_beside_settings_are_one_line(value, message):
    from scheda.protocol.tables.stacked import settings
    from scheda.utils.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        settings(smoke_cfg("table=stacked", f"table.stacked.beside={value}"))
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_committed_beside_numbers_are_table1_cpu_s_own():
    """configs/table_scale/stacked_cpu.yaml's table.stacked.beside, number for number, is the table of
    its source report (each seed at its own best validation epoch; the further seeds in order)."""
    from omegaconf import OmegaConf

    from helpers import REPO
    from scheda.protocol.tables.stacked import settings

    ROWS = settings(smoke_cfg("table=stacked")).rows
    beside = OmegaConf.load(REPO / "configs" / "table_scale" / "stacked_cpu.yaml").table.stacked.beside
    text = (REPO / beside.source).read_text()
    table = text.split("at each seed's own best validation epoch: each reported model over seeds", 1)[1]
    table = table.split("\n\n", 2)[1]
    labels = {"l1.da": "Best DA", "l1.scheda": "ScheDA", "l1.same_start": "Control: same start, constant nu",
              "l1.finetune_da": "Fine-tuned best DA", "l1.finetune_scheda": "Fine-tuned best ScheDA"}
    assert set(beside.rows) == set(labels) and set(labels) <= set(ROWS)
    for key, label in labels.items():
        [row] = [line for line in table.splitlines() if line.startswith(f"| {label} |")]
        cells = [c.strip() for c in row.strip("|").split("|")]
        further = [float(v.split(" (")[0]) for v in cells[2].split(", ")]
        assert {int(s): float(v) for s, v in beside.rows[key].items()} == {0: float(cells[1]),
                                                                            **dict(zip(range(1, 6), further))}



@pytest.mark.parametrize("override, message", [
    ("table.stacked.questions=[{question: 'Q?', compare: [[da.da, l1.cosine]]}]",
     "table.stacked.questions[0] compares l1.cosine, which is not a row of table.stacked.rows: use one of l1.da,"),
    ("table.stacked.questions=[{question: 'Q?', compare: [[da.da]]}]",
     "table.stacked.questions[0]: give {question: <words>, compare: [[a, b], ...]}"),
    (None, "table.stacked.rows is empty: give the report's rows"),  # a stacked table of one's own without them
])
def test_bad_report_rows_and_questions_are_one_line(override, message):
    from scheda.protocol.tables.stacked import settings
    from scheda.utils.errors import ConfigError

    cfg = smoke_cfg("table=stacked", *([override] if override else []))
    if override is None:
        cfg.table.stacked.rows = {}
    with pytest.raises(ConfigError, match=re.escape(message)):
        settings(cfg)


def test_a_question_declared_in_yaml_is_answered_from_the_rows():
    """table.stacked.questions from the command line: its comparisons through the one engine, its answer
    the first one's verdict in words; the table's own questions give way to it."""
    text = _section_with("null", {0: 53.0, 1: 52.0, 2: 54.0, 4: 53.0}).split("### The four questions", 1)[1]
    assert text.count("**") >= 8  # the table's own four questions
    from scheda.protocol.tables.stacked import section, settings

    cfg = smoke_cfg("table=stacked", "table.stacked.questions=[{question: 'Is DA + DA better than DA alone?', "
                                     "compare: [[da.da, l1.da]]}]")
    rows = {"l1.da": {seed: {"test_error": e / 100} for seed, e in {0: 53.0, 1: 52.0, 2: 54.0}.items()},
            "da.da": {seed: {"test_error": e / 100} for seed, e in {0: 52.5, 1: 51.0, 2: 53.5}.items()}}
    text = "\n".join(section(cfg, {"settings": settings(cfg), "seeds": [0, 1, 2], "rows": rows, "chosen": {}}))
    asked = text.split("### The question (test error", 1)[1].split("\n### ", 1)[0]
    assert asked.count("**") == 2 and "**Is DA + DA better than DA alone?**" in asked
    assert "| DA + DA − DA (layer 1 alone) | -0.50 | -1.00, -0.50 | 2 | -0.75 ± 0.35 |" in asked
    assert "Answer: DA + DA against DA (layer 1 alone): -0.75 points over 2 further seeds" in asked
