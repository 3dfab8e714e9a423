"""`dra._runtime.wait.until`, the one poll loop, on a fake clock."""

from __future__ import annotations

import pytest

from dra._runtime.wait import WaitTimeout, until


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def test_returns_the_first_truthy_result_without_sleeping_when_it_is_immediate() -> None:
    clock = FakeClock()
    assert until(lambda: "ready", timeout=1, clock=clock, sleep=clock.sleep) == "ready"
    assert clock.sleeps == []


def test_polls_every_interval_until_the_probe_succeeds() -> None:
    clock = FakeClock()
    answers = iter([None, 0, [], "x"])
    assert until(lambda: next(answers), timeout=10, interval=0.5, clock=clock, sleep=clock.sleep) == "x"
    assert clock.sleeps == [0.5, 0.5, 0.5]


def test_times_out_naming_what_and_the_last_value_and_probes_once_more_at_the_deadline() -> None:
    clock = FakeClock()
    calls: list[float] = []

    def probe() -> int:
        calls.append(clock.now)
        return 0

    with pytest.raises(WaitTimeout, match=r"after 1 s waiting for the pod \(last: 0\)") as info:
        until(probe, timeout=1, interval=0.25, what="the pod", clock=clock, sleep=clock.sleep)
    assert info.value.last == 0
    assert calls[-1] >= 1.0 and len(calls) == 5


def test_the_caller_chooses_the_error_class() -> None:
    clock = FakeClock()
    with pytest.raises(RuntimeError, match="waiting for x"):
        until(lambda: None, timeout=0, what="x", error=RuntimeError, clock=clock, sleep=clock.sleep)
