"""ResourceQuotas on HAMi's resources, which conversion bypasses: the webhook strips
``nvidia.com/gpu``, ``gpumem`` and ``gpucores`` before the ResourceQuota admission plugin counts
the pod, so a quota on them no longer limits converted pods. The webhook cannot keep them
counting; it says so on every converted pod of such a namespace (a warning, and an Event on the
pod's owner), naming the quota, the resource and DRA's own quota: devices per DeviceClass,
``<class>.deviceclass.resource.k8s.io/devices`` (Kubernetes counts no consumable capacity, so
memory and cores have no DRA quota). A namespace that already has that quota for each class the
pod's claims name gets no warning about its device count.

Quotas are read with one LIST per namespace, remembered for `ttl` seconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from dra.webhook.shares import PodPlan

DRA_QUOTA = "{}.deviceclass.resource.k8s.io/devices"
MAX_NAMED = 8  # quota keys named one by one in a pod's warnings


class Quotas(Protocol):
    def hard(self, namespace: str) -> Sequence[tuple[str, Mapping[str, str]]] | None:
        """Each ResourceQuota's name and ``spec.hard``; None when they cannot be read."""
        ...


class NoQuotas:
    def hard(self, namespace: str) -> Sequence[tuple[str, Mapping[str, str]]] | None:
        return None


class QuotaReader:
    """`get(path, params)` is `dra._runtime.client.get_json` on the webhook's client."""

    def __init__(self, get: Callable[[str, dict[str, str]], dict[str, Any] | None], ttl: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._get, self._ttl, self._clock = get, ttl, clock
        self._cache: dict[str, tuple[float, Sequence[tuple[str, Mapping[str, str]]] | None]] = {}
        self._lock = threading.Lock()

    def hard(self, namespace: str) -> Sequence[tuple[str, Mapping[str, str]]] | None:
        now = self._clock()
        with self._lock:
            hit = self._cache.get(namespace)
            if hit is not None and hit[0] > now:
                return hit[1]
        try:
            doc = self._get("/api/v1/namespaces/{namespace}/resourcequotas", {"namespace": namespace}) or {}
            got: Sequence[tuple[str, Mapping[str, str]]] | None = [
                (str((q.get("metadata") or {}).get("name", "?")), {str(k): str(v) for k, v in
                                                                   ((q.get("spec") or {}).get("hard") or {}).items()})
                for q in doc.get("items") or []]
        except Exception:  # unreadable (RBAC, outage): no warning rather than a slow or failed admission
            got = None
        with self._lock:
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[namespace] = (now + self._ttl, got)
        return got


def _resource(key: str) -> str:
    for prefix in ("requests.", "limits."):
        if key.startswith(prefix):
            return key[len(prefix):]
    return key


def warnings(plan: PodPlan, quotas: Sequence[tuple[str, Mapping[str, str]]] | None,
             count_resources: Iterable[str]) -> list[str]:
    """The warnings for a converted pod in a namespace with `quotas`: one per quota key on a
    resource the conversion strips. `count_resources`: the vendors' device-count resources (whose
    DRA equivalent is the per-class device quota)."""
    if not quotas or not plan.stripped:
        return []
    stripped = {r for rs in plan.stripped.values() for r in rs}
    counts = set(count_resources)
    classes = sorted({cs.share.device_class or cs.share.vendor.device_class for cs in plan.shares})
    dra_keys = {k for _, hard in quotas for k in hard}
    out: list[str] = []
    for name, hard in quotas:
        for key in sorted(hard):
            resource = _resource(key)
            if resource not in stripped:
                continue
            if resource in counts:
                missing = [c for c in classes if DRA_QUOTA.format(c) not in dra_keys]
                if not missing:
                    continue
                out.append(f"ResourceQuota {name[:63]}: {key} no longer counts this pod (converted to claims); DRA's"
                           f" quota counts devices per class: {DRA_QUOTA.format(missing[0])}")
            else:
                out.append(f"ResourceQuota {name[:63]}: {key} no longer counts this pod (converted to claims); DRA's"
                           f" quota counts devices, not memory or cores (examples/hami-compat/README.md, Quota)")
    if len(out) > MAX_NAMED:
        out = [*out[:MAX_NAMED], f"{len(out) - MAX_NAMED} more quota keys no longer count this pod"]
    return out
