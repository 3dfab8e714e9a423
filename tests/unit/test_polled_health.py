"""dra.PolledHealth: the polled health monitor the vendor drivers share, on devices whose health
the test sets (the vendors' own mappings are tested in their driver tests)."""

from __future__ import annotations

import dataclasses
import logging
import threading

import pytest

import dra
from dra import Taint


@dataclasses.dataclass(frozen=True)
class Dev:
    uuid: str
    index: int


@dataclasses.dataclass(frozen=True)
class Health:
    uuid: str
    level: int | None = None  # None: not known
    message: str = "not polled yet"

    @property
    def healthy(self) -> bool | None:
        return None if self.level is None else self.level == 0

    def taints(self) -> tuple[Taint, ...]:
        return (Taint("toy/health", str(self.level), "NoSchedule"),) if self.level else ()

    def state(self) -> object:
        return self.level  # the message alone is no change


class Monitor(dra.PolledHealth[Dev, Health]):
    noun = "toy"
    thread_name = "toy-health"

    def __init__(self, devices: list[Dev], levels: dict[str, int | None], interval: float = 5.0) -> None:
        self.levels, self.asked, self.changes = levels, 0, 0
        self.fail: Exception | None = None
        self.threads: set[str] = set()
        super().__init__(devices, self.changed, interval)

    def changed(self) -> None:
        self.changes += 1

    def unpolled(self, device: Dev) -> Health:
        return Health(device.uuid)

    def log_fields(self, device: Dev) -> dict[str, object]:
        return {"index": device.index}

    def ask(self, device: Dev) -> Health:
        self.asked += 1
        self.threads.add(threading.current_thread().name)
        if self.fail is not None:
            raise self.fail
        level = self.levels[device.uuid]
        return Health(device.uuid, level, "ok" if level == 0 else f"level {level} (asked {self.asked})")


DEVS = [Dev("toy-a", 0), Dev("toy-b", 1)]


def test_before_the_first_poll_every_device_is_unknown_with_its_unpolled_record() -> None:
    m = Monitor(DEVS, {"toy-a": 0, "toy-b": 0})
    assert m.snapshot() == [("toy-a", None, "not polled yet"), ("toy-b", None, "not polled yet")]
    assert m.taints() == {} and m.asked == 0 and m.polls.count == 0


def test_a_poll_asks_every_device_and_reports_a_change_of_state_once(caplog: pytest.LogCaptureFixture) -> None:
    levels: dict[str, int | None] = {"toy-a": 0, "toy-b": 0}
    m = Monitor(DEVS, levels)
    with caplog.at_level(logging.WARNING, logger=__name__):
        assert m.poll() is True  # unknown -> ok is a change
    assert m.changes == 1 and m.asked == 2 and m.polls.count == 1
    assert [r.getMessage() for r in caplog.records] == ["toy health changed"] * 2
    assert {(r.uuid, r.index, r.healthy) for r in caplog.records} == {("toy-a", 0, True), ("toy-b", 1, True)}  # type: ignore[attr-defined]
    assert m.poll() is False and m.changes == 1 and m.polls.count == 2  # the same answers: nothing to report
    levels["toy-b"] = 3
    assert m.poll() is True and m.changes == 2
    assert m.snapshot() == [("toy-a", True, "ok"), ("toy-b", False, "level 3 (asked 6)")]
    assert m.taints() == {"toy-b": (Taint("toy/health", "3", "NoSchedule"),)}


def test_a_new_message_of_the_same_state_is_kept_and_not_reported() -> None:
    m = Monitor(DEVS, {"toy-a": 2, "toy-b": 0})
    m.poll()
    assert m.poll() is False and m.changes == 1
    assert m.snapshot()[0] == ("toy-a", False, "level 2 (asked 3)")  # the latest message, no republish


def test_start_polls_before_it_returns_then_the_thread_polls_and_survives_a_failing_poll(
    caplog: pytest.LogCaptureFixture,
) -> None:
    m = Monitor(DEVS, {"toy-a": 0, "toy-b": 1}, interval=0.01)
    with caplog.at_level(logging.ERROR, logger=__name__):
        m.fail = RuntimeError("library gone")
        with pytest.raises(RuntimeError, match="library gone"):
            m.start()  # the first poll is the caller's: its failure is the caller's to see
        assert m.polls.count == 0
        m.fail = None
        m.start()
        assert m.polls.count == 1 and m.changes == 1 and m.taints() == {"toy-b": (Taint("toy/health", "1", "NoSchedule"),)}
        m.fail = RuntimeError("a query hung up")
        failed = m.asked
        dra.until(lambda: m.asked > failed + 1, timeout=10, interval=0.005, what="the thread to poll again after a failure")
        m.fail = None
        done = m.polls.count
        assert m.polls.wait(done + 1), "the thread stopped polling after a failed poll"
        m.stop()
    assert "toy-health" in m.threads
    assert any(r.getMessage() == "health poll failed" and r.exc_info for r in caplog.records)


def test_stop_ends_the_thread() -> None:
    m = Monitor(DEVS, {"toy-a": 0, "toy-b": 0}, interval=0.01)
    m.start()
    assert m.polls.wait(2)
    m.stop()
    assert m._thread is not None and not m._thread.is_alive()
    done = m.polls.count
    assert m.poll() is False and m.polls.count == done + 1  # poll() still works for a test after stop
