"""Shares written as Kubernetes objects: `template_spec(share, inventory)` is the
ResourceClaimTemplate spec of a share (its hash names the template, so one shape is one template
per namespace); `pod_patch(...)` the JSON patch that strips the vendor resources and references
the templates. Pure functions.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from dra.webhook import selectors as sel
from dra.webhook.shares import (
    CONVERTED_ANNOTATION,
    MANAGED_BY,
    MAX_SUBREQUESTS,
    SHAPE_ANNOTATION,
    Inventory,
    NoInventory,
    PodPlan,
    Share,
    quantity_text,
)
from dra.webhook.vendors import Items


def template_spec(share: Share, inventory: Inventory | None = None) -> dict[str, Any]:
    """The `spec` of the ResourceClaimTemplate for `share` (a ResourceClaim spec under `spec`)."""
    v = share.vendor
    capacity: dict[str, str] = {}
    if share.memory is not None:
        capacity[v.capacity_memory] = quantity_text(share.memory)
    if share.cores is not None:
        capacity[v.capacity_cores] = str(share.cores)

    # One request per device (count 1 each, distinct by UUID), never one request of count N:
    # kube-scheduler 1.34 crashes on count > 1 with the per-device slice layout
    # (kubernetes#133705, dra/_runtime/publish/layout.py) and before 1.37 does not hold distinctAttribute
    # within one request (kubernetes#140438); across requests every pair is compared.
    per_device = share.count > 1 and bool(v.uuid_attribute)
    count = 1 if per_device else share.count

    def exact(device_class: str, selectors: Sequence[str], cap: Mapping[str, str]) -> dict[str, Any]:
        body: dict[str, Any] = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}
        if selectors:
            body["selectors"] = [{"cel": {"expression": s}} for s in selectors]
        if cap:
            body["capacity"] = {"requests": dict(cap)}
        return body

    own_class = share.device_class or v.device_class
    request: dict[str, Any] = {}
    configs: list[tuple[str | None, Items, Items]] = []  # (subrequest or None: the request; claim's, class's fields)
    if share.memory_percent is not None:
        sizes = (inventory or NoInventory()).memory_sizes(v.driver, v.capacity_memory) or ()
        subs = []
        for i, size in enumerate(sizes[:MAX_SUBREQUESTS]):
            part = (size * share.memory_percent // 100) // (1 << 20) * (1 << 20) or size * share.memory_percent // 100
            fits = sel.memory_equals_selector(sel.capacity(v.driver, v.capacity_memory), quantity_text(size))
            subs.append({"name": f"size-{i}", **exact(own_class, [*share.selectors, fits],
                                                        {**capacity, v.capacity_memory: quantity_text(part)})})
        request["firstAvailable"] = subs
        configs.append((None, share.config, share.class_config))
    elif share.alternatives:
        request["firstAvailable"] = [{"name": share.mode, **exact(own_class, share.selectors, capacity)}]
        configs.append((share.mode, share.config, share.class_config))
        for alt in share.alternatives[: MAX_SUBREQUESTS - 1]:
            selectors = [*alt.selectors]
            if alt.min_memory is not None:
                selectors.append(sel.at_least_selector(sel.capacity(v.driver, v.capacity_memory), quantity_text(alt.min_memory)))
            request["firstAvailable"].append({"name": alt.mode, **exact(alt.device_class, selectors,
                                                                        {} if alt.whole else capacity)})
            configs.append((alt.mode, alt.config, alt.class_config))
    else:
        request["exactly"] = exact(own_class, share.selectors, capacity)
        configs.append((None, share.config, share.class_config))
    names = [f"{v.request_name}-{i}" for i in range(share.count)] if per_device else [v.request_name]
    devices: dict[str, Any] = {"requests": [{"name": name, **request} for name in names]}
    constraints = []
    if per_device and v.uuid_attribute and not share.whole:  # whole devices are distinct anyway
        constraints.append({"requests": names, "distinctAttribute": _qualified(v.driver, v.uuid_attribute)})
    if share.same_numa and v.numa_attribute:
        constraints.append({"requests": names, "matchAttribute": _qualified(v.driver, v.numa_attribute)})
    if share.module > 1 and per_device and v.module_attribute:  # each module's devices together (910C's dies)
        for i in range(0, len(names), share.module):
            constraints.append({"requests": names[i:i + share.module],
                                "matchAttribute": _qualified(v.driver, v.module_attribute)})
    if constraints:
        devices["constraints"] = constraints
    config = [_config(v.driver, v.config_kind, [f"{n}/{sub}" if sub else n for n in names], (*repeated, *fields))
              for sub, fields, repeated in configs if fields and v.config_kind]
    if config:
        devices["config"] = config
    return {"spec": {"devices": devices}}


def _config(driver: str, kind: tuple[str, str] | None, requests: list[str], fields: Items) -> dict[str, Any]:
    assert kind is not None
    return {"requests": requests, "opaque": {"driver": driver, "parameters": {
        "apiVersion": kind[0], "kind": kind[1], **dict(sorted(fields))}}}


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
    """JSON patch: vendor resources removed, one pod claim per (container, vendor) on its template;
    an init container whose request an app container's claim covers uses that claim (`uses`)."""
    spec = pod.get("spec") or {}
    existing = list(spec.get("resourceClaims") or [])
    taken = {c.get("name") for c in existing if c.get("name")}
    new_claims = []
    per_container: dict[tuple[bool, int], list[str]] = {}
    claim_of: dict[int, str] = {}
    for i, cs in enumerate(plan.shares):
        if cs.uses is not None:
            continue
        name = pod_claim_name(cs.share.vendor.name, cs.container, taken)
        claim_of[i] = name
        new_claims.append({"name": name, "resourceClaimTemplateName": templates[cs.share]})
    for i, cs in enumerate(plan.shares):
        per_container.setdefault((cs.init, cs.index), []).append(claim_of[cs.uses if cs.uses is not None else i])
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
