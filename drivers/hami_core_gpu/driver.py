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

MIG (`mig.py`): GPUs in MIG mode are published as MIG devices (``--set mig=static``: the existing
ones; ``dynamic``: every profile at every placement, instances made at prepare and destroyed at
unprepare; a start destroys instances no checkpoint record names, left by a crash). A MIG claim's
containers see exactly its MIG devices (``NVIDIA_VISIBLE_DEVICES``/``CUDA_VISIBLE_DEVICES`` = the
MIG UUIDs, the toolkit's ``nvidia.com/gpu=MIG-...``); the hardware isolates them, no hook is
loaded, and a config asking for hook settings (preload, computeMode) is refused there. One claim
holds MIG devices or hook shares, not both.

MPS (`mps.py`): a claim whose config says ``sharing: mps`` runs as a client of its GPU's MPS
server (one control daemon per GPU, restarted when it stops answering, the GPU reported unhealthy
meanwhile); its containers get the pipe and log dirs and the limits ``cores`` (SM percentage)
and ``memory`` (pinned device memory); hookcore keeps the memory quota, its compute limit is off.

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
    Mount,
    Preload,
    PreparedDevice,
    PrepareError,
    Quota,
)
from drivers.hami_core_gpu import devices, edits, fake, mig, mps, nvml
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
        self._mig_devices: list[Device] = []
        self.mps: mps.MpsDaemons | None = None
        self._mig_static: dict[str, mig.MigDevice] = {}
        self._mig_dynamic: dict[str, tuple[nvml.Gpu, mig.Profile, int]] = {}

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
        self._setup_mig(ctx)
        self._by_name = {devices.device_name(g): g for g in shared}
        log.info("GPUs discovered", extra={
            "gpus": [f"{devices.device_name(g)} {g.uuid} {g.product_name}" for g in shared],
            "driver_version": self.inventory.driver_version, "fake": ctx.fake or None})
        if self.fake is not None:  # the fake's "driver" is the stub libcuda + libnvidia-ml, in either mode
            self.files = edits.DriverFiles.find(self.fake.stub_library.parent)
        elif self.settings.cdi_mode == "self-contained":
            self.files = edits.DriverFiles.find(self.settings.driver_root)
        root = self.settings.mps_root
        if self.fake is not None and "mpsRoot" not in ctx.settings:
            root = self.fake.mps_root
        program = self.settings.mps_control or (str(self.fake.mps_control) if self.fake else "nvidia-cuda-mps-control")
        self.mps = mps.MpsDaemons(root, program, self._health_changed)
        self.mps.start([g.uuid for g in shared])
        if self.settings.health and shared:
            self.monitor = HealthMonitor([g.uuid for g in shared], self._health_changed,
                                         probe_interval=self.settings.health_probe_interval)
            self.monitor.start()

    def _setup_mig(self, ctx: DriverContext) -> None:
        """MIG GPUs: discover their profiles and devices, publish them per the ``mig`` setting."""
        assert self.inventory is not None
        gpus = [g for g in self.inventory.gpus if g.mig_enabled]
        if not gpus:
            return
        if self.settings.mig == "off":
            for g in gpus:
                log.warning("GPU in MIG mode left out (mig=off; static or dynamic publish its MIG devices)",
                            extra={"uuid": g.uuid})
            return
        found = mig.discover([g.uuid for g in gpus])
        if self.fake is not None and self.settings.mig == "static" and self.fake.seed_static_mig(found):
            found = mig.discover([g.uuid for g in gpus])
        if self.settings.mig == "dynamic":
            self._repair_mig(ctx, gpus, found)
        for g in gpus:
            parent = dict(devices.to_device(g, self.inventory).attributes)
            if self.settings.mig == "static":
                self._mig_devices += mig.static_devices(g, parent, found[g.uuid])
                self._mig_static.update({mig.device_name(g.minor, d.profile, d.start, d.compute_instance): d
                                         for d in found[g.uuid].devices})
            else:
                self._mig_devices += mig.dynamic_devices(g, parent, found[g.uuid])
                self._mig_dynamic.update({mig.device_name(g.minor, p, start): (g, p, start)
                                          for p in found[g.uuid].profiles for start in p.starts})
        log.info("MIG GPUs", extra={"mode": self.settings.mig, "gpus": [g.uuid for g in gpus],
                                    "devices": len(self._mig_devices)})

    def _repair_mig(self, ctx: DriverContext, gpus: Sequence[nvml.Gpu], found: dict[str, mig.MigGpu]) -> None:
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

    def close(self) -> None:
        """Stop the health monitor and drop the fake backend's files (tests; the daemon exits)."""
        if self.monitor is not None:
            self.monitor.stop()
        if self._processes is not None:
            self._processes.close()
        if self.mps is not None:
            self.mps.close()
        if self.fake is not None:
            self.fake.close()

    def _health_changed(self) -> None:
        if self.context is None:
            return
        self.context.devices_changed()
        self.context.report_health(self.health_events())

    def health_events(self) -> list[HealthEvent]:
        """Every shared GPU's health now (healthy None: not monitored); a GPU whose MPS control
        daemon is being restarted is unhealthy."""
        nvml_view = {u: (healthy, message) for u, healthy, message in self.monitor.snapshot()} if self.monitor else {}
        mps_down = {g.uuid for g in self._by_name.values() if self.mps is not None and self.mps.healthy(g.uuid) is False}
        if self.monitor is None and not (self.mps is not None and self.mps.status()):
            return []
        out = []
        for name, gpu in sorted(self._by_name.items(), key=lambda kv: kv[1].minor):
            u = gpu.uuid
            healthy, message = nvml_view.get(u, (None, ""))
            if u in mps_down:
                healthy, message = False, "MPS control daemon not answering; restarting it"
            out.append(HealthEvent(name, healthy, message))
        return out

    def processes(self) -> Sequence[DeviceProcess]:
        """Every process on the shared GPUs, from NVML (`processes.py`), for the watchdog."""
        if self._processes is None:
            self._processes = ProcessReader([(n, g.uuid) for n, g in self._by_name.items()])
        return self._processes.read()

    # --- publish -------------------------------------------------------------------------------
    def devices(self) -> Sequence[Device]:
        if self.inventory is None:
            raise RuntimeError("hami-core-gpu: devices() before setup(); the framework calls setup first")
        return [*devices.to_devices(self.inventory, self.monitor.taints() if self.monitor else None), *self._mig_devices]

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

    def _is_mig(self, devices_: Sequence[AllocatedDevice]) -> bool:
        kinds = {d.device in self._mig_static or d.device in self._mig_dynamic for d in devices_}
        if len(kinds) > 1:
            raise PrepareError(f"the claim has MIG devices and hook-shared GPUs ({[d.device for d in devices_]}); one"
                               " claim holds one kind: put them in two claims")
        return kinds == {True}

    def _prepare_mig(self, devices_: Sequence[AllocatedDevice]) -> list[PreparedDevice]:
        for dev in devices_:
            c = dev.config
            if isinstance(c, GpuConfig) and (c.preload or c.compute_mode or c.full_load_clock_mhz):
                raise PrepareError(f"device {dev.device} is a MIG device: the hardware isolates it and no hook runs"
                                   " there, so preload/computeMode/fullLoadClockMhz do not apply; drop them from"
                                   " the claim's (or DeviceClass's) GpuConfig")
        prepared = []
        for dev in devices_:
            if dev.device in self._mig_static:
                found, how = self._mig_static[dev.device], "static"
            else:
                gpu, profile, start = self._mig_dynamic[dev.device]
                try:
                    found, how = mig.create(gpu.uuid, profile, start), "dynamic"
                except nvml.NvmlError as exc:
                    raise PrepareError(f"device {dev.device}: cannot create MIG {profile.name} at slice {start} on"
                                       f" {gpu.uuid}: {exc}") from exc
            minor = next(g.minor for g in self.inventory.gpus if g.uuid == found.parent_uuid) if self.inventory else 0
            nodes: tuple[DeviceNode, ...] = ()
            if self.settings.cdi_mode == "self-contained" and self.fake is None:
                nodes = (edits.self_contained_device_node(minor, self.settings.dev_root),
                         *mig.cap_device_nodes(minor, found.gpu_instance, found.compute_instance, self.settings.dev_root))
            toolkit: tuple[str, ...] = ()
            if self.settings.cdi_mode == "toolkit" and self.fake is None:
                toolkit = tuple(edits.toolkit_device_ids(self.settings.toolkit_cdi_kind, [found.uuid]))
            state = {"uuid": found.uuid, "parent": found.parent_uuid, "minor": minor, "mig": how,
                     "profile": found.profile.name, "start": found.start, "memory": found.memory,
                     "gi": found.gpu_instance, "ci": found.compute_instance}
            prepared.append(PreparedDevice(dev, ContainerEdits(device_nodes=nodes), state=state, cdi_devices=toolkit))
        return prepared

    def prepare(self, claim: ClaimRef, devices_: Sequence[AllocatedDevice]) -> Sequence[PreparedDevice]:
        if self._is_mig(devices_):
            return self._prepare_mig(devices_)
        visible = self.visible(claim, devices_)  # refuse before anything is written
        use_mps = self._config(devices_).sharing == "mps"
        if use_mps:
            if len(visible) != 1:
                raise PrepareError(f"sharing: mps needs the claim on one GPU (a process talks to one MPS server); it"
                                   f" has {len(visible)}: {[d.device for d in devices_]}; ask for one device")
            assert self.mps is not None
            try:
                self.mps.add_claim(visible[0].uuid, claim.uid)
            except (OSError, RuntimeError) as exc:
                raise PrepareError(f"device {devices_[0].device}: MPS: {exc}") from exc
        prepared = []
        for dev in devices_:
            gpu = self._by_name[dev.device]
            nodes: tuple[DeviceNode, ...] = ()
            if self.settings.cdi_mode == "self-contained" and self.fake is None:
                nodes = (edits.self_contained_device_node(gpu.minor, self.settings.dev_root),)
            state = {"uuid": gpu.uuid, "minor": gpu.minor, **{k: int(v) for k, v in dev.consumed_capacity.items()}}
            if use_mps:
                state["mps"] = True
            toolkit: tuple[str, ...] = ()
            if self.settings.cdi_mode == "toolkit" and self.fake is None:
                toolkit = tuple(edits.toolkit_device_ids(self.settings.toolkit_cdi_kind, [gpu.uuid]))
            prepared.append(PreparedDevice(dev, ContainerEdits(device_nodes=nodes), state=state, cdi_devices=toolkit))
        return prepared

    def enforcement(self, claim: ClaimRef, prepared: Sequence[PreparedDevice]) -> Enforcement | None:
        """hookcore's libvgpu.so with one quota per visible GPU (the claim's CUDA ordinals); none on MIG."""
        allocated = [p.device for p in prepared]
        if self._is_mig(allocated):
            return None
        config = self._config(allocated)
        unlimited = {d.device for d in allocated if d.config is not None and not d.config.compute_limit}
        names = {g.uuid: n for n, g in self._by_name.items()}
        if config.sharing == "mps":  # MPS caps the SMs; the hook keeps the memory quota only
            unlimited = {d.device for d in allocated}
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
            migs = [self._mig_of(p) for p in prepared if p.state.get("mig")]
            env.update(self.fake.container_env(uuids, migs))
        mounts: tuple[Mount, ...] = ()
        if any(p.state.get("mps") for p in prepared) and self.mps is not None:
            (v,) = self.visible(claim, [p.device for p in prepared])
            env.update(mps.container_env(v.cores, v.memory))
            mounts = mps.container_mounts(self.mps, v.uuid)
        if self.files is None:
            return ContainerEdits(env=env, mounts=mounts)
        base = edits.self_contained_claim_edits(self.files, None if self.fake else self.settings.dev_root)
        return dataclasses.replace(base, env={**base.env, **env}, mounts=(*base.mounts, *mounts))

    def _config(self, allocated: Sequence[AllocatedDevice]) -> GpuConfig:
        """The claim's one config; its requests' configs must agree on the compute mode too."""
        configs = {dev.config for dev in allocated if isinstance(dev.config, GpuConfig)}
        modes = {c.compute_mode for c in configs if c.compute_mode is not None}
        clocks = {c.full_load_clock_mhz for c in configs if c.full_load_clock_mhz is not None}
        if len(modes) > 1 or len(clocks) > 1:
            raise PrepareError(f"the claim's configs ask for different compute modes {sorted(modes)} or full-load "
                               f"clocks {sorted(clocks)}; one claim is held one way: use one computeMode (and "
                               "fullLoadClockMhz)")
        sharing = {c.sharing for c in configs}
        if len(sharing) > 1:
            raise PrepareError(f"the claim's requests ask for different sharing {sorted(map(str, sharing))}; one"
                               " claim's containers are MPS clients or not: give every request sharing: mps")
        mode, mhz = next(iter(modes), None), next(iter(clocks), None)
        return dataclasses.replace(dra.claim_share_config(GpuConfig, allocated), compute_mode=mode,
                                   full_load_clock_mhz=mhz, sharing=next(iter(sharing), None))

    def _mig_of(self, p: PreparedDevice) -> mig.MigDevice:
        """The MIG device a prepared device's state describes."""
        st = p.state
        profile = self._mig_static[p.device.device].profile if p.device.device in self._mig_static \
            else self._mig_dynamic[p.device.device][1]
        return mig.MigDevice(uuid=str(st["uuid"]), parent_uuid=str(st["parent"]), gpu_instance=int(st["gi"]),
                             compute_instance=int(st["ci"]), profile=profile, start=int(st["start"]),
                             multiprocessors=profile.multiprocessors, memory=int(st["memory"]))

    def unprepare(self, claim: ClaimRef, prepared: Sequence[PreparedDevice]) -> None:
        """Destroy the claim's dynamic MIG instances (found by device name: a record still
        "preparing" has no state); the framework removes its CDI spec, hook config and ledger."""
        for p in prepared:
            if p.device.device in self._by_name and self.mps is not None:
                # also for a record still "preparing" (no state): the claim's MPS record goes by GPU
                self.mps.remove_claim(self._by_name[p.device.device].uuid, claim.uid)
            if p.device.device in self._mig_dynamic:
                gpu, profile, start = self._mig_dynamic[p.device.device]
                if mig.destroy(gpu.uuid, profile, start):
                    log.info("MIG instance destroyed", extra={"claim": claim.uid, "device": p.device.device})

