"""Desired ResourceSlices: the driver's devices as resource.k8s.io/v1 objects, before any API call.

Pure functions, no I/O. One pool per node, named after the node. Devices are sorted by name
(digits compared as numbers, so ``gpu-2`` precedes ``gpu-10``) and cut into slices of at most
128 devices, or 64 when any device of the pool carries taints (the API's limit for slices that
use advanced features), or of one device each where the scheduler needs it (`layout`). The
same devices always give the same slices, which is what lets the sync loop make no API write
when nothing changed.

Devices that draw on shared counters (partitionable devices) are published in one slice per
counter set, with that set in the slice's `sharedCounters` (Kubernetes 1.34, where a device's
counter set must be in its slice); with `separate_counters` (1.35 and later, where a slice holds
devices or counter sets, not both) the sets come first, at most 8 per slice, then the devices.

Every device is validated here, before it can reach the API server, so that a bad device is
reported by name with what was expected rather than as a rejected slice.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from dra._runtime.client import quantity_decimal
from dra._runtime.publish.layout import SliceLayout
from dra.driver import Capacity, CounterSet, Device, Version
from dra.errors import DRAError

API_VERSION = "resource.k8s.io/v1"
MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_PER_SLICE_ADVANCED = 64
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_STRING_LENGTH = 64
MAX_VALID_VALUES = 10
MAX_TAINTS_PER_DEVICE = 4  # 1.34; 1.35 raised it to 16
MAX_COUNTERS_PER_SLICE = 32  # 1.34: all counters of all sets of one slice (1.35+: of one set)
MAX_COUNTER_SETS_PER_SLICE = 8  # 1.35+
TAINT_EFFECTS = ("NoSchedule", "NoExecute", "None")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")
_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-((0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(\+([0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*))?$"
)


class DeviceValidationError(DRAError):
    """A device the API server would reject; the message names the device and the rule."""


@dataclasses.dataclass(frozen=True)
class DesiredPool:
    """The slices one node should have: `slices[i]` is the device list of slice i (API JSON)."""

    driver: str
    node_name: str
    slices: tuple[tuple[dict[str, Any], ...], ...]
    layout: SliceLayout = SliceLayout.PACKED
    separate_counters: bool = False
    counters: tuple[tuple[dict[str, Any], ...], ...] = ()
    """Per slice, its `sharedCounters` (API JSON); shorter than `slices` when the last have none."""

    def shared_counters(self, index: int) -> tuple[dict[str, Any], ...]:
        return self.counters[index] if index < len(self.counters) else ()

    @property
    def pool_name(self) -> str:
        return self.node_name

    @property
    def device_count(self) -> int:
        return sum(len(s) for s in self.slices)


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key comparing digit runs as numbers: gpu-2 < gpu-10."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.findall(r"\d+|\D+", name))


def desired_pool(driver: str, node_name: str, devices: Iterable[Device], layout: SliceLayout = SliceLayout.PACKED,
                 separate_counters: bool = False) -> DesiredPool:
    """Validate `devices` and cut them into slices as `layout` says (devices drawing on counter
    sets go in their set's slice, or after the sets with `separate_counters`); raise
    DeviceValidationError on the first bad one."""
    if not _DNS_SUBDOMAIN.match(driver) or len(driver) > 63:
        raise DeviceValidationError(f"driver name {driver!r} must be a lowercase DNS subdomain of at most 63 chars")
    if not node_name or len(node_name) > 253 or not _DNS_SUBDOMAIN.match(node_name):
        raise DeviceValidationError(f"node name {node_name!r} is not a valid pool name (a DNS subdomain)")
    ordered = sorted(devices, key=lambda d: natural_key(d.name))
    seen: set[str] = set()
    encoded = []
    for device in ordered:
        if device.name in seen:
            raise DeviceValidationError(f"device {device.name!r} is listed twice; device names must be unique")
        seen.add(device.name)
        encoded.append(encode_device(device))
    # Partitionable devices: one slice per counter set (its devices and the set).
    sets: dict[str, CounterSet] = {}
    members: dict[str, list[dict[str, Any]]] = {}
    plain = []
    for device, enc in zip(ordered, encoded, strict=True):
        if not device.consumes_counters:
            plain.append(enc)
            continue
        names = {c.counter_set.name for c in device.consumes_counters}
        if len(names) != 1:
            raise DeviceValidationError(f"device {device.name!r}: draws on counter sets {sorted(names)}; one set per"
                                        " device (it is published in that set's slice)")
        for c in device.consumes_counters:
            if sets.setdefault(c.counter_set.name, c.counter_set) != c.counter_set:
                raise DeviceValidationError(f"counter set {c.counter_set.name!r} is given with different counters by"
                                            f" device {device.name!r}")
            unknown = set(c.counters) - set(c.counter_set.counters)
            if unknown:
                raise DeviceValidationError(f"device {device.name!r}: consumes counters {sorted(unknown)} that counter"
                                            f" set {c.counter_set.name!r} does not have")
        members.setdefault(names.pop(), []).append(enc)
    advanced = any(d.taints or d.consumes_counters for d in ordered)
    size = MAX_DEVICES_PER_SLICE_ADVANCED if advanced else MAX_DEVICES_PER_SLICE
    set_names = sorted(members, key=natural_key)
    encoded_sets = [encode_counter_set(sets[n]) for n in set_names]
    if separate_counters:
        counters = [tuple(encoded_sets[i : i + MAX_COUNTER_SETS_PER_SLICE])
                    for i in range(0, len(encoded_sets), MAX_COUNTER_SETS_PER_SLICE)]
        chunks: list[tuple[dict[str, Any], ...]] = [() for _ in counters]
        drawing = [d for n in set_names for d in members[n]]
        chunks += [tuple(drawing[i : i + size]) for i in range(0, len(drawing), size)]
    else:
        chunks = [tuple(members[n]) for n in set_names]
        counters = [(c,) for c in encoded_sets]
        for n, chunk in zip(set_names, chunks, strict=True):
            if len(chunk) > size:
                raise DeviceValidationError(f"counter set {n!r}: {len(chunk)} devices draw on it; at most {size} fit"
                                            " its slice")
    # The plain (shared) devices: one per slice where the scheduler needs it (dra._runtime.publish.layout).
    plain_size = 1 if layout is SliceLayout.PER_DEVICE else size
    chunks += [tuple(plain[i : i + plain_size]) for i in range(0, len(plain), plain_size)]
    # An empty pool is still a pool: one slice without devices tells the scheduler so.
    return DesiredPool(driver=driver, node_name=node_name, slices=tuple(chunks) or ((),),
                       layout=layout, separate_counters=separate_counters, counters=tuple(counters))


def encode_counter_set(counter_set: CounterSet) -> dict[str, Any]:
    """A `CounterSet` as resource.k8s.io/v1 JSON; raises DeviceValidationError naming it."""
    if not _DNS_LABEL.match(counter_set.name):
        raise DeviceValidationError(f"counter set {counter_set.name!r}: the name must be a DNS label")
    if not counter_set.counters or len(counter_set.counters) > MAX_COUNTERS_PER_SLICE:
        raise DeviceValidationError(f"counter set {counter_set.name!r}: needs 1..{MAX_COUNTERS_PER_SLICE} counters")
    counters = {}
    for key in sorted(counter_set.counters):
        if not _DNS_LABEL.match(key):
            raise DeviceValidationError(f"counter set {counter_set.name!r}: counter {key!r} must be a DNS label")
        try:
            quantity_decimal(counter_set.counters[key])
        except (ValueError, TypeError, ArithmeticError):
            raise DeviceValidationError(f"counter set {counter_set.name!r}: counter {key!r}:"
                                        f" {counter_set.counters[key]!r} is not a quantity") from None
        counters[key] = {"value": counter_set.counters[key]}
    return {"name": counter_set.name, "counters": counters}


def encode_device(device: Device) -> dict[str, Any]:
    """One `Device` as resource.k8s.io/v1 JSON; raises DeviceValidationError naming the device."""

    def fail(what: str) -> DeviceValidationError:
        return DeviceValidationError(f"device {device.name!r}: {what}")

    if not isinstance(device.name, str) or not _DNS_LABEL.match(device.name):
        raise fail("the name must be a DNS label (lowercase letters, digits and '-', at most 63 chars)")
    total = len(device.attributes) + len(device.capacity)
    if total > MAX_ATTRIBUTES_AND_CAPACITIES:
        raise fail(
            f"has {len(device.attributes)} attributes and {len(device.capacity)} capacities;"
            f" at most {MAX_ATTRIBUTES_AND_CAPACITIES} in total are allowed"
        )
    out: dict[str, Any] = {"name": device.name}
    if device.attributes:
        attrs = {}
        for key in sorted(device.attributes):
            _check_qualified_name(key, "attribute", fail)
            attrs[key] = _encode_attribute(key, device.attributes[key], fail)
        out["attributes"] = attrs
    if device.capacity:
        caps = {}
        for key in sorted(device.capacity):
            _check_qualified_name(key, "capacity", fail)
            caps[key] = _encode_capacity(key, device.capacity[key], device.allow_multiple_allocations, fail)
        out["capacity"] = caps
    if device.allow_multiple_allocations:
        out["allowMultipleAllocations"] = True
    if device.taints:
        if len(device.taints) > MAX_TAINTS_PER_DEVICE:
            raise fail(f"has {len(device.taints)} taints; at most {MAX_TAINTS_PER_DEVICE} are allowed")
        taints = []
        for taint in device.taints:
            if taint.effect not in TAINT_EFFECTS:
                raise fail(f"taint {taint.key!r} has effect {taint.effect!r}; expected one of {TAINT_EFFECTS}")
            entry = {"key": taint.key, "effect": taint.effect}
            if taint.value:
                entry["value"] = taint.value
            taints.append(entry)
        out["taints"] = taints
    if device.consumes_counters and device.allow_multiple_allocations:
        # kube-scheduler mishandles the pair: before 1.35 a second share of the device is refused
        # for its counters (kubernetes#134100), before 1.36 shares' counters are forgotten in later
        # cycles, so devices excluding each other are allocated together (kubernetes#139034).
        raise fail("draws on a counter set and allows multiple allocations; kube-scheduler before 1.36"
                   " mis-counts that pair (kubernetes#134100, #139034): bound a shared device by its"
                   " consumable capacity alone, or make the counter-drawing device exclusive")
    if device.consumes_counters:
        consumption = []
        for c in device.consumes_counters:
            amounts = {}
            for key in sorted(c.counters):
                try:
                    quantity_decimal(c.counters[key])
                except (ValueError, TypeError, ArithmeticError):
                    raise fail(f"consumes counter {key!r}: {c.counters[key]!r} is not a quantity") from None
                amounts[key] = {"value": c.counters[key]}
            consumption.append({"counterSet": c.counter_set.name, "counters": amounts})
        out["consumesCounters"] = consumption
    return out


def _check_qualified_name(key: str, kind: str, fail: Any) -> None:
    domain, sep, ident = key.rpartition("/")
    if sep and (not domain or len(domain) > 63 or not _DNS_SUBDOMAIN.match(domain)):
        raise fail(f"{kind} {key!r}: the prefix {domain!r} must be a DNS subdomain of at most 63 chars")
    if not _C_IDENTIFIER.match(ident):
        raise fail(f"{kind} {key!r}: the name must be a C identifier of at most 32 chars")


def _encode_attribute(key: str, value: object, fail: Any) -> dict[str, Any]:
    # bool before int: True is an int in Python, but a bool attribute in Kubernetes.
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise fail(f"attribute {key!r}: {value} does not fit in int64")
        return {"int": value}
    if isinstance(value, Version):
        if len(value.value) > MAX_STRING_LENGTH or not _SEMVER.match(value.value):
            raise fail(f"attribute {key!r}: {value.value!r} is not a semantic version (e.g. 1.2.3) of <= 64 chars")
        return {"version": value.value}
    if isinstance(value, str):
        if len(value) > MAX_STRING_LENGTH:
            raise fail(f"attribute {key!r}: the string is {len(value)} chars long; at most {MAX_STRING_LENGTH}")
        return {"string": value}
    raise fail(f"attribute {key!r}: {type(value).__name__} is not one of str, int, bool, Version")


def _quantity(key: str, what: str, value: object, fail: Any) -> Decimal:
    try:
        return quantity_decimal(value)
    except (ValueError, TypeError, ArithmeticError):
        raise fail(f"capacity {key!r}: {what} {value!r} is not a Kubernetes quantity (e.g. 100, 16Gi)") from None


def _encode_capacity(key: str, cap: Capacity, multiple: bool, fail: Any) -> dict[str, Any]:
    total = _quantity(key, "value", cap.value, fail)
    out: dict[str, Any] = {"value": cap.value}
    policy = cap.policy
    if policy is None:
        return out
    if not multiple:
        raise fail(f"capacity {key!r} has a request policy, which needs allow_multiple_allocations=True")
    ranged = policy.min is not None or policy.max is not None or policy.step is not None
    if ranged and policy.valid_values:
        raise fail(f"capacity {key!r}: give either min/max/step or valid_values, not both")
    if (ranged or policy.valid_values) and policy.default is None:
        raise fail(f"capacity {key!r}: a request policy with a range or valid values needs a default")
    encoded: dict[str, Any] = {}
    if policy.default is not None:
        if _quantity(key, "default", policy.default, fail) > total:
            raise fail(f"capacity {key!r}: default {policy.default} exceeds the value {cap.value}")
        encoded["default"] = policy.default
    if ranged:
        if policy.min is None:
            raise fail(f"capacity {key!r}: a valid range needs min")
        rng = {"min": policy.min}
        if _quantity(key, "min", policy.min, fail) > total:
            raise fail(f"capacity {key!r}: min {policy.min} exceeds the value {cap.value}")
        if policy.max is not None:
            if _quantity(key, "max", policy.max, fail) > total:
                raise fail(f"capacity {key!r}: max {policy.max} exceeds the value {cap.value}")
            rng["max"] = policy.max
        if policy.step is not None:
            _quantity(key, "step", policy.step, fail)
            rng["step"] = policy.step
        encoded["validRange"] = rng
    elif policy.valid_values:
        if len(policy.valid_values) > MAX_VALID_VALUES:
            raise fail(f"capacity {key!r}: {len(policy.valid_values)} valid values; at most {MAX_VALID_VALUES}")
        amounts = [_quantity(key, "valid value", v, fail) for v in policy.valid_values]
        if amounts != sorted(set(amounts)):
            raise fail(f"capacity {key!r}: valid values must be unique and ascending")
        if amounts[-1] > total:
            raise fail(f"capacity {key!r}: valid value {policy.valid_values[-1]} exceeds the value {cap.value}")
        if _quantity(key, "default", policy.default, fail) not in amounts:
            raise fail(f"capacity {key!r}: default {policy.default} must be one of the valid values")
        encoded["validValues"] = list(policy.valid_values)
    out["requestPolicy"] = encoded
    return out


def slice_object(pool: DesiredPool, index: int, generation: int, node_uid: str, name: str | None = None) -> dict[str, Any]:
    """The full ResourceSlice for slice `index` of `pool` (with `name` for updates, else generateName)."""
    metadata: dict[str, Any] = {
        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": pool.node_name, "uid": node_uid, "controller": True}]
    }
    if name:
        metadata["name"] = name
    else:
        metadata["generateName"] = f"{pool.node_name}-{pool.driver}-"
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": metadata,
        "spec": {
            "driver": pool.driver,
            "nodeName": pool.node_name,
            "pool": {"name": pool.pool_name, "generation": generation, "resourceSliceCount": len(pool.slices)},
            # 1.35+: a slice of counter sets has no `devices` at all (an empty list is refused too)
            **({"devices": list(pool.slices[index])} if pool.slices[index] or not pool.shared_counters(index) else {}),
            **({"sharedCounters": list(pool.shared_counters(index))} if pool.shared_counters(index) else {}),
        },
    }


def comparable_slice(devices: Sequence[Mapping[str, Any]], shared_counters: Sequence[Mapping[str, Any]] = ()
                     ) -> tuple[Any, ...]:
    """`comparable_devices` plus the slice's shared counters (quantities canonical)."""
    sets = tuple(sorted((c.get("name"), tuple(sorted((k, _q((v or {}).get("value")))
                                                      for k, v in (c.get("counters") or {}).items())))
                        for c in shared_counters))
    return (comparable_devices(devices), sets)


def comparable_devices(devices: Sequence[Mapping[str, Any]]) -> tuple[Any, ...]:
    """A canonical, hashable form of a device list, equal for what the server stores and what we send.

    The server rewrites quantities in canonical form ("1024Mi" -> "1Gi"), stamps `timeAdded` on
    taints and may omit false booleans; none of that is a change.
    """
    return tuple(_canon(d) for d in devices)


def _canon(device: Mapping[str, Any]) -> Any:
    attrs = tuple(sorted((k, tuple(sorted(v.items()))) for k, v in (device.get("attributes") or {}).items()))
    caps = []
    for key, cap in sorted((device.get("capacity") or {}).items()):
        policy = cap.get("requestPolicy")
        canon_policy: Any = None
        if policy is not None:
            rng = policy.get("validRange")
            canon_policy = (
                _q(policy.get("default")),
                tuple(_q(v) for v in policy.get("validValues") or ()),
                None if rng is None else (_q(rng.get("min")), _q(rng.get("max")), _q(rng.get("step"))),
            )
        caps.append((key, _q(cap.get("value")), canon_policy))
    taints = tuple((t.get("key"), t.get("value") or "", t.get("effect")) for t in device.get("taints") or ())
    known = {"name", "attributes", "capacity", "allowMultipleAllocations", "taints"}
    rest = tuple(sorted((k, repr(v)) for k, v in device.items() if k not in known))
    return (device.get("name"), attrs, tuple(caps), bool(device.get("allowMultipleAllocations")), taints, rest)


def _q(value: object) -> Decimal | None:
    if value is None:
        return None
    try:
        return quantity_decimal(value)
    except (ValueError, TypeError, ArithmeticError):
        return None
