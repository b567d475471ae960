import json

import re

import pytest
import torch

from scheda.training.callbacks import Callback
from scheda.training.checkpoint import load_checkpoint
from scheda.utils.errors import ConfigError, DivergenceError
from scheda.model.autoencoder import DenoisingAutoencoder
from scheda.model.noise import build_noise
from scheda.model.optim import SGD
from scheda.run import run
from scheda.model.schedule import build_schedule
from scheda.training.trainer import ModelState

from helpers import STAGES, TINY, compose_cfg

masking = build_noise({"name": "masking"})


def _synthetic(n=256, d=64, seed=0):
    """Binary-ish data with low-dimensional structure, so a small DA can learn it."""
    g = torch.Generator().manual_seed(seed)
    codes = (torch.rand(n, 4, generator=g) > 0.5).float()
    basis = (torch.rand(4, d, generator=g) > 0.5).float()
    return (codes @ basis).clamp(max=1.0)


def _trainer(schedule_cfg, x, seed=0, callbacks=(), lr=0.1):
    model = DenoisingAutoencoder(x.shape[1], 16, generator=torch.Generator().manual_seed(seed))
    opt = SGD(model.parameters(), lr=lr)
    return ModelState(model, opt, masking, build_schedule(schedule_cfg), x, 32,
                   torch.Generator().manual_seed(seed), callbacks)


def _reconstruction_error(model, x):
    with torch.no_grad():
        return model.loss(x, x).item()


def test_training_lowers_reconstruction_error():
    x = _synthetic()
    trainer = _trainer(dict(name="constant", nu=0.2, epochs=30), x)
    before = _reconstruction_error(trainer.model, x)
    history = trainer.fit()
    after = _reconstruction_error(trainer.model, x)
    assert after < 0.6 * before
    assert history[-1]["loss"] < history[0]["loss"]


def test_same_seed_same_weights_other_seed_differs():
    x = _synthetic()
    cfg = dict(name="random_uniform", low=0.1, high=0.5, epochs=3)
    a, b, c = _trainer(cfg, x, 1), _trainer(cfg, x, 1), _trainer(cfg, x, 2)
    for t in (a, b, c):
        t.fit()
    assert torch.equal(a.model.W, b.model.W)
    assert not torch.equal(a.model.W, c.model.W)


class Recorder(Callback):
    def __init__(self):
        self.events = []

    def on_epoch_end(self, trainer, metrics):
        self.events.append(("epoch", metrics["epoch"], metrics["nu"]))

    def on_stage_end(self, trainer, metrics):
        self.events.append(("stage_end", metrics["epoch"], metrics["nu"]))


def test_schedule_callback_sets_nu_and_records_switches():
    rec = Recorder()
    trainer = _trainer(dict(name="decreasing", nu0=0.6, delta_nu=0.2, K=1, initial_epochs=2,
                            T=2, nu_final=None), _synthetic(), callbacks=[rec])
    trainer.fit()
    assert [e for e in rec.events if e[0] == "epoch"] == [
        ("epoch", 1, 0.6), ("epoch", 2, 0.6), ("epoch", 3, 0.4), ("epoch", 4, 0.2)]
    assert [e for e in rec.events if e[0] == "stage_end"] == [
        ("stage_end", 2, 0.6), ("stage_end", 3, 0.4), ("stage_end", 4, 0.2)]
    assert trainer.switches == [{"epoch": 0, "nu": 0.6}, {"epoch": 2, "nu": 0.4},
                                            {"epoch": 3, "nu": 0.2}]


def test_random_schedule_logs_mean_nu():
    trainer = _trainer(dict(name="random_discrete", values=[0.2, 0.4], epochs=2), _synthetic())
    history = trainer.fit()
    assert all(0.2 <= h["nu"] <= 0.4 for h in history)


def test_an_evaluation_of_a_random_schedule_logs_its_mean_nu_shortly(cifar_arrays, tmp_path, caplog):
    """The epoch's mean nu, kept whole in results.json, printed to 4 digits in the log line."""
    import logging
    import re

    caplog.set_level(logging.INFO, logger="scheda.evaluation.evaluate")
    summary = run(compose_cfg([f"dataset.root={cifar_arrays}", *TINY, "schedule=random_uniform", "schedule.epochs=1",
                               "logger=none"]), tmp_path / "run")
    nu = summary["evaluations"][-1]["nu"]
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("eval epoch 1 "))
    assert re.match(r"eval epoch 1 nu=0\.\d{1,4}: ", line) and f"nu={nu:.4g}:" in line, line


def test_divergence_stops_with_a_clear_error():
    trainer = _trainer(dict(name="constant", nu=0.3, epochs=3), _synthetic() * 1e30, lr=1e30)
    with pytest.raises(DivergenceError, match=r"epoch 1 \(nu=0.3\).*optim.lr"):
        trainer.fit()


def test_run_writes_checkpoints_results_and_tensorboard(cifar_arrays, tmp_path):
    cfg = compose_cfg([f"dataset.root={cifar_arrays}", *TINY, *STAGES, "trainer.checkpoint_every=2"])
    out = tmp_path / "run"
    summary = run(cfg, out)
    assert summary["epochs"] == 3
    assert summary["switches"] == [{"epoch": 0, "nu": 0.5}, {"epoch": 2, "nu": 0.2}]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["epoch_00002.pt", "epoch_00003.pt"]
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "completed" and len(results["history"]) == 3
    state = load_checkpoint(out)
    assert state["epoch"] == 3 and state["model"]["W"].shape == (8, 3072)

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(out / "tensorboard")).Reload()
    tags = acc.Tags()
    assert {"train/reconstruction_ce", "train/nu", "time/epoch_seconds"} <= set(tags["scalars"])
    assert [e.value for e in acc.Scalars("train/nu")] == pytest.approx([0.5, 0.5, 0.2])
    assert "filters" in tags["images"] and len(acc.Images("filters")) == 2  # one per stage end
    # Noise switches are marked on their epochs; the HParams plugin gets the columns that tell
    # runs apart, and Scalars gets no one-point hparam/* charts.
    assert [(e.step, e.value) for e in acc.Scalars("schedule/nu_at_switch")] == [(0, 0.5), (2, pytest.approx(0.2))]
    assert not [t for t in tags["scalars"] if t.startswith("hparam")]
    from tensorboard.plugins.hparams import plugin_data_pb2

    content = acc.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    # Only what this run's schedule has (a list of stages: its first and last nu; no K, no delta_nu).
    assert set(start.hparams) == {"schedule", "schedule.nu_first", "schedule.nu_last", "model.hidden", "optim.lr",
                                  "noise", "seed", "epochs"}
    assert start.hparams["schedule"].string_value == "stages" and start.hparams["schedule.nu_first"].number_value == 0.5
    # No experiment summary: TensorBoard builds it from all the runs, the differing keys first.
    assert "_hparams_/experiment" not in content


def _weights(out):
    return load_checkpoint(out)["model"]


@pytest.mark.parametrize("schedule", [
    ["schedule=stages", "schedule.stages=[{nu:0.5,epochs:2},{nu:0.2,epochs:2}]"],
    ["schedule=random_uniform", "schedule.epochs=4"],
])
def test_resume_gives_the_same_final_weights(cifar_arrays, tmp_path, schedule):
    base = [f"dataset.root={cifar_arrays}", *TINY, *schedule, "trainer.checkpoint_every=1", "logger=none"]
    run(compose_cfg(base), tmp_path / "golden")
    # Interrupted: the same run stopped after 1 epoch, then resumed from its checkpoint.
    run(compose_cfg(base + ["trainer.max_epochs=1"]), tmp_path / "part")
    resumed = run(compose_cfg(base + [f"resume={tmp_path / 'part'}"]), tmp_path / "resumed")
    golden, final = _weights(tmp_path / "golden"), _weights(tmp_path / "resumed")
    for key in golden:
        assert torch.equal(golden[key], final[key]), key
    golden_summary = json.loads((tmp_path / "golden" / "results.json").read_text())
    assert resumed["switches"] == golden_summary["switches"]
    assert [h["loss"] for h in resumed["history"]] == [h["loss"] for h in golden_summary["history"]]


def test_init_from_starts_a_new_run_from_weights(cifar_arrays, tmp_path):
    base = [f"dataset.root={cifar_arrays}", *TINY, "logger=none"]
    run(compose_cfg(base + STAGES), tmp_path / "da")
    cont = run(compose_cfg(base + [f"init_from={tmp_path / 'da'}", "schedule=decreasing",
                                   "schedule.nu0=0.5", "schedule.initial_epochs=0", "schedule.T=2",
                                   "schedule.K=1"]), tmp_path / "scheda")
    assert cont["epochs"] == 2 and [s["nu"] for s in cont["switches"]] == [0.4, 0.3]
    assert cont["history"][0]["loss"] < json.loads((tmp_path / "da" / "results.json").read_text())["history"][0]["loss"]
    # Resumed (as `resume=` does, without init_from: the run continues its own checkpoint), its record still says
    # where it started: a resumed continuation once read as a run from scratch (scheda-results, the protocol's check).
    resumed = run(compose_cfg(base + [f"resume={tmp_path / 'scheda'}", "schedule=decreasing", "schedule.nu0=0.5",
                                      "schedule.initial_epochs=0", "schedule.T=2", "schedule.K=1",
                                      "trainer.max_epochs=4"]), tmp_path / "scheda")
    assert resumed["epochs"] == 4 and resumed["config"]["init_from"] == str(tmp_path / "da")


@pytest.mark.parametrize("override, key", [
    ("optim.lr=0", "optim.lr"),
    ("optim.momentum=1.5", "optim.momentum"),
    ("trainer.batch_size=0", "trainer.batch_size"),
    ("trainer.batch_size=100000", "trainer.batch_size"),
    ("model.hidden=0", "model.hidden"),
    ("schedule.stages=[]", "schedule.stages"),
    ("trainer.device=tpu", "trainer.device"),
    ("trainer.device=mps", "trainer.device='mps' is not a device scheda runs on"),  # torch knows it: it failed on the data
    ("dataset.val_size=100", "dataset.val_size"),
])
def test_bad_config_values_fail_with_the_key(cifar_arrays, tmp_path, override, key):
    with pytest.raises(ConfigError, match=key):
        run(compose_cfg([f"dataset.root={cifar_arrays}", *TINY, *STAGES, override]), tmp_path / "bad")
    assert not (tmp_path / "bad" / "checkpoints").exists()


def test_a_cuda_device_this_machine_lacks_is_one_line(monkeypatch):
    """cuda:N beyond the machine's devices is refused with the range, before any data."""
    from scheda.training.trainer import TrainerConfig

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert TrainerConfig(device="cuda:1").resolve_device() == torch.device("cuda:1")
    with pytest.raises(ConfigError, match=r"trainer.device=cuda:2 but this machine has 2 CUDA device\(s\): use cuda:0 .. cuda:1"):
        TrainerConfig(device="cuda:2").resolve_device()


def test_streams_are_derived_from_the_seed():
    from scheda.utils.seeding import derive_seed, train_seed

    seeds = {derive_seed(0, "init"), derive_seed(0, "train", 0), derive_seed(0, "train", 40), derive_seed(1, "train", 0)}
    assert len(seeds) == 4 and derive_seed(0, "train", 40) == derive_seed(0, "train", 40)
    assert train_seed(0, 40) == derive_seed(0, "train", 40) and train_seed(0, 40, override=7) == 7


def test_initialisation_has_its_own_stream(cifar_arrays, tmp_path):
    from scheda.model.autoencoder import build_model
    from scheda.runs.rundir import RunResults
    from scheda.planning.plan import make_plan
    from scheda.run import Member
    from scheda.utils.seeding import derive_seed

    cfg = compose_cfg([f"dataset.root={cifar_arrays}", *TINY, "seed=3"])
    plan = make_plan(cfg)
    member = Member(plan.models[0], plan, tmp_path, RunResults(tmp_path / "results.json"))  # before any data
    expected = build_model(cfg.model, 3072, generator=torch.Generator().manual_seed(derive_seed(3, "init")))
    same_as_seed = build_model(cfg.model, 3072, generator=torch.Generator().manual_seed(3))
    assert torch.equal(member.model.W, expected.W) and not torch.equal(member.model.W, same_as_seed.W)


def test_a_continuation_does_not_replay_the_da_stream_and_shares_its_own(cifar_arrays, tmp_path):
    """A continuation's first epoch must not repeat the DA's first permutation and masks; a
    ScheDA and its control from one checkpoint draw the same numbers (common random numbers)."""
    base = [f"dataset.root={cifar_arrays}", *TINY, "logger=none", "evaluate.enabled=false", "schedule=constant",
            "schedule.epochs=1"]
    run(compose_cfg(base + ["schedule.nu=0.5"]), tmp_path / "da")
    for name, nu in (("a", 0.3), ("b", 0.5)):
        run(compose_cfg(base + [f"schedule.nu={nu}", f"init_from={tmp_path / 'da'}"]), tmp_path / name)
    run(compose_cfg(base + ["schedule.nu=0.3", f"init_from={tmp_path / 'da'}", "train_seed=11"]), tmp_path / "own")
    state = {name: load_checkpoint(tmp_path / name)["generator"] for name in ("da", "a", "b", "own")}
    assert torch.equal(state["a"], state["b"])
    assert not torch.equal(state["a"], state["da"]) and not torch.equal(state["own"], state["a"])


@pytest.mark.parametrize("threads, load, cores, wanted", [
    (2, 2, 2, "(2 processes running beside this run on 2 cores) and torch runs 2 threads, which then wait on each "
              "other (several times slower): set trainer.num_threads=1, or OMP_WAIT_POLICY=PASSIVE"),
    (2, 1, 2, "set trainer.num_threads=1,"),
    (2, 0, 2, None),  # idle cores: the threads fit
    (1, 7, 2, None),  # one thread waits on nobody
    (8, 9, 16, "set trainer.num_threads=7,"),
])
def test_threads_that_outnumber_the_idle_cores_are_warned_of(monkeypatch, threads, load, cores, wanted):
    """Measured (scripts/bench_train.py, 500 hidden units, 2 cores, one busy): 23 s an epoch with
    torch's 2 threads against 5.5 s on idle cores; a tiny model's epoch 0.01 s -> 2.9 s."""
    from scheda.training.trainer import busy_cores

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    warning = busy_cores(threads, others=load, cores=cores)
    assert (warning is None) if wanted is None else (wanted in warning), warning
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    assert busy_cores(threads, others=load, cores=cores) is None  # the user chose


def test_the_processes_running_beside_a_run_are_counted_now(monkeypatch):
    """Not the load average, which still counts the user's command of a minute ago: the fewest
    runnable threads of a few looks at /proc/stat, this process not counted."""
    import builtins
    import io

    from scheda.training import trainer

    looks = iter([4, 3, 5, 3, 4])
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda path, *a, **k: io.StringIO(
        f"cpu  1 2 3\nprocs_running {next(looks)}\nprocs_blocked 0\n") if path == "/proc/stat" else real_open(path, *a, **k))
    assert trainer.running_elsewhere(pause=0) == 2


def test_the_console_shows_the_training_loggers_warnings_and_not_their_epochs(cifar_arrays, tmp_path):
    """The per-epoch lines of training and fine-tuning go to train.log only (fine-tuning's went to
    the console too, under a logging config naming its old module), and those loggers' warnings
    reach the console as well (they went to train.log only)."""
    from helpers import run_train

    common = [f"dataset.root={cifar_arrays}", *TINY, "schedule=constant", "schedule.nu=0.3", "logger=none"]
    first = run_train([*common, "schedule.epochs=2", "finetune.enabled=true", "finetune.max_epochs=2",
                       f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    log = (tmp_path / "run" / "train.log").read_text()
    assert "] - epoch 2 nu=0.3 loss=" in log and "finetune lr=" in log
    console = first.stdout + first.stderr
    assert "] - epoch 2 nu=0.3 loss=" not in console and "eval epoch 2" in console
    assert not re.search(r"finetune lr=\S+ epoch \d+: loss", console), console[-3000:]
    # a console that is no terminal has no bar: each rate's first epoch and end say where it stands
    assert "finetune lr=0.00125 epoch 1 of at most 2: val " in console and "finetune lr=0.00125 epoch 2 done: " in console
    again = run_train([f"resume={tmp_path / 'run'}", "schedule.nu=0.4", "schedule.epochs=3", "force_resume=true"],
                      cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "the schedule differs from the checkpoint's" in again.stdout + again.stderr


def test_each_console_line_is_one_write_flushed_at_once():
    """A parallel sweep's jobs share the console: a line written in pieces (text, then newline) or
    left in a block buffer (a pipe, a file) came out cut into another job's line."""
    import io
    import logging

    from scheda.training.callbacks import TqdmLoggingHandler

    class Console(io.StringIO):
        def __init__(self):
            super().__init__()
            self.writes, self.flushed = [], []

        def write(self, text):
            if text:
                self.writes.append(text)
            return super().write(text)

        def flush(self):
            self.flushed.append(self.getvalue())

    console = Console()
    handler = TqdmLoggingHandler(console)
    handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
    record = logging.LogRecord("scheda.run", logging.INFO, __file__, 1, "eval epoch %d: val %.4f", (4, 0.615), None)
    handler.emit(record)
    handler.emit(record)
    assert console.writes == ["[scheda.run] eval epoch 4: val 0.6150\n"] * 2
    assert console.flushed[-1] == console.getvalue() and len(console.flushed) >= 2  # out before the next record
