"""The sync loop's retry schedule in virtual time, against an address where nothing listens.

No API server is faked: the publisher talks to a closed loopback port, so every request fails
the way it does during a real outage (connection refused). The injected clock records the
delays instead of sleeping them.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
from kube_helpers import wait_for
from kubernetes import client

from dra._runtime.publish import Backoff, Publisher, PublishSettings
from dra.driver import Device


class RecordingClock:
    """Virtual time: `wait` returns at once (after a real millisecond, so threads never spin hot)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[tuple[str, float | None]] = []
        self.lock = threading.Lock()

    def monotonic(self) -> float:
        return self.now

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        with self.lock:
            self.waits.append((threading.current_thread().name, timeout))
            if timeout is not None:
                self.now += timeout
        time.sleep(0.001)
        return event.is_set()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_failed_syncs_are_retried_with_exponential_backoff_up_to_the_ceiling() -> None:
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{closed_port()}"
    cfg.retries = False  # one connection attempt per request: the loop's own backoff is under test
    clock = RecordingClock()
    errors: list[BaseException] = []
    publisher = Publisher(
        client.ApiClient(cfg),
        "gpu.example.com",
        "node-1",
        lambda: [Device(name="d0")],
        settings=PublishSettings(coalesce=0.0, resync_period=300.0, request_timeout=1.0),
        clock=clock,
        backoff=Backoff(initial=0.2, factor=2.0, maximum=5.0, jitter=0.0),
        on_error=errors.append,
    )
    publisher.start()
    try:
        wait_for(lambda: len(errors) >= 9, 20, 0.01, what="nine failed syncs")
    finally:
        publisher.stop()
    with clock.lock:
        delays = [t for name, t in clock.waits if name == "dra-publish-sync" and t not in (None, 0.0)]
    assert delays[:8] == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]
    assert not publisher.ready
    assert publisher.counts["create"] == publisher.counts["update"] == 0


def test_a_rescan_whose_device_read_fails_is_retried_not_lost() -> None:
    """Review bug 1: the dirty flag was cleared before `devices()` ran, so a driver error lost
    the rescan and the next syncs republished the old pool until the next SIGHUP."""
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{closed_port()}"
    cfg.retries = False
    answers: list[list[Device] | Exception] = [[Device(name="d0")], RuntimeError("NVML busy"),
                                               [Device(name="d0"), Device(name="d1")]]

    def devices() -> list[Device]:
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    publisher = Publisher(client.ApiClient(cfg), "gpu.example.com", "node-1", devices,
                          settings=PublishSettings(request_timeout=1.0))
    with pytest.raises(Exception):  # noqa: B017 - the closed port: the read went first
        publisher.sync_once()
    publisher.devices_changed()
    with pytest.raises(RuntimeError, match="NVML busy"):
        publisher.sync_once()
    with pytest.raises(Exception):  # noqa: B017 - the closed port again, after the retried read
        publisher.sync_once()
    assert publisher._desired is not None
    assert [d["name"] for s in publisher._desired.slices for d in s] == ["d0", "d1"]


def test_resync_and_wait_counts_completed_comparisons_not_failed_attempts() -> None:
    """Tests prove "nothing more was written" by waiting for one more comparison; a failed
    attempt compared nothing, so it must not end the wait."""
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{closed_port()}"
    cfg.retries = False
    errors: list[BaseException] = []
    publisher = Publisher(client.ApiClient(cfg), "gpu.example.com", "node-1", lambda: [Device(name="d0")],
                          settings=PublishSettings(request_timeout=1.0, backoff_initial=0.01, backoff_max=0.05),
                          on_error=errors.append)
    publisher.start()
    try:
        assert not publisher.resync_and_wait(0.5)
        assert errors, "the worker never tried: the wait above proves nothing"
        assert publisher.comparisons == 0
    finally:
        publisher.stop()
