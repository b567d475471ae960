"""The one lockstep loop (scheda.training.loop): the active set, the step built for it and again
when a member drops out, the hooks in their order, and the stop hook on a failure."""

import pytest

from scheda.training.loop import Loop


class Member:
    def __init__(self, epochs):
        self.epochs, self.epoch = epochs, 0

    @property
    def finished(self):
        return self.epoch >= self.epochs


class Counting(Loop):
    def __init__(self, members, fail_at=None):
        self.calls, self.built, self.fail_at = [], [], fail_at
        super().__init__(members, self.build)

    def build(self, active):
        self.built.append([m.epochs for m in active])
        return object()

    def on_fit_start(self):
        self.calls.append("on_fit_start")

    def run_epoch(self, active):
        self.step_for(active)
        if self.fail_at is not None and active[0].epoch == self.fail_at:
            raise RuntimeError("diverged")
        for m in active:
            m.epoch += 1
        self.calls.append(len(active))

    def on_fit_end(self):
        self.calls.append("on_fit_end")

    def on_fit_stopped(self, exc):
        self.calls.append(f"on_fit_stopped: {exc}")

    def close(self):
        self.calls.append("close")


def test_the_step_is_rebuilt_only_when_a_member_drops_out():
    loop = Counting([Member(3), Member(1), Member(2)])
    loop.fit()
    assert loop.built == [[3, 1, 2], [3, 2], [3]]
    assert loop.calls == ["on_fit_start", 3, 2, 1, "on_fit_end", "close"]


def test_a_failing_epoch_calls_on_fit_stopped_then_close_and_raises():
    loop = Counting([Member(3)], fail_at=1)
    with pytest.raises(RuntimeError, match="diverged"):
        loop.fit()
    assert loop.calls == ["on_fit_start", 1, "on_fit_stopped: diverged", "close"]


def test_a_loop_says_what_its_epoch_does():
    with pytest.raises(TypeError, match="run_epoch"):
        Loop([Member(1)], lambda active: None)
