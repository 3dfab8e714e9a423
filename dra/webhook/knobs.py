"""HAMi's pod-level inputs besides the resources: the privileged rule, the annotations nothing
under DRA honours, and the container environment HAMi's hook reads. Pure functions that add
problems (the pod is refused) or warnings (the pod is converted; the warning names the field and
the DRA way to ask, and reaches the pod's owner as an Event, `events`), so nothing is dropped
without a word.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dra.webhook.shares import PodPlan
from dra.webhook.vendors import Vendor, VendorMapping

MAX_VALUE_SHOWN = 40  # characters of a tenant's annotation or env value repeated in a message
MAX_UNKNOWN_WARNINGS = 4  # unknown HAMi-looking annotations named one by one, then counted
_TRUE = {"1", "t", "T", "TRUE", "true", "True"}  # Go's strconv.ParseBool, which HAMi's plugin uses
COMPUTE_POLICIES = ("default", "force", "disable")  # HAMi-core's GPU_CORE_UTILIZATION_POLICY


def shown(value: str) -> str:
    """A tenant's value for a message: quoted, escaped, at most `MAX_VALUE_SHOWN` characters of it."""
    text = repr(value)
    return text if len(text) <= MAX_VALUE_SHOWN + 2 else text[:MAX_VALUE_SHOWN + 1] + "...'"


def container_env(ctr: Mapping[str, Any]) -> dict[str, str | None]:
    """The container's env by name (the last entry wins, as in the kubelet); None for a value
    from a reference (ConfigMap, Secret, field), which admission cannot read."""
    out: dict[str, str | None] = {}
    for e in ctr.get("env") or []:
        if isinstance(e, Mapping) and isinstance(e.get("name"), str):
            value = e.get("value")
            out[e["name"]] = None if e.get("valueFrom") is not None else str(value or "")
    return out


def privileged(pod: Mapping[str, Any]) -> list[str]:
    """HAMi's rule: a pod with device resources and a privileged container (any, init included) is
    refused; a privileged container sees every device of the node, past any share."""
    spec = pod.get("spec") or {}
    for field in ("initContainers", "containers"):
        for ctr in spec.get(field) or []:
            if ((ctr.get("securityContext") or {}).get("privileged")) is True:
                return [f"container {str(ctr.get('name'))!r} is privileged: a privileged container sees every device of"
                        f" the node, past any share, so a pod asking for shared devices may not have one (HAMi refuses"
                        f" it too); remove securityContext.privileged (the claim's devices reach the container without it)"]
    return []


def env_knobs(where: str, v: Vendor, env: Mapping[str, str | None], sharing: bool, whole: bool, plan: PodPlan) -> None:
    """``CUDA_DISABLE_CONTROL`` (no hook at all) and ``GPU_CORE_UTILIZATION_POLICY`` (`disable`,
    applied by translate; `default` and `force` are what the hook always does)."""
    name = v.env.disable_control
    if name and name in env:
        raw = env[name]
        if raw is None:
            plan.warnings.append(f"{where}: env {name} comes from a reference admission cannot read; the device's"
                                 f" limits stay")
        elif raw in _TRUE and sharing and not whole:
            plan.problems.append(f"{where}: env {name}={shown(raw)} would lift every limit of a device others share;"
                                 f" remove it, or ask for whole devices ({v.resources.count} alone), or give memory"
                                 f" without {v.resources.cores} for no compute limit")
    name = v.env.compute_policy
    if name and name in env:
        raw = env[name]
        if raw is None:
            plan.warnings.append(f"{where}: env {name} comes from a reference admission cannot read; the compute"
                                 f" limit stays")
        elif raw.strip().lower() not in COMPUTE_POLICIES:
            plan.warnings.append(f"{where}: env {name}={shown(raw)} is not a policy HAMi-core knows (default, force,"
                                 f" disable); the compute limit stays")


def annotation_warnings(annotations: Mapping[str, str], mapping: VendorMapping, used: Sequence[Vendor]) -> list[str]:
    """One warning per annotation of the vendors the pod uses that nothing under DRA honours (with
    the DRA way to ask), and per HAMi-looking annotation no vendor reads."""
    out: list[str] = []
    seen: set[str] = set()
    for v in used:
        for key in (*(a for a, _ in v.warned_annotations), *v.ignored_annotations):
            if key not in annotations or key in seen:
                continue
            seen.add(key)
            value = annotations[key]
            if value.strip() in v.honoured(key):
                continue
            way = v.dra_way(key)
            out.append(f"annotation {key}={shown(value)} is not honoured under DRA: "
                       + (" ".join(way.split()) if way else "kube-scheduler picks the devices"))
    known = set(_known_annotations(mapping.vendors))
    domains = {"hami.io/"} | {k.split("/", 1)[0] + "/" for k in known if "/" in k}
    unknown = sorted(k for k in annotations if k not in known and any(k.startswith(d) for d in domains))
    for key in unknown[:MAX_UNKNOWN_WARNINGS]:
        out.append(f"annotation {key} is not a HAMi input this webhook reads; nothing under DRA acts on it")
    if len(unknown) > MAX_UNKNOWN_WARNINGS:
        out.append(f"{len(unknown) - MAX_UNKNOWN_WARNINGS} more annotations under {', '.join(sorted(domains))} are not"
                   f" read either")
    return out


def _known_annotations(vendors: Iterable[Vendor]) -> Iterable[str]:
    for v in vendors:
        a = v.annotations
        yield from (k for k in (a.use_uuid, a.no_use_uuid, a.use_type, a.no_use_type, a.numa_bind) if k)
        yield from (k for k, _ in v.warned_annotations)
        yield from v.ignored_annotations
        if v.mode is not None:
            yield v.mode.annotation
