"""Prometheus metrics of one node daemon, and its /healthz, /readyz and /metrics endpoint.

Every series is created at start with value zero, so a dashboard or alert sees `0` rather than
"no data" before the first claim. Metrics live in a registry owned by `Metrics` (no global
state), so tests and several daemons in one process never collide.

Series (all labelled with `driver`):
- ``dra_requests_total{operation}``: kubelet NodePrepareResources/NodeUnprepareResources calls
  (empty probe calls excluded).
- ``dra_request_duration_seconds{operation}``: their latency, histogram.
- ``dra_claims_total{operation, result}``: claims handled, result ``success`` or ``error``.
- ``dra_errors_total{kind}``: ``prepare`` / ``unprepare`` (a claim answered with an error),
  ``internal`` (the handler raised), ``publish`` (a ResourceSlice sync failed).
- ``dra_published_devices``, ``dra_published_slices``, ``dra_pool_generation``: the pool as
  last published.
- ``dra_ledger_oversized_total``: claim ledgers found grown past their size (written to from a
  claim's container) and cut back (`dra._runtime.enforcement.LedgerGuard`).

Read at each scrape (`DeviceStateCollector`), so never stale:
- ``dra_kubelet_registered``: 1 while kubelet's last word on the plugin's registration was
  "registered", else 0 (not yet, or refused: /readyz says why).
- ``dra_device_capacity{device, capacity}``: each published device's capacities (``memory`` in
  bytes, ``cores`` in percent, ...), as published.
- ``dra_device_health{device, state}``: 1 for the device's current health ``state``
  (``healthy``, ``unhealthy``, ``unknown``) and 0 for the other two, as kubelet's health stream
  last got it; no series when the driver reports no health.
- ``dra_device_taint{device, key, value, effect}``: 1 per taint on a published device (the
  driver's, e.g. an XID, and the watchdog's).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from dra._runtime.kubelet.handler import ClaimHandler, ClaimOutcome
from dra.driver import ClaimRef, Device, HealthEvent, quantity_to_int

log = logging.getLogger("dra._runtime.metrics")
_T = TypeVar("_T")

OPERATIONS = ("prepare", "unprepare")
RESULTS = ("success", "error")
ERROR_KINDS = ("prepare", "unprepare", "internal", "publish")
# Prepare is a GET plus local file writes: most calls take milliseconds, kubelet gives up at 45 s.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 45.0)


class Metrics:
    """The daemon's series in their own registry."""

    def __init__(self, driver: str, registry: CollectorRegistry | None = None) -> None:
        self.driver = driver
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter("dra_requests", "kubelet DRA calls (probes excluded).", ["driver", "operation"], registry=r)
        self.duration = Histogram(
            "dra_request_duration_seconds",
            "Latency of kubelet DRA calls.",
            ["driver", "operation"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.claims = Counter("dra_claims", "Claims handled.", ["driver", "operation", "result"], registry=r)
        self.errors = Counter("dra_errors", "Errors by kind.", ["driver", "kind"], registry=r)
        self.devices = Gauge("dra_published_devices", "Devices in the published pool.", ["driver"], registry=r)
        self.slices = Gauge("dra_published_slices", "ResourceSlices in the published pool.", ["driver"], registry=r)
        self.generation = Gauge("dra_pool_generation", "Generation of the published pool.", ["driver"], registry=r)
        self.ledger_oversized = Counter("dra_ledger_oversized", "Claim ledgers grown past their size and cut back.",
                                        ["driver"], registry=r)
        self.ledger_oversized.labels(driver)
        for op in OPERATIONS:
            self.requests.labels(driver, op)
            self.duration.labels(driver, op)
            for result in RESULTS:
                self.claims.labels(driver, op, result)
        for kind in ERROR_KINDS:
            self.errors.labels(driver, kind)
        for gauge in (self.devices, self.slices, self.generation):
            gauge.labels(driver).set(0)

    def published(self, devices: int, slices: int, generation: int) -> None:
        self.devices.labels(self.driver).set(devices)
        self.slices.labels(self.driver).set(slices)
        self.generation.labels(self.driver).set(generation)

    def error(self, kind: str) -> None:
        self.errors.labels(self.driver, kind).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


HEALTH_STATES = ("healthy", "unhealthy", "unknown")


class DeviceStateCollector(Collector):
    """The daemon's state that other parts own, read at every scrape: kubelet registration, the
    published devices' capacities and taints, and their health as last streamed to kubelet.

    `devices`: the devices as last published (taints included); `health`: the latest full health
    snapshot, None when the driver reports none; `registered`: whether kubelet registered the plugin.
    """

    def __init__(self, driver: str, devices: Callable[[], Sequence[Device]],
                 health: Callable[[], Sequence[HealthEvent] | None], registered: Callable[[], bool]) -> None:
        self.driver = driver
        self._devices = devices
        self._health = health
        self._registered = registered

    def describe(self) -> list[GaugeMetricFamily]:
        return list(self._families())

    def _families(self) -> tuple[GaugeMetricFamily, ...]:
        return (
            GaugeMetricFamily("dra_kubelet_registered", "1 while kubelet has registered the plugin, else 0.",
                              labels=["driver"]),
            GaugeMetricFamily("dra_device_capacity", "Capacity of a published device (memory in bytes, cores in percent).",
                              labels=["driver", "device", "capacity"]),
            GaugeMetricFamily("dra_device_health", "1 for the device's health state as streamed to kubelet, 0 for the others.",
                              labels=["driver", "device", "state"]),
            GaugeMetricFamily("dra_device_taint", "1 per taint on a published device.",
                              labels=["driver", "device", "key", "value", "effect"]),
        )

    def collect(self) -> Iterator[GaugeMetricFamily]:
        registered, capacity, health, taint = families = self._families()
        d = self.driver
        registered.add_metric([d], 1.0 if self._registered() else 0.0)
        for dev in self._devices():
            for name, cap in sorted(dev.capacity.items()):
                try:
                    capacity.add_metric([d, dev.name, name], float(quantity_to_int(cap.value)))
                except (ValueError, TypeError, ArithmeticError):
                    continue  # a capacity the API would refuse is never published either
            for t in dev.taints:
                taint.add_metric([d, dev.name, t.key, t.value, t.effect], 1.0)
        for event in self._health() or ():
            now = "unknown" if event.healthy is None else ("healthy" if event.healthy else "unhealthy")
            for state in HEALTH_STATES:
                health.add_metric([d, event.device, state], 1.0 if state == now else 0.0)
        yield from families


class MeteredHandler:
    """A `ClaimHandler` that counts and times the calls of the one it wraps."""

    def __init__(self, inner: ClaimHandler, metrics: Metrics) -> None:
        self.inner = inner
        self.metrics = metrics
        # The labelled series, looked up once (`labels()` takes a lock and builds keys per call).
        d = metrics.driver
        self._requests = {op: metrics.requests.labels(d, op) for op in OPERATIONS}
        self._duration = {op: metrics.duration.labels(d, op) for op in OPERATIONS}
        self._claims = {(op, r): metrics.claims.labels(d, op, r) for op in OPERATIONS for r in RESULTS}

    def prepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, ClaimOutcome]:
        if not claims:
            return self.inner.prepare_claims(claims)
        out = self._timed("prepare", lambda: self.inner.prepare_claims(claims))
        self._count("prepare", [o.error for o in out.values()])
        return out

    def unprepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        if not claims:
            return self.inner.unprepare_claims(claims)
        out = self._timed("unprepare", lambda: self.inner.unprepare_claims(claims))
        self._count("unprepare", list(out.values()))
        return out

    def _timed(self, op: str, call: Callable[[], _T]) -> _T:
        self._requests[op].inc()
        t0 = time.perf_counter()
        try:
            return call()
        except BaseException:
            self.metrics.error("internal")
            raise
        finally:
            self._duration[op].observe(time.perf_counter() - t0)

    def _count(self, op: str, errors: Sequence[str]) -> None:
        failed = sum(1 for e in errors if e)
        if failed:
            self._claims[(op, "error")].inc(failed)
            self.metrics.errors.labels(self.metrics.driver, op).inc(failed)
        if len(errors) - failed:
            self._claims[(op, "success")].inc(len(errors) - failed)


Check = Callable[[], str]
"""A health check: "" when fine, else what is wrong (sent in the 503 body)."""


class HealthServer:
    """HTTP on `address:port`: ``/healthz`` (liveness), ``/readyz`` (readiness), ``/metrics``.

    Port 0 picks a free port (see `port` after `start`). The port may be reachable from tenants'
    pods, so a connection costs the daemon a socket and no thread: one event loop reads each
    request (its head within `request_timeout` seconds, at most 8 KiB), then runs the route on a
    small pool (`workers`; probes on a pool of their own, so a slow ``/metrics`` never delays
    ``/healthz``) and writes the answer within the same timeout. Past `max_connections` the
    oldest connection still sending its request is dropped, so idle connections cannot lock the
    probes out. Each check runs per request; keep them fast.
    """

    def __init__(self, metrics: Metrics, liveness: Check, readiness: Check, port: int, address: str = "0.0.0.0",
                 *, request_timeout: float = 5.0, max_connections: int = 256, workers: int = 2) -> None:
        self._routes: dict[str, tuple[Callable[[], tuple[int, str, bytes]], bool]] = {
            "/healthz": (lambda: _probe(liveness), True),
            "/readyz": (lambda: _probe(readiness), True),
            "/metrics": (lambda: (200, CONTENT_TYPE_LATEST, metrics.exposition()), False),
        }
        self.request_timeout = request_timeout
        self.max_connections = max_connections
        self._probes = ThreadPoolExecutor(max_workers=2, thread_name_prefix="dra-http-probe")
        self._work = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dra-http")
        self._reading: dict[asyncio.StreamWriter, None] = {}  # insertion order: oldest first
        self._open = 0
        self._loop = asyncio.new_event_loop()
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((address, port))
            self._sock.listen(128)
        except OSError:
            self._sock.close()
            self._loop.close()
            raise
        self._sock.setblocking(False)
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    def start(self) -> None:
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._serve, sock=self._sock, limit=MAX_REQUEST_HEAD))
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="dra-http", daemon=True)
        self._thread.start()
        ready.wait(10)

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for w in list(self._reading):
                w.close()

        if self._thread is not None and self._loop.is_running():
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
        self._sock.close()
        self._probes.shutdown(wait=False, cancel_futures=True)
        self._work.shutdown(wait=False, cancel_futures=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open += 1
        if self._open > self.max_connections and self._reading:
            oldest = next(iter(self._reading))  # its own coroutine ends and counts it out
            self._reading.pop(oldest)
            oldest.transport.abort()
        self._reading[writer] = None
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.request_timeout)
            except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                return
            finally:
                self._reading.pop(writer, None)
            status, ctype, body = await self._answer(head)
            writer.write(b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                         % (status, _REASONS.get(status, "").encode(), ctype.encode(), len(body)) + body)
            await asyncio.wait_for(writer.drain(), self.request_timeout)
        except (TimeoutError, ConnectionError):
            pass
        finally:
            self._open -= 1
            writer.close()

    async def _answer(self, head: bytes) -> tuple[int, str, bytes]:
        method, _, rest = head.partition(b" ")
        path = rest.split(b" ", 1)[0].split(b"?", 1)[0].decode("latin-1")
        if method not in (b"GET", b"HEAD"):
            return 405, "text/plain; charset=utf-8", b"only GET\n"
        route = self._routes.get(path)
        if route is None:
            return 404, "text/plain; charset=utf-8", b"not found: try /healthz, /readyz, /metrics\n"
        call, probe = route
        try:
            fut = self._loop.run_in_executor(self._probes if probe else self._work, call)
            return await asyncio.wait_for(fut, self.request_timeout)
        except TimeoutError:
            return 503, "text/plain; charset=utf-8", f"{path} took longer than {self.request_timeout:g} s\n".encode()
        except Exception as exc:  # a failing check is an unhealthy answer, not a dead server
            return 500, "text/plain; charset=utf-8", f"check failed: {exc!r}\n".encode()


MAX_REQUEST_HEAD = 8 << 10
_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 500: "Internal Server Error",
            503: "Service Unavailable"}


def _probe(check: Check) -> tuple[int, str, bytes]:
    problem = check()
    if problem:
        return 503, "text/plain; charset=utf-8", f"{problem}\n".encode()
    return 200, "text/plain; charset=utf-8", b"ok\n"
