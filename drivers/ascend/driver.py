"""`ascend.project-hami.io`: Huawei Ascend NPUs shared by consumable capacity, held by hookcore.

Compatible with HAMi's Ascend DRA driver by name, DeviceClass, device names and attributes, so
claims written for it keep working; each share is enforced inside the container by hookcore's
``libvnpu.so`` (memory quota, compute share), which the framework installs and preloads.

    dra run ascend --node-name "$NODE_NAME"                     # an Ascend node (libdcmi.so)
    dra run ascend --node-name node-1 --fake 910b3x8 ...        # fake NPUs (stub libdcmi.so)

Start: settings parsed (`settings.py`), the fake backend activated when asked (`fake.py`), the
NPUs discovered once through DCMI (`dcmi.py`), the health poller started (`health.py`). The
inventory does not change while the daemon runs; health changes republish the devices with
taints (`devices.py`) and update kubelet's health stream.

Prepare: every allocation result of a claim must name an NPU of this node (results of other
drivers in the same claim never reach this driver: the framework filters by driver name, so a
heterogeneous GPU + NPU claim is prepared by each driver for its own devices). Shares of one
NPU in one claim are summed into one visible device. The claim's containers see its NPUs by
physical ID in ascending order (`edits.py`), and the framework enforces one `Quota` per visible
NPU: memory = the bytes the scheduler reserved, cores = the percent (100 = no compute limit,
also when the claim's config says ``computeLimit: false``).
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path

import dra
from dra import (
    AllocatedDevice,
    ClaimRef,
    ContainerEdits,
    Device,
    DeviceNode,
    Driver,
    DriverContext,
    Enforcement,
    HealthEvent,
    Preload,
    PreparedDevice,
    PrepareError,
    Quota,
)
from drivers.ascend import dcmi, devices, edits, fake
from drivers.ascend.config import API_VERSION, NpuConfig
from drivers.ascend.health import HealthMonitor
from drivers.ascend.settings import Settings

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class VisibleNpu:
    """One NPU as a claim's containers see it: runtime device i, the i-th of ASCEND_VISIBLE_DEVICES."""

    uuid: str
    phy_id: int
    memory: int  # bytes reserved by the scheduler for this claim on this NPU
    cores: int  # percent, 1..100


class AscendDriver(Driver):
    name = devices.DRIVER_NAME
    cdi_kind = "k8s.ascend.project-hami.io/npu"
    config_type = NpuConfig
    config_api_version = API_VERSION

    def __init__(self) -> None:
        self.settings = Settings()
        self.inventory: dcmi.Inventory | None = None
        self.fake: fake.FakeBackend | None = None
        self.monitor: HealthMonitor | None = None
        self.host_files: edits.HostFiles | None = None
        self._by_name: dict[str, dcmi.Npu] = {}

    # --- start ---------------------------------------------------------------------------------
    def setup(self, ctx: DriverContext) -> None:
        super().setup(ctx)
        self.settings = Settings.parse(ctx.settings)
        sysfs = self.settings.sysfs
        if ctx.fake:
            self.fake = fake.FakeBackend(fake.load(ctx.fake, ctx.node_name), fake.stub_library())
            atexit.register(self.fake.close)
            sysfs = self.fake.sysfs
            library = self.fake.dcmi
        else:
            library = dcmi.Dcmi(self.settings.dcmi_library or dcmi.DEFAULT_LIBRARIES)
        self.inventory = dcmi.discover(library, sysfs)
        self._by_name = {devices.device_name(n): n for n in self.inventory.npus}
        log.info("NPUs discovered", extra={
            "npus": [f"{devices.device_name(n)} {n.uuid} {n.product_name} phy {n.phy_id}" for n in self.inventory.npus],
            "driver_version": self.inventory.driver_version, "fake": ctx.fake or None})
        if self.settings.device_nodes == "cdi" and self.fake is None:
            self.host_files = edits.HostFiles.find(self.settings.dev_root, self.settings.driver_root)
        if self.settings.health and self.inventory.npus:
            self.monitor = HealthMonitor(library, self.inventory.npus, self._health_changed, self.settings.health_interval)
            self.monitor.start()

    def close(self) -> None:
        """Stop the health poller and drop the fake backend's files (tests; the daemon exits)."""
        if self.monitor is not None:
            self.monitor.stop()
        if self.fake is not None:
            self.fake.close()

    def _health_changed(self) -> None:
        if self.context is None:
            return
        self.context.devices_changed()
        self.context.report_health(self.health_events())

    def health_events(self) -> list[HealthEvent]:
        """Every NPU's health now (healthy None: not known)."""
        if self.monitor is None:
            return []
        names = {n.uuid: name for name, n in self._by_name.items()}
        return [HealthEvent(names[u], healthy, message) for u, healthy, message in self.monitor.snapshot()]

    # --- publish -------------------------------------------------------------------------------
    def devices(self) -> Sequence[Device]:
        if self.inventory is None:
            raise RuntimeError("ascend: devices() before setup(); the framework calls setup first")
        return devices.to_devices(self.inventory, self.monitor.taints() if self.monitor else None)

    # --- prepare -------------------------------------------------------------------------------
    def visible(self, claim: ClaimRef, allocated: Sequence[AllocatedDevice]) -> list[VisibleNpu]:
        """The claim's NPUs in container order (physical ID ascending), shares of one NPU summed."""
        for dev in allocated:
            if dev.device not in self._by_name:
                raise PrepareError(
                    f"device {dev.device} (pool {dev.pool}) is not an NPU of this node; this node has "
                    f"{sorted(self._by_name) or 'none'}: was the claim allocated from a stale ResourceSlice?"
                )
        shares = dra.device_shares(allocated, lambda name: devices.usable_memory(self._by_name[name]), "NPU")
        return [VisibleNpu(npu.uuid, npu.phy_id, share.memory, share.cores)
                for share, npu in sorted(((sh, self._by_name[sh.device]) for sh in shares), key=lambda p: p[1].phy_id)]

    def prepare(self, claim: ClaimRef, devices_: Sequence[AllocatedDevice]) -> Sequence[PreparedDevice]:
        self.visible(claim, devices_)  # refuse before anything is written
        self._config(devices_)
        prepared = []
        for dev in devices_:
            npu = self._by_name[dev.device]
            nodes: tuple[DeviceNode, ...] = ()
            if self.host_files is not None:
                nodes = (edits.chip_node(npu.phy_id, self.settings.dev_root),)
            state = {"uuid": npu.uuid, "phyID": npu.phy_id, "logicID": npu.logic_id,
                     **{k: int(v) for k, v in dev.consumed_capacity.items()}}
            prepared.append(PreparedDevice(dev, ContainerEdits(device_nodes=nodes), state=state))
        return prepared

    def hook_libraries(self) -> Sequence[Path]:
        """libvnpu.so, installed by the daemon at start (before the first publish), so a
        heterogeneous claim's GPU and NPU specs mount one hook set holding both libraries."""
        return [dra.hook_library("vnpu")]

    def enforcement(self, claim: ClaimRef, prepared: Sequence[PreparedDevice]) -> Enforcement:
        """hookcore's libvnpu.so with one quota per visible NPU (runtime devices 0..n-1), each
        keyed by its physical ID, which the hook checks against what the runtime reports."""
        allocated = [p.device for p in prepared]
        config = self._config(allocated)
        unlimited = {d.device for d in allocated if d.config is not None and not d.config.compute_limit}
        names = {n.uuid: name for name, n in self._by_name.items()}
        quotas = [Quota(edits.hook_key(v.phy_id), v.memory, 100 if names[v.uuid] in unlimited else v.cores)
                  for v in self.visible(claim, allocated)]
        preload = Preload(config.preload) if config.preload else None
        return Enforcement(dra.hook_library("vnpu"), quotas, preload)

    def claim_edits(self, claim: ClaimRef, prepared: Sequence[PreparedDevice]) -> ContainerEdits:
        by_phy = {int(p.state["phyID"]): str(p.state["uuid"]) for p in prepared}
        phys = sorted(by_phy)
        env = edits.visible_devices_env(phys)
        if self.fake is not None:
            env.update(self.fake.container_env([by_phy[p] for p in phys]))
            return ContainerEdits(env=env, mounts=self.fake.container_mounts())
        if self.host_files is None:
            return ContainerEdits(env=env)
        base = self.host_files.claim_edits()
        return dataclasses.replace(base, env={**base.env, **env})

    def _config(self, allocated: Sequence[AllocatedDevice]) -> NpuConfig:
        return dra.claim_share_config(NpuConfig, allocated)

    def unprepare(self, claim: ClaimRef, prepared: Sequence[PreparedDevice]) -> None:
        return None  # the framework removes the claim's CDI spec, hook config and ledger
