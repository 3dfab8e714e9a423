"""`hami-core-gpu.project-hami.io`: NVIDIA GPUs shared by consumable capacity, held by hookcore.

Compatible with HAMi's NVIDIA DRA driver by name, DeviceClass, device names and attributes.

    dra run hami-core-gpu --node-name "$NODE_NAME"                  # a GPU node
    dra run hami-core-gpu --node-name node-1 --fake h200x8 ...      # fake GPUs (stub NVML)

The skeleton (`dra.SharedDeviceDriver`) does the rest; this driver discovers GPUs through NVML
(`nvml.py`, `fake.py`), watches XIDs (`health.py`), lists processes (`processes.py`), maps shares
to edits (`edits.py`) and ``libvgpu.so`` quotas. MIG devices (`mig_devices.py`) get no hook; an
MPS claim (`mps.py`) is its GPU's MPS client, the hook keeps its memory quota.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence

import dra
from drivers.hami_core_gpu import devices, edits, fake, health, mps, nvml, strict_defaults
from drivers.hami_core_gpu.config import API_VERSION, GpuConfig, claim_config
from drivers.hami_core_gpu.fake import FakeBackend
from drivers.hami_core_gpu.mig_devices import MigDevices
from drivers.hami_core_gpu.processes import ProcessReader
from drivers.hami_core_gpu.settings import Settings

log = logging.getLogger(__name__)


class HamiCoreGpuDriver(dra.SharedDeviceDriver[nvml.Gpu, GpuConfig]):
    name, cdi_kind, noun, hook_stem = devices.DRIVER_NAME, "k8s.hami-core-gpu.project-hami.io/claim", "GPU", "vgpu"
    config_type, config_api_version, claim_config = GpuConfig, API_VERSION, staticmethod(claim_config)
    device_name, usable_memory = staticmethod(devices.device_name), staticmethod(devices.usable_memory)
    settings = Settings()
    fake: FakeBackend | None = None
    files: edits.DriverFiles | None = None
    inventory: nvml.Inventory  # these four are set by discover (setup), before any other call
    migs: MigDevices
    mps: mps.MpsDaemons
    _processes: ProcessReader

    def discover(self, ctx: dra.DriverContext) -> Sequence[nvml.Gpu]:
        self.settings = s = Settings.parse(ctx.settings)
        if ctx.fake:
            self.fake = self.adopt(fake.FakeBackend(fake.load(ctx.fake, ctx.node_name), fake.stub_library()), at_exit=True)
        self.inventory = nvml.discover(self.fake.sysfs if self.fake else s.sysfs, s.device_memory)
        shared = devices.publishable(self.inventory)
        self.migs = MigDevices(s, self.inventory, self.fake).setup(ctx)
        log.info("GPUs discovered", extra={"gpus": [f"{devices.device_name(g)} {g.uuid} {g.product_name}" for g in shared],
                                           "driver_version": self.inventory.driver_version, "fake": ctx.fake or None})
        root = self.fake.stub_library.parent if self.fake else s.driver_root if s.cdi_mode == "self-contained" else None  # fake: stubs
        self.files = edits.DriverFiles.find(root) if root is not None else None
        self.mps = self.adopt(mps.for_node(s.mps_root, "mpsRoot" in ctx.settings, s.mps_control,
                                           (self.fake.mps_root, self.fake.mps_control) if self.fake else None,
                                           self.health_changed, s.mps_sharing))
        self.mps.start([g.uuid for g in shared])
        self._processes = self.adopt(ProcessReader([(devices.device_name(g), g.uuid) for g in shared],
                                                   [(devices.device_name(g), g.minor, g.uuid) for g in self.migs.watched()],
                                                   self.migs.published, self.migs.on_gpu()))
        return shared

    def watch_health(self, ctx: dra.DriverContext, shared: Sequence[nvml.Gpu]) -> health.HealthMonitor | None:
        """NVML's XID events and probes (`health.py`) of the shared GPUs and of the MIG GPUs."""
        watched = [g.uuid for g in (*shared, *self.migs.parents())]
        return health.HealthMonitor(watched, self.health_changed, probe_interval=self.settings.health_probe_interval) \
            if self.settings.health and watched else None

    def health_events(self) -> list[dra.HealthEvent]:
        """NVML's view of the shared and MIG devices (`health.health_events`), MPS restarts too."""
        return health.health_events(self.by_name, self.monitor, self.mps, self.migs.devices)

    def processes(self) -> Sequence[dra.DeviceProcess]:
        """Every process on the shared GPUs and in the MIG devices of the GPUs in MIG mode (``mig``
        static or dynamic), from NVML, for the watchdog (`processes.py`). A MIG device's process is
        under the MIG device's published name (`MigDevices.published`: a static device, a dynamic
        instance a prepared claim holds), or, in an instance this driver does not publish, under
        ``hami-gpu-<minor>-mig-gi<gi>-ci<ci>`` (`mig.unpublished_name`), which no claim holds: unheld,
        and a taint of it goes on the GPU's published MIG devices (`MigDevices.on_gpu`).
        Utilization is None on MIG (NVML gives none there): no over-share verdict. The MPS control
        daemons and servers this daemon started are marked ``mps`` (known by PID from `MpsDaemons`,
        never from anything a process shows in /proc), so they are neither unheld nor in a claim."""
        procs = self._processes.read()
        ours = self.mps.server_pids() if procs else frozenset()
        return [dataclasses.replace(p, system="mps") if p.pid in ours else p for p in procs]

    def to_devices(self, taints: Mapping[str, tuple[dra.Taint, ...]]) -> Sequence[dra.Device]:
        return [*devices.to_devices(self.inventory, dict(taints)), *self.migs.tainted(taints)]

    def prepare(self, claim: dra.ClaimRef, devices_: Sequence[dra.AllocatedDevice]) -> Sequence[dra.PreparedDevice]:
        if self.migs.is_mig(devices_):
            return self.migs.prepare(claim, devices_)
        view = self.view(claim, devices_)  # refuse before anything is written (super().prepare reads it back)
        if view.config.sharing != "mps":
            return super().prepare(claim, devices_)
        self.mps.admit(claim, [v.device.uuid for v in view.visible], [d.device for d in devices_])
        return [dataclasses.replace(p, state={**p.state, "mps": True}) for p in super().prepare(claim, devices_)]

    def prepared_device(self, claim: dra.ClaimRef, allocated: dra.AllocatedDevice, gpu: nvml.Gpu) -> dra.PreparedDevice:
        edits_, toolkit = edits.device_edits(self.settings, self.fake is None, gpu.minor, gpu.uuid)
        state = {"uuid": gpu.uuid, "minor": gpu.minor, **{k: int(v) for k, v in allocated.consumed_capacity.items()}}
        return dra.PreparedDevice(allocated, edits_, state=state, cdi_devices=toolkit)

    def enforcement(self, claim: dra.ClaimRef, prepared: Sequence[dra.PreparedDevice]) -> dra.Enforcement | None:
        """The skeleton's (one quota per visible GPU, the claim's CUDA ordinals); none on MIG."""
        return None if self.migs.is_mig([p.device for p in prepared]) else super().enforcement(claim, prepared)

    def quota(self, v: dra.Visible[nvml.Gpu], cores: int, config: GpuConfig) -> dra.Quota:
        """Strict caps full-load throughput, at the full-load clock and clock elasticity of the claim's
        config, else the daemon's settings, else the GPU model's measured ones (`strict_defaults`).
        Under MPS the hook keeps the claim's cores too: MPS's SM percentage is the client's own
        environment, the hook's config is the daemon's (a ceiling; review 2026-12-04 #5). The GPU's SM
        count from NVML goes with it: the hook charges a client's device time x its part of that
        count, so an honest client is held once. Every claim
        takes part in priorities: normal (the default) waits where a high claim has work."""
        capped = config.compute_mode == "strict" and cores < 100  # nothing to cap on a whole GPU
        mhz, elasticity = None, None
        if capped:  # the claim's config, else the daemon's settings, else the GPU model's measured values
            measured = strict_defaults.for_gpu(v.device)
            mhz = config.full_load_clock_mhz or self.settings.full_load_clock_mhz or (
                measured.full_load_mhz if measured else None)
            elasticity = next((e for e in (config.clock_elasticity, self.settings.clock_elasticity,
                                           measured.clock_elasticity if measured else None) if e is not None), None)
        return dra.Quota(v.device.uuid, v.memory, cores, strict=capped, full_load_mhz=mhz, clock_elasticity=elasticity,
                         context_memory=self.settings.context_charge(fake=self.fake is not None) or None,
                         device_sms=v.device.sms, priority=config.priority or "normal")

    def claim_edits(self, claim: dra.ClaimRef, prepared: Sequence[dra.PreparedDevice]) -> dra.ContainerEdits:
        uuids = list(dict.fromkeys(str(p.state["uuid"]) for p in prepared))
        env = edits.visible_devices_env(uuids)
        if self.fake is not None:
            env.update(self.fake.container_env(uuids, [self.migs.of(p) for p in prepared if p.state.get("mig")]))
        extra = dra.ContainerEdits()
        if any(p.state.get("mps") for p in prepared):
            (v,) = self.view(claim, [p.device for p in prepared]).visible
            extra = self.mps.claim_edits(v.device.uuid, v.cores, v.memory)
        base = edits.self_contained_claim_edits(self.files, None if self.fake else self.settings.dev_root) \
            if self.files is not None else dra.ContainerEdits()
        return dataclasses.replace(base, env={**base.env, **env, **extra.env}, mounts=(*base.mounts, *extra.mounts))

    def unprepare(self, claim: dra.ClaimRef, prepared: Sequence[dra.PreparedDevice]) -> None:
        """Drop the claim's MPS records (by GPU: a "preparing" record has no state), its dynamic MIG instances."""
        for uuid in {self.by_name[p.device.device].uuid for p in prepared if p.device.device in self.by_name}:
            self.mps.remove_claim(uuid, claim.uid)
        self.migs.unprepare(claim, prepared)
