"""One pod's HAMi-style limits as DRA requests: pure functions, no API calls.

`plan_pod(pod, mapping, inventory, classes)` reads every container and init container and
returns a `PodPlan`: per container and vendor a `Share` (what it asks of one vendor), the
warnings, and the problems that make the pod impossible (each names the container, the resource
and the fix). `claimspec.template_spec` writes the ResourceClaimTemplate spec for a share and
`claimspec.pod_patch` the pod's JSON patch (both re-exported here).

Units, as HAMi reads them: counts, memory (in the vendor's unit, MiB for HAMi) and percents are
Kubernetes quantities that must be whole numbers (the API server may hand ``3000`` over as
``3k``). Limits are read before requests (HAMi's order). Memory and cores are per device.

HAMi's meanings kept (each pinned by tests/unit/test_webhook_translate.py and the compatibility
table of examples/hami-compat/):
- memory without cores (or cores 0) is a memory quota with no compute limit on a device others
  share: a claim on the vendor's `memoryOnly` class (its config lifts the compute limit) that
  consumes `memoryOnly.cores` (1), so the device stays shareable;
- a vendor with model templates (Ascend) splits a share asked without the mode annotation and
  without cores as HAMi's default does: the memory rounded up to the smallest template that holds
  it, the template's share of AI cores as cores; a model with `module` > 1 (910C) takes whole
  modules (one device is rounded up to one module);
- with a list of modes in the mode annotation, or without the annotation where the mapping lists
  `mode.unannotated` (the admin's opt-in; shipped off), a share may land on any of those modes
  (a `firstAvailable` alternative each). Which alternatives a pod gets depends on the pod and the
  mapping only: a listed mode whose DeviceClass is known missing refuses the pod instead of
  quietly changing its claims (and the template name, a hash of them);
- an init container whose request an app container's claim covers uses that claim (HAMi counts
  the larger of the two, not their sum).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Callable, Mapping
from typing import Any

from dra.webhook import knobs
from dra.webhook import selectors as sel
from dra.webhook.claimspec import pod_claim_name, pod_patch, template_name, template_object, template_spec
from dra.webhook.shares import (
    CONVERTED_ANNOTATION,
    MANAGED_BY,
    MAX_REQUESTS,
    MAX_SHAPES_PER_POD,
    MAX_SUBREQUESTS,
    SHAPE_ANNOTATION,
    Alternative,
    ContainerShare,
    Inventory,
    NoInventory,
    PodPlan,
    QuantityTooLarge,
    Share,
    bounded_quantity,
    describe_bytes,
    quantity_text,
    whole_number,
)
from dra.webhook.vendors import Items, Vendor, VendorMapping

__all__ = [
    "CONVERTED_ANNOTATION", "MANAGED_BY", "MAX_REQUESTS", "MAX_SHAPES_PER_POD", "MAX_SUBREQUESTS", "SHAPE_ANNOTATION",
    "ClassCheck", "ContainerShare", "Inventory", "NoInventory", "PodPlan", "QuantityTooLarge", "Share",
    "bounded_quantity", "containers", "describe_bytes", "plan_pod", "pod_claim_name", "pod_patch", "template_name",
    "template_object", "template_spec",
]

ClassCheck = Callable[[str], "bool | None"]
"""Whether a DeviceClass exists: True, False (known missing) or None (not known)."""


def _unknown_classes(name: str) -> bool | None:
    return None


def containers(pod: Mapping[str, Any]) -> list[tuple[bool, int, Mapping[str, Any]]]:
    spec = pod.get("spec") or {}
    out = [(True, i, c) for i, c in enumerate(spec.get("initContainers") or [])]
    out += [(False, i, c) for i, c in enumerate(spec.get("containers") or [])]
    return out


@dataclasses.dataclass(frozen=True)
class _Pod:
    annotations: Mapping[str, str]
    inventory: Inventory
    classes: ClassCheck


def plan_pod(pod: Mapping[str, Any], mapping: VendorMapping, inventory: Inventory | None = None,
             classes: ClassCheck | None = None) -> PodPlan:
    """`classes`: whether a DeviceClass exists (the memory-only class, the alternatives' classes);
    by default not known, which keeps the memory-only class and leaves alternatives out."""
    ctx = _Pod((pod.get("metadata") or {}).get("annotations") or {}, inventory or NoInventory(),
               classes or _unknown_classes)
    plan = PodPlan()
    vendors: dict[str, Vendor] = {}
    for init, index, ctr in containers(pod):
        name = str(ctr.get("name", f"#{index}"))
        sidecar = init and ctr.get("restartPolicy") == "Always"
        kind = "init container" if init and not sidecar else "sidecar container" if sidecar else "container"
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
                plan.shares.append(ContainerShare(name, init and not sidecar, index, share))
        by_vendor: dict[str, Vendor] = {}
        for r in ours:
            v = mapping.vendor_of(r)
            if v is not None:
                by_vendor.setdefault(v.name, v)
        env = knobs.container_env(ctr)
        for vendor in by_vendor.values():
            vendors.setdefault(vendor.name, vendor)
            share = _share(where, vendor, limits, requests, env, ctx, plan)
            if share is not None:
                plan.shares.append(ContainerShare(name, init and not sidecar, index, share))
    if plan.stripped:
        plan.problems += knobs.privileged(pod)
        plan.warnings += knobs.annotation_warnings(ctx.annotations, mapping, tuple(vendors.values()))
    _init_containers(plan)
    return plan


def _init_containers(plan: PodPlan) -> None:
    """An init container runs before the app containers, so HAMi counts the larger of its request
    and theirs: where an app container's claim covers the init container's request, the init
    container uses that claim; else it keeps its own, held beside the app's for the pod's life."""
    for i, cs in enumerate(plan.shares):
        if not cs.init:
            continue
        same = [(j, app) for j, app in enumerate(plan.shares) if not app.init and app.share.vendor == cs.share.vendor]
        cover = next((j for j, app in same if app.share.covers(cs.share)), None)
        if cover is not None:
            plan.shares[i] = dataclasses.replace(cs, uses=cover)
        elif same:
            plan.warnings.append(
                f"init container {cs.container!r}: its {cs.share.vendor.name} request is larger than any app container's,"
                f" so its own claim is held beside theirs for the pod's life (HAMi counts the larger one); ask no more"
                f" than an app container does and it uses that container's claim")


def _profile_share(where: str, resource: str, mapping: VendorMapping, limits: Mapping[str, Any],
                   requests: Mapping[str, Any], plan: PodPlan) -> Share | None:
    """``nvidia.com/mig-1g.18gb: 2``: two whole devices of that profile."""
    v = mapping.profile_vendor(resource)
    assert v is not None and v.profiles is not None
    raw = limits.get(resource, requests.get(resource))
    count = whole_number(where, resource, raw)
    if isinstance(count, str):
        plan.problems.append(count)
        return None
    if count == 0:
        return None
    if count > MAX_REQUESTS:
        plan.problems.append(f"{where}: {resource}={count} asks for more than {MAX_REQUESTS} devices (the requests"
                             f" of one claim); ask for at most {MAX_REQUESTS}")
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


@dataclasses.dataclass
class _Ask:
    """One container's request of one vendor while it is being read."""

    count: int
    memory: int | None  # bytes
    percent: int | None
    cores: int | None
    cores_given: bool  # the cores resource is there (0 included)
    device_class: str | None = None
    whole: bool = False
    config: Items = ()  # the claim's own (priority)
    class_config: Items = ()  # the chosen class's, repeated when a config is written
    mode: str = ""
    alternatives: tuple[str, ...] = ()  # other modes to offer after the share's own


def _share(where: str, v: Vendor, limits: Mapping[str, Any], requests: Mapping[str, Any],
           env: Mapping[str, str | None], ctx: _Pod, plan: PodPlan) -> Share | None:
    r = v.resources

    def value(name: str | None) -> int | None:
        if name is None:
            return None
        raw = limits.get(name, requests.get(name))
        if raw is None:
            return None
        got = whole_number(where, name, raw)
        if isinstance(got, str):
            plan.problems.append(got)
            return None
        return got

    problems_before = len(plan.problems)
    count, memory_units, percent, cores = value(r.count), value(r.memory), value(r.memory_percentage), value(r.cores)
    priority = value(r.priority)
    for ign in r.ignored:
        if ign in limits or ign in requests:
            plan.warnings.append(f"{where}: {ign} is not supported by the DRA drivers and was removed")
    given = {n: x for n, x in ((r.memory, memory_units), (r.memory_percentage, percent), (r.cores, cores))
             if n is not None and x is not None}
    described = ", ".join(f"{n}={limits.get(n, requests.get(n))}"
                          for n in (r.count, r.memory, r.memory_percentage, r.cores, r.priority)
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
    if memory_units == 0:  # HAMi: 0 is "not given", the whole memory (or the percentage)
        plan.warnings.append(f"{where}: {r.memory}=0 means no memory limit (as in HAMi): the whole device's memory")
        memory_units = None
    if memory_units is not None:
        memory = memory_units * v.memory_unit
        if percent is not None:
            plan.warnings.append(f"{where}: {r.memory_percentage} is ignored because {r.memory} is set (as in HAMi)")
            percent = None
    if percent == 0:
        plan.warnings.append(f"{where}: {r.memory_percentage}=0 means no memory limit (as in HAMi): the whole"
                             f" device's memory")
        percent = None
    if percent is not None and not 1 <= percent <= 100:
        plan.problems.append(f"{where}: {r.memory_percentage}={percent} must be 1-100 (percent of one device's memory)")
    if percent == 100:
        percent = None
    cores_given = r.cores is not None and (r.cores in limits or r.cores in requests)
    if cores is not None:
        if cores > v.max_cores:
            plan.problems.append(f"{where}: {r.cores}={cores} is more than a device has ({v.max_cores}, percent of one "
                                 f"device's compute); set it to 1-{v.max_cores}, or ask for more devices")
        elif cores == 0:
            cores = None  # HAMi: no compute limit
    ask = _Ask(count, memory, percent, cores, cores_given)

    _mode(where, v, ctx, ask, plan)
    _memory_only(where, v, ctx, ask, plan)
    knobs.env_knobs(where, v, env, ask.memory is not None or ask.percent is not None or ask.cores is not None,
                    ask.whole, plan)
    if v.env.compute_policy and (env.get(v.env.compute_policy) or "").strip().lower() == "disable":
        _lift_compute_limit(where, v, ctx, ask, plan)
    _templates(where, v, ctx, ask, plan)
    _module(where, v, ask, plan)
    if priority is not None:
        ask.config = _priority(where, v, priority, ask.config, plan)

    same_numa = _numa(where, v, ctx.annotations, ask.count, plan)
    selectors = _selectors(where, v, ctx.annotations, plan, _uuid_attribute(v, ask.mode))
    _sizes(where, v, ctx.inventory, ask, limits, requests, plan)
    if len(plan.problems) > problems_before:
        return None
    alternatives = tuple(alt for mode in ask.alternatives
                         if (alt := _alternative(where, v, mode, ask, ctx, plan, priority)) is not None)
    if len(plan.problems) > problems_before:
        return None
    if ask.whole and ask.memory is not None:  # a device at least that large, taken whole
        selectors.append(_at_least_selector(v, ask.memory))
        ask.memory = None
    return Share(v, ask.count, ask.memory, ask.percent, ask.cores, tuple(selectors), same_numa, described,
                 ask.device_class, ask.whole, ask.config, ask.class_config, alternatives,
                 ask.mode or (v.mode.value if v.mode else ""), v.model_info.module if v.model_info else 1)


def _at_least_selector(v: Vendor, memory: int) -> str:
    return sel.at_least_selector(sel.capacity(v.driver, v.capacity_memory), quantity_text(memory))


def _mode(where: str, v: Vendor, ctx: _Pod, ask: _Ask, plan: PodPlan) -> None:
    """The sharing mode from the mode annotation: the vendor's own (`mode.value`) on its class,
    another on that mode's class; a list (or no annotation, with `mode.unannotated`) offers the
    others as alternatives, as HAMi places a pod on any GPU of the modes it allows."""
    if v.mode is None:
        return
    raw = ctx.annotations.get(v.mode.annotation)
    if raw is None:
        modes = v.mode.unannotated or (v.mode.value,)
    else:
        modes = tuple(dict.fromkeys(m.strip() for m in raw.split(",")))
        bad = [m for m in modes if m not in v.mode.served]
        if bad:
            served = ", ".join(repr(m) for m in v.mode.served)
            plan.problems.append(f"{where}: annotation {v.mode.annotation}={raw!r} asks for a mode the DRA drivers do"
                                 f" not serve; served: {served} (set one or remove the annotation)")
            return
    own = v.mode.value if v.mode.value in modes else modes[0]
    ask.mode = own
    ask.alternatives = tuple(m for m in modes if m != own)
    other = v.mode.other(own)
    if other is None:
        sharing = ask.memory is not None or ask.percent is not None or ask.cores_given
        if raw is None and v.mode.required_for_sharing and sharing and not (v.model_info and v.model_info.templates):
            plan.problems.append(f"{where}: a share of a device needs the annotation {v.mode.annotation}: {v.mode.value}"
                                 f" (template-based splitting is not served); add it, or ask for whole devices only")
        return
    ask.device_class, ask.whole, ask.class_config = other.device_class, other.whole, other.config
    if other.whole:
        if ask.cores_given:
            plan.warnings.append(f"{where}: {v.resources.cores} does not apply in mode {other.value!r} (a whole device's"
                                 f" compute is its own) and was removed")
        ask.cores = None
        if ask.percent is not None:
            plan.problems.append(f"{where}: {v.resources.memory_percentage} cannot pick a device in mode "
                                 f"{other.value!r}; give {v.resources.memory} (the smallest device size that fits)")


def _memory_only(where: str, v: Vendor, ctx: _Pod, ask: _Ask, plan: PodPlan) -> None:
    """Memory without cores (or cores 0): HAMi's memory quota with no compute limit, on a device
    others share. On the vendor's own mode: the `memoryOnly` class at its small `cores`."""
    share = ask.memory is not None or ask.percent is not None
    if ask.whole or ask.cores is not None or not share:
        return
    if v.model_info is not None and v.model_info.templates and not _soft(v, ctx, ask):
        return  # HAMi's default split: `_templates` gives the template's cores
    mo = v.memory_only
    own = v.mode is None or ask.mode == v.mode.value
    if mo is not None and own:
        if ctx.classes(mo.device_class) is not False:
            ask.device_class, ask.cores, ask.class_config = mo.device_class, mo.cores, mo.config
            return
        plan.warnings.append(f"{where}: DeviceClass {mo.device_class} (memory-only shares) does not exist, so this"
                             f" share takes the device's whole compute and no one else can share it; the admin"
                             f" creates it (examples/hami-compat/deviceclasses.yaml)")
    ask.cores = v.default_cores
    if ask.cores is None and (mo is None or not own):
        plan.warnings.append(f"{where}: without {v.resources.cores} this share takes the device's whole compute (no"
                             f" memory-only class{'' if own else f' in mode {ask.mode!r}'}); give {v.resources.cores}"
                             f" to share the device")


def _lift_compute_limit(where: str, v: Vendor, ctx: _Pod, ask: _Ask, plan: PodPlan) -> None:
    """``GPU_CORE_UTILIZATION_POLICY=disable``: no compute limit, the share's cores still reserved."""
    mo = v.memory_only
    own = v.mode is None or ask.mode == v.mode.value
    name = v.env.compute_policy
    if ask.whole or (ask.cores is None and ask.memory is None and ask.percent is None):
        return  # a whole device: nothing limits it anyway
    if mo is None or not own:
        plan.warnings.append(f"{where}: env {name}=disable is not applied in mode {ask.mode!r}; the compute limit stays")
        return
    if ctx.classes(mo.device_class) is False:
        plan.warnings.append(f"{where}: env {name}=disable needs DeviceClass {mo.device_class}, which does not exist;"
                             f" the compute limit stays")
        return
    ask.device_class, ask.class_config = mo.device_class, mo.config
    if ask.cores is None:
        ask.cores = mo.cores


def _soft(v: Vendor, ctx: _Pod, ask: _Ask) -> bool:
    """A vendor with templates shares softly (memory as given) with the mode annotation or cores."""
    return ask.cores_given or (v.mode is not None and v.mode.annotation in ctx.annotations)


def _templates(where: str, v: Vendor, ctx: _Pod, ask: _Ask, plan: PodPlan) -> None:
    """HAMi's default split (no mode annotation, no cores): the smallest template that holds the
    memory, its share of the AI cores as cores; past the largest template, the whole device."""
    model = v.model_info
    if model is None or not model.templates or ask.memory is None or _soft(v, ctx, ask):
        return
    assert model.ai_cores is not None and model.memory_mib is not None
    mib = ask.memory // (1 << 20) + (ask.memory % (1 << 20) > 0)
    fit = next(((m, c) for m, c in model.templates if mib <= m), None)
    if fit is None:
        if mib > model.memory_mib:
            plan.problems.append(f"{where}: {v.resources.memory}={mib} is more than a {model.name} has ({model.memory_mib}"
                                 f" MiB); ask for at most that, or for the whole device without {v.resources.memory}")
        ask.memory = ask.cores = None  # HAMi: the whole device
        return
    if ask.count > 1:
        plan.problems.append(f"{where}: a vNPU template share ({v.resources.memory}={mib}) is one device's (HAMi: vNPU"
                             f" is not supported for multiple devices); ask for 1, or add {v.mode.annotation if v.mode else ''}"
                             f": hami-core to share several devices")
        return
    ask.memory, ask.cores = fit[0] << 20, math.ceil(fit[1] * 100 / model.ai_cores)


def _module(where: str, v: Vendor, ask: _Ask, plan: PodPlan) -> None:
    """A model allocated in modules (910C: two dies): one device is one module, as HAMi rounds;
    another count not a multiple of the module is refused, as HAMi refuses it."""
    module = v.model_info.module if v.model_info else 1
    if module < 2 or ask.count % module == 0:
        return
    if ask.count == 1:
        ask.count = module
        plan.warnings.append(f"{where}: {v.resources.count}=1 is rounded up to {module}, one whole module (as HAMi does)")
        return
    plan.problems.append(f"{where}: {v.resources.count}={ask.count} must be 1 or a multiple of {module} (a module's"
                         f" devices are allocated together)")


def _priority(where: str, v: Vendor, priority: int, config: Items, plan: PodPlan) -> Items:
    wanted = dict(v.priorities).get(str(priority))
    if wanted is None:
        known = ", ".join(f"{k} ({p})" for k, p in v.priorities)
        plan.problems.append(f"{where}: {v.resources.priority}={priority} is not a priority; HAMi's are {known}")
        return config
    return tuple(sorted({**dict(config), "priority": wanted}.items()))


def _alternative(where: str, v: Vendor, mode: str, ask: _Ask, ctx: _Pod, plan: PodPlan,
                 priority: int | None) -> Alternative | None:
    """`mode` as a further `firstAvailable` alternative of the share, where it can say the same (a
    whole device (MIG) needs the memory, a minimum size; a percentage has no alternative). Offered
    by the pod's annotation, it is left out while its class is known missing. Offered by the
    mapping (`mode.unannotated`, the admin's choice), it is written whether or not the class is
    known, and a known missing class refuses the pod: kube-scheduler cannot allocate a claim naming
    a missing class, and quietly leaving it out would give the same pod other claims (and another
    template) depending on which classes someone created, which a planted template and a user's
    expectations both trip over."""
    assert v.mode is not None
    explicit = v.mode.annotation in ctx.annotations
    other = v.mode.other(mode)
    if ask.percent is not None or (other is not None and other.whole and ask.memory is None):
        return None
    device_class = other.device_class if other else (v.memory_only.device_class if v.memory_only and ask.cores is None
                                                      else v.device_class)
    if ctx.classes(device_class) is False:
        if not explicit:
            plan.problems.append(
                f"{where}: without {v.mode.annotation} this share may also land in mode {mode!r} (the webhook's mapping,"
                f" mode.unannotated), but DeviceClass {device_class} does not exist; set {v.mode.annotation}: {ask.mode}"
                f" on the pod, or have the admin create the class or take {mode!r} out of mode.unannotated")
        return None
    quiet = PodPlan()  # the annotations' problems are the share's own, reported once
    selectors = _selectors("", v, ctx.annotations, quiet, _uuid_attribute(v, mode))
    class_config: Items = other.config if other else ()
    config = _priority("", v, priority, (), quiet) if priority is not None else ()
    if other is not None and other.whole:
        assert ask.memory is not None
        return Alternative(mode, device_class, True, tuple(selectors), config, class_config, ask.memory)
    return Alternative(mode, device_class, False, tuple(selectors), config, class_config)


def _uuid_attribute(v: Vendor, mode: str) -> str | None:
    other = v.mode.other(mode) if v.mode is not None else None
    return (other.uuid_attribute if other is not None and other.uuid_attribute else None) or v.uuid_attribute


def _sizes(where: str, v: Vendor, inventory: Inventory, ask: _Ask, limits: Mapping[str, Any],
           requests: Mapping[str, Any], plan: PodPlan) -> None:
    r = v.resources
    sizes = inventory.memory_sizes(v.driver, v.capacity_memory)
    if ask.memory is not None and sizes and ask.memory > sizes[0]:
        raw = str(limits.get(r.memory or "", requests.get(r.memory or "")))
        hint = (f" ({r.memory} counts {_unit(v)}: {raw} is not a size, write e.g. {3 * (1 << 30) // v.memory_unit} "
                f"for 3 GiB)") if raw[-1:] in "iMGTPE" else ""
        plan.problems.append(f"{where}: {r.memory}={ask.memory // v.memory_unit} ({describe_bytes(ask.memory)}) is more"
                             f" than any published {v.device_class} device has (largest: {describe_bytes(sizes[0])} = "
                             f"{sizes[0] // v.memory_unit} {_unit(v)}); ask for at most that{hint}")
    if ask.percent is not None:
        if not sizes:
            plan.problems.append(f"{where}: {r.memory_percentage}={ask.percent} needs the device sizes, but no "
                                 f"{v.driver} device is published yet; give {r.memory} instead, or retry once the "
                                 f"driver runs")
        elif len(sizes) > MAX_SUBREQUESTS:
            plan.problems.append(f"{where}: {r.memory_percentage} cannot be written for {len(sizes)} different device "
                                 f"sizes (at most {MAX_SUBREQUESTS}); give {r.memory} instead")


def _selectors(where: str, v: Vendor, annotations: Mapping[str, str], plan: PodPlan,
               uuid_attribute: str | None = None) -> list[str]:
    a = v.annotations
    out: list[str] = []
    if v.model is not None and v.model_attribute:
        out.append(sel.equals_selector(sel.attribute(v.driver, v.model_attribute), v.model))
    def listed(key: str | None) -> tuple[str, ...]:
        if not key or key not in annotations:
            return ()
        warning = sel.list_warning(key, annotations[key])
        if warning and where and f"{where}: {warning}" not in plan.warnings:
            plan.warnings.append(f"{where}: {warning}")
        return sel.split_list(key, annotations[key])

    use_uuid, no_uuid = listed(a.use_uuid), listed(a.no_use_uuid)
    use_type, no_type = listed(a.use_type), listed(a.no_use_type)
    uuid_attribute = uuid_attribute or v.uuid_attribute
    if (use_uuid or no_uuid) and uuid_attribute:
        out += sel.uuid_selectors(sel.attribute(v.driver, uuid_attribute), use_uuid, no_uuid)
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
    if raw not in _TRUE | _FALSE:  # HAMi: ParseBool fails, not enforced
        plan.warnings.append(f"{where}: annotation {key}={knobs.shown(raw)} is not true or false, so (as in HAMi)"
                             f" devices may span NUMA nodes; write true to keep them on one")
        return False
    if raw in _FALSE or count < 2:
        return False
    if not v.numa_attribute:
        plan.warnings.append(f"{where}: {key} is not supported for {v.device_class} (no NUMA attribute is published)")
        return False
    return True


def _unit(v: Vendor) -> str:
    return {1 << 20: "MiB", 1 << 30: "GiB", 1 << 10: "KiB", 1: "bytes"}.get(v.memory_unit, f"{v.memory_unit} bytes")
