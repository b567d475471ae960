import json
import math

import pytest
import torch
from hypothesis import example, given, settings, strategies as st

from scheda.utils.errors import ConfigError
from scheda.model.schedule import Stage, build_schedule

from helpers import compose_cfg


def levels(name="decreasing", **kw):
    cfg = dict(name=name, nu0=0.7, delta_nu=0.1, K=2, initial_epochs=3, T=None, nu_final=None)
    cfg.update(kw)
    return cfg


def test_constant_schedule():
    s = build_schedule(dict(name="constant", nu=0.3, epochs=4))
    assert s.epoch_nus() == [0.3] * 4
    assert [s.is_stage_end(e) for e in range(4)] == [False, False, False, True]


def test_decreasing_exact_nu_per_epoch():
    s = build_schedule(levels(nu_final=0.4))
    assert s.epoch_nus() == [0.7, 0.7, 0.7, 0.6, 0.6, 0.5, 0.5, 0.4, 0.4]
    assert [e for e in range(s.total_epochs) if s.is_stage_end(e)] == [2, 4, 6, 8]


def test_decreasing_by_T_and_default_stop_above_zero():
    assert build_schedule(levels(T=2, K=1, initial_epochs=1)).epoch_nus() == [0.7, 0.6, 0.5]
    nus = build_schedule(levels(K=1, initial_epochs=1)).epoch_nus()
    assert nus == [0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1]


def test_fine_decreasing_levels_have_no_float_drift():
    nus = build_schedule(levels(delta_nu=0.05, K=1, initial_epochs=1, nu_final=0.1)).epoch_nus()
    assert nus[-1] == 0.1 and len(nus) == 13 and nus[3] == 0.55


def test_increasing_schedule():
    s = build_schedule(levels(name="increasing", nu0=0.1, K=1, initial_epochs=2, nu_final=0.4))
    assert s.epoch_nus() == [0.1, 0.1, 0.2, 0.3, 0.4]


def test_continuation_without_initial_epochs():
    s = build_schedule(levels(initial_epochs=0, K=2, T=2))
    assert s.epoch_nus() == [0.6, 0.6, 0.5, 0.5]


def test_stages_schedule():
    s = build_schedule(dict(name="stages", stages=[dict(nu=0.5, epochs=1), dict(nu=0.0, epochs=2)]))
    assert s.epoch_nus() == [0.5, 0.0, 0.0]


def test_max_epochs_cuts_or_extends_the_last_stage():
    s = build_schedule(levels(nu_final=0.5), max_epochs=4)
    assert s.epoch_nus() == [0.7, 0.7, 0.7, 0.6]
    s = build_schedule(levels(nu_final=0.6), max_epochs=7)
    assert s.epoch_nus() == [0.7, 0.7, 0.7, 0.6, 0.6, 0.6, 0.6]


def test_random_schedules_draw_in_range():
    g = torch.Generator().manual_seed(0)
    u = build_schedule(dict(name="random_uniform", low=0.1, high=0.7, epochs=3))
    draws = torch.stack([u.draw(g, torch.device("cpu")) for _ in range(2000)])
    assert u.per_minibatch and u.epoch_nus() == [None] * 3
    assert draws.min() >= 0.1 and draws.max() <= 0.7 and abs(draws.mean().item() - 0.4) < 0.02
    d = build_schedule(dict(name="random_discrete", values=[0.1, 0.5], epochs=1))
    draws = torch.stack([d.draw(g, torch.device("cpu")) for _ in range(1000)])
    torch.testing.assert_close(draws.unique(), torch.tensor([0.1, 0.5]))


@pytest.mark.parametrize("cfg, key", [
    (levels(nu0=math.inf), "schedule.nu0"),
    (levels(nu0=-0.1), "schedule.nu0"),
    (levels(delta_nu=0.0), "schedule.delta_nu"),
    (levels(K=0), "schedule.K"),
    (levels(T=9), "schedule.T"),
    (levels(T=1, nu_final=0.3), "schedule.T"),
    (levels(nu_final=0.8), "schedule.nu_final"),
    (levels(initial_epochs=0, T=0), "schedule"),
    (dict(name="stages", stages=[]), "schedule.stages"),
    (dict(name="stages", stages=[dict(nu=-1.2, epochs=1)]), r"schedule.stages\[0\].nu"),
    (dict(name="constant", nu=0.3, epochs=0), "schedule.epochs"),
    (dict(name="random_uniform", low=0.5, high=0.2, epochs=1), "schedule.low"),
    (dict(name="random_discrete", values=[], epochs=1), "schedule.values"),
    (dict(name="cosine"), "schedule.name"),
])
def test_bad_schedule_values_name_the_key(cfg, key):
    with pytest.raises(ConfigError, match=key):
        build_schedule(cfg)


@settings(max_examples=200, deadline=None)
@example(name="increasing", nu0=1.0, delta_nu=0.5, K=1, initial_epochs=1, T=None, nu_final=None)  # nu0 alone, at 1
@given(
    name=st.sampled_from(["decreasing", "increasing"]),
    nu0=st.one_of(st.floats(-0.5, 1.5), st.just(math.nan)),
    delta_nu=st.one_of(st.floats(-0.2, 1.2), st.just(math.nan), st.just(1e-9)),
    K=st.integers(-2, 5),
    initial_epochs=st.integers(-2, 5),
    T=st.one_of(st.none(), st.integers(-2, 30)),
    nu_final=st.one_of(st.none(), st.floats(-0.2, 1.2)),
)
def test_any_schedule_of_levels_is_valid_or_a_clear_error(name, nu0, delta_nu, K, initial_epochs, T, nu_final):
    try:
        s = build_schedule(dict(name=name, nu0=nu0, delta_nu=delta_nu, K=K, initial_epochs=initial_epochs,
                                T=T, nu_final=nu_final))
    except ConfigError as exc:
        assert str(exc).startswith("schedule")
        return
    nus = s.epoch_nus()
    # nu0 is the user's (the noise bounds it: masking below 1, a Gaussian std unbounded); the levels from it stay
    # at or below nu0 going down, and going up below 1 unless nu_final lets them pass it
    top = nu0 + 1e-9 if name == "decreasing" else 1.0 if nu_final is None else nu_final + 1e-9
    start = s.stages[0].nu if initial_epochs > 0 else None  # nu0's own stage
    levels = nus if name == "decreasing" or nu_final is not None else [nu for nu in nus if nu != start]
    assert nus and all(0 <= nu and math.isfinite(nu) for nu in nus)
    assert all(nu <= top if name == "decreasing" or nu_final is not None else nu < top for nu in levels)
    assert nus == sorted(nus, reverse=(name == "decreasing"))


def test_presets_compose_and_build():
    for preset, first, last in [("decreasing_0.7", 0.7, 0.1), ("decreasing_0.7_fine", 0.7, 0.1),
                                ("increasing", 0.1, 0.7), ("constant", 0.3, 0.3), ("stages", 0.7, 0.1)]:
        cfg = compose_cfg([f"schedule={preset}"])
        s = build_schedule(cfg.schedule)
        assert (s.stages[0].nu, s.stages[-1].nu) == (first, last), preset
    s = build_schedule(compose_cfg(["schedule=decreasing_0.7"]).schedule)
    assert [st.nu for st in s.stages] == [0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1]
    assert [st.epochs for st in s.stages[1:]] == [50] * 6
    for preset in ["random_uniform", "random_discrete"]:
        assert build_schedule(compose_cfg([f"schedule={preset}"]).schedule).per_minibatch


def test_exponential_decay_holds_each_level_K_epochs_then_stays_at_nu_min():
    s = build_schedule(dict(name="exponential", nu0=0.8, gamma=0.5, nu_min=0.1, K=2, epochs=9))
    assert s.epoch_nus() == [0.8, 0.8, 0.4, 0.4, 0.2, 0.2, 0.1, 0.1, 0.1]
    assert [st.epochs for st in s.stages] == [2, 2, 2, 3] and s.is_stage_end(5) and not s.is_stage_end(6)
    every_epoch = build_schedule(dict(name="exponential", nu0=0.7, gamma=0.9, nu_min=0.0, K=1, epochs=5))
    assert every_epoch.epoch_nus() == pytest.approx([0.7 * 0.9 ** t for t in range(5)])
    assert build_schedule(dict(name="exponential", nu0=0.3, nu_min=0.3, epochs=4)).epoch_nus() == [0.3] * 4
    assert build_schedule(compose_cfg(["schedule=exponential"]).schedule).epoch_nus()[0] == 0.7


@pytest.mark.parametrize("values, key", [
    (dict(gamma=1.0), "schedule.gamma"), (dict(gamma=0.0), "schedule.gamma"), (dict(gamma=math.nan), "schedule.gamma"),
    (dict(nu_min=0.8), "schedule.nu_min"), (dict(nu0=-0.2), "schedule.nu0"), (dict(K=0), "schedule.K"),
    (dict(epochs=0), "schedule.epochs"),
])
def test_bad_exponential_values_name_the_key(values, key):
    with pytest.raises(ConfigError, match=key):
        build_schedule(dict(name="exponential", **values))


def test_exponential_decay_in_a_run_a_fused_sweep_and_the_protocol(cifar_arrays, tmp_path):
    from scheda.protocol import phases
    from scheda.run import run

    from helpers import TINY, smoke_cfg

    common = [f"dataset.root={cifar_arrays}", *TINY, "logger=none", "evaluate.enabled=false", "schedule=exponential",
              "schedule.gamma=0.5", "schedule.nu_min=0.1", "schedule.epochs=3"]
    alone = run(compose_cfg([*common, "schedule.nu0=0.4"]), tmp_path / "alone")
    assert [h["nu"] for h in alone["history"]] == [0.4, 0.2, 0.1]
    assert [s["nu"] for s in alone["switches"]] == [0.4, 0.2, 0.1]
    fused = run(compose_cfg([*common, "trainer.parallel.nu=[0.4,0.8]"]), tmp_path / "fused")
    assert [m["overrides"] for m in fused["models"]] == [{"schedule.nu0": 0.4}, {"schedule.nu0": 0.8}]
    for k, nus in enumerate([[0.4, 0.2, 0.1], [0.8, 0.4, 0.2]]):
        model = json.loads((tmp_path / "fused" / "models" / str(k) / "results.json").read_text())
        assert [h["nu"] for h in model["history"]] == nus
    assert [h["loss"] for h in json.loads((tmp_path / "fused" / "models" / "0" / "results.json").read_text())["history"]] \
        == pytest.approx([h["loss"] for h in alone["history"]], rel=1e-5)
    cfg = smoke_cfg("+scale.schedules.exponential={nu0:[0.5],grid:{gamma:[0.3,0.8],nu_min:[0.2],epochs:[3]},lr:0.1}",
                    "table.continuations=[scheda,exponential]")
    phases.check(cfg)
    selection = {"hidden": {"16": {"by_nu": {"0.5": {"checkpoint": "c.pt", "epoch": 2, "nu": 0.5}}}}}
    jobs = [j for j in phases.continuation_jobs(cfg.scale, cfg.table.continuations, selection)
            if j.meta["kind"] == "exponential"]
    assert [(j.values["schedule.nu0"], j.values["schedule.gamma"], j.meta["epochs"], j.meta["levels"]) for j in jobs] \
        == [(0.5, 0.3, 3, 2), (0.5, 0.8, 3, 3)]  # 0.5, 0.2 (nu_min) x 2; 0.5, 0.4, 0.32
    assert all(j.groups == {"schedule": "exponential"} and j.values["init_from"] == "c.pt" for j in jobs)


def test_schedule_steps_of_0_2_reads_as_T(caplog):
    """0.2's ``schedule.steps`` still builds its schedule (with a warning) until 0.4; with T too it is refused."""
    with caplog.at_level("WARNING", logger="scheda.model.schedule"):
        old = build_schedule(levels(steps=2, K=1, initial_epochs=1))
    assert old.epoch_nus() == build_schedule(levels(T=2, K=1, initial_epochs=1)).epoch_nus() == [0.7, 0.6, 0.5]
    assert "schedule.steps is called schedule.T now" in caplog.text
    with pytest.raises(ConfigError, match="schedule.steps=2 is 0.2's name of schedule.T"):
        build_schedule(levels(steps=2, T=2))


def test_a_checkpoints_schedule_agrees_with_the_same_schedule_cut_short_or_run_on():
    """A resume that changes trainer.max_epochs continues the same schedule: no warning about it."""
    s = build_schedule(dict(name="stages", stages=[dict(nu=0.5, epochs=4), dict(nu=0.4, epochs=2)]))
    assert s.agrees_with([Stage(0.5, 4), Stage(0.4, 2)])
    assert s.agrees_with([Stage(0.5, 4)]) and s.agrees_with([Stage(0.5, 3)])  # it was cut short
    assert s.agrees_with([Stage(0.5, 4), Stage(0.4, 5)])  # it ran on in its last stage
    assert not s.agrees_with([Stage(0.5, 2), Stage(0.4, 4)]) and not s.agrees_with([Stage(0.6, 4)])


def test_a_schedule_that_draws_per_minibatch_says_so_once_by_the_class_it_builds(monkeypatch):
    """``per_minibatch`` is the built schedule's; a schema reads it from ``builds`` (the rules ask
    before building), and one that names the wrong class is refused in one line."""
    from dataclasses import dataclass

    from scheda.model.schedule import (RandomUniformSchedule, RandomUniformScheduleConfig,
                                       ScheduleConfig, build_schedule)
    from scheda.utils.errors import ConfigError

    assert RandomUniformScheduleConfig().per_minibatch and RandomUniformSchedule.per_minibatch
    assert not ScheduleConfig.builds.per_minibatch

    @dataclass
    class Forgot(RandomUniformScheduleConfig):
        builds = ScheduleConfig.builds  # a per-minibatch schedule whose schema says a fixed nu per epoch

    import scheda.model.schedule as schedule

    monkeypatch.setattr(schedule, "typed", lambda group, config: Forgot())
    with pytest.raises(ConfigError, match="builds a RandomUniformSchedule, which draws nu per minibatch"):
        build_schedule({})
