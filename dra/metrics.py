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
"""

from __future__ import annotations

import http.server
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from dra.driver import ClaimRef
from dra.kubelet.handler import ClaimHandler, ClaimOutcome

log = logging.getLogger("dra.metrics")
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

    Port 0 picks a free port (see `port` after `start`). Each check runs per request, in the
    server's thread; keep them fast.
    """

    def __init__(self, metrics: Metrics, liveness: Check, readiness: Check, port: int, address: str = "0.0.0.0") -> None:
        routes: dict[str, Callable[[], tuple[int, str, bytes]]] = {
            "/healthz": lambda: _probe(liveness),
            "/readyz": lambda: _probe(readiness),
            "/metrics": lambda: (200, CONTENT_TYPE_LATEST, metrics.exposition()),
        }

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                route = routes.get(self.path.split("?", 1)[0])
                if route is None:
                    status, ctype, body = 404, "text/plain; charset=utf-8", b"not found: try /healthz, /readyz, /metrics\n"
                else:
                    try:
                        status, ctype, body = route()
                    except Exception as exc:  # a failing check is an unhealthy answer, not a dead server
                        status, ctype, body = 500, "text/plain; charset=utf-8", f"check failed: {exc!r}\n".encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # probes every few seconds: keep quiet
                log.debug("%s " + format, self.address_string(), *args)

        self._server = http.server.ThreadingHTTPServer((address, port), Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, name="dra-http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)


def _probe(check: Check) -> tuple[int, str, bytes]:
    problem = check()
    if problem:
        return 503, "text/plain; charset=utf-8", f"{problem}\n".encode()
    return 200, "text/plain; charset=utf-8", b"ok\n"
