"""What a pod asks of a vendor, as values: `Share` (one DRA request's shape), `PodPlan` (a pod's
shares, warnings and problems), the device `Inventory` they are judged against, and the bounded
reading of quantities. `translate` fills them from a pod; `claimspec` writes them as
ResourceClaimTemplates and the pod's patch.
"""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Any, Protocol

from dra._runtime.client import quantity_decimal
from dra.webhook.vendors import Items, Vendor

MANAGED_BY = "dra-webhook"
ANNOTATION_DOMAIN = "dra.project-hami.io"
SHAPE_ANNOTATION = f"{ANNOTATION_DOMAIN}/request"
CONVERTED_ANNOTATION = f"{ANNOTATION_DOMAIN}/converted"
MAX_SUBREQUESTS = 8  # firstAvailable entries per request (resource.k8s.io/v1)
MAX_REQUESTS = 32  # requests per claim (resource.k8s.io/v1): one per device, see claimspec.template_spec
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
class Alternative:
    """Another mode a share may be served in when its own has no room (a `firstAvailable`
    alternative after the share's own): HAMi's one pool of hami-core and MIG GPUs."""

    mode: str
    device_class: str
    whole: bool  # a device taken whole (MIG): no capacity requests
    selectors: tuple[str, ...]
    config: Items = ()
    class_config: Items = ()
    min_memory: int | None = None  # a whole device at least this large (bytes)

    def covers(self, other: Alternative) -> bool:
        mine, theirs = dataclasses.replace(self, min_memory=None), dataclasses.replace(other, min_memory=None)
        return mine == theirs and (other.min_memory or 0) <= (self.min_memory or 0)


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
    config: Items = ()  # the claim's own opaque config fields (priority; empty: no config written)
    class_config: Items = ()  # the class's fields, repeated in a config written (it replaces the class's)
    alternatives: tuple[Alternative, ...] = ()
    mode: str = ""  # the mode the share's own alternative is (named in firstAvailable)
    module: int = 1  # devices that go together (one module): pairs of requests share the module attribute

    def covers(self, other: Share) -> bool:
        """True when a claim of this shape satisfies `other` too: the same devices, at least its
        memory and cores (an init container may then use the app container's claim, as HAMi
        counts the larger of the two)."""
        if (self.vendor, self.count, self.selectors, self.same_numa, self.device_class, self.whole,
                self.memory_percent, self.config, self.class_config, self.module, len(self.alternatives)) != (
                other.vendor, other.count, other.selectors, other.same_numa, other.device_class, other.whole,
                other.memory_percent, other.config, other.class_config, other.module, len(other.alternatives)):
            return False
        return (_at_least(self.memory, other.memory) and _at_least(self.cores, other.cores)
                and all(a.covers(b) for a, b in zip(self.alternatives, other.alternatives, strict=True)))


def _at_least(mine: int | None, theirs: int | None) -> bool:
    """None is the whole device's."""
    return mine is None or (theirs is not None and theirs <= mine)


@dataclasses.dataclass(frozen=True)
class ContainerShare:
    container: str
    init: bool
    index: int  # position in spec.containers or spec.initContainers
    share: Share
    uses: int | None = None  # an init container on the claim of plan.shares[uses] (no claim of its own)


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
        return {dataclasses.replace(cs.share, described="") for cs in self.shares if cs.uses is None}


# --- quantities ----------------------------------------------------------------------------------

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


def whole_number(where: str, resource: str, raw: Any) -> int | str:
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


def describe_bytes(n: int) -> str:
    for unit, size in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f}Gi"
    return str(n)


def quantity_text(n: int) -> str:
    """Bytes as the shortest exact binary quantity ("3000Mi")."""
    for unit, size in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if n % size == 0 and n >= size:
            return f"{n // size}{unit}"
    return str(n)
