"""Per-claim quota and usage on the daemon's /metrics, read from the claims' hook ledgers.

Every enforced claim has a ledger (``<state-dir>/hooks/<claim-uid>/ledger``) that the hook
library in its containers updates: per visible device the quota, the memory its processes hold
now and at most, and how many live processes use it. At each scrape this collector opens every
prepared claim's ledger read-only (hookcore's reader: it never modifies a ledger or takes a
process slot) and reports:

- ``dra_claim_memory_limit_bytes``: the claim's memory quota on the device (absent: no quota);
- ``dra_claim_memory_used_bytes``: memory the claim's live processes hold now;
- ``dra_claim_memory_peak_bytes``: the highest claim-wide usage admitted so far;
- ``dra_claim_compute_limit_percent``: the claim's compute share (100: no compute limit);
- ``dra_claim_processes``: processes of the claim using the device;
- ``dra_claim_compute_seconds_total``: device time the compute limiter charged the claim (its
  rate over a window is the share the claim got: 0.3 = 30% of the device);
- ``dra_claim_compute_throttled_seconds_total``: time the claim's threads waited for their share;
- ``dra_claim_compute_throttles_total``: how many times they waited (seconds waited per wait: how
  long a throttled thread sleeps);
- ``dra_ledger_read_errors_total``: ledgers that could not be read (the log says which and why).

Labels: ``driver``, ``namespace``, ``claim``, ``claim_uid``, ``index`` (the device as the
claim's containers number it), ``uuid`` (the physical device) and ``device`` (the published
device with that ``uuid`` attribute, when there is one). Reading at scrape time is never stale.

The ledger is writable by the claim's containers, so it is read as hostile input
(``hookcore.read_ledger``): never through a symlink, never blocking on a FIFO, never mapped (a
private copy, so a file truncated meanwhile cannot kill the daemon with SIGBUS), with the GIL
released and a per-ledger deadline (``read_timeout``, 1 s); a ledger that fails any of these is
skipped for that scrape and counted in ``dra_ledger_read_errors_total``. The limits shown come
from the claim's ``config`` (written by the daemon, read-only in the container) when it is there,
not from the ledger's copy of them, which the tenant can rewrite.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

LABELS = ("driver", "namespace", "claim", "claim_uid", "index", "uuid", "device")
LEDGER = "ledger"
CONFIG = "config"


class ClaimName(Protocol):
    """What the collector needs of a prepared claim (`dra._runtime.checkpoint.ClaimRecord` has it)."""

    @property
    def uid(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...


class LedgerCollector(Collector):
    """Collects the ledgers of `claims()` under `hooks_root` at every scrape."""

    def __init__(
        self,
        driver: str,
        hooks_root: Path,
        claims: Callable[[], Iterable[ClaimName]],
        device_names: Callable[[], Mapping[str, str]] | None = None,
        read_timeout: float = 1.0,
    ) -> None:
        """`device_names`: physical device UUID -> published device name (may be empty);
        `read_timeout`: seconds one ledger may take before it is skipped and counted as an error."""
        self.driver = driver
        self.read_timeout = read_timeout
        self.hooks_root = Path(hooks_root)
        self._claims = claims
        self._device_names = device_names
        self.read_errors = 0
        self._names: dict[str, str] = {}
        self._reported: set[str] = set()  # ledgers whose error was logged (once each)

    def describe(self) -> Iterable[Any]:
        return list(self._families())  # the same names, help and labels, without samples

    def _families(self) -> tuple[GaugeMetricFamily, ...]:
        return (
            GaugeMetricFamily("dra_claim_memory_limit_bytes", "Memory quota of the claim on the device.", labels=LABELS),
            GaugeMetricFamily("dra_claim_memory_used_bytes", "Memory the claim's processes hold on the device.", labels=LABELS),
            GaugeMetricFamily("dra_claim_memory_peak_bytes", "Highest memory the claim held on the device.", labels=LABELS),
            GaugeMetricFamily("dra_claim_compute_limit_percent", "Compute share of the claim on the device (100: none).",
                              labels=LABELS),
            GaugeMetricFamily("dra_claim_processes", "Live processes of the claim using the device.", labels=LABELS),
        )

    def collect(self) -> Iterator[Any]:
        limit, used, peak, compute, procs = families = self._families()
        try:
            names = dict(self._device_names()) if self._device_names else {}
        except Exception:
            log.exception("device names for ledger metrics")
            names = {}
        self._names = names
        claims_seen = []
        for claim in self._claims():
            devices, live, limiters = self._read(claim)
            claims_seen.append((claim, devices, limiters))
            for dev in devices:
                labels = [self.driver, claim.namespace, claim.name, claim.uid, str(dev.index), dev.uuid or "",
                          names.get(dev.uuid or "", "")]
                if dev.memory_limit is not None:
                    limit.add_metric(labels, dev.memory_limit)
                holding = [p.used.get(dev.index, 0) for p in live]
                used.add_metric(labels, sum(holding))
                peak.add_metric(labels, dev.peak)
                compute.add_metric(labels, dev.sm_limit)
                procs.add_metric(labels, sum(1 for h in holding if h))
        yield from families
        yield from self._compute(claims_seen)
        errors = CounterMetricFamily("dra_ledger_read_errors", "Claim ledgers that could not be read.", labels=["driver"])
        errors.add_metric([self.driver], self.read_errors)
        yield errors

    def _compute(self, claims: list[tuple[ClaimName, list[Any], dict[int, Any]]]) -> Iterator[Any]:
        """The limiter's counters of the devices whose compute limit a process has set up."""
        charged = CounterMetricFamily("dra_claim_compute_seconds", "Device time charged to the claim by the compute limiter.",
                                      labels=LABELS)
        waited = CounterMetricFamily("dra_claim_compute_throttled_seconds",
                                     "Time the claim's threads waited for their compute share.", labels=LABELS)
        waits = CounterMetricFamily("dra_claim_compute_throttles",
                                    "How many times the claim's threads waited for their compute share.", labels=LABELS)
        names = self._names
        for claim, devices, usage in claims:
            for dev in devices:
                u = usage.get(dev.index)
                if u is None or not u.active:
                    continue
                labels = [self.driver, claim.namespace, claim.name, claim.uid, str(dev.index), dev.uuid or "",
                          names.get(dev.uuid or "", "")]
                charged.add_metric(labels, u.charged_ns / 1e9)
                waited.add_metric(labels, u.throttled_ns / 1e9)
                waits.add_metric(labels, u.throttles)
        yield charged
        yield waited
        yield waits

    def _read(self, claim: ClaimName) -> tuple[list[Any], list[Any], dict[int, Any]]:
        """The claim's devices, its live processes and its devices' limiter usage. Memory of a
        process that died is counted by the ledger until the claim's next process reclaims it;
        this reader cannot reclaim (it never writes), so it sums the live processes itself."""
        path = self.hooks_root / claim.uid / LEDGER
        try:
            os.lstat(path)  # lstat: a symlink named ledger is read (and refused) below, not followed
        except FileNotFoundError:
            return [], [], {}  # not enforced (or not prepared yet)
        except OSError:
            pass  # the reader reports it
        import hookcore

        try:
            snap = hookcore.read_ledger(path, timeout=self.read_timeout)
            return self._trusted_limits(claim, snap.devices), snap.processes, snap.limiters
        except (OSError, ValueError) as exc:  # hookcore.LedgerError and LedgerTimeout are OSErrors
            self.read_errors += 1
            if str(path) not in self._reported:
                self._reported.add(str(path))
                log.warning("claim ledger unreadable", extra={"claim": claim.uid, "path": str(path), "error": str(exc)})
            return [], [], {}


    def _trusted_limits(self, claim: ClaimName, devices: list[Any]) -> list[Any]:
        """The devices with their limits from the claim's config file (the daemon's own, read-only
        in the container) instead of the ledger's copy, which the claim's processes can rewrite."""
        config = self.hooks_root / claim.uid / CONFIG
        try:
            fd = os.open(config, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return devices
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return devices
            text = os.read(fd, 65537).decode("utf-8", "replace")
        finally:
            os.close(fd)
        import hookcore

        try:
            quotas = {q.index: q for q in hookcore.parse_config({}, file_text=text, file_path=str(config)).devices}
        except (ValueError, OSError):
            return devices
        out = []
        for d in devices:
            q = quotas.get(d.index)
            out.append(dataclasses.replace(d, memory_limit=q.memory, sm_limit=q.cores) if q else d)
        return out


def device_names_by_hook_key(records: Iterable[Any], driver: str) -> dict[str, str]:
    """Prepared devices' names by the key the claims' hooks name them by (the daemon's checkpoint
    records: where that is not the device's UUID, a PCI bus ID or a physical ID, no published
    attribute says it)."""
    out = {}
    for record in records:
        for d in record.devices:
            key = d.hook_key() if d.driver == driver else None
            if key:
                out[key] = d.device
    return out


def device_names_by_uuid(devices: Iterable[Any]) -> dict[str, str]:
    """Published devices' names by their ``uuid`` attribute (devices without one are left out)."""
    out = {}
    for d in devices:
        uuid = d.attributes.get("uuid")
        if isinstance(uuid, str):
            out[uuid] = d.name
    return out
