"""`ascend.project-hami.io`: Huawei Ascend NPUs shared by consumable capacity, held by hookcore.

Compatible with HAMi's Ascend DRA driver by name, DeviceClass, device names and attributes, so
claims written for it keep working; each share is enforced inside the container by hookcore's
``libvnpu.so`` (memory quota, compute share), which the framework installs and preloads.

    dra run ascend --node-name "$NODE_NAME"                     # an Ascend node (libdcmi.so)
    dra run ascend --node-name node-1 --fake 910b3x8 ...        # fake NPUs (stub libdcmi.so)

The skeleton (`dra.SharedDeviceDriver`) does the rest; this driver discovers the NPUs through DCMI
(`dcmi.py`, or `fake.py`), polls their health (`health.py`), lists the processes on them for the
watchdog (`processes.py`), maps them to edits and hook quotas.

Prepare: a heterogeneous GPU + NPU claim is prepared by each driver for its own devices (the
framework filters by driver name). The claim's containers see its NPUs by physical ID ascending,
and the hook gets one `Quota` per visible NPU (cores 100: no limit, also for ``computeLimit: false``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence

import dra
from drivers.ascend import dcmi, devices, edits, fake
from drivers.ascend.config import API_VERSION, NpuConfig
from drivers.ascend.health import HealthMonitor
from drivers.ascend.processes import ProcessReader
from drivers.ascend.settings import Settings

log = logging.getLogger(__name__)


class AscendDriver(dra.SharedDeviceDriver[dcmi.Npu, NpuConfig]):
    name = devices.DRIVER_NAME
    cdi_kind = "k8s.ascend.project-hami.io/npu"
    config_type = NpuConfig
    config_api_version = API_VERSION
    noun = "NPU"
    hook_stem = "vnpu"

    def __init__(self) -> None:
        super().__init__()
        self.settings = Settings()
        self.inventory: dcmi.Inventory | None = None
        self.fake: fake.FakeBackend | None = None
        self.host_files: edits.HostFiles | None = None
        self.library: dcmi.Dcmi | None = None
        self._processes: ProcessReader | None = None

    def discover(self, ctx: dra.DriverContext) -> Sequence[dcmi.Npu]:
        self.settings = Settings.parse(ctx.settings)
        sysfs = self.settings.sysfs
        if ctx.fake:
            self.fake = self.adopt(fake.FakeBackend(fake.load(ctx.fake, ctx.node_name), fake.stub_library()), at_exit=True)
            sysfs, self.library = self.fake.sysfs, self.fake.dcmi
        else:
            self.library = dcmi.Dcmi(self.settings.dcmi_library or dcmi.DEFAULT_LIBRARIES)
        self.inventory = dcmi.discover(self.library, sysfs)
        self._processes = ProcessReader(self.library, self.inventory.npus)
        log.info("NPUs discovered", extra={
            "npus": [f"{devices.device_name(n)} {n.uuid} {n.product_name} phy {n.phy_id}" for n in self.inventory.npus],
            "driver_version": self.inventory.driver_version, "fake": ctx.fake or None})
        if self.settings.device_nodes == "cdi" and self.fake is None:
            self.host_files = edits.HostFiles.find(self.settings.dev_root, self.settings.driver_root)
        return self.inventory.npus

    device_name = staticmethod(devices.device_name)
    usable_memory = staticmethod(devices.usable_memory)

    def watch_health(self, ctx: dra.DriverContext, npus: Sequence[dcmi.Npu]) -> HealthMonitor | None:
        """The DCMI health poller (`health.py`), when ``health`` is on and the node has NPUs."""
        if not (self.settings.health and npus and self.library is not None):
            return None
        return HealthMonitor(self.library, npus, self.health_changed, self.settings.health_interval)

    def processes(self) -> Sequence[dra.DeviceProcess] | None:
        """Every process on the NPUs, from DCMI (`processes.py`), for the watchdog: keyed by the
        hook's key (``davinci<phy ID>``) as the claims' quotas are; None before setup or where the
        library has no process query."""
        return self._processes.read() if self._processes is not None else None

    def to_devices(self, taints: Mapping[str, tuple[dra.Taint, ...]]) -> Sequence[dra.Device]:
        assert self.inventory is not None
        return devices.to_devices(self.inventory, dict(taints) if self.monitor else None)

    def container_order(self, visible: list[dra.Visible[dcmi.Npu]]) -> list[dra.Visible[dcmi.Npu]]:
        """Physical ID ascending: the runtime numbers a container's NPUs so."""
        return sorted(visible, key=lambda v: v.device.phy_id)

    def prepared_device(self, claim: dra.ClaimRef, allocated: dra.AllocatedDevice, npu: dcmi.Npu) -> dra.PreparedDevice:
        nodes: tuple[dra.DeviceNode, ...] = ()
        if self.host_files is not None:
            nodes = (edits.chip_node(npu.phy_id, self.settings.dev_root),)
        state = {"uuid": npu.uuid, "phyID": npu.phy_id, "logicID": npu.logic_id,
                 **{k: int(v) for k, v in allocated.consumed_capacity.items()}}
        return dra.PreparedDevice(allocated, dra.ContainerEdits(device_nodes=nodes), state=state)

    def hook_key(self, device: dcmi.Npu) -> str:
        """The physical ID, which the hook checks against what the runtime reports."""
        return edits.hook_key(device.phy_id)

    def claim_edits(self, claim: dra.ClaimRef, prepared: Sequence[dra.PreparedDevice]) -> dra.ContainerEdits:
        by_phy = {int(p.state["phyID"]): str(p.state["uuid"]) for p in prepared}
        phys = sorted(by_phy)
        env = edits.visible_devices_env(phys)
        if self.fake is not None:
            env.update(self.fake.container_env([by_phy[p] for p in phys]))
            return dra.ContainerEdits(env=env, mounts=self.fake.container_mounts())
        if self.host_files is None:
            return dra.ContainerEdits(env=env)
        base = self.host_files.claim_edits()
        return dataclasses.replace(base, env={**base.env, **env})
