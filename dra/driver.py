"""The vendor interface: the one small class a DRA driver implements.

A vendor driver knows its hardware and nothing else. It lists devices, turns an allocation into
container edits, undoes them, says how a share is enforced, and optionally reports health. The
framework does everything around it: gRPC with kubelet, fetching and checking claims,
opaque-config decoding, the checkpoint, CDI files, ResourceSlice publishing, metrics, and quota
enforcement (hook library install, per-claim ledger and config, preload).

Life cycle: the framework instantiates the driver with no arguments, calls `setup` once with a
`DriverContext` (node, pool, settings, fake profile, callbacks), installs `hook_libraries`,
then calls `devices`.

Rules for implementers (enforced by import contracts and tests):
- import only `dra` (this interface), `dra.topology`, `dra.settings` and `dra.fakes`
  (`dra.testing` is for the driver's tests): no gRPC, no Kubernetes API calls, no file writes
  (the framework writes CDI, state, ledgers and hook libraries);
- read configuration from `DriverContext.settings`, not from the environment;
- `prepare` is deterministic for the same inputs and may be called again after a crash;
- `unprepare` receives exactly what `prepare` returned (edits and state, from the checkpoint),
  also when the framework rolls a failed prepare back, and must tolerate resources that are
  already gone.
Drivers register through the ``dra.drivers`` entry-point group.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

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
class CounterSet:
    """Counters that devices of the pool draw on (DRAPartitionableDevices), e.g. a GPU's memory
    slices: the scheduler allocates a device only while its consumption still fits. `counters`
    maps DNS-label names to quantities; published with the devices that consume it."""

    name: str
    counters: Mapping[str, str]


@dataclasses.dataclass(frozen=True)
class CounterConsumption:
    """What one device takes from a `CounterSet` when allocated (counter name -> quantity)."""

    counter_set: CounterSet
    counters: Mapping[str, str]


@dataclasses.dataclass(frozen=True)
class Device:
    """One device as published in this node's ResourceSlice pool."""

    name: str
    attributes: Mapping[str, AttributeValue | Version] = dataclasses.field(default_factory=dict)
    capacity: Mapping[str, Capacity] = dataclasses.field(default_factory=dict)
    allow_multiple_allocations: bool = False
    taints: tuple[Taint, ...] = ()
    consumes_counters: tuple[CounterConsumption, ...] = ()


@dataclasses.dataclass(frozen=True)
class ClaimRef:
    """The claim being prepared, as kubelet names it."""

    uid: str
    namespace: str
    name: str


@dataclasses.dataclass(frozen=True)
class DeviceKey:
    """What tells one allocated share from every other of the driver's: pool, device and share ID
    (None for a device that is not shared by consumable capacity). The one key of the claim path:
    an allocation result, a driver's prepared device and a checkpoint record of it are matched by it."""

    pool: str
    device: str
    share_id: str | None = None

    @property
    def name(self) -> str:
        """A name unique per share within the pool (``<device>-<shareID>`` or ``<device>``): two
        shares of one device never collide."""
        return f"{self.device}-{self.share_id}" if self.share_id else self.device

    def __str__(self) -> str:
        return f"{self.pool}/{self.name}"


class Keyed:
    """The `key` of a record of one allocated device (mixed into each shape the claim path gives
    one: the claim's result, `AllocatedDevice`, the checkpoint's record, `RecordedDevice`)."""

    pool: str
    device: str
    share_id: str | None

    @property
    def key(self) -> DeviceKey:
        """The share's key; ``key.name`` is unique per share: two shares of one device never collide."""
        return DeviceKey(self.pool, self.device, self.share_id)


class Allocation(Protocol):
    """One allocation result as the claim path carries it (a claim's result, a checkpoint record
    of it): what `AllocatedDevice.of` takes."""

    @property
    def request(self) -> str: ...
    @property
    def pool(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def share_id(self) -> str | None: ...
    @property
    def consumed_capacity(self) -> Mapping[str, int]: ...
    @property
    def admin_access(self) -> bool: ...


@dataclasses.dataclass(frozen=True)
class AllocatedDevice(Keyed):
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

    @classmethod
    def of(cls, allocation: Allocation, config: Any = None) -> AllocatedDevice:
        """`allocation` (a claim's result, a checkpoint record) with its decoded `config`."""
        return cls(allocation.request, allocation.pool, allocation.device, allocation.share_id,
                   dict(allocation.consumed_capacity), allocation.admin_access, config)

    @property
    def main_request(self) -> str:
        """The request name kubelet matches containers by (``main`` of ``main/sub``)."""
        return main_request(self.request)


@dataclasses.dataclass(frozen=True)
class RecordedDevice(Keyed):
    """One device of a claim in the node's checkpoint (`DriverContext.recorded`): which claim
    holds it, whether that claim is still being prepared, and the state the driver's prepare
    returned for it (empty while ``preparing``: the record is written before `Driver.prepare`)."""

    claim: ClaimRef
    phase: Literal["preparing", "prepared"]
    pool: str
    device: str
    share_id: str | None = None
    admin_access: bool = False
    state: Mapping[str, Any] = dataclasses.field(default_factory=dict)


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


HOOK_KEY = "hookKey"
"""`PreparedDevice.state` key: the device's `Quota.uuid` (`dra.SharedDeviceDriver` sets it)."""

WHOLE_MEMORY = "memory"
"""`PreparedDevice.state` key: the bytes of memory of a device allocated whole, one claim's alone
(not shared by capacity, e.g. a hardware partition: Kubernetes records no consumed capacity for its
allocation). The watchdog holds the claim's processes there to it; a shared device's quota is the
memory its allocation consumed."""


@dataclasses.dataclass(frozen=True)
class PreparedDevice:
    """The driver's answer for one allocated device.

    `state` is JSON-serialisable data the driver wants back at unprepare (the framework stores it
    in the checkpoint); keep it small. Three keys are read by the framework too: ``uuid`` (the
    physical device) and `HOOK_KEY` (the key the hook names it by, where that is not its UUID: a
    PCI bus ID, a physical ID), so the watchdog and the ledger metrics match the hook's devices;
    `WHOLE_MEMORY`, the memory of a device allocated whole (its allocation consumed no capacity),
    which the watchdog judges the claim's memory there against.
    `cdi_devices` are extra fully qualified CDI device IDs (``vendor/class=name``) that the
    container runtime resolves from other specs (e.g. a vendor toolkit's ``nvidia.com/gpu=<uuid>``);
    the framework passes them to kubelet after its own.
    """

    device: AllocatedDevice
    edits: ContainerEdits
    state: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    cdi_devices: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class HealthEvent:
    """Health of one device of this driver's pool; the framework streams the full list to kubelet
    (and names the pool itself)."""

    device: str
    healthy: bool | None  # None = unknown
    message: str = ""


@dataclasses.dataclass(frozen=True)
class DeviceProcess:
    """One process using a device, as the device's management library sees it from the host:
    what the framework's watchdog checks against the claims (`Driver.processes`)."""

    device: str
    """The published device name; with `taint_on` set, the name of a partition the driver does not
    publish (for messages and metrics: no claim holds it, so its processes are unheld)."""
    uuid: str
    """The physical device, as `Quota.uuid` names it."""
    pid: int
    """The host PID (the daemon runs in the host PID namespace)."""
    memory: int
    """Bytes of device memory the process holds, its context included."""
    utilization: float | None = None
    """Percent of the device's compute the process used since the last poll; None: not reported."""
    system: str | None = None
    """A process the driver itself runs on the device (e.g. ``"mps-server"``): not a tenant's. The
    watchdog neither judges it nor counts it in a claim. Set only from what the driver knows it
    started (its own PIDs), never from anything a process can say about itself."""
    taint_on: tuple[str, ...] | None = None
    """Only where `device` is not published: the published devices that share its hardware, which a
    ``taint`` verdict against it goes on (``()``: none does, and the verdict taints nothing, saying
    so). None: `device` is published and its own taint takes it."""


# --- enforcement: how a share is held to its quota -----------------------------------------------


class Preload(enum.Enum):
    """How the hook library gets into every process of the container."""

    FILE = "file"
    """Mount ``/etc/ld.so.preload`` listing the library: every process, also children started by
    ``su``, ``ssh`` or a shell with a clean environment, loads it. The default."""

    ENV = "env"
    """Set ``LD_PRELOAD``: processes that keep the environment load it (a clean ``env -i`` child
    does not); for images that bring their own ``/etc/ld.so.preload``."""


@dataclasses.dataclass(frozen=True)
class Quota:
    """The quota of one device visible to the claim's containers (index = position in the list).

    `uuid` names the physical device (the hook matches it, so the index the application sees
    never has to agree with the host's numbering); `memory` in bytes (None: no memory quota);
    `cores` in percent of the device's compute (100: no compute limit).
    """

    uuid: str
    memory: int | None = None
    cores: int = 100
    strict: bool = False
    """Hold throughput, not device time, to `cores` (a *strict cap*, below 100 only): each batch is
    charged its cost at the device's full-load clock, so an idle device's boost gives nothing
    extra. Costs bandwidth-bound work its boost too (hookcore/README.md, "the strict cap")."""
    full_load_mhz: int | None = None
    """Strict only: the device's sustained clock under full load, MHz (None: the hook library's
    default, which may not know it and then charges device time)."""
    clock_elasticity: float | None = None
    """Strict only: how a batch's time follows the SM clock (0: memory-bound, 1: compute-bound; at
    most 3 decimals), the value measured for the GPU model's power-bound matmul
    (measured per model by the vendor driver's bench). Given, the hook charges it and learns nothing
    over it (a throttling GPU's clock jitter taught one model ~0 and let a 70% cap reach 78.5%). None: the
    hook learns it from the claim's own batches where the clock moves, starting from 1 (the whole
    boost charged, which holds a claim whose clock never moves below its share)."""
    context_memory: int | None = None
    """Bytes of device memory one context of a process takes on this device, charged to `memory`
    once per process and once per extra context (None: contexts are not charged). The driver
    knows the figure (measured per GPU model and driver); without it a 4 GiB claim's process holds
    4 GiB of allocations plus its context."""
    device_sms: int | None = None
    """The device's SM count (streaming multiprocessors or the vendor's compute units), as the driver
    read it from the vendor's management library: the whole the hook measures a context's SM
    fraction against, so a sharing client limited to part of the device (MPS) is charged its part
    of `cores` once. Not the compute API's figure, which inside such a client answers its own part
    (None: the hook asks the compute API, which is right outside MPS and charges the full device
    time inside it)."""
    priority: Literal["high", "normal"] | None = None
    """The claim's priority on this device (HAMi's ``nvidia.com/priority``: 0 high, 1 normal): where a
    ``high`` claim has work, ``normal`` claims on the device wait, and use the device as their
    shares allow otherwise. The framework mounts the device's priority board into the claim's
    containers (writable for high, read-only for normal; hookcore/core/priority.h). None: the
    claim takes no part (no board: it neither waits nor makes others wait). Asking for high is a
    loosening: a driver honours it from a DeviceClass's config, or a claim's own where the admin
    allowed it."""


@dataclasses.dataclass(frozen=True)
class Enforcement:
    """A driver's answer to "how is this claim held to its share": the hook library serving its
    devices and one `Quota` per visible device. The framework installs the library on the host,
    writes the claim's hook config and ledger, validates them with the hook's own parser and adds
    the mounts (and the preload) to the claim's CDI spec.

    `library` is a built ``lib<stem>.so`` (e.g. from `dra.hook_library`); `preload` None means
    the daemon's ``--preload`` default.
    """

    library: Path
    quotas: Sequence[Quota]
    preload: Preload | None = None


# --- the context a driver runs in ------------------------------------------------------------------


def _ignore(*_args: Any) -> None:
    return None


@dataclasses.dataclass(frozen=True)
class DriverContext:
    """What the framework tells a driver at `Driver.setup`, and the calls it may make back.

    `settings` come from ``dra run DRIVER --set key=value`` (repeated); `fake` from ``--fake
    PROFILE_OR_FILE`` or the environment variable ``DRA_FAKE_DEVICES``: when set, the driver
    uses its fake backend (named as such) instead of hardware.
    """

    node_name: str
    pool_name: str
    settings: Mapping[str, str] = dataclasses.field(default_factory=dict)
    fake: str | None = None
    on_devices_changed: Callable[[], None] = dataclasses.field(default=_ignore, repr=False, compare=False)
    on_health: Callable[[Sequence[HealthEvent]], None] = dataclasses.field(default=_ignore, repr=False, compare=False)
    on_recorded_devices: Callable[[], Collection[str] | None] = dataclasses.field(
        default=lambda: None, repr=False, compare=False)
    on_recorded: Callable[[], Sequence[RecordedDevice] | None] = dataclasses.field(
        default=tuple, repr=False, compare=False)

    def recorded_devices(self) -> Collection[str] | None:
        """The names of this driver's devices in the node's checkpoint (claims prepared or being
        prepared), for a driver that made hardware state in prepare (e.g. a partition) and repairs it
        at start; None when unknown (no checkpoint, or a record could not be read): repair nothing."""
        return self.on_recorded_devices()

    def recorded(self) -> Sequence[RecordedDevice] | None:
        """This driver's devices in the node's checkpoint, with the claims that hold them, read now
        (claims prepared or being prepared, the caller's own included), for a driver whose devices
        must have one holder (a hardware partition it makes in prepare: refuse a second claim,
        destroy only what the record names). None when a record cannot be read (it may name any
        device); empty outside a daemon (tests, benchmarks: no checkpoint)."""
        return self.on_recorded()

    def devices_changed(self) -> None:
        """Ask the framework to call `Driver.devices()` again and republish what changed (taints
        come from `Device.taints`); cheap, may be called from any thread, coalesced."""
        self.on_devices_changed()

    def report_health(self, events: Sequence[HealthEvent]) -> None:
        """Report a full snapshot of the devices' health (every device, not a delta); kubelet's
        health streams get it at once. The push form of `Driver.health`."""
        self.on_health(list(events))

    def setting(self, key: str, default: str) -> str:
        """One ``--set`` value, or `default`."""
        return self.settings.get(key, default)


def quantity_to_int(quantity: str) -> int:
    """A Kubernetes quantity ("16Gi", "100", "1.5k") in integer base units, rounded up."""
    from dra._runtime import client  # the API client's parser, loaded on first use

    return client.quantity_to_int(quantity)


def main_request(request: str) -> str:
    """The request name kubelet matches containers by: ``main`` for a subrequest ``main/sub``."""
    return request.split("/", 1)[0]


class PrepareError(Exception):
    """A driver's refusal of one claim; the message reaches kubelet and the pod's events."""


class Driver(abc.ABC):
    """Subclass this, set the class variables, implement `devices`, `prepare` and `unprepare`."""

    context: DriverContext | None = None
    """The context given to `setup` (None before it)."""

    name: ClassVar[str]
    """The DRA driver name (a DNS subdomain), e.g. ``gpu.example.com``; equals `spec.driver`."""

    cdi_kind: ClassVar[str]
    """The CDI kind `vendor/class`, e.g. ``k8s.gpu.example.com/claim``."""

    config_type: ClassVar[type | None] = None
    """A dataclass for opaque config (decoded strictly: unknown fields are errors), or None. It
    may define ``validate(self) -> None`` raising ValueError that says what to change; prepare
    and the admission webhook both run it (`dra.decode_config`)."""

    config_api_version: ClassVar[str | None] = None
    """The `apiVersion` the opaque config must carry, e.g. ``gpu.example.com/v1alpha1``."""

    shares_held_by_device: ClassVar[bool] = False
    """Who holds a claim to its share of a shared device (`Device.allow_multiple_allocations`).
    False (the default): the hook library `enforcement` names, which the framework installs,
    configures and preloads. True: the device itself, partitioned by its hardware or by the
    vendor's driver from what `prepare` set up and its edits carry (a partition the container's
    device nodes open, the settings the vendor's runtime reads); `enforcement` answers None and no
    hook is loaded. Declared, not inferred from a None, so the conformance suite can tell a
    vendor-held share from a share nothing holds (`dra.testing.conformance`)."""

    def setup(self, ctx: DriverContext) -> None:
        """Called once, before `devices`; the default keeps `ctx` as `self.context`."""
        self.context = ctx

    @abc.abstractmethod
    def devices(self) -> Sequence[Device]:
        """The node's devices now; called at start and after each `DriverContext.devices_changed`."""

    @abc.abstractmethod
    def prepare(self, claim: ClaimRef, devices: Sequence[AllocatedDevice]) -> Sequence[PreparedDevice]:
        """Container edits for this claim's devices; raise PrepareError to refuse the claim."""

    @abc.abstractmethod
    def unprepare(self, claim: ClaimRef, prepared: Sequence[PreparedDevice]) -> None:
        """Undo `prepare`; must succeed when what it undoes is already gone."""

    def claim_edits(self, claim: ClaimRef, prepared: Sequence[PreparedDevice]) -> ContainerEdits:
        """Edits shared by all devices of the claim (e.g. a hook library mount); none by default."""
        return ContainerEdits()

    def enforcement(self, claim: ClaimRef, prepared: Sequence[PreparedDevice]) -> Enforcement | None:
        """How the claim's share is enforced (hook library and quotas), or None: not enforced, or
        held by the device itself (`shares_held_by_device`)."""
        return None

    def hook_libraries(self) -> Sequence[Path]:
        """The hook libraries `enforcement` will name. The daemon installs them at start, before
        it publishes, so every driver's library is in the node's hook set before the first claim:
        a heterogeneous claim's specs (one per driver) then mount the same set. Default: none."""
        return ()

    def processes(self) -> Sequence[DeviceProcess] | None:
        """Every process on this node's devices now (the watchdog polls it each second from one
        thread; keep it cheap), or None: the driver cannot list them and the watchdog stays off."""
        return None

    def health(self) -> Iterator[list[HealthEvent]] | None:
        """An optional blocking iterator of full health snapshots; None when not supported
        (a driver may instead push snapshots with `DriverContext.report_health`)."""
        return None
