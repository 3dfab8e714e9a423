"""Prometheus metrics of the webhook, served at /metrics on the health port.

Series, each created at start with value zero:
- ``dra_webhook_admissions_total{endpoint, verdict}``: AdmissionReviews answered; verdict
  ``converted`` (a pod got claims), ``passed`` (allowed as it came), ``refused``, ``error``
  (the webhook failed: the API server applies the failure policy).
- ``dra_webhook_admission_duration_seconds{endpoint}``: time to answer, histogram.
- ``dra_webhook_connections_total``: TLS connections accepted (the API server keeps them open,
  so this grows far slower than admissions when all is well).
- ``dra_webhook_connections_refused_total``: connections closed at once because every worker
  thread and backlog slot was taken.
- ``dra_webhook_inventory_devices{driver}``: devices of the driver's published slices the
  webhook knows (from its slice watch), once `track_inventory` is given the inventory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

ENDPOINTS = ("mutate", "validate")
VERDICTS = ("converted", "passed", "refused", "error")
# The API server gives a webhook timeoutSeconds (10 s here); answers normally take milliseconds.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class WebhookMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.admissions = Counter("dra_webhook_admissions", "AdmissionReviews answered",
                                  ["endpoint", "verdict"], registry=self.registry)
        self.duration = Histogram("dra_webhook_admission_duration_seconds", "Time to answer an AdmissionReview",
                                  ["endpoint"], buckets=BUCKETS, registry=self.registry)
        self.connections = Counter("dra_webhook_connections", "TLS connections accepted", registry=self.registry)
        self.refused = Counter("dra_webhook_connections_refused", "Connections closed: no worker or backlog slot free",
                               registry=self.registry)
        for e in ENDPOINTS:
            self.duration.labels(e)
            for v in VERDICTS:
                self.admissions.labels(e, v)

    def observe(self, endpoint: str, seconds: float, answer: Mapping[str, Any] | None) -> None:
        name = endpoint.strip("/")
        if answer is None:
            verdict = "error"
        else:
            resp = answer.get("response") or {}
            verdict = "refused" if not resp.get("allowed") else ("converted" if resp.get("patch") else "passed")
        self.admissions.labels(name, verdict).inc()
        self.duration.labels(name).observe(seconds)

    def track_inventory(self, device_counts: Callable[[], Mapping[str, int]]) -> None:
        self.registry.register(_InventoryCollector(device_counts))

    def render(self) -> bytes:
        return bytes(generate_latest(self.registry))


class _InventoryCollector(Collector):
    """Read at scrape time: the inventory is the truth, the metric only shows it."""

    def __init__(self, device_counts: Callable[[], Mapping[str, int]]) -> None:
        self._counts = device_counts

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("dra_webhook_inventory_devices", "Devices of published slices the webhook knows",
                                   labels=["driver"])
        for driver, n in sorted(self._counts().items()):
            family.add_metric([driver], n)
        yield family
