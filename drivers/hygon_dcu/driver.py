"""`hygon-dcu.project-hami.io`: Hygon DCUs shared by consumable capacity, held by hookcore.

Each DCU is published with consumable ``cores``/``memory``; every share is enforced inside the
container by hookcore's ``libvhip.so`` (memory quota on every HIP allocation path, compute share
on launches, graphs and copies), which the framework installs and preloads.

    dra run hygon-dcu --node-name "$NODE_NAME"                   # a DCU node (librocm_smi64.so)
    dra run hygon-dcu --node-name node-1 --fake k100-aix8 ...    # fake DCUs (stub librocm_smi64.so)

The skeleton (`dra.SharedDeviceDriver`) does the rest; this driver discovers the DCUs through
ROCm SMI (`rsmi.py`, or `fake.py`), polls their health (`health.py`), lists the processes on them
for the watchdog (`processes.py`), maps them to edits and hook quotas (`edits.py`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence

import dra
from drivers.hygon_dcu import devices, edits, fake, rsmi
from drivers.hygon_dcu.config import API_VERSION, DcuConfig
from drivers.hygon_dcu.health import HealthMonitor
from drivers.hygon_dcu.processes import ProcessReader
from drivers.hygon_dcu.settings import Settings

log = logging.getLogger(__name__)


class HygonDcuDriver(dra.SharedDeviceDriver[rsmi.Dcu, DcuConfig]):
    name = devices.DRIVER_NAME
    cdi_kind = "k8s.hygon-dcu.project-hami.io/dcu"
    config_type = DcuConfig
    config_api_version = API_VERSION
    noun = "DCU"
    hook_stem = "vhip"

    def __init__(self) -> None:
        super().__init__()
        self.settings = Settings()
        self.inventory: rsmi.Inventory | None = None
        self.fake: fake.FakeBackend | None = None
        self.host_files: edits.HostFiles | None = None
        self.library: rsmi.Rsmi | None = None
        self._processes: ProcessReader | None = None

    def discover(self, ctx: dra.DriverContext) -> Sequence[rsmi.Dcu]:
        self.settings = Settings.parse(ctx.settings)
        sysfs = self.settings.sysfs
        if ctx.fake:
            self.fake = self.adopt(fake.FakeBackend(fake.load(ctx.fake, ctx.node_name), fake.stub_library()), at_exit=True)
            sysfs, self.library = self.fake.sysfs, self.fake.rsmi
        else:
            self.library = rsmi.Rsmi(self.settings.smi_library or rsmi.DEFAULT_LIBRARIES)
        self.inventory = rsmi.discover(self.library, sysfs)
        self._processes = ProcessReader(self.library, self.inventory.dcus)
        log.info("DCUs discovered", extra={
            "dcus": [f"{devices.device_name(d)} {d.uuid} {d.name} {d.pci_bus_id}" for d in self.inventory.dcus],
            "driver_version": self.inventory.driver_version, "fake": ctx.fake or None})
        if self.fake is None:
            self.host_files = edits.HostFiles.find(self.settings.dev_root, self.settings.driver_root)
        return self.inventory.dcus

    device_name = staticmethod(devices.device_name)
    usable_memory = staticmethod(devices.usable_memory)

    def watch_health(self, ctx: dra.DriverContext, dcus: Sequence[rsmi.Dcu]) -> HealthMonitor | None:
        """The ROCm SMI health poller (`health.py`), when ``health`` is on and the node has DCUs."""
        if not (self.settings.health and dcus and self.library is not None):
            return None
        return HealthMonitor(self.library, dcus, self.health_changed, self.settings.health_interval)

    def processes(self) -> Sequence[dra.DeviceProcess] | None:
        """Every process on the DCUs, from ROCm SMI (`processes.py`), for the watchdog: keyed by
        the hook's key (``pci-<bus ID>``) as the claims' quotas are; None before setup or where the
        library has no process API."""
        return self._processes.read() if self._processes is not None else None

    def to_devices(self, taints: Mapping[str, tuple[dra.Taint, ...]]) -> Sequence[dra.Device]:
        assert self.inventory is not None
        return devices.to_devices(self.inventory, dict(taints) if self.monitor else None)

    def container_order(self, visible: list[dra.Visible[rsmi.Dcu]]) -> list[dra.Visible[rsmi.Dcu]]:
        """PCI bus ID ascending: the order the KFD topology, and so the runtime, lists them."""
        return sorted(visible, key=lambda v: v.device.pci_bus_id)

    def prepared_device(self, claim: dra.ClaimRef, allocated: dra.AllocatedDevice, dcu: rsmi.Dcu) -> dra.PreparedDevice:
        nodes: tuple[dra.DeviceNode, ...] = ()
        if self.host_files is not None:
            nodes = (edits.render_node(dcu.render_minor, self.settings.dev_root),)
        state = {"uuid": dcu.uuid, "pciBusID": dcu.pci_bus_id, "index": dcu.index,
                 **{k: int(v) for k, v in allocated.consumed_capacity.items()}}
        return dra.PreparedDevice(allocated, dra.ContainerEdits(device_nodes=nodes), state=state)

    def hook_key(self, device: rsmi.Dcu) -> str:
        """The PCI bus ID, which the hook checks against what the runtime reports."""
        return edits.hook_key(device.pci_bus_id)

    def claim_edits(self, claim: dra.ClaimRef, prepared: Sequence[dra.PreparedDevice]) -> dra.ContainerEdits:
        buses = sorted({str(p.state["pciBusID"]) for p in prepared})
        env = edits.visible_devices_env(len(buses))
        if self.fake is not None:
            env.update(self.fake.container_env(buses))
            return dra.ContainerEdits(env=env, mounts=self.fake.container_mounts())
        assert self.host_files is not None
        base = self.host_files.claim_edits()
        return dataclasses.replace(base, env={**base.env, **env})
