"""`hami-core-gpu.project-hami.io`: NVIDIA GPUs shared by consumable capacity, held by hookcore.

Compatible with HAMi's NVIDIA DRA driver by name, DeviceClass, device names and attributes; each
share is enforced in the container by hookcore's ``libvgpu.so`` (memory quota, compute share).

    dra run hami-core-gpu --node-name "$NODE_NAME"                  # a GPU node
    dra run hami-core-gpu --node-name node-1 --fake h200x8 ...      # fake GPUs (stub NVML)

The skeleton (`dra.SharedDeviceDriver`) does the rest; this driver discovers the GPUs through
NVML (`nvml.py`, or `fake.py`), watches XIDs (`health.py`), lists processes for the watchdog
(`processes.py`), maps shares to edits (`edits.py`) and quotas (``computeMode: strict``, contexts).
MIG (`mig_devices.py`): a MIG claim sees exactly its MIG devices, no hook; one claim holds MIG
devices or hook shares. MPS (`mps.py`): ``sharing: mps`` makes the claim a client of its GPU's
MPS server (SMs capped by MPS; the hook keeps the memory quota).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence

import dra
from dra import (AllocatedDevice, ClaimRef, ContainerEdits, Device, DeviceProcess, DriverContext, HealthEvent, Mount,
                 PreparedDevice, Quota, Taint, Visible)
from drivers.hami_core_gpu import devices, edits, fake, health, mps, nvml
from drivers.hami_core_gpu.config import API_VERSION, GpuConfig, claim_config
from drivers.hami_core_gpu.mig_devices import MigDevices
from drivers.hami_core_gpu.processes import ProcessReader
from drivers.hami_core_gpu.settings import Settings

log = logging.getLogger(__name__)


class HamiCoreGpuDriver(dra.SharedDeviceDriver[nvml.Gpu]):
    name, cdi_kind = devices.DRIVER_NAME, "k8s.hami-core-gpu.project-hami.io/claim"
    config_type, config_api_version, noun, hook_stem = GpuConfig, API_VERSION, "GPU", "vgpu"
    device_name, usable_memory = staticmethod(devices.device_name), staticmethod(devices.usable_memory)
    claim_config = staticmethod(claim_config)

    def __init__(self) -> None:
        super().__init__()
        self.settings = Settings()
        self.inventory: nvml.Inventory | None = None
        self.fake: fake.FakeBackend | None = None
        self.files: edits.DriverFiles | None = None
        self.mps: mps.MpsDaemons | None = None
        self.migs: MigDevices | None = None
        self._processes: ProcessReader | None = None

    def discover(self, ctx: DriverContext) -> Sequence[nvml.Gpu]:
        self.settings = s = Settings.parse(ctx.settings)
        if ctx.fake:
            self.fake = fake.FakeBackend(fake.load(ctx.fake, ctx.node_name), fake.stub_library())
            self.on_close(self.fake.close, at_exit=True)
        self.inventory = nvml.discover(self.fake.sysfs if self.fake else s.sysfs, s.device_memory)
        shared = devices.publishable(self.inventory)
        self.migs = MigDevices(s, self.inventory, self.fake)
        self.migs.setup(ctx)
        log.info("GPUs discovered", extra={"gpus": [f"{devices.device_name(g)} {g.uuid} {g.product_name}" for g in shared],
                                           "driver_version": self.inventory.driver_version, "fake": ctx.fake or None})
        # the fake's "driver" is the stub libcuda + libnvidia-ml, in either mode
        root = self.fake.stub_library.parent if self.fake else s.driver_root if s.cdi_mode == "self-contained" else None
        self.files = edits.DriverFiles.find(root) if root is not None else None
        mps_root = self.fake.mps_root if self.fake and "mpsRoot" not in ctx.settings else s.mps_root
        control = s.mps_control or (str(self.fake.mps_control) if self.fake else "nvidia-cuda-mps-control")
        self.mps = mps.MpsDaemons(mps_root, control, self.health_changed)
        self.on_close(self.mps.close)
        self.mps.start([g.uuid for g in shared])
        return shared

    def watch_health(self, ctx: DriverContext, shared: Sequence[nvml.Gpu]) -> health.HealthMonitor | None:
        """NVML's XID events and probes (`health.py`) of the shared GPUs and of the MIG GPUs."""
        watched = [*shared, *(self.migs.parents() if self.migs else [])]
        return health.HealthMonitor([g.uuid for g in watched], self.health_changed,
                                    probe_interval=self.settings.health_probe_interval) if self.settings.health and watched else None

    def health_events(self) -> list[HealthEvent]:
        """NVML's view of the shared and MIG devices (`health.health_events`), MPS restarts too."""
        if self.monitor is None and not (self.mps is not None and self.mps.status()):
            return []
        return health.health_events(self.by_name, self.monitor.snapshot() if self.monitor else [],
                                    lambda u: self.mps is not None and self.mps.healthy(u) is False,
                                    self.migs.devices if self.migs else [])

    def processes(self) -> Sequence[DeviceProcess]:
        """Every process on the shared GPUs, from NVML (`processes.py`), for the watchdog."""
        if self._processes is None:
            self._processes = ProcessReader([(n, g.uuid) for n, g in self.by_name.items()])
            self.on_close(self._processes.close)
        return self._processes.read()

    def to_devices(self, taints: Mapping[str, tuple[Taint, ...]]) -> Sequence[Device]:
        assert self.inventory is not None and self.migs is not None
        return [*devices.to_devices(self.inventory, dict(taints)), *self.migs.tainted(taints)]

    def prepare(self, claim: ClaimRef, devices_: Sequence[AllocatedDevice]) -> Sequence[PreparedDevice]:
        if self.migs is not None and self.migs.is_mig(devices_):
            return self.migs.prepare(devices_)
        visible = self.visible(claim, devices_)  # refuse before anything is written
        if claim_config(devices_).sharing != "mps" or self.mps is None:
            return super().prepare(claim, devices_)
        self.mps.admit(claim.uid, [v.device.uuid for v in visible], [d.device for d in devices_])
        return [dataclasses.replace(p, state={**p.state, "mps": True}) for p in super().prepare(claim, devices_)]

    def prepared_device(self, claim: ClaimRef, allocated: AllocatedDevice, gpu: nvml.Gpu) -> PreparedDevice:
        edits_, toolkit = edits.device_edits(self.settings, self.fake is None, gpu.minor, gpu.uuid)
        state = {"uuid": gpu.uuid, "minor": gpu.minor, **{k: int(v) for k, v in allocated.consumed_capacity.items()}}
        return PreparedDevice(allocated, edits_, state=state, cdi_devices=toolkit)

    def enforcement(self, claim: ClaimRef, prepared: Sequence[PreparedDevice]) -> dra.Enforcement | None:
        """The skeleton's (one quota per visible GPU, the claim's CUDA ordinals); none on MIG."""
        mig = self.migs is not None and self.migs.is_mig([p.device for p in prepared])
        return None if mig else super().enforcement(claim, prepared)

    def quota(self, v: Visible[nvml.Gpu], cores: int, config: GpuConfig) -> Quota:
        """MPS caps the SMs (the hook keeps the memory quota only); strict caps full-load throughput."""
        cores = 100 if config.sharing == "mps" else cores
        capped = config.compute_mode == "strict" and cores < 100  # nothing to cap on a whole GPU
        mhz = (config.full_load_clock_mhz or self.settings.full_load_clock_mhz) if capped else None
        context = self.settings.context_charge(fake=self.fake is not None) or None
        return Quota(v.device.uuid, v.memory, cores, strict=capped, full_load_mhz=mhz, context_memory=context)

    def claim_edits(self, claim: ClaimRef, prepared: Sequence[PreparedDevice]) -> ContainerEdits:
        uuids = list(dict.fromkeys(str(p.state["uuid"]) for p in prepared))
        env = edits.visible_devices_env(uuids)
        if self.fake is not None and self.migs is not None:
            env.update(self.fake.container_env(uuids, [self.migs.of(p) for p in prepared if p.state.get("mig")]))
        mounts: tuple[Mount, ...] = ()
        if any(p.state.get("mps") for p in prepared) and self.mps is not None:
            (v,) = self.visible(claim, [p.device for p in prepared])
            env.update(mps.container_env(v.cores, v.memory))
            mounts = mps.container_mounts(self.mps, v.device.uuid)
        base = edits.self_contained_claim_edits(self.files, None if self.fake else self.settings.dev_root) \
            if self.files is not None else ContainerEdits()
        return dataclasses.replace(base, env={**base.env, **env}, mounts=(*base.mounts, *mounts))

    def unprepare(self, claim: ClaimRef, prepared: Sequence[PreparedDevice]) -> None:
        """Drop the claim's MPS records (by GPU: a record still "preparing" has no state) and destroy
        its dynamic MIG instances; the framework removes its CDI spec, hook config and ledger."""
        for p in prepared:
            if p.device.device in self.by_name and self.mps is not None:
                self.mps.remove_claim(self.by_name[p.device.device].uuid, claim.uid)
        if self.migs is not None:
            self.migs.unprepare(claim, prepared)
