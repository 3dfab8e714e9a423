"""The vendor interface: the one small class a DRA driver implements.

A vendor driver knows its hardware and nothing else. It lists devices, turns an allocation into
container edits, undoes them, and optionally streams health. The framework does everything
around it: gRPC with kubelet, fetching and checking claims, opaque-config decoding, the
checkpoint, CDI files, ResourceSlice publishing, metrics.

Rules for implementers (enforced by import contracts and tests):
- no gRPC, no Kubernetes API calls, no file writes (the framework writes CDI and state);
- `prepare` is deterministic for the same inputs and may be called again after a crash;
- `unprepare` receives exactly what `prepare` returned (from the checkpoint) and must tolerate
  resources that are already gone.
Drivers register through the ``dra.drivers`` entry-point group.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

AttributeValue = str | int | bool
"""A device attribute: string, int or bool; versions are strings marked with `Version`."""


@dataclasses.dataclass(frozen=True)
class Version:
    """A semantic-version attribute (`version:` in the ResourceSlice), e.g. ``Version("12.9.0")``."""

    value: str


@dataclasses.dataclass(frozen=True)
class RequestPolicy:
    """How the scheduler may carve a consumable capacity (resource.k8s.io/v1 CapacityRequestPolicy).

    Quantities are Kubernetes quantity strings ("100", "16Gi", "1Mi"). Give either a range
    (`min`, optional `max` and `step`) or `valid_values`, not both.
    """

    default: str | None = None
    min: str | None = None
    max: str | None = None
    step: str | None = None
    valid_values: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Capacity:
    """One capacity of a device: its total `value` and, for shared devices, a request policy."""

    value: str
    policy: RequestPolicy | None = None


@dataclasses.dataclass(frozen=True)
class Taint:
    """A device taint (DRADeviceTaints): effect is NoSchedule or NoExecute."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclasses.dataclass(frozen=True)
class Device:
    """One device as published in this node's ResourceSlice pool."""

    name: str
    attributes: Mapping[str, AttributeValue | Version] = dataclasses.field(default_factory=dict)
    capacity: Mapping[str, Capacity] = dataclasses.field(default_factory=dict)
    allow_multiple_allocations: bool = False
    taints: tuple[Taint, ...] = ()


@dataclasses.dataclass(frozen=True)
class ClaimRef:
    """The claim being prepared, as kubelet names it."""

    uid: str
    namespace: str
    name: str


@dataclasses.dataclass(frozen=True)
class AllocatedDevice:
    """One allocation result of this driver in a claim, with its decoded opaque config.

    `consumed_capacity` holds integer base units (cores in percent, memory in bytes);
    `share_id` is set when the device allows multiple allocations (consumable capacity).
    `config` is the driver's decoded config object for this request (the driver's
    `config_type`), or None when no config applies.
    """

    request: str
    pool: str
    device: str
    share_id: str | None = None
    consumed_capacity: Mapping[str, int] = dataclasses.field(default_factory=dict)
    admin_access: bool = False
    config: Any = None

    @property
    def key(self) -> str:
        """A name unique per share: two shares of one device never collide."""
        return f"{self.device}-{self.share_id}" if self.share_id else self.device


@dataclasses.dataclass(frozen=True)
class Mount:
    host_path: str
    container_path: str
    options: tuple[str, ...] = ("ro", "nosuid", "nodev", "bind")


@dataclasses.dataclass(frozen=True)
class DeviceNode:
    path: str
    host_path: str | None = None
    permissions: str | None = None


@dataclasses.dataclass(frozen=True)
class ContainerEdits:
    """What the container runtime applies for one device (written to CDI by the framework)."""

    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()


@dataclasses.dataclass(frozen=True)
class PreparedDevice:
    """The driver's answer for one allocated device.

    `state` is JSON-serialisable data the driver wants back at unprepare (the framework stores it
    in the checkpoint); keep it small.
    """

    device: AllocatedDevice
    edits: ContainerEdits
    state: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class HealthEvent:
    """Health of one device; the framework streams the full list to kubelet."""

    pool: str
    device: str
    healthy: bool | None  # None = unknown
    message: str = ""


def quantity_to_int(quantity: str) -> int:
    """A Kubernetes quantity ("16Gi", "100", "1.5k") in integer base units, rounded up."""
    import math

    from kubernetes.utils import parse_quantity

    return math.ceil(parse_quantity(quantity))


class PrepareError(Exception):
    """A driver's refusal of one claim; the message reaches kubelet and the pod's events."""


class Driver(abc.ABC):
    """Subclass this, set the class variables, implement `devices`, `prepare` and `unprepare`."""

    name: ClassVar[str]
    """The DRA driver name (a DNS subdomain), e.g. ``gpu.example.com``; equals `spec.driver`."""

    cdi_kind: ClassVar[str]
    """The CDI kind `vendor/class`, e.g. ``k8s.gpu.example.com/claim``."""

    config_type: ClassVar[type | None] = None
    """A dataclass for opaque config (decoded strictly: unknown fields are errors), or None."""

    config_api_version: ClassVar[str | None] = None
    """The `apiVersion` the opaque config must carry, e.g. ``gpu.example.com/v1alpha1``."""

    @abc.abstractmethod
    def devices(self) -> Sequence[Device]:
        """The node's devices now; called at start and whenever `devices_changed` fires."""

    @abc.abstractmethod
    def prepare(self, claim: ClaimRef, devices: Sequence[AllocatedDevice]) -> Sequence[PreparedDevice]:
        """Container edits for this claim's devices; raise PrepareError to refuse the claim."""

    @abc.abstractmethod
    def unprepare(self, claim: ClaimRef, prepared: Sequence[PreparedDevice]) -> None:
        """Undo `prepare`; must succeed when what it undoes is already gone."""

    def claim_edits(self, claim: ClaimRef, prepared: Sequence[PreparedDevice]) -> ContainerEdits:
        """Edits shared by all devices of the claim (e.g. a hook library mount); none by default."""
        return ContainerEdits()

    def health(self) -> Iterator[list[HealthEvent]] | None:
        """An optional blocking iterator of full health snapshots; None when not supported."""
        return None

    def validate_config(self, config: Any) -> None:  # noqa: B027 - optional hook
        """Check a decoded config beyond its types; raise ValueError with a clear message."""
