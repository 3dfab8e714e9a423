"""`SharedDeviceDriver`: the one skeleton of a driver whose devices are shared by consumable
capacity and whose shares a hook library enforces, or the device itself (hardware or vendor
partitioning: `Driver.shares_held_by_device`, no hook).

Every such driver does the same things around its vendor part: it discovers its devices once at
start (a fake backend or the real one), keeps them by published name, watches their health and
republishes on a change, refuses a claim naming a device it does not have, sums the shares of one
device in one claim (`dra.device_shares`), and gives the hook one `Quota` per visible device.
Those live here, once; a vendor driver keeps discovery, its device's edits and state, and the
mapping of a share to its hook's quota (the hooks below, each named by what only the vendor knows).
"""

from __future__ import annotations

import atexit
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol, TypeVar, cast

from dra.capacity import ShareConfig, claim_share_config, device_share_configs, device_shares, share_capacity
from dra.driver import (
    HOOK_KEY,
    AllocatedDevice,
    ClaimRef,
    Device,
    Driver,
    DriverContext,
    Enforcement,
    HealthEvent,
    Preload,
    PreparedDevice,
    PrepareError,
    Quota,
    Taint,
)
from dra.health import HasUuid, HealthWatch

D = TypeVar("D", bound=HasUuid)
Cfg = TypeVar("Cfg", bound=ShareConfig)


def shared_device(name: str, attributes: Mapping[str, Any], memory: int, pcie_root: str | None, numa_node: int | None,
                  taints: Sequence[Taint] = ()) -> Device:
    """A device shared by ``cores``/``memory`` capacity, with the standard topology attributes
    where known (``resource.kubernetes.io/pcieRoot``, ``numaNode``), so every driver of shared
    devices publishes one shape the scheduler's constraints can match across drivers."""
    attrs = dict(attributes)
    if pcie_root is not None:
        attrs["resource.kubernetes.io/pcieRoot"] = pcie_root
    if numa_node is not None:
        attrs["numaNode"] = numa_node
    return Device(name=name, attributes=attrs, capacity=share_capacity(memory), allow_multiple_allocations=True,
                  taints=tuple(taints))
C = TypeVar("C", bound="Closable")


class Closable(Protocol):
    def close(self) -> None: ...


@dataclasses.dataclass(frozen=True)
class Visible(Generic[D]):
    """One device as a claim's containers see it, with the claim's summed share of it."""

    name: str  # the published device name
    device: D  # the vendor's discovered device
    memory: int  # bytes reserved by the scheduler for this claim on this device
    cores: int  # percent, 1..100


@dataclasses.dataclass(frozen=True)
class ClaimView(Generic[D, Cfg]):
    """One claim's devices as the skeleton reads them (`SharedDeviceDriver.view`): computed once for
    its prepare and read again by `claim_edits` and `enforcement` of the same allocation."""

    allocated: tuple[AllocatedDevice, ...]
    visible: tuple[Visible[D], ...]  # container order, shares of one device summed (`visible`)
    config: Cfg  # the claim's one config (`claim_config`): claim-wide fields such as ``preload``
    held: Mapping[str, Cfg]  # by device name, the config that holds that device (`device_configs`)


MAX_VIEWS = 1024
"""Claims whose view a driver keeps (beyond it, views are computed again)."""


class SharedDeviceDriver(Driver, Generic[D, Cfg]):
    """A `Driver` for devices shared by ``cores``/``memory`` capacity, with opaque config of type
    `Cfg` (a `dra.ShareConfig`, its `config_type`); subclasses fill the hooks."""

    noun: ClassVar[str] = "device"
    """What a device is called in error messages ("GPU", "NPU")."""
    hook_stem: ClassVar[str] = "vgpu"
    """The hook library enforcing the shares, ``lib<hook_stem>.so`` (`dra.hook_library`); unused
    where `shares_held_by_device`: the driver's `prepare` makes the device hold each share (with
    `held_cores` and each `Visible`'s memory), no hook is installed or loaded, and a config that
    names how to load one (``preload``) is refused."""
    device_name: Callable[[Any], str]
    """The published name of a device (stable across restarts: claims name it); a subclass sets it."""
    usable_memory: Callable[[Any], int]
    """The bytes of a device a claim can reserve (a whole share: 100 % of ``memory``); a subclass sets it."""

    def __init__(self) -> None:
        self.by_name: dict[str, D] = {}
        self.monitor: HealthWatch | None = None
        self._closers: list[Callable[[], None]] = []
        self._views: dict[str, ClaimView[D, Cfg]] = {}  # by claim UID, the last one computed

    # --- hooks: what only the vendor knows ---------------------------------------------------------
    def discover(self, ctx: DriverContext) -> Sequence[D]:
        """Parse the settings, activate a fake backend when ``ctx.fake`` asks, and return the
        devices this node shares (once: the inventory does not change while the daemon runs)."""
        raise NotImplementedError

    def device_uuid(self, device: D) -> str:
        """The UUID the health monitor keys `device` by."""
        return str(device.uuid)

    def hook_key(self, device: D) -> str:
        """The key the hook names `device` by (its `Quota.uuid`): what the device's runtime
        reports for it inside the container. Default: its UUID."""
        return self.device_uuid(device)

    def watch_health(self, ctx: DriverContext, devices: Sequence[D]) -> HealthWatch | None:
        """The health monitor of `devices`, calling `health_changed` on a change (None: none); the
        skeleton starts it once it is `self.monitor`, so its first callback already sees it."""
        return None

    def to_devices(self, taints: Mapping[str, tuple[Taint, ...]]) -> Sequence[Device]:
        """The devices to publish, with the monitor's taints (by UUID)."""
        raise NotImplementedError

    def prepared_device(self, claim: ClaimRef, allocated: AllocatedDevice, device: D) -> PreparedDevice:
        """One allocated device's edits and checkpointed state."""
        raise NotImplementedError

    def quota(self, visible: Visible[D], cores: int, config: Cfg) -> Quota:
        """The hook's quota for one visible device: `config` is the one that holds that device
        (`device_configs`), `cores` 100 where it lifts the limit."""
        return Quota(self.hook_key(visible.device), visible.memory, cores)

    def container_order(self, visible: list[Visible[D]]) -> list[Visible[D]]:
        """The order the claim's containers number its devices in (default: allocation order)."""
        return visible

    def claim_config(self, allocated: Sequence[AllocatedDevice]) -> Cfg:
        """The claim's one config: the strictest of its requests' (`dra.claim_share_config`);
        raise `PrepareError` for configs that cannot be held together."""
        return claim_share_config(self.share_config_type(), allocated)

    def device_configs(self, allocated: Sequence[AllocatedDevice]) -> Mapping[str, Cfg]:
        """The config that holds each device, by name: the strictest of every request on it
        (`dra.device_share_configs`), so one request's config never loosens another's device."""
        return device_share_configs(self.share_config_type(), allocated)

    def share_config_type(self) -> type[Cfg]:
        """`config_type`, which a driver of shared devices sets to its `dra.ShareConfig` subclass."""
        config_type = self.config_type
        if config_type is None or not issubclass(config_type, ShareConfig):
            raise TypeError(f"{type(self).__name__}.config_type must be a dra.ShareConfig subclass, not {config_type!r}")
        return cast("type[Cfg]", config_type)

    # --- lifecycle ----------------------------------------------------------------------------
    def setup(self, ctx: DriverContext) -> None:
        super().setup(ctx)
        self.by_name = {self.device_name(d): d for d in self.discover(ctx)}
        self.monitor = self.watch_health(ctx, list(self.by_name.values()))
        if self.monitor is not None:
            self.on_close(self.monitor.stop)
            self.monitor.start()

    def on_close(self, release: Callable[[], None], at_exit: bool = False) -> None:
        """Run `release` at `close` (last registered, first run); `at_exit`: also when the process
        exits without a close (a fake backend's temporary files)."""
        self._closers.append(release)
        if at_exit:
            atexit.register(release)

    def adopt(self, resource: C, at_exit: bool = False) -> C:
        """`resource`, closed at `close` (`on_close`): a fake backend, a daemon pool, a reader."""
        self.on_close(resource.close, at_exit)
        return resource

    def close(self) -> None:
        """Stop the health monitor and release what setup made (tests; the daemon exits)."""
        while self._closers:
            release = self._closers.pop()
            atexit.unregister(release)
            release()

    def health_changed(self) -> None:
        """The monitor's callback: republish (taints) and update kubelet's health stream."""
        if self.context is None:
            return
        self.context.devices_changed()
        self.context.report_health(self.health_events())

    def health_events(self) -> list[HealthEvent]:
        """Every monitored device's health now (healthy None: not known)."""
        if self.monitor is None:
            return []
        names = {self.device_uuid(d): n for n, d in self.by_name.items()}
        return [HealthEvent(names[u], healthy, message) for u, healthy, message in self.monitor.snapshot() if u in names]

    # --- publish ------------------------------------------------------------------------------
    def devices(self) -> Sequence[Device]:
        if self.context is None:
            raise RuntimeError(f"{self.name}: devices() before setup(); the framework calls setup first")
        return self.to_devices(self.monitor.taints() if self.monitor else {})

    # --- prepare ------------------------------------------------------------------------------
    def visible(self, claim: ClaimRef, allocated: Sequence[AllocatedDevice]) -> list[Visible[D]]:
        """The claim's devices in container order, shares of one device summed; a device this node
        does not have is refused (a claim allocated from a stale ResourceSlice)."""
        for dev in allocated:
            if dev.device not in self.by_name:
                raise PrepareError(
                    f"device {dev.device} (pool {dev.pool}) is not a shared {self.noun} of this node; this node has "
                    f"{sorted(self.by_name) or 'none'}: was the claim allocated from a stale ResourceSlice?"
                )
        shares = device_shares(allocated, lambda name: self.usable_memory(self.by_name[name]), self.noun)
        return self.container_order([Visible(sh.device, self.by_name[sh.device], sh.memory, sh.cores) for sh in shares])

    def view(self, claim: ClaimRef, allocated: Sequence[AllocatedDevice]) -> ClaimView[D, Cfg]:
        """The claim's devices in container order and the configs that hold them, computed once per
        allocation: `prepare` computes it (refusing a device this node does not have, or configs that
        cannot be held together), `claim_edits` and `enforcement` of the same devices read it back."""
        allocated = tuple(allocated)
        got = self._views.get(claim.uid)
        if got is not None and got.allocated == allocated:  # the same objects, as the framework passes them
            return got
        got = ClaimView(allocated, tuple(self.visible(claim, allocated)), self.claim_config(allocated),
                        self.device_configs(allocated))
        if self.shares_held_by_device and got.config.preload:
            raise PrepareError(f"preload: {got.config.preload} names how to load a hook, and this driver's {self.noun}s"
                               " hold their shares themselves (no hook is loaded): drop preload from the claim's"
                               " (or DeviceClass's) config")
        if len(self._views) >= MAX_VIEWS:
            self._views.clear()
        self._views[claim.uid] = got
        return got

    def prepare(self, claim: ClaimRef, devices: Sequence[AllocatedDevice]) -> Sequence[PreparedDevice]:
        """Each device's `prepared_device`, its state stamped with its hook key (`dra.HOOK_KEY`)."""
        self.view(claim, devices)  # refuse before anything is written
        out = []
        for dev in devices:
            device = self.by_name[dev.device]
            p = self.prepared_device(claim, dev, device)
            out.append(dataclasses.replace(p, state={**p.state, HOOK_KEY: self.hook_key(device)}))
        return out

    def held_cores(self, view: ClaimView[D, Cfg], visible: Visible[D]) -> int:
        """The compute share `visible` is held to for the claim: its summed cores, or 100 (no limit)
        where every request on it lifts the limit (the strictest of their configs, `device_configs`,
        says ``computeLimit: false``). The one rule for the hook's quota and for a device that
        holds its shares itself."""
        return visible.cores if view.held[visible.name].compute_limit else 100

    def enforcement(self, claim: ClaimRef, prepared: Sequence[PreparedDevice]) -> Enforcement | None:
        """The hook library with one quota per visible device, in container order. Each device is
        held by the strictest config of the requests on it (`device_configs`): its compute limit
        is lifted only when every one of them lifts it, and otherwise is the summed cores of all
        of them (what the scheduler reserved for the claim on it). None where the devices hold
        their shares themselves (`shares_held_by_device`)."""
        if self.shares_held_by_device:
            return None
        from dra import hook_library

        view = self.view(claim, [p.device for p in prepared])
        quotas = [self.quota(v, self.held_cores(view, v), view.held[v.name]) for v in view.visible]
        preload = Preload(view.config.preload) if view.config.preload else None
        return Enforcement(hook_library(self.hook_stem), quotas, preload)

    def hook_libraries(self) -> Sequence[Path]:
        """The hook library, installed by the daemon at start (so a heterogeneous claim's specs
        mount one hook set); none where the devices hold their shares themselves."""
        if self.shares_held_by_device:
            return []
        from dra import hook_library

        return [hook_library(self.hook_stem)]

    def unprepare(self, claim: ClaimRef, prepared: Sequence[PreparedDevice]) -> None:
        return None  # the framework removes the claim's CDI spec, hook config and ledger
