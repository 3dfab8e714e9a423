"""The DRA health service: full device list, pushed on change, resent before kubelet's timeout."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import grpc
import pytest

from dra._runtime.kubelet import KubeletPaths, KubeletPlugin
from dra._runtime.kubelet.health import HealthMonitor, truncate_message
from dra.driver import HealthEvent
from dra.testing.kubelet import KubeletHarness, RecordingHandler, short_tmpdir

DRIVER = "gpu.example.com"


class FakeHealth:
    """A driver health source fed by the test: each `push` is one full snapshot."""

    def __init__(self) -> None:
        self.q: queue.Queue[list[HealthEvent] | Exception] = queue.Queue()
        self.calls = 0

    def push(self, item: list[HealthEvent] | Exception) -> None:
        self.q.put(item)

    def __call__(self) -> Iterator[list[HealthEvent]]:
        self.calls += 1
        return self._gen()

    def _gen(self) -> Iterator[list[HealthEvent]]:
        while True:
            item = self.q.get()
            if isinstance(item, Exception):
                raise item
            yield item


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


SNAP = [HealthEvent("gpu-0", True), HealthEvent("gpu-1", False, "ECC errors"),
        HealthEvent("gpu-2", None)]  # fmt: skip


Setup = tuple[FakeHealth, Clock, KubeletPlugin, KubeletHarness]


@pytest.fixture
def setup() -> Iterator[Setup]:
    source, clock = FakeHealth(), Clock()
    with short_tmpdir("khealth") as root:
        paths = KubeletPaths(registrar_dir=root / "reg", plugins_dir=root / "plugins")
        plugin = KubeletPlugin(
            DRIVER, RecordingHandler(), source, paths, health_resend_interval=0.2, health_clock=clock,
            pool_name="node-a",
        )
        with plugin, KubeletHarness(paths.registrar_dir) as kubelet:
            kubelet.wait_for_plugin(DRIVER)
            yield source, clock, plugin, kubelet


@pytest.mark.parametrize("version", ["v1", "v1alpha1"])
def test_full_list_then_changes_then_resends(setup: Setup, version: str) -> None:
    source, clock, _, kubelet = setup
    source.push(SNAP)
    with kubelet.watch_health(version=version) as watch:
        first = watch.next(timeout=5)
        assert [(d.pool_name, d.device_name, d.health, d.message) for d in first] == [
            ("node-a", "gpu-0", "Healthy", ""),
            ("node-a", "gpu-1", "Unhealthy", "ECC errors"),
            ("node-a", "gpu-2", "Unknown", ""),
        ]
        assert {d.last_updated_time for d in first} == {1_700_000_000}
        assert {d.health_check_timeout_seconds for d in first} == {0}
        # a change is pushed at once, as the full list
        source.push([HealthEvent("gpu-0", False, "fell off the bus"), *SNAP[1:]])
        changed = watch.next(timeout=5)
        assert len(changed) == 3 and changed[0].health == "Unhealthy"
        # without change the full list comes again within the resend interval, freshly stamped
        clock.now += 20
        again = watch.next(timeout=2)
        assert [(d.device_name, d.health) for d in again] == [(d.device_name, d.health) for d in changed]
        assert {d.last_updated_time for d in again} == {1_700_000_020}
        watch.next(timeout=2)


def test_stream_opened_before_the_first_snapshot_waits_for_it(setup: Setup) -> None:
    source, _, _, kubelet = setup
    with kubelet.watch_health() as watch:
        with pytest.raises(TimeoutError):
            watch.next(timeout=0.5)
        source.push(SNAP[:1])
        assert [d.device_name for d in watch.next(timeout=5)] == ["gpu-0"]


def test_failed_driver_stream_reports_unknown_and_restarts(setup: Setup) -> None:
    source, _, _, kubelet = setup
    source.push(SNAP)
    with kubelet.watch_health() as watch:
        watch.next(timeout=5)
        source.push(RuntimeError("NVML gone"))
        unknown = watch.next(timeout=5)
        assert {d.health for d in unknown} == {"Unknown"}
        assert "NVML gone" in unknown[0].message
    assert source.calls == 1


def test_two_streams_each_get_the_full_list(setup: Setup) -> None:
    source, _, _, kubelet = setup
    source.push(SNAP)
    with kubelet.watch_health(version="v1") as a, kubelet.watch_health(version="v1alpha1") as b:
        assert len(a.next(timeout=5)) == 3
        assert len(b.next(timeout=5)) == 3


def test_stop_ends_open_streams(setup: Setup) -> None:
    source, _, plugin, kubelet = setup
    source.push(SNAP)
    watch = kubelet.watch_health()
    watch.next(timeout=5)
    stopper = threading.Thread(target=plugin.stop, kwargs={"grace": 1})
    stopper.start()
    stopper.join(10)
    assert not stopper.is_alive()
    with pytest.raises((EOFError, grpc.RpcError)):
        while True:
            watch.next(timeout=5)


def test_no_health_service_without_driver_support() -> None:
    with short_tmpdir("knohealth") as root:
        paths = KubeletPaths(registrar_dir=root / "reg", plugins_dir=root / "plugins")
        with KubeletPlugin(DRIVER, RecordingHandler(), lambda: None, paths) as plugin, KubeletHarness(
            paths.registrar_dir
        ) as kubelet:
            assert not plugin.health_enabled
            kubelet.wait_for_plugin(DRIVER)
            with kubelet.watch_health() as watch, pytest.raises(grpc.RpcError) as err:
                watch.next(timeout=5)
            assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED  # type: ignore[attr-defined]


def test_resend_interval_must_beat_the_timeout() -> None:
    with short_tmpdir("kint") as root:
        paths = KubeletPaths(registrar_dir=root / "reg", plugins_dir=root / "plugins")
        with pytest.raises(ValueError, match="below the device health timeout"):
            KubeletPlugin(DRIVER, RecordingHandler(), FakeHealth(), paths, health_resend_interval=30)
        # a longer per-device timeout allows a longer interval
        KubeletPlugin(
            DRIVER, RecordingHandler(), FakeHealth(), paths, health_resend_interval=30, health_device_timeout_s=90
        )


def test_long_messages_are_truncated_like_kubelet() -> None:
    assert truncate_message("x" * 1024) == "x" * 1024
    assert truncate_message("x" * 2000) == "x" * 1021 + "..."


def test_monitor_restarts_a_failed_driver_stream() -> None:
    source = FakeHealth()
    monitor = HealthMonitor(source, restart_delay=0.05)
    monitor.start(source())
    try:
        source.push(SNAP)
        version, snap = monitor.wait_newer(0, 5)
        assert snap == SNAP
        source.push(RuntimeError("boom"))
        version, snap = monitor.wait_newer(version, 5)
        assert snap is not None and {e.healthy for e in snap} == {None}
        source.push(SNAP[:1])  # consumed by the restarted iterator
        for _ in range(100):
            version, snap = monitor.wait_newer(version, 5)
            if snap == SNAP[:1]:
                break
        assert snap == SNAP[:1]
        assert source.calls == 2
    finally:
        monitor.stop()
