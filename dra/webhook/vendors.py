"""The vendor mapping: which pod resources and annotations become which DRA request.

It is data (`vendors.yaml` next to this module is the shipped default; `dra webhook run
--config FILE` reads another), decoded strictly: an unknown key, a missing one or a value of
the wrong type is an error naming its place in the file, so a typo never silently disables a
vendor.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from dra._runtime.client import quantity_decimal
from dra.errors import UserError

DEFAULT_PATH = Path(__file__).with_name("vendors.yaml")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")


class VendorConfigError(UserError):
    """The vendor mapping file is malformed; the message names the place and the fix."""


Items = tuple[tuple[str, str | int | bool], ...]
"""A small mapping kept hashable (a `Vendor` is part of a `Share`, and shares are set members)."""


@dataclasses.dataclass(frozen=True)
class Resources:
    count: str
    memory: str | None = None
    memory_percentage: str | None = None
    cores: str | None = None
    ignored: tuple[str, ...] = ()
    priority: str | None = None

    def known(self) -> tuple[str, ...]:
        named = (self.count, self.memory, self.memory_percentage, self.cores, self.priority)
        return tuple(n for n in named if n) + self.ignored


@dataclasses.dataclass(frozen=True)
class Annotations:
    use_uuid: str | None = None
    no_use_uuid: str | None = None
    use_type: str | None = None
    no_use_type: str | None = None
    numa_bind: str | None = None


@dataclasses.dataclass(frozen=True)
class OtherMode:
    """A sharing mode served by claims on another DeviceClass; `whole`: its devices are allocated
    whole (memory picks a device at least that large, cores do not apply); `uuid_attribute`: the
    attribute UUID annotations match in this mode (MIG devices: their parent GPU's UUID, as HAMi
    matches); `config`: the class's config fields, repeated in a claim config the webhook writes
    for this mode (a claim's config replaces its class's)."""

    value: str
    device_class: str
    whole: bool = False
    uuid_attribute: str | None = None
    config: Items = ()


@dataclasses.dataclass(frozen=True)
class Mode:
    annotation: str
    value: str
    required_for_sharing: bool = False
    others: tuple[OtherMode, ...] = ()
    unannotated: tuple[str, ...] = ()
    """Modes a pod without the annotation may land on, in order (HAMi's one pool of hami-core and
    MIG GPUs): each becomes a `firstAvailable` alternative. Empty: `value` only. The admin's
    choice (the mapping, or ``dra webhook run --unannotated-modes``), never inferred from which
    DeviceClasses exist: a pod's claims do not change when someone creates or deletes a class."""

    @property
    def served(self) -> tuple[str, ...]:
        return (self.value, *(o.value for o in self.others))

    def other(self, value: str) -> OtherMode | None:
        return next((o for o in self.others if o.value == value), None)


@dataclasses.dataclass(frozen=True)
class MemoryOnly:
    """Where a share with memory and no compute limit goes (HAMi's ``cores`` 0: a memory quota, the
    device's compute shared freely): `device_class`, whose config lifts the compute limit, at
    `cores` consumed so that the device stays shareable; `config`: that class's config fields,
    repeated in a claim config the webhook writes for such a share."""

    device_class: str
    cores: int
    config: Items = ()


@dataclasses.dataclass(frozen=True)
class Model:
    """One model of a vendor with models (HAMi's Ascend ``vnpus`` table): the name in its resource
    names, the chip names it covers (the driver publishes `name` for them), its AI cores and
    memory (MiB), HAMi's vNPU templates (memory MiB, AI cores; the default split of a share
    without the mode annotation) and `module`, the devices one allocation takes at least."""

    name: str
    chips: tuple[str, ...] = ()
    ai_cores: int | None = None
    memory_mib: int | None = None
    templates: tuple[tuple[int, int], ...] = ()
    module: int = 1


@dataclasses.dataclass(frozen=True)
class Env:
    """Container environment variables HAMi's hook reads: `compute_policy` (HAMi-core's
    ``GPU_CORE_UTILIZATION_POLICY``: ``disable`` lifts the compute limit) and `disable_control`
    (``CUDA_DISABLE_CONTROL``: no hook at all)."""

    compute_policy: str | None = None
    disable_control: str | None = None


@dataclasses.dataclass(frozen=True)
class Profiles:
    """Resources ``<prefix><profile>: N``: N whole devices of `device_class` whose `attribute` is <profile>."""

    prefix: str
    device_class: str
    attribute: str


@dataclasses.dataclass(frozen=True)
class Vendor:
    """One vendor (or one model of a vendor): everything needed to write its DRA request."""

    name: str
    device_class: str
    driver: str
    request_name: str
    resources: Resources
    owned_prefixes: tuple[str, ...]
    memory_unit: int
    max_cores: int = 100
    default_count: int = 1
    default_cores: int | None = None
    capacity_memory: str = "memory"
    capacity_cores: str = "cores"
    uuid_attribute: str | None = None
    type_attribute: str | None = None
    model_attribute: str | None = None
    numa_attribute: str | None = None
    type_prefix: str = ""
    model: str | None = None
    annotations: Annotations = Annotations()
    mode: Mode | None = None
    ignored_annotations: tuple[str, ...] = ()
    profiles: Profiles | None = None
    memory_only: MemoryOnly | None = None
    model_info: Model | None = None
    module_attribute: str | None = None
    config_kind: tuple[str, str] | None = None  # (apiVersion, kind) of the driver's opaque config
    priorities: Items = ()  # the priority resource's values -> the config's `priority`
    env: Env = Env()
    warned_annotations: Items = ()  # annotation -> the DRA way, for a warning (and an Event)
    honoured_values: tuple[tuple[str, tuple[str, ...]], ...] = ()  # warned annotation -> values DRA does as HAMi

    def dra_way(self, annotation: str) -> str | None:
        return next((str(w) for a, w in self.warned_annotations if a == annotation), None)

    def honoured(self, annotation: str) -> tuple[str, ...]:
        return next((v for a, v in self.honoured_values if a == annotation), ())


@dataclasses.dataclass(frozen=True)
class VendorMapping:
    vendors: tuple[Vendor, ...]
    source: str = "<built-in>"

    def __post_init__(self) -> None:
        seen: dict[str, str] = {}
        names: set[str] = set()
        for v in self.vendors:
            if v.name in names:
                raise VendorConfigError(f"{self.source}: two vendors are named {v.name!r}; names must be unique")
            names.add(v.name)
            for r in v.resources.known():
                if r in seen:
                    raise VendorConfigError(
                        f"{self.source}: resource {r} belongs to both {seen[r]!r} and {v.name!r}; give it to one vendor")
                seen[r] = v.name

    def vendor_of(self, resource: str) -> Vendor | None:
        """The vendor whose resource `resource` is (count, memory, cores, ... or ignored)."""
        for v in self.vendors:
            if resource in v.resources.known():
                return v
        return None

    def profile_vendor(self, resource: str) -> Vendor | None:
        """The vendor whose profile resources (``<prefix><profile>``) `resource` is one of."""
        for v in self.vendors:
            if v.profiles is not None and resource.startswith(v.profiles.prefix) and len(resource) > len(v.profiles.prefix):
                return v
        return None

    def owns(self, resource: str) -> bool:
        """True when `resource` falls under a vendor's prefixes (known to it or not)."""
        return any(resource.startswith(p) for v in self.vendors for p in v.owned_prefixes)

    @property
    def prefixes(self) -> tuple[str, ...]:
        return tuple(sorted({p for v in self.vendors for p in v.owned_prefixes}))

    @property
    def device_classes(self) -> tuple[str, ...]:
        return tuple(sorted({v.device_class for v in self.vendors}))

    def all_resources(self) -> tuple[str, ...]:
        return tuple(r for v in self.vendors for r in v.resources.known())


def with_unannotated(mapping: VendorMapping, settings: Sequence[str]) -> VendorMapping:
    """`mapping` with `mode.unannotated` replaced as ``VENDOR=MODE[,MODE...]`` settings say (the
    flag ``dra webhook run --unannotated-modes``); ``VENDOR=`` turns the fallback off. VENDOR is
    the name in the generated objects' names (``nvidia``). Errors name the setting and the fix."""
    out = list(mapping.vendors)
    for setting in settings:
        name, sep, listed = setting.partition("=")
        modes = tuple(dict.fromkeys(m.strip() for m in listed.split(",") if m.strip()))
        hit = [i for i, v in enumerate(out) if v.name == name.strip()]
        if not sep or not hit:
            known = ", ".join(v.name for v in out if v.mode is not None and v.mode.others)
            raise VendorConfigError(f"--unannotated-modes {setting!r}: write VENDOR=MODE[,MODE...] naming a vendor of"
                                    f" {mapping.source} with more than one mode (here: {known or 'none'})")
        for i in hit:
            mode = out[i].mode
            if mode is None or not mode.others:
                raise VendorConfigError(f"--unannotated-modes {setting!r}: vendor {name!r} serves one mode only")
            bad = [m for m in modes if m not in mode.served]
            if bad:
                raise VendorConfigError(f"--unannotated-modes {setting!r}: {bad[0]!r} is not a mode of {name!r}"
                                        f" (served: {', '.join(mode.served)})")
            out[i] = dataclasses.replace(out[i], mode=dataclasses.replace(mode, unannotated=modes))
    return VendorMapping(tuple(out), mapping.source)


def load(path: Path | str | None = None) -> VendorMapping:
    """The mapping in `path` (the shipped default when None)."""
    p = Path(path) if path is not None else DEFAULT_PATH
    try:
        raw = yaml.safe_load(p.read_text())
    except OSError as e:
        raise VendorConfigError(f"cannot read the vendor mapping {p}: {e.strerror}; pass an existing file to --config") from None
    except yaml.YAMLError as e:
        raise VendorConfigError(f"{p} is not valid YAML: {e}") from None
    return parse(raw, str(p))


def parse(raw: Any, source: str = "<mapping>") -> VendorMapping:
    top = _Obj(raw, source, "")
    items = top.items("vendors", required=True)
    top.done()
    vendors: list[Vendor] = []
    for i, item in enumerate(items):
        vendors.extend(_vendor(_Obj(item, source, f"vendors[{i}]")))
    if not vendors:
        raise VendorConfigError(f"{source}: `vendors` is empty; list at least one vendor")
    return VendorMapping(tuple(vendors), source)


def _vendor(o: _Obj) -> list[Vendor]:
    name = o.required_text("name")
    models: list[Model | None] = [_model(item, o, i) for i, item in enumerate(o.items("models"))] or [None]
    device_class = o.required_text("deviceClass")
    driver = o.required_text("driver")
    request_name = o.text("requestName") or "device"
    res = o.child("resources", required=True)
    resources = (res.required_text("count"), res.text("memory"), res.text("memoryPercentage"),
                 res.text("cores"), tuple(res.items("ignored")), res.text("priority"))
    res.done()
    prefixes = tuple(o.items("ownedPrefixes"))
    unit_text = o.text("memoryUnit") or "1Mi"
    try:
        unit = int(quantity_decimal(unit_text))
    except ValueError:
        raise o.error("memoryUnit", f"{unit_text!r} is not a Kubernetes quantity; write e.g. 1Mi") from None
    max_cores = o.integer("maxCores", 100)
    default_count = o.integer("defaultCount", 1)
    default_cores = o.optional_integer("defaultCores")
    cap = o.child("capacity")
    capacity = (cap.text("memory") or "memory", cap.text("cores") or "cores")
    cap.done()
    attrs = o.child("attributes")
    attributes = (attrs.text("uuid"), attrs.text("type"), attrs.text("model"), attrs.text("numa"))
    module_attribute = attrs.text("module")
    attrs.done()
    type_prefix = o.text("typePrefix") or ""
    ann = o.child("annotations")
    annotations = (ann.text("useUUID"), ann.text("noUseUUID"), ann.text("useType"), ann.text("noUseType"),
                   ann.text("numaBind"))
    ignored_annotations = tuple(str(x) for x in ann.items("ignored"))
    warned = ann.child("warned")
    warned_annotations = tuple((str(k), warned.required_text(str(k))) for k in sorted(warned.raw))
    warned.done()
    honoured_obj = ann.child("honoured")
    honoured = tuple((str(k), tuple(str(v) for v in honoured_obj.items(str(k)))) for k in sorted(honoured_obj.raw))
    honoured_obj.done()
    ann.done()
    mode = _mode(o)
    prof = o.child("profiles")
    profiles = None
    if prof.present:
        profiles = Profiles(prof.required_text("prefix"), prof.required_text("deviceClass"),
                            prof.required_text("attribute"))
    prof.done()
    mo = o.child("memoryOnly")
    memory_only = None
    if mo.present:
        memory_only = MemoryOnly(mo.required_text("deviceClass"), mo.integer("cores", 1), mo.fields("config"))
        if not 1 <= memory_only.cores <= max_cores:
            raise mo.error("cores", f"must be 1-{max_cores} (every share costs the scheduler at least 1)")
    mo.done()
    cfg = o.child("config")
    config_kind = (cfg.required_text("apiVersion"), cfg.required_text("kind")) if cfg.present else None
    cfg.done()
    prio = o.child("priorities")
    priorities = tuple((str(k), prio.required_text(str(k))) for k in sorted(prio.raw, key=str))
    prio.done()
    if resources[5] and not (priorities and config_kind):
        raise o.error("resources", "a priority resource needs `priorities` (its values) and `config` (the driver's kind)")
    env_obj = o.child("env")
    env = Env(env_obj.text("computePolicy"), env_obj.text("disableControl"))
    env_obj.done()
    o.done()

    for attr in (*attributes, module_attribute):
        if attr is not None and "/" not in attr and not _C_IDENTIFIER.match(attr):
            raise o.error("attributes", f"{attr!r} is not an attribute name (a C identifier of at most 32 characters)")
    if not _DNS_LABEL.match(request_name):
        raise o.error("requestName", f"{request_name!r} is not a DNS label")
    if default_count < 1 or max_cores < 1:
        raise o.error("defaultCount", "defaultCount and maxCores must be at least 1")
    if models != [None] and attributes[2] is None:
        raise o.error("attributes", "a vendor with models needs attributes.model: the attribute devices are matched on")

    out = []
    for model in models:
        model_name = model.name if model is not None else None

        def sub(text: str | None, m: str | None = model_name) -> str | None:
            return text.replace("{model}", m) if text is not None and m is not None else text

        vname = model_name.lower() if model_name else name
        if not _DNS_LABEL.match(vname) or len(vname) > 40:
            raise o.error("name", f"{vname!r} must be a DNS label of at most 40 characters (it is part of object names)")
        r = Resources(sub(resources[0]) or "", sub(resources[1]), sub(resources[2]), sub(resources[3]),
                      tuple(sub(x) or "" for x in resources[4]), sub(resources[5]))
        a = Annotations(*(sub(x) for x in annotations))
        if model is not None and model.module > 1 and not module_attribute:
            raise o.error("attributes", f"model {model.name} has module {model.module}: name attributes.module, the"
                                        " attribute devices of one module share")
        out.append(Vendor(
            name=vname, device_class=device_class, driver=driver, request_name=request_name, resources=r,
            owned_prefixes=prefixes, memory_unit=unit, max_cores=max_cores, default_count=default_count,
            default_cores=default_cores, capacity_memory=capacity[0], capacity_cores=capacity[1],
            uuid_attribute=attributes[0], type_attribute=attributes[1], model_attribute=attributes[2],
            numa_attribute=attributes[3], type_prefix=type_prefix, model=model_name, annotations=a,
            mode=mode, ignored_annotations=tuple(sub(x) or "" for x in ignored_annotations), profiles=profiles,
            memory_only=memory_only, model_info=model, module_attribute=module_attribute, config_kind=config_kind,
            priorities=priorities, env=env, warned_annotations=tuple((sub(k) or "", w) for k, w in warned_annotations),
            honoured_values=tuple((sub(k) or "", v) for k, v in honoured),
        ))
    return out


def _model(item: Any, o: _Obj, i: int) -> Model:
    """A model: its name alone (chip = the name without a leading "Ascend"), or the full entry."""
    if isinstance(item, str):
        return Model(item)
    m = _Obj(item, o.source, f"{o.path}.models[{i}]")
    name = m.required_text("name")
    chips = tuple(m.items("chips"))
    if not all(isinstance(c, str) for c in chips):
        raise m.error("chips", f"chip names must be strings (quote them: YAML reads 910_9392 as a number), got {chips!r}")
    templates = []
    for j, t in enumerate(m.items("templates")):
        if (not isinstance(t, list) or len(t) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0
                                                                 for x in t)):
            raise m.error(f"templates[{j}]", f"must be [memory MiB, AI cores], two positive integers, not {t!r}")
        templates.append((int(t[0]), int(t[1])))
    ai_cores, memory = m.optional_integer("aiCores"), m.optional_integer("memory")
    module = m.integer("module", 1)
    m.done()
    if templates and not (ai_cores and memory):
        raise m.error("templates", "templates need aiCores and memory (the whole device's)")
    if any(c > (ai_cores or 0) or mem > (memory or 0) for mem, c in templates):
        raise m.error("templates", "a template cannot be larger than the device (aiCores, memory)")
    if not 1 <= module <= 8:
        raise m.error("module", f"must be 1-8, not {module}")
    return Model(name, chips, ai_cores, memory, tuple(sorted(templates)), module)


def _mode(o: _Obj) -> Mode | None:
    mode_obj = o.child("mode")
    if not mode_obj.present:
        mode_obj.done()
        return None
    others = []
    for i, item in enumerate(mode_obj.items("others")):
        other = _Obj(item, o.source, f"{mode_obj.path}.others[{i}]")
        others.append(OtherMode(other.required_text("value"), other.required_text("deviceClass"),
                                other.flag("whole", False), other.text("uuidAttribute"), other.fields("config")))
        other.done()
    mode = Mode(mode_obj.required_text("annotation"), mode_obj.required_text("value"),
                mode_obj.flag("requiredForSharing", False), tuple(others),
                tuple(str(x) for x in mode_obj.items("unannotated")))
    unknown = [m for m in mode.unannotated if m not in mode.served]
    if unknown:
        raise mode_obj.error("unannotated", f"{unknown[0]!r} is not a mode listed here (value or others)")
    mode_obj.done()
    return mode


class _Obj:
    """A mapping read key by key; `done()` rejects the keys nobody read."""

    def __init__(self, raw: Any, source: str, path: str) -> None:
        self.source, self.path = source, path
        self.present = raw is not None
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise VendorConfigError(f"{source}: {path or 'the top level'} must be a mapping, got {type(raw).__name__}")
        self.raw: Mapping[str, Any] = raw
        self.read: set[str] = set()

    def error(self, key: str, why: str) -> VendorConfigError:
        where = f"{self.path}.{key}" if self.path else key
        return VendorConfigError(f"{self.source}: {where}: {why}")

    def _get(self, key: str, required: bool) -> Any:
        self.read.add(key)
        if key not in self.raw or self.raw[key] is None:
            if required:
                raise self.error(key, "is required")
            return None
        return self.raw[key]

    def required_text(self, key: str) -> str:
        v = self.text(key, required=True)
        assert v is not None
        return v

    def text(self, key: str, required: bool = False) -> str | None:
        v = self._get(key, required)
        if v is not None and not isinstance(v, str):
            raise self.error(key, f"must be a string, got {v!r}")
        return v

    def integer(self, key: str, default: int) -> int:
        v = self.optional_integer(key)
        return default if v is None else v

    def optional_integer(self, key: str) -> int | None:
        v = self._get(key, False)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.error(key, f"must be an integer, got {v!r}")
        return v

    def flag(self, key: str, default: bool) -> bool:
        v = self._get(key, False)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self.error(key, f"must be true or false, got {v!r}")
        return v

    def items(self, key: str, required: bool = False) -> Sequence[Any]:
        v = self._get(key, required)
        if v is None:
            return []
        if not isinstance(v, list):
            raise self.error(key, f"must be a list, got {v!r}")
        return v

    def fields(self, key: str) -> Items:
        """A mapping of scalars (a config's fields), kept as sorted items."""
        v = self._get(key, False)
        if v is None:
            return ()
        if not isinstance(v, Mapping) or not all(isinstance(x, str | int | bool) for x in v.values()):
            raise self.error(key, f"must be a mapping of strings, numbers or booleans, got {v!r}")
        return tuple(sorted((str(k), x) for k, x in v.items()))

    def child(self, key: str, required: bool = False) -> _Obj:
        return _Obj(self._get(key, required), self.source, f"{self.path}.{key}" if self.path else key)

    def done(self) -> None:
        unknown = sorted(set(self.raw) - self.read)
        if unknown:
            raise self.error(unknown[0], f"unknown key (known here: {', '.join(sorted(self.read))})")
