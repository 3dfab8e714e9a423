"""One snapshot of what `dra top` shows, joined from ResourceSlices, ResourceClaims and the daemons'
samples: per node its devices, per device the claims on it (one row per claim and device, its
requests summed) with the pods using them, what each asked for and what it uses, and the
watchdog's word. Pure: the API objects and scrapes come in (with the monotonic time of each
scrape, from which the compute a claim used is a rate), nothing is read here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dra._runtime.top import metrics as m

CORES, MEMORY = "cores", "memory"  # the capacities the drivers publish (memory in bytes, cores in percent)


@dataclasses.dataclass(frozen=True)
class Scrape:
    """One read of one daemon's /metrics: its samples, or why there are none."""

    node: str
    url: str
    at: float  # monotonic seconds
    samples: tuple[m.Sample, ...] = ()
    error: str | None = None


@dataclasses.dataclass
class Share:
    """One claim on one device (its requests on that device together)."""

    namespace: str
    name: str
    uid: str
    driver: str
    device: str
    node: str
    requests: list[str]
    pods: list[str]
    requested_memory: int | None
    requested_cores: int | None
    used_memory: int | None = None
    peak_memory: int | None = None
    limit_memory: int | None = None
    limit_cores: float | None = None
    used_cores: float | None = None  # percent of the device, over the last interval
    processes: int | None = None
    over_quota_bytes: float | None = None
    over_share_percent: float | None = None

    def json(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name, "uid": self.uid, "driver": self.driver,
                "device": self.device, "node": self.node, "requests": self.requests, "pods": self.pods,
                "requested": {"memory": self.requested_memory, "cores": self.requested_cores},
                "used": {"memory": self.used_memory, "memory_peak": self.peak_memory, "cores": self.used_cores,
                         "processes": self.processes},
                "limit": {"memory": self.limit_memory, "cores": self.limit_cores},
                "watchdog": {"memory_over_quota_bytes": self.over_quota_bytes,
                             "compute_over_share_percent": self.over_share_percent}}


@dataclasses.dataclass
class Device:
    driver: str
    name: str
    node: str
    attributes: dict[str, Any]
    memory: int | None  # capacity
    cores: int | None
    shares: list[Share] = dataclasses.field(default_factory=list)
    processes: int | None = None
    unheld: int | None = None
    unverified: int | None = None

    @property
    def requested_memory(self) -> int:
        return sum(s.requested_memory or 0 for s in self.shares)

    @property
    def requested_cores(self) -> int:
        return sum(s.requested_cores or 0 for s in self.shares)

    @property
    def used_memory(self) -> int | None:
        known = [s.used_memory for s in self.shares if s.used_memory is not None]
        return sum(known) if known else None

    @property
    def used_cores(self) -> float | None:
        known = [s.used_cores for s in self.shares if s.used_cores is not None]
        return sum(known) if known else None

    def json(self) -> dict[str, Any]:
        return {"driver": self.driver, "name": self.name, "attributes": self.attributes,
                "capacity": {"memory": self.memory, "cores": self.cores},
                "requested": {"memory": self.requested_memory, "cores": self.requested_cores},
                "used": {"memory": self.used_memory, "cores": self.used_cores},
                "watchdog": {"processes": self.processes, "unheld": self.unheld, "unverified": self.unverified},
                "claims": [s.json() for s in self.shares]}


@dataclasses.dataclass
class Node:
    name: str
    devices: list[Device] = dataclasses.field(default_factory=list)
    endpoints: list[tuple[str, str | None]] = dataclasses.field(default_factory=list)  # (url, error)
    verdicts: dict[str, int] = dataclasses.field(default_factory=dict)  # the watchdog's, since its daemons started

    def json(self) -> dict[str, Any]:
        return {"name": self.name,
                "metrics": [{"url": u, "error": e} for u, e in self.endpoints],
                "watchdog": {"verdicts": self.verdicts},
                "devices": [d.json() for d in self.devices]}


@dataclasses.dataclass
class Snapshot:
    nodes: list[Node]
    pending: list[dict[str, str]]  # claims not allocated: namespace, name, uid
    interval: float | None  # seconds between the two scrapes the compute rates come from

    @property
    def shares(self) -> list[Share]:
        return [s for n in self.nodes for d in n.devices for s in d.shares]

    def json(self) -> dict[str, Any]:
        return {"interval_seconds": self.interval, "nodes": [n.json() for n in self.nodes],
                "claims": [s.json() for s in self.shares], "pending": self.pending}


def quantity(value: Any) -> int | None:
    """A capacity or consumed quantity ({"value": "80Gi"} or "80Gi") in base units; None if not one."""
    from dra._runtime.client import quantity_to_int

    raw = value.get("value") if isinstance(value, Mapping) else value
    if raw is None:
        return None
    try:
        return quantity_to_int(str(raw))
    except (ValueError, TypeError, ArithmeticError):
        return None


def _attributes(device: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in (device.get("attributes") or {}).items():
        if isinstance(v, Mapping) and v:
            out[k] = next(iter(v.values()))
    return out


def build(slices: Iterable[Mapping[str, Any]], claims: Iterable[Mapping[str, Any]], scrapes: Sequence[Scrape],
          previous: Mapping[tuple[str, str], Scrape] | None = None, node: str | None = None) -> Snapshot:
    """The snapshot; `previous`: the scrape before each (node, url), for compute rates; `node`: only that node."""
    nodes: dict[str, Node] = {}
    devices: dict[tuple[str, str, str], Device] = {}  # (driver, pool, device)
    by_name: dict[tuple[str, str, str], Device] = {}  # (node, driver, device name)
    for sl in slices:
        spec = sl.get("spec") or {}
        where = spec.get("nodeName")
        if not where or (node and where != node):
            continue
        pool = (spec.get("pool") or {}).get("name", where)
        for d in spec.get("devices") or []:
            cap = d.get("capacity") or {}
            dev = Device(spec.get("driver", ""), d.get("name", ""), where, _attributes(d), quantity(cap.get(MEMORY)),
                         quantity(cap.get(CORES)))
            devices[(dev.driver, pool, dev.name)] = dev
            by_name[(where, dev.driver, dev.name)] = dev
            nodes.setdefault(where, Node(where)).devices.append(dev)
    pending = []
    ordered: dict[tuple[str, str, str], list[Share]] = {}  # (claim uid, driver, node) -> its shares in allocation order
    for c in claims:
        meta, status = c.get("metadata") or {}, c.get("status") or {}
        ident = {"namespace": meta.get("namespace", ""), "name": meta.get("name", ""), "uid": meta.get("uid", "")}
        alloc = status.get("allocation")
        if not alloc:
            if node is None:
                pending.append(ident)
            continue
        pods = [f"{ident['namespace']}/{r.get('name')}" for r in status.get("reservedFor") or [] if r.get("resource") == "pods"]
        mine: dict[tuple[str, str], Share] = {}
        for r in (alloc.get("devices") or {}).get("results") or []:
            found = devices.get((r.get("driver", ""), r.get("pool", ""), r.get("device", "")))
            if found is None:  # a device no listed slice has (another node, or the slice went)
                continue
            dev = found
            consumed = r.get("consumedCapacity") or {}
            memory = quantity(consumed[MEMORY]) if MEMORY in consumed else dev.memory  # a whole device: all of it
            cores = quantity(consumed[CORES]) if CORES in consumed else dev.cores
            key = (dev.driver, dev.name)
            share = mine.get(key)
            if share is None:
                share = mine[key] = Share(ident["namespace"], ident["name"], ident["uid"], dev.driver, dev.name, dev.node,
                                          [], pods, memory, cores)
                dev.shares.append(share)
                ordered.setdefault((ident["uid"], dev.driver, dev.node), []).append(share)
            else:
                share.requested_memory = _add(share.requested_memory, memory)
                share.requested_cores = _add(share.requested_cores, cores)
            share.requests.append(str(r.get("request", "")))
    before = previous or {}
    for scrape in scrapes:
        if node and scrape.node != node:
            continue
        n = nodes.setdefault(scrape.node, Node(scrape.node))
        n.endpoints.append((scrape.url, scrape.error))
        if scrape.error is None:
            _apply(n, scrape, before.get((scrape.node, scrape.url)), by_name, ordered)
    intervals = [s.at - p.at for s in scrapes if (p := before.get((s.node, s.url))) is not None and s.at > p.at]
    for n in nodes.values():
        n.devices.sort(key=lambda d: (d.driver, _natural(d.name)))
        for d in n.devices:
            d.shares.sort(key=lambda s: (s.namespace, s.name))
    return Snapshot(sorted(nodes.values(), key=lambda n: n.name), pending, max(intervals) if intervals else None)


def _add(a: int | None, b: int | None) -> int | None:
    return None if a is None and b is None else (a or 0) + (b or 0)


def _natural(name: str) -> tuple[Any, ...]:
    """hami-gpu-2 before hami-gpu-10."""
    import re

    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _share_of(s: m.Sample, node: str, by_name: Mapping[tuple[str, str, str], Device],
              ordered: Mapping[tuple[str, str, str], list[Share]]) -> Share | None:
    """The share a ledger sample is about: its claim on the device its `device` label names, else
    the claim's `index`-th device of this driver on this node (the hook numbers them so)."""
    uid, driver = s.labels.get("claim_uid", ""), s.labels.get("driver", "")
    named = by_name.get((node, driver, s.labels.get("device", "")))
    if named is not None:
        return next((sh for sh in named.shares if sh.uid == uid), None)
    shares = ordered.get((uid, driver, node)) or []
    try:
        index = int(s.labels.get("index", ""))
    except ValueError:
        return None
    return shares[index] if 0 <= index < len(shares) else None


def _apply(n: Node, scrape: Scrape, before: Scrape | None, by_name: Mapping[tuple[str, str, str], Device],
           ordered: Mapping[tuple[str, str, str], list[Share]]) -> None:
    samples = scrape.samples
    for name, field in ((m.CLAIM_MEMORY_USED, "used_memory"), (m.CLAIM_MEMORY_PEAK, "peak_memory"),
                        (m.CLAIM_MEMORY_LIMIT, "limit_memory"), (m.CLAIM_PROCESSES, "processes")):
        for s in m.by_name(samples, name):
            if (sh := _share_of(s, n.name, by_name, ordered)) is not None:
                setattr(sh, field, (getattr(sh, field) or 0) + int(s.value))  # two ledger devices of one share: summed
    for s in m.by_name(samples, m.CLAIM_COMPUTE_LIMIT):
        if (sh := _share_of(s, n.name, by_name, ordered)) is not None:
            sh.limit_cores = s.value
    if before is not None and before.error is None and scrape.at > before.at:
        then = {_key(s): s.value for s in m.by_name(before.samples, m.CLAIM_COMPUTE_SECONDS)}
        for s in m.by_name(samples, m.CLAIM_COMPUTE_SECONDS):
            sh = _share_of(s, n.name, by_name, ordered)
            was = then.get(_key(s))
            if sh is None or was is None or s.value < was:  # new, or the counter restarted with the daemon
                continue
            sh.used_cores = (sh.used_cores or 0.0) + 100.0 * (s.value - was) / (scrape.at - before.at)
    for name, field in ((m.CLAIM_OVER_QUOTA, "over_quota_bytes"), (m.CLAIM_OVER_SHARE, "over_share_percent")):
        for s in m.by_name(samples, name):
            on = by_name.get((n.name, s.labels.get("driver", ""), s.labels.get("device", "")))
            sh = next((x for x in on.shares if x.uid == s.labels.get("claim_uid")), None) if on else None
            if sh is not None:
                setattr(sh, field, s.value)
    for name, field in ((m.DEVICE_PROCESSES, "processes"), (m.DEVICE_UNHELD, "unheld"), (m.DEVICE_UNVERIFIED, "unverified")):
        for s in m.by_name(samples, name):
            dev = by_name.get((n.name, s.labels.get("driver", ""), s.labels.get("device", "")))
            if dev is not None:
                setattr(dev, field, int(s.value))
    for s in m.by_name(samples, m.VERDICTS):
        verdict = s.labels.get("verdict", "")
        n.verdicts[verdict] = n.verdicts.get(verdict, 0) + int(s.value)


def _key(s: m.Sample) -> tuple[str, ...]:
    return tuple(s.labels.get(k, "") for k in ("driver", "claim_uid", "index", "uuid"))
