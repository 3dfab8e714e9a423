"""`hami-core-gpu.project-hami.io`: NVIDIA GPUs shared by consumable capacity, held by hookcore.

Compatible with HAMi's NVIDIA DRA driver by name, DeviceClass, device names and attributes, so
claims written for it keep working; each share is enforced inside the container by hookcore's
``libvgpu.so`` (memory quota, compute share), which the framework installs and preloads.

    dra run hami-core-gpu --node-name "$NODE_NAME"                  # a GPU node
    dra run hami-core-gpu --node-name node-1 --fake h200x8 ...      # fake GPUs (stub NVML)

Start: settings parsed (`settings.py`), the fake backend activated when asked (`fake.py`), the
GPUs discovered once through NVML (`nvml.py`), the health monitor started (`health.py`). The
inventory does not change while the daemon runs; health changes republish the devices with
taints (`devices.py`) and update kubelet's health stream.

Prepare: every allocation result of a claim must name a GPU of this node. Shares of one GPU in
one claim (two requests landing on one device) are summed into one visible device. The claim's
containers see its GPUs by UUID in allocation order (`edits.py`), and the framework enforces one
`Quota` per visible GPU: memory = the bytes the scheduler reserved, cores = the percent (100 =
no compute limit, also when the claim's config says ``computeLimit: false``).
"""

from __future__ import annotations

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
    DeviceProcess,
    Driver,
    DriverContext,
    Enforcement,
    HealthEvent,
    Preload,
    PreparedDevice,
    PrepareError,
    Quota,
)
from drivers.hami_core_gpu import devices, edits, fake, nvml
from drivers.hami_core_gpu.config import API_VERSION, GpuConfig
from drivers.hami_core_gpu.health import HealthMonitor
from drivers.hami_core_gpu.processes import ProcessReader
from drivers.hami_core_gpu.settings import Settings

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class VisibleGpu:
    """One GPU as a claim's containers see it: the i-th of CUDA_VISIBLE_DEVICES."""

    uuid: str
    minor: int
    memory: int  # bytes reserved by the scheduler for this claim on this GPU
    cores: int  # percent, 1..100


class HamiCoreGpuDriver(Driver):
    name = devices.DRIVER_NAME
    cdi_kind = "k8s.hami-core-gpu.project-hami.io/claim"
    config_type = GpuConfig
    config_api_version = API_VERSION

    def __init__(self) -> None:
        self.settings = Settings()
        self.inventory: nvml.Inventory | None = None
        self.fake: fake.FakeBackend | None = None
        self.monitor: HealthMonitor | None = None
        self.files: edits.DriverFiles | None = None
        self._by_name: dict[str, nvml.Gpu] = {}
        self._processes: ProcessReader | None = None

    # --- start ---------------------------------------------------------------------------------
    def setup(self, ctx: DriverContext) -> None:
        super().setup(ctx)
        self.settings = Settings.parse(ctx.settings)
        sysfs = self.settings.sysfs
        if ctx.fake:
            self.fake = fake.FakeBackend(fake.load(ctx.fake, ctx.node_name), fake.stub_library())
            sysfs = self.fake.sysfs
        self.inventory = nvml.discover(sysfs, self.settings.device_memory)
        shared = devices.publishable(self.inventory)
        for g in self.inventory.gpus:
            if g.mig_enabled:
                log.warning("GPU in MIG mode is not shared (disable MIG to share it)", extra={"uuid": g.uuid})
        self._by_name = {devices.device_name(g): g for g in shared}
        log.info("GPUs discovered", extra={
            "gpus": [f"{devices.device_name(g)} {g.uuid} {g.product_name}" for g in shared],
            "driver_version": self.inventory.driver_version, "fake": ctx.fake or None})
        if self.fake is not None:  # the fake's "driver" is the stub libcuda + libnvidia-ml, in either mode
            self.files = edits.DriverFiles.find(self.fake.stub_library.parent)
        elif self.settings.cdi_mode == "self-contained":
            self.files = edits.DriverFiles.find(self.settings.driver_root)
        if self.settings.health and shared:
            self.monitor = HealthMonitor([g.uuid for g in shared], self._health_changed,
                                         probe_interval=self.settings.health_probe_interval)
            self.monitor.start()

    def close(self) -> None:
        """Stop the health monitor and drop the fake backend's files (tests; the daemon exits)."""
        if self.monitor is not None:
            self.monitor.stop()
        if self._processes is not None:
            self._processes.close()
        if self.fake is not None:
            self.fake.close()

    def _health_changed(self) -> None:
        if self.context is None:
            return
        self.context.devices_changed()
        self.context.report_health(self.health_events())

    def health_events(self) -> list[HealthEvent]:
        """Every shared GPU's health now (healthy None: not monitored)."""
        if self.monitor is None:
            return []
        names = {g.uuid: n for n, g in self._by_name.items()}
        return [HealthEvent(names[u], healthy, message) for u, healthy, message in self.monitor.snapshot()]

    def processes(self) -> Sequence[DeviceProcess]:
        """Every process on the shared GPUs, from NVML (`processes.py`), for the watchdog."""
        if self._processes is None:
            self._processes = ProcessReader([(n, g.uuid) for n, g in self._by_name.items()])
        return self._processes.read()

    # --- publish -------------------------------------------------------------------------------
    def devices(self) -> Sequence[Device]:
        if self.inventory is None:
            raise RuntimeError("hami-core-gpu: devices() before setup(); the framework calls setup first")
        return devices.to_devices(self.inventory, self.monitor.taints() if self.monitor else None)

    # --- prepare -------------------------------------------------------------------------------
    def visible(self, claim: ClaimRef, allocated: Sequence[AllocatedDevice]) -> list[VisibleGpu]:
        """The claim's GPUs in allocation order, shares of one GPU summed."""
        for dev in allocated:
            if dev.device not in self._by_name:
                raise PrepareError(
                    f"device {dev.device} (pool {dev.pool}) is not a shared GPU of this node; this node has "
                    f"{sorted(self._by_name) or 'none'}: was the claim allocated from a stale ResourceSlice?"
                )
        shares = dra.device_shares(allocated, lambda name: devices.usable_memory(self._by_name[name]), "GPU")
        return [VisibleGpu(self._by_name[sh.device].uuid, self._by_name[sh.device].minor, sh.memory, sh.cores)
                for sh in shares]

    def prepare(self, claim: ClaimRef, devices_: Sequence[AllocatedDevice]) -> Sequence[PreparedDevice]:
        self.visible(claim, devices_)  # refuse before anything is written
        self._config(devices_)
        prepared = []
        for dev in devices_:
            gpu = self._by_name[dev.device]
            nodes: tuple[DeviceNode, ...] = ()
            if self.settings.cdi_mode == "self-contained" and self.fake is None:
                nodes = (edits.self_contained_device_node(gpu.minor, self.settings.dev_root),)
            state = {"uuid": gpu.uuid, "minor": gpu.minor, **{k: int(v) for k, v in dev.consumed_capacity.items()}}
            toolkit: tuple[str, ...] = ()
            if self.settings.cdi_mode == "toolkit" and self.fake is None:
                toolkit = tuple(edits.toolkit_device_ids(self.settings.toolkit_cdi_kind, [gpu.uuid]))
            prepared.append(PreparedDevice(dev, ContainerEdits(device_nodes=nodes), state=state, cdi_devices=toolkit))
        return prepared

    def enforcement(self, claim: ClaimRef, prepared: Sequence[PreparedDevice]) -> Enforcement:
        """hookcore's libvgpu.so with one quota per visible GPU (the claim's CUDA ordinals)."""
        allocated = [p.device for p in prepared]
        config = self._config(allocated)
        unlimited = {d.device for d in allocated if d.config is not None and not d.config.compute_limit}
        names = {g.uuid: n for n, g in self._by_name.items()}
        strict = config.compute_mode == "strict"
        mhz = (config.full_load_clock_mhz or self.settings.full_load_clock_mhz) if strict else None
        quotas = []
        for v in self.visible(claim, allocated):
            cores = 100 if names[v.uuid] in unlimited else v.cores
            capped = strict and cores < 100  # nothing to cap on a whole GPU
            quotas.append(Quota(v.uuid, v.memory, cores, strict=capped, full_load_mhz=mhz if capped else None))
        preload = Preload(config.preload) if config.preload else None
        return Enforcement(dra.hook_library("vgpu"), quotas, preload)

    def hook_libraries(self) -> Sequence[Path]:
        """libvgpu.so, installed by the daemon at start (so a heterogeneous claim's specs mount one set)."""
        return [dra.hook_library("vgpu")]

    def claim_edits(self, claim: ClaimRef, prepared: Sequence[PreparedDevice]) -> ContainerEdits:
        uuids = list(dict.fromkeys(str(p.state["uuid"]) for p in prepared))
        env = edits.visible_devices_env(uuids)
        if self.fake is not None:
            env.update(self.fake.container_env(uuids))
        if self.files is None:
            return ContainerEdits(env=env)
        base = edits.self_contained_claim_edits(self.files, None if self.fake else self.settings.dev_root)
        return dataclasses.replace(base, env={**base.env, **env})

    def _config(self, allocated: Sequence[AllocatedDevice]) -> GpuConfig:
        """The claim's one config; its requests' configs must agree on the compute mode too."""
        configs = {dev.config for dev in allocated if isinstance(dev.config, GpuConfig)}
        modes = {c.compute_mode for c in configs if c.compute_mode is not None}
        clocks = {c.full_load_clock_mhz for c in configs if c.full_load_clock_mhz is not None}
        if len(modes) > 1 or len(clocks) > 1:
            raise PrepareError(f"the claim's configs ask for different compute modes {sorted(modes)} or full-load "
                               f"clocks {sorted(clocks)}; one claim is held one way: use one computeMode (and "
                               "fullLoadClockMhz)")
        mode, mhz = next(iter(modes), None), next(iter(clocks), None)
        return dataclasses.replace(dra.claim_share_config(GpuConfig, allocated), compute_mode=mode,
                                   full_load_clock_mhz=mhz)

    def unprepare(self, claim: ClaimRef, prepared: Sequence[PreparedDevice]) -> None:
        return None  # the framework removes the claim's CDI spec, hook config and ledger

