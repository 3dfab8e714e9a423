"""The poll thread: a failing driver is logged once per distinct failure, and the loop goes on."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pytest
from kube_helpers import wait_for
from prometheus_client import CollectorRegistry

from dra._runtime.watchdog.loop import Watchdog
from dra._runtime.watchdog.model import WatchdogSettings
from dra.driver import DeviceProcess
from tests.watchdog.watchdog_rig import ListingDriver


class FlakyDriver(ListingDriver):
    """A fake driver whose process list fails a few times (an NVML outage), then answers."""

    name = "flaky.example.com"
    cdi_kind = "k8s.flaky.example.com/claim"

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.calls = 0
        self.failures = failures

    def processes(self) -> Sequence[DeviceProcess]:
        self.calls += 1
        if self.calls <= self.failures:
            raise RuntimeError("NVML nvmlInit() failed: Driver Not Loaded")
        return []


def test_a_failing_poll_is_logged_once_and_the_loop_recovers(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    driver = FlakyDriver(failures=5)
    wd = Watchdog(driver, lambda: [], tmp_path / "hooks", events=type("E", (), {"emit": lambda self, v: None})(),
                  registry=CollectorRegistry(), settings=WatchdogSettings(interval=0.05, share_window=1))
    with caplog.at_level(logging.INFO, logger="dra._runtime.watchdog"):
        wd.start()
        try:
            wait_for(lambda: wd.polls >= 3, 10, 0.02, what="three polls")
        finally:
            wd.stop()
    assert driver.calls >= 8 and wd.polls >= 3
    failed = [r for r in caplog.records if "poll failed" in r.getMessage()]
    assert len(failed) == 1
    assert any("polls again" in r.getMessage() for r in caplog.records)
