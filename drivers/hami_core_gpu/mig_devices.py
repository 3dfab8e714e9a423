"""The MIG half of the driver: which MIG devices this node publishes (``--set mig=``), their
prepare and unprepare, and the names their processes are reported under (`published`). Kept apart
from `driver.py` because none of it is hook sharing: the hardware isolates a MIG device, so it has
no share, no hook quota and no health of its own (a MIG device is as healthy as its GPU)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence

from dra import (
    WHOLE_MEMORY,
    AllocatedDevice,
    ClaimRef,
    Device,
    DriverContext,
    PreparedDevice,
    PrepareError,
    RecordedDevice,
    Taint,
)
from drivers.hami_core_gpu import devices, edits, mig, nvml
from drivers.hami_core_gpu.config import GpuConfig
from drivers.hami_core_gpu.fake import FakeBackend
from drivers.hami_core_gpu.settings import Settings

log = logging.getLogger(__name__)


class MigDevices:
    """The node's MIG devices: static (the existing instances) or dynamic (every placement)."""

    def __init__(self, settings: Settings, inventory: nvml.Inventory, fake: FakeBackend | None) -> None:
        self.settings, self.inventory, self.fake = settings, inventory, fake
        self.devices: list[Device] = []
        self.static: dict[str, mig.MigDevice] = {}
        self.dynamic: dict[str, tuple[nvml.Gpu, mig.Profile, int]] = {}
        self._made: dict[str, str] = {}  # dynamic: MIG UUID -> device, the instances prepared claims hold
        self.ctx = DriverContext("", "")  # set by setup; this one records no claims

    def setup(self, ctx: DriverContext) -> MigDevices:
        """MIG GPUs: discover their profiles and devices, publish them per the ``mig`` setting."""
        self.ctx = ctx
        gpus = [g for g in self.inventory.gpus if g.mig_enabled]
        if not gpus:
            return self
        if self.settings.mig == "off":
            for g in gpus:
                log.warning("GPU in MIG mode left out (mig=off; static or dynamic publish its MIG devices)",
                            extra={"uuid": g.uuid})
            return self
        found = mig.discover([g.uuid for g in gpus])
        if self.fake is not None and self.settings.mig == "static" and self.fake.seed_static_mig(found):
            found = mig.discover([g.uuid for g in gpus])
        if self.settings.mig == "dynamic":
            self._repair(ctx, gpus, found)
        for g in gpus:
            parent = dict(devices.to_device(g, self.inventory).attributes)
            if self.settings.mig == "static":
                self.devices += mig.static_devices(g, parent, found[g.uuid])
                self.static.update({mig.device_name(g.minor, d.profile, d.start, d.compute_instance): d
                                    for d in found[g.uuid].devices})
            else:
                self.devices += mig.dynamic_devices(g, parent, found[g.uuid])
                self.dynamic.update({mig.device_name(g.minor, p, start): (g, p, start)
                                     for p in found[g.uuid].profiles for start in p.starts})
        if self.dynamic:
            self._made = self._held_at_start(ctx, gpus, found)
        log.info("MIG GPUs", extra={"mode": self.settings.mig, "gpus": [g.uuid for g in gpus],
                                    "devices": len(self.devices)})
        return self

    def _held_at_start(self, ctx: DriverContext, gpus: Sequence[nvml.Gpu], found: Mapping[str, mig.MigGpu]
                       ) -> dict[str, str]:
        """The dynamic instances that claims prepared before this start hold (the repair kept them),
        MIG UUID -> device, from their records. A record unreadable: every instance there was at
        start, by its placement (none was repaired; whose each is is unknown, and a claim's
        processes must not be called unheld for it)."""
        recorded = ctx.recorded()
        if recorded is not None:
            return {str(r.state["uuid"]): r.device for r in recorded if r.device in self.dynamic and "uuid" in r.state}
        return {d.uuid: mig.device_name(g.minor, d.profile, d.start) for g in gpus for d in found[g.uuid].devices
                if mig.device_name(g.minor, d.profile, d.start) in self.dynamic}

    def _repair(self, ctx: DriverContext, gpus: Sequence[nvml.Gpu], found: dict[str, mig.MigGpu]) -> None:
        """Destroy the MIG instances that no checkpoint record names (made by a prepare that crashed
        before its record, or left by an unprepare that crashed): the record is the source of truth."""
        recorded = ctx.recorded_devices()
        if recorded is None:
            log.warning("checkpoint not readable in full: MIG instances are not repaired at this start")
            return
        for g in gpus:
            for profile, start in mig.instances(g.uuid, found[g.uuid].profiles):
                name = mig.device_name(g.minor, profile, start)
                if name not in recorded:
                    mig.destroy(g.uuid, profile, start)
                    log.warning("destroyed a MIG instance no claim records", extra={"device": name, "gpu": g.uuid})

    def watched(self) -> list[nvml.Gpu]:
        """The GPUs in MIG mode whose MIG devices this driver publishes (``mig`` static or dynamic),
        whether or not one exists now: the watchdog lists their processes (`processes.py`)."""
        return [g for g in self.inventory.gpus if g.mig_enabled] if self.settings.mig != "off" else []

    def published(self) -> dict[str, str]:
        """The MIG devices whose processes are reported under a published name, by MIG UUID: every
        static device (as discovered: an instance made again since has another UUID), and the
        dynamic instances that prepared claims hold (made at prepare, gone at unprepare)."""
        out = {d.uuid: name for name, d in self.static.items()}
        out.update(self._made)
        return out

    def on_gpu(self) -> dict[str, tuple[str, ...]]:
        """The published MIG devices of each GPU, by GPU UUID: where a taint of an instance the driver
        does not publish goes (`dra.DeviceProcess.taint_on`; the GPU's XIDs taint them all too)."""
        out: dict[str, tuple[str, ...]] = {}
        for d in self.devices:
            parent = str(d.attributes["parentUUID"])
            out[parent] = (*out.get(parent, ()), d.name)
        return out

    def parents(self) -> list[nvml.Gpu]:
        """The GPUs whose MIG devices are published (the health monitor watches them too)."""
        return list({g.uuid: g for g in self.inventory.gpus if g.mig_enabled and self.devices}.values())

    def tainted(self, taints: Mapping[str, tuple[Taint, ...]]) -> list[Device]:
        """The MIG devices, each with its GPU's taints: an XID of the GPU takes its MIG devices out too."""
        return [dataclasses.replace(d, taints=tuple(taints.get(str(d.attributes["parentUUID"]), ())))
                for d in self.devices]

    def is_mig(self, devices_: Sequence[AllocatedDevice]) -> bool:
        """Whether the claim holds MIG devices; one claim holds MIG devices or hook shares, not both."""
        kinds = {d.device in self.static or d.device in self.dynamic for d in devices_}
        if len(kinds) > 1:
            raise PrepareError(f"the claim has MIG devices and hook-shared GPUs ({[d.device for d in devices_]}); one"
                               " claim holds one kind: put them in two claims")
        return kinds == {True}

    def _others(self, claim: ClaimRef) -> list[RecordedDevice] | None:
        """The devices other claims' checkpoint records name now (None: a record is unreadable)."""
        recorded = self.ctx.recorded()
        return None if recorded is None else [r for r in recorded if r.claim.uid != claim.uid]

    def _slices(self, device: str) -> tuple[str, set[int]] | None:
        """(GPU UUID, memory slices) a MIG device of this node occupies; None for another device."""
        if device in self.dynamic:
            gpu, profile, start = self.dynamic[device]
            return gpu.uuid, set(range(start, start + profile.memory_slices))
        if device in self.static:
            d = self.static[device]
            return d.parent_uuid, set(range(d.start, d.start + d.profile.memory_slices))
        return None

    def _holder(self, dev: AllocatedDevice, others: Sequence[RecordedDevice]) -> RecordedDevice | None:
        """Another claim's recorded device on the same MIG hardware as `dev`: the same device, or
        (dynamic) a placement whose memory slices overlap. Admin access to a static device is
        Kubernetes' way to reach a device in use, so it holds nothing and is held by nothing."""
        mine = self._slices(dev.device)
        for r in others:
            if dev.device in self.static:
                if r.device == dev.device and not (r.admin_access or dev.admin_access):
                    return r
                continue
            theirs = self._slices(r.device)
            if r.device == dev.device or (mine and theirs and mine[0] == theirs[0] and mine[1] & theirs[1]):
                return r
        return None

    def prepare(self, claim: ClaimRef, devices_: Sequence[AllocatedDevice]) -> list[PreparedDevice]:
        """The claim's MIG devices, dynamic ones made (or, after a crash, found again) now. Refused
        while another claim's record names the same MIG hardware: kubelet retries, and the claim is
        prepared once that claim's unprepare has run (it destroys its instance, this one makes a new)."""
        for dev in devices_:
            c = dev.config
            if isinstance(c, GpuConfig) and (c.preload or c.compute_mode or c.full_load_clock_mhz
                                             or c.clock_elasticity is not None):
                raise PrepareError(f"device {dev.device} is a MIG device: the hardware isolates it and no hook runs"
                                   " there, so preload/computeMode/fullLoadClockMhz/clockElasticity do not apply; drop"
                                   " them from the claim's (or DeviceClass's) GpuConfig")
        others = self._others(claim)
        for dev in devices_:
            holder = self._holder(dev, others or ())
            if holder is not None:
                c = holder.claim
                doing = "holds" if holder.phase == "prepared" else "is being prepared with"
                raise PrepareError(
                    f"device {dev.device}: claim {c.namespace}/{c.name} ({c.uid}) {doing} {holder.device}, the same MIG"
                    " hardware, on this node; two claims never share a MIG instance. kubelet retries this claim, and"
                    " it is prepared once that claim is unprepared (its pod gone: the placement was allocated again"
                    " before the old claim's unprepare ran, e.g. after a force-delete)")
        if others is None:
            static = [d.device for d in devices_ if d.device in self.static]
            if static:
                raise PrepareError(f"devices {static}: a checkpoint record on this node cannot be read (see the"
                                   " daemon's log), so whether another claim holds these MIG devices is unknown;"
                                   " kubelet retries once the record is readable or removed")
            log.warning("checkpoint not readable in full: a MIG instance already at a placement is not adopted",
                        extra={"claim": claim.uid})
        prepared = []
        for dev in devices_:
            if dev.device in self.static:
                found, how = self.static[dev.device], "static"
            else:
                gpu, profile, start = self.dynamic[dev.device]
                try:
                    found, how = mig.create(gpu.uuid, profile, start, self._held(gpu.uuid, others)), "dynamic"
                except nvml.NvmlError as exc:
                    raise PrepareError(f"device {dev.device}: cannot create MIG {profile.name} at slice {start} on"
                                       f" {gpu.uuid}: {exc}") from exc
                except PrepareError as exc:
                    raise PrepareError(f"device {dev.device}: {exc}") from None
            minor = next(g.minor for g in self.inventory.gpus if g.uuid == found.parent_uuid)
            on_host = self.fake is None
            caps = mig.cap_device_nodes(minor, found.gpu_instance, found.compute_instance, self.settings.dev_root) \
                if on_host and self.settings.cdi_mode == "self-contained" else ()
            device_edits, toolkit = edits.device_edits(self.settings, on_host, minor, found.uuid, caps)
            # gi and uuid are the instance's identity: unprepare destroys that instance and no other;
            # its memory is what the watchdog holds the claim to there (a MIG device is allocated whole)
            state = {"uuid": found.uuid, "parent": found.parent_uuid, "minor": minor, "mig": how,
                     "profile": found.profile.name, "start": found.start, WHOLE_MEMORY: found.memory,
                     "gi": found.gpu_instance, "ci": found.compute_instance}
            prepared.append(PreparedDevice(dev, device_edits, state=state, cdi_devices=toolkit))
        made = {str(p.state["uuid"]): p.device.device for p in prepared if p.state["mig"] == "dynamic"}
        if made:  # a new dict, never one changed in place: the watchdog's thread reads it
            self._made = {**self._made, **made}
        return prepared

    @staticmethod
    def _held(gpu_uuid: str, others: Sequence[RecordedDevice] | None) -> dict[mig.Identity, str] | None:
        """The identities of the MIG instances on this GPU that other claims' records name -> who."""
        if others is None:
            return None
        return {(int(r.state["gi"]), str(r.state["uuid"])): f"{r.claim.namespace}/{r.claim.name} ({r.claim.uid})"
                for r in others if r.state.get("parent") == gpu_uuid and "gi" in r.state and "uuid" in r.state}

    def of(self, p: PreparedDevice) -> mig.MigDevice:
        """The MIG device a prepared device's state describes."""
        st = p.state
        profile = self.static[p.device.device].profile if p.device.device in self.static \
            else self.dynamic[p.device.device][1]
        return mig.MigDevice(uuid=str(st["uuid"]), parent_uuid=str(st["parent"]), gpu_instance=int(st["gi"]),
                             compute_instance=int(st["ci"]), profile=profile, start=int(st["start"]),
                             multiprocessors=profile.multiprocessors, memory=int(st[WHOLE_MEMORY]))

    def unprepare(self, claim: ClaimRef, prepared: Sequence[PreparedDevice]) -> None:
        """Destroy the claim's dynamic MIG instances: the one its record names by identity (GPU
        instance id and MIG UUID), nothing when the instance at the placement is another. A record
        still "preparing" (or a rollback) names only the placement: its instance, made by this claim
        before a crash, is destroyed while no other claim's record names that placement or instance,
        else left to the repair at the next start."""
        dynamic = [p for p in prepared if p.device.device in self.dynamic]
        others = self._others(claim) if dynamic else []
        keep = [str(r.state["uuid"]) for r in others or () if "uuid" in r.state]
        for p in dynamic:
            gpu, profile, start = self.dynamic[p.device.device]
            st = p.state
            if "gi" in st and "uuid" in st:
                outcome = mig.destroy(gpu.uuid, profile, start, (int(st["gi"]), str(st["uuid"])), keep)
            elif others is None or self._holder(p.device, others) is not None:
                log.warning("MIG instance of an unfinished prepare left in place: another claim's record names its"
                            " placement, or a record is unreadable (the next start repairs it)",
                            extra={"claim": claim.uid, "device": p.device.device})
                continue
            else:
                outcome = mig.destroy(gpu.uuid, profile, start, None, keep)
            extra = {"claim": claim.uid, "device": p.device.device, "gi": st.get("gi"), "uuid": st.get("uuid")}
            if outcome != "kept" and "uuid" in st:  # gone, or never the one made: no longer this device
                self._made = {u: d for u, d in self._made.items() if u != str(st["uuid"])}
            if outcome == "destroyed":
                log.info("MIG instance destroyed", extra=extra)
            elif outcome in ("another", "kept"):
                log.warning("MIG instance at the claim's placement is not the one its record names (or another"
                            " claim's record names it): left alone", extra={**extra, "why": outcome})
