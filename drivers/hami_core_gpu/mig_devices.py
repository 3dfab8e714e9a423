"""The MIG half of the driver: which MIG devices this node publishes (``--set mig=``), and their
prepare and unprepare. Kept apart from `driver.py` because none of it is hook sharing: the
hardware isolates a MIG device, so it has no share, no quota and no health of its own (a MIG
device is as healthy as its GPU)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence

from dra import AllocatedDevice, ClaimRef, Device, DriverContext, PreparedDevice, PrepareError, Taint
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

    def setup(self, ctx: DriverContext) -> MigDevices:
        """MIG GPUs: discover their profiles and devices, publish them per the ``mig`` setting."""
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
        log.info("MIG GPUs", extra={"mode": self.settings.mig, "gpus": [g.uuid for g in gpus],
                                    "devices": len(self.devices)})
        return self

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

    def prepare(self, devices_: Sequence[AllocatedDevice]) -> list[PreparedDevice]:
        for dev in devices_:
            c = dev.config
            if isinstance(c, GpuConfig) and (c.preload or c.compute_mode or c.full_load_clock_mhz):
                raise PrepareError(f"device {dev.device} is a MIG device: the hardware isolates it and no hook runs"
                                   " there, so preload/computeMode/fullLoadClockMhz do not apply; drop them from"
                                   " the claim's (or DeviceClass's) GpuConfig")
        prepared = []
        for dev in devices_:
            if dev.device in self.static:
                found, how = self.static[dev.device], "static"
            else:
                gpu, profile, start = self.dynamic[dev.device]
                try:
                    found, how = mig.create(gpu.uuid, profile, start), "dynamic"
                except nvml.NvmlError as exc:
                    raise PrepareError(f"device {dev.device}: cannot create MIG {profile.name} at slice {start} on"
                                       f" {gpu.uuid}: {exc}") from exc
            minor = next(g.minor for g in self.inventory.gpus if g.uuid == found.parent_uuid)
            on_host = self.fake is None
            caps = mig.cap_device_nodes(minor, found.gpu_instance, found.compute_instance, self.settings.dev_root) \
                if on_host and self.settings.cdi_mode == "self-contained" else ()
            device_edits, toolkit = edits.device_edits(self.settings, on_host, minor, found.uuid, caps)
            state = {"uuid": found.uuid, "parent": found.parent_uuid, "minor": minor, "mig": how,
                     "profile": found.profile.name, "start": found.start, "memory": found.memory,
                     "gi": found.gpu_instance, "ci": found.compute_instance}
            prepared.append(PreparedDevice(dev, device_edits, state=state, cdi_devices=toolkit))
        return prepared

    def of(self, p: PreparedDevice) -> mig.MigDevice:
        """The MIG device a prepared device's state describes."""
        st = p.state
        profile = self.static[p.device.device].profile if p.device.device in self.static \
            else self.dynamic[p.device.device][1]
        return mig.MigDevice(uuid=str(st["uuid"]), parent_uuid=str(st["parent"]), gpu_instance=int(st["gi"]),
                             compute_instance=int(st["ci"]), profile=profile, start=int(st["start"]),
                             multiprocessors=profile.multiprocessors, memory=int(st["memory"]))

    def unprepare(self, claim: ClaimRef, prepared: Sequence[PreparedDevice]) -> None:
        """Destroy the claim's dynamic MIG instances (found by device name: a record still
        "preparing" has no state)."""
        for p in prepared:
            if p.device.device in self.dynamic:
                gpu, profile, start = self.dynamic[p.device.device]
                if mig.destroy(gpu.uuid, profile, start):
                    log.info("MIG instance destroyed", extra={"claim": claim.uid, "device": p.device.device})
