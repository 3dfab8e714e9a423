"""One pod's HAMi-style limits as DRA requests: pure functions, no API calls.

`plan_pod(pod, mapping, inventory)` reads every container and init container and returns a
`PodPlan`: per container and vendor a `Share` (what it asks of one vendor), the warnings, and
the problems that make the pod impossible (each names the container, the resource and the
fix). `template_spec(share, inventory)` writes the ResourceClaimTemplate spec for a share;
its hash names the template, so one shape is one template per namespace. `pod_patch(...)`
is the JSON patch that strips the vendor resources and references the templates.

Units, as HAMi reads them: counts, memory (in the vendor's unit, MiB for HAMi) and percents are
Kubernetes quantities that must be whole numbers (the API server may hand ``3000`` over as
``3k``). Limits are read before requests (HAMi's order). Memory and cores are per device.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any, Protocol

from dra._runtime.client import quantity_decimal
from dra.webhook import selectors as sel
from dra.webhook.vendors import Vendor, VendorMapping

MANAGED_BY = "dra-webhook"
ANNOTATION_DOMAIN = "dra.project-hami.io"
SHAPE_ANNOTATION = f"{ANNOTATION_DOMAIN}/request"
CONVERTED_ANNOTATION = f"{ANNOTATION_DOMAIN}/converted"
MAX_SUBREQUESTS = 8  # firstAvailable entries per request (resource.k8s.io/v1)
MAX_REQUESTS = 32  # requests per claim (resource.k8s.io/v1): one per device, see template_spec
MAX_SHAPES_PER_POD = 32
"""Default of the distinct shapes (`Share`s, one ResourceClaimTemplate each) one pod may ask for:
past it /mutate refuses the pod before creating any template, so that one admission never makes
more than this many API writes (``dra webhook run --max-shapes-per-pod``)."""


class Inventory(Protocol):
    """What the published ResourceSlices say about a driver's devices."""

    def memory_sizes(self, driver: str, capacity: str) -> tuple[int, ...] | None:
        """Distinct memory capacities (bytes) of the driver's devices, largest first; None when not known yet."""
        ...


class NoInventory:
    """No slices known (unit tests, or a webhook started without API access)."""

    def memory_sizes(self, driver: str, capacity: str) -> tuple[int, ...] | None:
        return None


@dataclasses.dataclass(frozen=True)
class Share:
    """What one container asks of one vendor: the shape of one DRA request."""

    vendor: Vendor
    count: int
    memory: int | None = None  # bytes per device
    memory_percent: int | None = None  # percent of one device's memory (when memory is not given)
    cores: int | None = None  # percent of one device's compute
    selectors: tuple[str, ...] = ()
    same_numa: bool = False
    described: str = ""  # the original resources, for humans
    device_class: str | None = None  # another mode's DeviceClass (vendor's when None)
    whole: bool = False  # devices allocated whole (MIG): memory is a minimum size, no capacity requests


@dataclasses.dataclass(frozen=True)
class ContainerShare:
    container: str
    init: bool
    index: int  # position in spec.containers or spec.initContainers
    share: Share


@dataclasses.dataclass
class PodPlan:
    shares: list[ContainerShare] = dataclasses.field(default_factory=list)
    stripped: dict[tuple[bool, int], tuple[str, ...]] = dataclasses.field(default_factory=dict)  # resources to remove
    warnings: list[str] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)

    @property
    def touches_pod(self) -> bool:
        return bool(self.stripped)

    def shapes(self) -> set[Share]:
        """The distinct shapes the pod asks for, each a template of its own (`described`, the
        original resources' text, names none: two spellings of one request are one template)."""
        return {dataclasses.replace(cs.share, described="") for cs in self.shares}


def containers(pod: Mapping[str, Any]) -> list[tuple[bool, int, Mapping[str, Any]]]:
    spec = pod.get("spec") or {}
    out = [(True, i, c) for i, c in enumerate(spec.get("initContainers") or [])]
    out += [(False, i, c) for i, c in enumerate(spec.get("containers") or [])]
    return out


def plan_pod(pod: Mapping[str, Any], mapping: VendorMapping, inventory: Inventory | None = None) -> PodPlan:
    inventory = inventory or NoInventory()
    plan = PodPlan()
    annotations: Mapping[str, str] = (pod.get("metadata") or {}).get("annotations") or {}
    for init, index, ctr in containers(pod):
        name = str(ctr.get("name", f"#{index}"))
        kind = "init container" if init else "container"
        where = f"{kind} {name!r}"
        res = ctr.get("resources") or {}
        limits: Mapping[str, Any] = res.get("limits") or {}
        requests: Mapping[str, Any] = res.get("requests") or {}
        names = list(dict.fromkeys([*limits, *requests]))
        ours = [r for r in names if mapping.owns(r) or mapping.vendor_of(r) is not None]
        if not ours:
            continue
        plan.stripped[(init, index)] = tuple(ours)
        profiled = [r for r in ours if mapping.vendor_of(r) is None and mapping.profile_vendor(r) is not None]
        unknown = [r for r in ours if mapping.vendor_of(r) is None and r not in profiled]
        plan.problems += [_unknown(where, r, mapping) for r in unknown]
        if unknown:
            continue
        for r in profiled:
            share = _profile_share(where, r, mapping, limits, requests, plan)
            if share is not None:
                plan.shares.append(ContainerShare(name, init, index, share))
        by_vendor: dict[str, Vendor] = {}
        for r in ours:
            v = mapping.vendor_of(r)
            if v is not None:
                by_vendor.setdefault(v.name, v)
        for vendor in by_vendor.values():
            share = _share(where, vendor, limits, requests, annotations, inventory, plan)
            if share is not None:
                plan.shares.append(ContainerShare(name, init, index, share))
    return plan


def _profile_share(where: str, resource: str, mapping: VendorMapping, limits: Mapping[str, Any],
                   requests: Mapping[str, Any], plan: PodPlan) -> Share | None:
    """``nvidia.com/mig-1g.18gb: 2``: two whole devices of that profile."""
    v = mapping.profile_vendor(resource)
    assert v is not None and v.profiles is not None
    raw = limits.get(resource, requests.get(resource))
    count = _whole(where, resource, raw)
    if isinstance(count, str):
        plan.problems.append(count)
        return None
    if count == 0:
        return None
    profile = resource[len(v.profiles.prefix):]
    selector = sel.equals_selector(sel.attribute(v.driver, v.profiles.attribute), profile)
    return Share(v, count, selectors=(selector,), described=f"{resource}={raw}",
                 device_class=v.profiles.device_class, whole=True)


def _unknown(where: str, resource: str, mapping: VendorMapping) -> str:
    near = [r for v in mapping.vendors if any(resource.startswith(p) for p in v.owned_prefixes)
            for r in v.resources.known()]
    close = difflib.get_close_matches(resource, near, n=2, cutoff=0.75)
    hint = f"did you mean {' or '.join(close)}?" if close else f"known: {', '.join(sorted(near)[:12])}"
    return (f"{where}: {resource} is not a resource this webhook knows ({hint}); fix the name, or label the pod or "
            f"its namespace to opt out if another device plugin serves it")


MAX_QUANTITY = 10**18
"""The largest count, memory or percent the webhook reads (an exabyte in bytes): checked on the
text and the exponent before any conversion, since ``int()`` of a valid quantity such as
``1e999999999`` would run for minutes."""
MAX_QUANTITY_CHARS = 64
LIMIT_TEXT = f"the webhook's limit of 10^18 (and {MAX_QUANTITY_CHARS} characters)"


class QuantityTooLarge(ValueError):
    """A quantity past `MAX_QUANTITY` (or longer than `MAX_QUANTITY_CHARS`)."""


def bounded_quantity(raw: Any) -> Decimal:
    """`raw` as an exact Decimal within ±`MAX_QUANTITY`, checked before any conversion that costs
    more than its text: QuantityTooLarge, or ValueError/TypeError when it is no quantity."""
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise TypeError(f"{raw!r} is not a quantity")
    text = str(raw)
    if len(text) > MAX_QUANTITY_CHARS:
        raise QuantityTooLarge(f"{text[:MAX_QUANTITY_CHARS]}... is beyond {LIMIT_TEXT}")
    try:
        q = quantity_decimal(text)
    except ArithmeticError:  # an exponent past Decimal's own range
        raise QuantityTooLarge(f"{text} is beyond {LIMIT_TEXT}") from None
    if not q.is_finite() or q.adjusted() > 18 or abs(q) > MAX_QUANTITY:
        raise QuantityTooLarge(f"{text} is beyond {LIMIT_TEXT}")
    return q


def _whole(where: str, resource: str, raw: Any) -> int | str:
    """A whole-number quantity, or the problem with it."""
    try:
        q = bounded_quantity(raw)
    except QuantityTooLarge as e:
        return f"{where}: {resource}={e}; write a whole number of at most 10^18"
    except (ValueError, TypeError):
        return f"{where}: {resource}={raw!r} is not a Kubernetes quantity; write a whole number"
    if q < 0:
        return f"{where}: {resource}={raw} is negative"
    if q != q.to_integral_value():
        return f"{where}: {resource}={raw} is not a whole number; write a whole number"
    return int(q)


def _share(where: str, v: Vendor, limits: Mapping[str, Any], requests: Mapping[str, Any],
           annotations: Mapping[str, str], inventory: Inventory, plan: PodPlan) -> Share | None:
    r = v.resources

    def value(name: str | None) -> int | None:
        if name is None:
            return None
        raw = limits.get(name, requests.get(name))
        if raw is None:
            return None
        got = _whole(where, name, raw)
        if isinstance(got, str):
            plan.problems.append(got)
            return None
        return got

    problems_before = len(plan.problems)
    count, memory_units, percent, cores = value(r.count), value(r.memory), value(r.memory_percentage), value(r.cores)
    for ign in r.ignored:
        if ign in limits or ign in requests:
            plan.warnings.append(f"{where}: {ign} is not supported by the DRA drivers and was removed")
    given = {n: x for n, x in ((r.memory, memory_units), (r.memory_percentage, percent), (r.cores, cores))
             if n is not None and x is not None}
    described = ", ".join(f"{n}={limits.get(n, requests.get(n))}" for n in (r.count, r.memory, r.memory_percentage, r.cores)
                          if n and (n in limits or n in requests))
    if count is None:
        if not given:
            return None
        count = v.default_count
    if count == 0:
        if given:
            plan.problems.append(f"{where}: {r.count}=0 asks for no device, but {', '.join(given)} is set; "
                                 f"remove {', '.join(given)} or ask for at least one device")
        return None
    if count > MAX_REQUESTS:
        plan.problems.append(f"{where}: {r.count}={count} asks for {count} devices; a claim holds at most {MAX_REQUESTS}"
                             f" requests and each device is a request of its own: ask for at most {MAX_REQUESTS}")
        return None

    memory = None
    if memory_units is not None:
        if memory_units == 0:
            plan.problems.append(f"{where}: {r.memory}=0 asks for no memory; give the memory per device "
                                 f"(in units of {_unit(v)}) or remove it for the whole device")
        memory = memory_units * v.memory_unit
        if percent is not None:
            plan.warnings.append(f"{where}: {r.memory_percentage} is ignored because {r.memory} is set (as in HAMi)")
            percent = None
    if percent is not None and not 1 <= percent <= 100:
        plan.problems.append(f"{where}: {r.memory_percentage}={percent} must be 1-100 (percent of one device's memory)")
    if cores is not None:
        if cores > v.max_cores:
            plan.problems.append(f"{where}: {r.cores}={cores} is more than a device has ({v.max_cores}, percent of one "
                                 f"device's compute); set it to 1-{v.max_cores}, or ask for more devices")
        elif cores == 0:
            plan.warnings.append(f"{where}: {r.cores}=0 (HAMi: no compute limit) leaves the compute share to the "
                                 f"driver's default")
            cores = None
    elif memory is not None or (percent is not None and percent < 100):
        cores = v.default_cores

    # Modes: v.mode.value on the vendor's class, v.mode.others each on its own class.
    sharing = memory is not None or percent is not None or cores is not None
    device_class, whole = None, False
    if v.mode is not None:
        raw_mode = annotations.get(v.mode.annotation)
        modes = tuple(m.strip() for m in raw_mode.split(",")) if raw_mode is not None else ()
        other = next((o for o in v.mode.others if o.value in modes), None)
        if raw_mode is not None and v.mode.value not in modes and other is None:
            served = ", ".join(repr(m) for m in v.mode.served)
            plan.problems.append(f"{where}: annotation {v.mode.annotation}={raw_mode!r} asks for a mode the DRA "
                                 f"drivers do not serve; served: {served} (set one or remove the annotation)")
        elif other is not None and v.mode.value not in modes:
            device_class, whole = other.device_class, other.whole
            if whole and r.cores and (r.cores in limits or r.cores in requests):
                plan.warnings.append(f"{where}: {r.cores} does not apply in mode {other.value!r} (a whole device's "
                                     f"compute is its own) and was removed")
            if whole:
                cores = None
                if percent is not None:
                    plan.problems.append(f"{where}: {r.memory_percentage} cannot pick a device in mode "
                                         f"{other.value!r}; give {r.memory} (the smallest device size that fits)")
        elif raw_mode is None and v.mode.required_for_sharing and sharing:
            plan.problems.append(f"{where}: a share of a device ({described}) needs the annotation "
                                 f"{v.mode.annotation}: {v.mode.value} (template-based splitting is not served); add "
                                 f"it, or ask for whole devices only")

    for key in v.ignored_annotations:
        if key in annotations:
            plan.warnings.append(f"{where}: annotation {key} is not honoured under DRA (kube-scheduler picks the "
                                 f"devices); it was left on the pod")
    selectors = _selectors(where, v, annotations, plan)
    same_numa = _numa(where, v, annotations, count, plan)

    sizes = inventory.memory_sizes(v.driver, v.capacity_memory)
    if memory is not None and sizes:
        if memory > sizes[0]:
            raw = str(limits.get(r.memory or "", requests.get(r.memory or "")))
            hint = (f" ({r.memory} counts {_unit(v)}: {raw} is not a size, write e.g. {3 * (1 << 30) // v.memory_unit} "
                    f"for 3 GiB)") if raw[-1:] in "iMGTPE" else ""
            plan.problems.append(f"{where}: {r.memory}={memory_units} ({describe_bytes(memory)}) is more than any "
                                 f"published {v.device_class} device has (largest: {describe_bytes(sizes[0])} = "
                                 f"{sizes[0] // v.memory_unit} {_unit(v)}); ask for at most that{hint}")
    if percent is not None and percent < 100:
        if not sizes:
            plan.problems.append(f"{where}: {r.memory_percentage}={percent} needs the device sizes, but no "
                                 f"{v.driver} device is published yet; give {r.memory} instead, or retry once the "
                                 f"driver runs")
        elif len(sizes) > MAX_SUBREQUESTS:
            plan.problems.append(f"{where}: {r.memory_percentage} cannot be written for {len(sizes)} different device "
                                 f"sizes (at most {MAX_SUBREQUESTS}); give {r.memory} instead")
    if len(plan.problems) > problems_before:
        return None
    if percent == 100:
        percent = None
    if whole and memory is not None:  # a device at least that large, taken whole
        cap = sel.capacity(v.driver, v.capacity_memory)
        selectors.append(f"{cap}.compareTo(quantity({sel.cel_string(_quantity(memory))})) >= 0")
        memory = None
    return Share(v, count, memory, percent, cores, tuple(selectors), same_numa, described, device_class, whole)


def _selectors(where: str, v: Vendor, annotations: Mapping[str, str], plan: PodPlan) -> list[str]:
    a = v.annotations
    out: list[str] = []
    if v.model is not None and v.model_attribute:
        out.append(sel.equals_selector(sel.attribute(v.driver, v.model_attribute), v.model))
    try:
        def listed(key: str | None) -> tuple[str, ...]:
            return sel.split_list(key, annotations[key]) if key and key in annotations else ()

        use_uuid, no_uuid = listed(a.use_uuid), listed(a.no_use_uuid)
        use_type, no_type = listed(a.use_type), listed(a.no_use_type)
    except sel.AnnotationError as e:
        plan.problems.append(f"{where}: {e}")
        return out
    if (use_uuid or no_uuid) and v.uuid_attribute:
        out += sel.uuid_selectors(sel.attribute(v.driver, v.uuid_attribute), use_uuid, no_uuid)
    if (use_type or no_type) and v.type_attribute:
        out += sel.type_selectors(sel.attribute(v.driver, v.type_attribute), v.type_prefix, use_type, no_type)
    return out


_TRUE = {"1", "t", "T", "TRUE", "true", "True"}  # Go's strconv.ParseBool, which HAMi uses
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def _numa(where: str, v: Vendor, annotations: Mapping[str, str], count: int, plan: PodPlan) -> bool:
    key = v.annotations.numa_bind
    if not key or key not in annotations:
        return False
    raw = annotations[key]
    if raw not in _TRUE | _FALSE:
        plan.problems.append(f"{where}: annotation {key}={raw!r} must be true or false")
        return False
    if raw in _FALSE or count < 2:
        return False
    if not v.numa_attribute:
        plan.warnings.append(f"{where}: {key} is not supported for {v.device_class} (no NUMA attribute is published)")
        return False
    return True


def _unit(v: Vendor) -> str:
    return {1 << 20: "MiB", 1 << 30: "GiB", 1 << 10: "KiB", 1: "bytes"}.get(v.memory_unit, f"{v.memory_unit} bytes")


def describe_bytes(n: int) -> str:
    for unit, size in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f}Gi"
    return str(n)


def _quantity(n: int) -> str:
    """Bytes as the shortest exact binary quantity ("3000Mi")."""
    for unit, size in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if n % size == 0 and n >= size:
            return f"{n // size}{unit}"
    return str(n)


# --- the claim template ------------------------------------------------------------------------


def template_spec(share: Share, inventory: Inventory | None = None) -> dict[str, Any]:
    """The `spec` of the ResourceClaimTemplate for `share` (a ResourceClaim spec under `spec`)."""
    v = share.vendor
    capacity: dict[str, str] = {}
    if share.memory is not None:
        capacity[v.capacity_memory] = _quantity(share.memory)
    if share.cores is not None:
        capacity[v.capacity_cores] = str(share.cores)

    # One request per device (count 1 each, distinct by UUID), never one request of count N:
    # kube-scheduler 1.34 crashes on count > 1 with the per-device slice layout
    # (kubernetes#133705, dra/_runtime/publish/layout.py) and before 1.37 does not hold distinctAttribute
    # within one request (kubernetes#140438); across requests every pair is compared.
    per_device = share.count > 1 and bool(v.uuid_attribute)
    count = 1 if per_device else share.count

    def exact(selectors: Sequence[str], cap: Mapping[str, str]) -> dict[str, Any]:
        body: dict[str, Any] = {"deviceClassName": share.device_class or v.device_class, "allocationMode": "ExactCount",
                                "count": count}
        if selectors:
            body["selectors"] = [{"cel": {"expression": s}} for s in selectors]
        if cap:
            body["capacity"] = {"requests": dict(cap)}
        return body

    request: dict[str, Any] = {}
    if share.memory_percent is None:
        request["exactly"] = exact(share.selectors, capacity)
    else:
        sizes = (inventory or NoInventory()).memory_sizes(v.driver, v.capacity_memory) or ()
        subs = []
        for i, size in enumerate(sizes[:MAX_SUBREQUESTS]):
            part = (size * share.memory_percent // 100) // (1 << 20) * (1 << 20) or size * share.memory_percent // 100
            fits = sel.memory_equals_selector(sel.capacity(v.driver, v.capacity_memory), _quantity(size))
            subs.append({"name": f"size-{i}", **exact([*share.selectors, fits], {**capacity, v.capacity_memory: _quantity(part)})})
        request["firstAvailable"] = subs
    names = [f"{v.request_name}-{i}" for i in range(share.count)] if per_device else [v.request_name]
    devices: dict[str, Any] = {"requests": [{"name": name, **request} for name in names]}
    constraints = []
    if per_device and v.uuid_attribute and not share.whole:  # whole devices are distinct anyway
        constraints.append({"requests": names, "distinctAttribute": _qualified(v.driver, v.uuid_attribute)})
    if share.same_numa and v.numa_attribute:
        constraints.append({"requests": names, "matchAttribute": _qualified(v.driver, v.numa_attribute)})
    if constraints:
        devices["constraints"] = constraints
    return {"spec": {"devices": devices}}


def _qualified(driver: str, name: str) -> str:
    return name if "/" in name else f"{driver}/{name}"


def template_name(share: Share, spec: Mapping[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:10]
    return f"hami-{share.vendor.name}-{digest}"


def template_object(share: Share, namespace: str, inventory: Inventory | None = None) -> dict[str, Any]:
    spec = template_spec(share, inventory)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": template_name(share, spec),
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": MANAGED_BY},
            "annotations": {SHAPE_ANNOTATION: share.described},
        },
        "spec": spec,
    }


# --- the pod patch -------------------------------------------------------------------------------


def pod_claim_name(vendor: str, container: str, taken: set[str]) -> str:
    """A DNS label naming the pod's claim for one container and vendor, unique in the pod."""
    base = f"{vendor}-{container}"
    if len(base) > 63:
        base = f"{base[:52].rstrip('-')}-{hashlib.sha256(base.encode()).hexdigest()[:10]}"
    name, n = base, 1
    while name in taken:
        n += 1
        suffix = f"-{n}"
        name = base[: 63 - len(suffix)].rstrip("-") + suffix
    taken.add(name)
    return name


def pod_patch(pod: Mapping[str, Any], plan: PodPlan, templates: Mapping[Share, str]) -> list[dict[str, Any]]:
    """JSON patch: vendor resources removed, one pod claim per (container, vendor) on its template."""
    spec = pod.get("spec") or {}
    existing = list(spec.get("resourceClaims") or [])
    taken = {c.get("name") for c in existing if c.get("name")}
    new_claims = []
    per_container: dict[tuple[bool, int], list[str]] = {}
    for cs in plan.shares:
        name = pod_claim_name(cs.share.vendor.name, cs.container, taken)
        new_claims.append({"name": name, "resourceClaimTemplateName": templates[cs.share]})
        per_container.setdefault((cs.init, cs.index), []).append(name)
    ops: list[dict[str, Any]] = []
    converted: dict[str, dict[str, Any]] = {}
    for (init, index), removed in plan.stripped.items():
        ctr = (spec.get("initContainers" if init else "containers") or [])[index]
        res = dict(ctr.get("resources") or {})
        before: dict[str, Any] = {}
        for field in ("limits", "requests"):
            kept = {k: q for k, q in (res.get(field) or {}).items() if k not in removed}
            for k in removed:
                if k in (res.get(field) or {}):
                    before.setdefault(k, res[field][k])
            if kept:
                res[field] = kept
            else:
                res.pop(field, None)
        claims = [*(res.get("claims") or []), *({"name": n} for n in per_container.get((init, index), []))]
        if claims:
            res["claims"] = claims
        field_path = "initContainers" if init else "containers"
        ops.append({"op": "add", "path": f"/spec/{field_path}/{index}/resources", "value": res})
        converted[str(ctr.get("name"))] = {k: str(q) for k, q in before.items()}
    if new_claims:
        ops.append({"op": "add", "path": "/spec/resourceClaims", "value": [*existing, *new_claims]})
    meta = pod.get("metadata") or {}
    if "annotations" not in meta:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
    ops.append({"op": "add", "path": "/metadata/annotations/" + CONVERTED_ANNOTATION.replace("~", "~0").replace("/", "~1"),
                "value": json.dumps(converted, sort_keys=True, separators=(",", ":"))})
    return ops

