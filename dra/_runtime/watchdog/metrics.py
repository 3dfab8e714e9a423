"""The watchdog's Prometheus series: verdicts and actions counted, each device's processes and each
claim's excess as gauges, the poll's duration."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from dra._runtime.watchdog.model import ACTIONS, VERDICTS, ClaimView
from dra._runtime.watchdog.verdicts import Judgement

CLAIM_LABELS = ["driver", "namespace", "claim", "claim_uid", "device"]


class WatchdogMetrics:
    """The series of one driver's watchdog in `registry`."""

    def __init__(self, driver: str, registry: CollectorRegistry) -> None:
        self.driver = driver
        d = driver
        self.verdicts = Counter("dra_watchdog_verdicts", "Watchdog verdicts given.", ["driver", "verdict"],
                                registry=registry)
        self.actions = Counter("dra_watchdog_actions", "Watchdog actions taken.", ["driver", "action", "result"],
                               registry=registry)
        self.unheld = Gauge("dra_device_processes_unheld", "Processes on the device that no claim's hook holds.",
                            ["driver", "device"], registry=registry)
        self.processes = Gauge("dra_device_processes", "Processes on the device.", ["driver", "device"],
                               registry=registry)
        self.unverified = Gauge("dra_device_processes_unverified",
                                "Processes on the device only their claim's ledger says are held (no maps).",
                                ["driver", "device"], registry=registry)
        self.over_quota = Gauge("dra_claim_memory_over_quota_bytes",
                                "Device memory of the claim beyond its quota plus the per-process tolerance.",
                                CLAIM_LABELS, registry=registry)
        self.over_share = Gauge("dra_claim_compute_over_share_percent",
                                "Compute of the claim beyond its share plus the tolerance, over the window.",
                                CLAIM_LABELS, registry=registry)
        self.poll = Gauge("dra_watchdog_poll_seconds", "Duration of the last watchdog poll.", ["driver"],
                          registry=registry)
        for v in VERDICTS:
            self.verdicts.labels(d, v)
        for a in ACTIONS:
            for r in ("done", "refused", "failed"):
                self.actions.labels(d, a, r)
        self.poll.labels(d).set(0)
        self._judged: dict[Gauge, set[tuple[str, ...]]] = {self.over_quota: set(), self.over_share: set()}
        """Per gauge, the label sets it has a series for (set at 0 once not judged, removed by `forget`)."""

    def action(self, action: str, result: str) -> None:
        """One action taken: ``done``, ``refused`` or ``failed``."""
        self.actions.labels(self.driver, action, result).inc()

    def observe(self, judgement: Judgement) -> None:
        """The gauges as one poll left them."""
        d = self.driver
        for dev, counts in judgement.devices.items():
            self.unheld.labels(d, dev).set(counts.unheld)
            self.unverified.labels(d, dev).set(counts.unverified)
            self.processes.labels(d, dev).set(counts.processes)
        judged: dict[Gauge, set[tuple[str, ...]]] = {self.over_quota: set(), self.over_share: set()}
        for load in judgement.loads:
            c = load.claim
            labels: tuple[str, ...] = (d, c.namespace, c.name, c.uid, load.device)
            if load.over_quota is not None:
                self.over_quota.labels(*labels).set(load.over_quota)
                judged[self.over_quota].add(labels)
            if load.over_share is not None:
                self.over_share.labels(*labels).set(load.over_share)
                judged[self.over_share].add(labels)
        # A claim whose processes left the device (exited, killed) is over by nothing now: its
        # series reads 0 (not its last excess, which would keep an alert firing) until the claim ends.
        for gauge, now in judged.items():
            for labels in self._judged[gauge] - now:
                gauge.labels(*labels).set(0)
            self._judged[gauge] |= now

    def forget(self, claim: ClaimView) -> None:
        """An ended claim's series go with it."""
        for dev in claim.devices:
            for gauge in (self.over_quota, self.over_share):
                labels: tuple[str, ...] = (self.driver, claim.namespace, claim.name, claim.uid, dev)
                self._judged[gauge].discard(labels)
                try:
                    gauge.remove(*labels)
                except KeyError:
                    pass
