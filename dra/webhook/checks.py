"""The validating side for DRA objects: ResourceClaims and ResourceClaimTemplates.

A claim is refused at admission, with a message saying what to change, when it could never be
prepared: a capacity request beyond what any published device of a mapped DeviceClass has
(cores over the vendor's maximum, memory over the largest device), or an opaque config for an
installed driver that the driver's own decoder rejects, or that loosens enforcement below the
DeviceClass's config where the admin did not allow it (`dra._runtime.loosening`, prepare's same rule). The decoder is the one prepare runs
(`decode_config`), on the driver *class* from the ``dra.drivers`` entry points: the webhook
never instantiates a driver, and its verdict is prepare's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

from dra import ConfigError, decode_config
from dra._runtime.loosening import describe as describe_loosening
from dra._runtime.loosening import loosened
from dra.webhook.classes import ClassConfigs, NoClasses
from dra.webhook.translate import Inventory, NoInventory, QuantityTooLarge, bounded_quantity, describe_bytes
from dra.webhook.vendors import Vendor, VendorMapping

log = logging.getLogger(__name__)
# Unset fields on a daemon with the charts' defaults. So a claim's own watchdogAction: taint is refused
# here even where a daemon's flag is taint (the daemon would take it: it repeats the flag); unset is the same.
DAEMON_DEFAULTS = {"preload": "file", "watchdogAction": "report"}


def claim_spec(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    spec = obj.get("spec") or {}
    return (spec.get("spec") or {}) if kind == "ResourceClaimTemplate" else spec


def _requests(spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for req in (spec.get("devices") or {}).get("requests") or []:
        name = str(req.get("name", "?"))
        if req.get("exactly"):
            yield name, req["exactly"]
        for sub in req.get("firstAvailable") or []:
            yield f"{name}/{sub.get('name', '?')}", sub


def check_claim(obj: Mapping[str, Any], kind: str, mapping: VendorMapping, drivers: Mapping[str, type],
                inventory: Inventory | None = None, classes: ClassConfigs | None = None,
                allow_loosening: bool = False) -> list[str]:
    """The problems that make this claim (or template) impossible; empty when it may be stored.
    Unless `allow_loosening`, one is a claim config weaker than its class's (prepare's rule)."""
    inventory = inventory or NoInventory()
    spec = claim_spec(obj, kind)
    problems: list[str] = []
    by_class: dict[str, Vendor] = {}
    for v in mapping.vendors:
        by_class.setdefault(v.device_class, v)
    for name, req in _requests(spec):
        vendor = by_class.get(str(req.get("deviceClassName", "")))
        if vendor is None:
            continue
        wanted = ((req.get("capacity") or {}).get("requests")) or {}
        problems += _capacity(f"request {name!r}", vendor, wanted, inventory)
    decoded: list[tuple[int, str, tuple[str, ...], Any]] = []
    for i, entry in enumerate((spec.get("devices") or {}).get("config") or []):
        opaque = entry.get("opaque")
        if not opaque:
            continue
        cls = drivers.get(str(opaque.get("driver", "")))
        if cls is None:
            continue
        try:
            cfg = decode_config(cls, opaque.get("parameters"))
        except ConfigError as e:
            problems.append(f"config[{i}] for driver {opaque.get('driver')}: {e}")
            continue
        decoded.append((i, str(opaque.get("driver")), tuple(str(r) for r in entry.get("requests") or ()), cfg))
    if not allow_loosening:
        problems += _loosening(spec, decoded, drivers, classes or NoClasses())
    return problems


def _applies(requests: tuple[str, ...], name: str) -> bool:
    return not requests or name in requests or name.split("/", 1)[0] in requests


def _loosening(spec: Mapping[str, Any], decoded: list[tuple[int, str, tuple[str, ...], Any]],
               drivers: Mapping[str, type], classes: ClassConfigs) -> list[str]:
    """Prepare's rule (`dra._runtime.loosening`): per request, the last claim config of a driver against
    the last config of the same driver in the request's DeviceClass."""
    out: list[str] = []
    for name, req in _requests(spec):
        for driver in sorted({d for _, d, _, _ in decoded}):
            mine = [(i, cfg) for i, d, reqs, cfg in decoded if d == driver and _applies(reqs, name)]
            if not mine:
                continue
            index, cfg = mine[-1]
            class_name = str(req.get("deviceClassName", ""))
            baseline = None
            for opaque in classes.opaque(class_name) or ():
                if opaque.get("driver") == driver:
                    try:
                        baseline = decode_config(drivers[driver], opaque.get("parameters"))
                    except ConfigError:
                        continue  # prepare names a broken class config itself
            found = loosened(cfg, baseline, unset=DAEMON_DEFAULTS)
            if found:
                out.append(f"config[{index}] for driver {driver}, request {name!r} (class {class_name}):"
                           f" {describe_loosening(found)}")
    return out


def _capacity(where: str, v: Vendor, wanted: Mapping[str, Any], inventory: Inventory) -> list[str]:
    out = []

    def amount(name: str) -> tuple[str, Any] | None:
        for key in (name, f"{v.driver}/{name}"):
            if key in wanted:
                return key, wanted[key]
        return None

    cores = amount(v.capacity_cores)
    if cores is not None:
        key, raw = cores
        try:
            if bounded_quantity(raw) > v.max_cores:
                out.append(f"{where}: capacity {key}={raw} is more than a {v.device_class} device has "
                           f"({v.max_cores}, percent of its compute); ask for at most {v.max_cores}")
        except QuantityTooLarge as e:
            out.append(f"{where}: capacity {key}={e}; ask for at most {v.max_cores}")
        except (ValueError, TypeError):
            out.append(f"{where}: capacity {key}={raw!r} is not a quantity")
    memory = amount(v.capacity_memory)
    sizes = inventory.memory_sizes(v.driver, v.capacity_memory)
    if memory is not None and sizes:
        key, raw = memory
        try:
            if bounded_quantity(raw) > sizes[0]:
                out.append(f"{where}: capacity {key}={raw} is more than any published {v.device_class} device has "
                           f"(largest: {describe_bytes(sizes[0])}); ask for at most that")
        except QuantityTooLarge as e:
            out.append(f"{where}: capacity {key}={e}; ask for at most {describe_bytes(sizes[0])}")
        except (ValueError, TypeError):
            out.append(f"{where}: capacity {key}={raw!r} is not a quantity")
    return out
