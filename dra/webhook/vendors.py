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


@dataclasses.dataclass(frozen=True)
class Resources:
    count: str
    memory: str | None = None
    memory_percentage: str | None = None
    cores: str | None = None
    ignored: tuple[str, ...] = ()

    def known(self) -> tuple[str, ...]:
        return tuple(n for n in (self.count, self.memory, self.memory_percentage, self.cores) if n) + self.ignored


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
    whole (memory picks a device at least that large, cores do not apply)."""

    value: str
    device_class: str
    whole: bool = False


@dataclasses.dataclass(frozen=True)
class Mode:
    annotation: str
    value: str
    required_for_sharing: bool = False
    others: tuple[OtherMode, ...] = ()

    @property
    def served(self) -> tuple[str, ...]:
        return (self.value, *(o.value for o in self.others))


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
    models = o.items("models") or [None]
    device_class = o.required_text("deviceClass")
    driver = o.required_text("driver")
    request_name = o.text("requestName") or "device"
    res = o.child("resources", required=True)
    resources = (res.required_text("count"), res.text("memory"), res.text("memoryPercentage"),
                 res.text("cores"), tuple(res.items("ignored")))
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
    attrs.done()
    type_prefix = o.text("typePrefix") or ""
    ann = o.child("annotations")
    annotations = (ann.text("useUUID"), ann.text("noUseUUID"), ann.text("useType"), ann.text("noUseType"),
                   ann.text("numaBind"))
    ignored_annotations = tuple(str(x) for x in ann.items("ignored"))
    ann.done()
    mode_obj = o.child("mode")
    mode: tuple[str, str, bool, tuple[OtherMode, ...]] | None = None
    if mode_obj.present:
        others = []
        for i, item in enumerate(mode_obj.items("others")):
            other = _Obj(item, o.source, f"{mode_obj.path}.others[{i}]")
            others.append(OtherMode(other.required_text("value"), other.required_text("deviceClass"),
                                    other.flag("whole", False)))
            other.done()
        mode = (mode_obj.required_text("annotation"), mode_obj.required_text("value"),
                mode_obj.flag("requiredForSharing", False), tuple(others))
    mode_obj.done()
    prof = o.child("profiles")
    profiles = None
    if prof.present:
        profiles = Profiles(prof.required_text("prefix"), prof.required_text("deviceClass"),
                            prof.required_text("attribute"))
    prof.done()
    o.done()

    for attr in attributes:
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
        if model is not None and not isinstance(model, str):
            raise o.error("models", f"models must be strings, got {model!r}")

        def sub(text: str | None, m: str | None = model) -> str | None:
            return text.replace("{model}", m) if text is not None and m is not None else text

        vname = model.lower() if model else name
        if not _DNS_LABEL.match(vname) or len(vname) > 40:
            raise o.error("name", f"{vname!r} must be a DNS label of at most 40 characters (it is part of object names)")
        r = Resources(sub(resources[0]) or "", sub(resources[1]), sub(resources[2]), sub(resources[3]),
                      tuple(sub(x) or "" for x in resources[4]))
        a = Annotations(*(sub(x) for x in annotations))
        out.append(Vendor(
            name=vname, device_class=device_class, driver=driver, request_name=request_name, resources=r,
            owned_prefixes=prefixes, memory_unit=unit, max_cores=max_cores, default_count=default_count,
            default_cores=default_cores, capacity_memory=capacity[0], capacity_cores=capacity[1],
            uuid_attribute=attributes[0], type_attribute=attributes[1], model_attribute=attributes[2],
            numa_attribute=attributes[3], type_prefix=type_prefix, model=model, annotations=a,
            mode=Mode(*mode) if mode else None,
            ignored_annotations=tuple(sub(x) or "" for x in ignored_annotations), profiles=profiles,
        ))
    return out


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

    def child(self, key: str, required: bool = False) -> _Obj:
        return _Obj(self._get(key, required), self.source, f"{self.path}.{key}" if self.path else key)

    def done(self) -> None:
        unknown = sorted(set(self.raw) - self.read)
        if unknown:
            raise self.error(unknown[0], f"unknown key (known here: {', '.join(sorted(self.read))})")
