"""Metrics series, the metered handler and the /healthz /readyz /metrics endpoint (no cluster)."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence

import pytest

from dra._runtime.kubelet.handler import ClaimOutcome
from dra._runtime.metrics import HealthServer, MeteredHandler, Metrics
from dra.driver import ClaimRef


def value(m: Metrics, name: str, **labels: str) -> float:
    got = m.registry.get_sample_value(name, {"driver": m.driver, **labels})
    assert got is not None, f"no series {name}{labels}"
    return got


class Handler:
    def __init__(self, fail: set[str] = frozenset(), raise_: bool = False) -> None:  # type: ignore[assignment]
        self.fail = fail
        self.raise_ = raise_
        self.calls = 0

    def prepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, ClaimOutcome]:
        self.calls += 1
        if self.raise_:
            raise RuntimeError("boom")
        return {c.uid: ClaimOutcome(error="bad" if c.uid in self.fail else "") for c in claims}

    def unprepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        return {c.uid: "bad" if c.uid in self.fail else "" for c in claims}


def test_every_series_exists_at_zero_before_the_first_claim() -> None:
    m = Metrics("gpu.example.com")
    for op in ("prepare", "unprepare"):
        assert value(m, "dra_requests_total", operation=op) == 0
        assert value(m, "dra_request_duration_seconds_count", operation=op) == 0
        for result in ("success", "error"):
            assert value(m, "dra_claims_total", operation=op, result=result) == 0
    for kind in ("prepare", "unprepare", "internal", "publish"):
        assert value(m, "dra_errors_total", kind=kind) == 0
    assert value(m, "dra_published_devices") == 0
    text = m.exposition().decode()
    assert 'dra_claims_total{driver="gpu.example.com",operation="prepare",result="error"} 0.0' in text


def test_metered_handler_counts_calls_claims_errors_and_latency() -> None:
    m = Metrics("d")
    handler = MeteredHandler(Handler(fail={"b"}), m)
    claims = [ClaimRef("a", "ns", "a"), ClaimRef("b", "ns", "b")]
    assert handler.prepare_claims(claims) == {"a": ClaimOutcome(), "b": ClaimOutcome(error="bad")}
    handler.unprepare_claims(claims)
    handler.prepare_claims([])  # a probe: not a request
    assert value(m, "dra_requests_total", operation="prepare") == 1
    assert value(m, "dra_request_duration_seconds_count", operation="prepare") == 1
    assert value(m, "dra_claims_total", operation="prepare", result="success") == 1
    assert value(m, "dra_claims_total", operation="prepare", result="error") == 1
    assert value(m, "dra_errors_total", kind="prepare") == 1
    assert value(m, "dra_errors_total", kind="unprepare") == 1


def test_a_raising_handler_counts_as_internal_error_and_still_times_the_call() -> None:
    m = Metrics("d")
    with pytest.raises(RuntimeError):
        MeteredHandler(Handler(raise_=True), m).prepare_claims([ClaimRef("a", "ns", "a")])
    assert value(m, "dra_errors_total", kind="internal") == 1
    assert value(m, "dra_request_duration_seconds_count", operation="prepare") == 1


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_health_server_answers_probes_and_metrics() -> None:
    m = Metrics("d")
    m.published(devices=3, slices=1, generation=2)
    ready = ["not registered with kubelet yet"]
    server = HealthServer(m, liveness=lambda: "", readiness=lambda: ready[0], port=0, address="127.0.0.1")
    server.start()
    try:
        assert get(server.port, "/healthz") == (200, "ok\n")
        assert get(server.port, "/readyz") == (503, "not registered with kubelet yet\n")
        ready[0] = ""
        assert get(server.port, "/readyz") == (200, "ok\n")
        status, text = get(server.port, "/metrics")
        assert status == 200
        assert 'dra_published_devices{driver="d"} 3.0' in text
        assert 'dra_pool_generation{driver="d"} 2.0' in text
        assert get(server.port, "/nope")[0] == 404
    finally:
        server.stop()


def test_device_state_is_read_at_each_scrape() -> None:
    """Registration, capacities, taints and health come from their owners at every scrape."""
    from dra._runtime.metrics import DeviceStateCollector
    from dra.driver import Capacity, Device, HealthEvent, Taint

    devices = [Device("gpu-0", capacity={"memory": Capacity("16Gi"), "cores": Capacity("100")}),
               Device("gpu-1", capacity={"memory": Capacity("16Gi")}, taints=(Taint("gpu.example.com/xid", "48"),))]
    health: list[HealthEvent] | None = None
    registered = False
    m = Metrics("gpu.example.com")
    m.registry.register(DeviceStateCollector("gpu.example.com", lambda: devices, lambda: health, lambda: registered))
    assert value(m, "dra_kubelet_registered") == 0
    assert value(m, "dra_device_capacity", device="gpu-0", capacity="memory") == 16 << 30
    assert value(m, "dra_device_capacity", device="gpu-0", capacity="cores") == 100
    assert value(m, "dra_device_taint", device="gpu-1", key="gpu.example.com/xid", value="48", effect="NoSchedule") == 1
    assert "dra_device_health{" not in m.exposition().decode()  # no health reported: no series
    registered = True
    health = [HealthEvent("gpu-0", True), HealthEvent("gpu-1", False, "XID 48"), HealthEvent("gpu-2", None)]
    devices = devices[:1]
    assert value(m, "dra_kubelet_registered") == 1
    assert [value(m, "dra_device_health", device="gpu-1", state=s) for s in ("healthy", "unhealthy", "unknown")] == [0, 1, 0]
    assert value(m, "dra_device_health", device="gpu-0", state="healthy") == 1
    assert value(m, "dra_device_health", device="gpu-2", state="unknown") == 1
    assert "dra_device_taint{" not in m.exposition().decode()  # the tainted device is gone: so is its series
