"""MIG: a GPU in MIG mode is published as its MIG partitions, never whole and never hook-shared.

Two ways (``--set mig=``, chart ``daemon.settings.mig``):

- ``static`` (default): the MIG devices that exist (made by the admin, e.g. with mig-parted)
  are devices of their own, each allocatable whole by one claim.
- ``dynamic``: the GPU's profiles at every placement NVML lists are devices drawing on the
  GPU's shared counters (DRAPartitionableDevices): one counter per memory slice and one for
  the compute slices, so the scheduler only picks placements that fit together. Prepare
  creates the GPU instance at the allocated placement and one compute instance spanning it;
  unprepare destroys both.

A device's name says where it sits, ``hami-gpu-<minor>-mig-<profile>-<start>`` (e.g.
``hami-gpu-0-mig-1g18gb-0``; a second compute instance of one GPU instance adds ``-c<id>``),
so a checkpoint record that names the device finds its placement. The instance itself is known by
its identity, (GPU instance id, MIG UUID), which the prepared record's state keeps: unprepare
destroys only that instance, and a claim never gets a placement another record names (the
placement can be allocated again before the old claim's unprepare runs, kubernetes#141471).

GPUs with MIG off are shared by hookcore as before. Switching a GPU is the admin's act (``nvidia-smi
-i N -mig 1``, which needs the GPU idle); the daemon reads the mode at start, so restart it after.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import re
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import pynvml

from dra import Capacity, CounterConsumption, CounterSet, Device, DeviceNode, PrepareError, Version
from drivers.hami_core_gpu import nvml

log = logging.getLogger(__name__)
Attr = str | int | bool | Version

MODES = ("off", "static", "dynamic")
DEVICE_TYPE = "mig"  # the `type` attribute, as NVIDIA's DRA driver names MIG devices
MEMORY_SLICES = 8  # every MIG-capable GPU so far (A30: 4 is handled: counters follow the placements)
COMPUTE_COUNTER = "compute-slices"
_NAME = re.compile(r"^hami-gpu-(?P<minor>\d+)-mig-(?P<profile>[0-9a-z]+)-(?P<start>\d+)(-c(?P<ci>\d+))?$")


def counter_set_name(minor: int) -> str:
    return f"hami-gpu-{minor}-mig"


def memory_counter(i: int) -> str:
    return f"memory-slice-{i}"


@dataclasses.dataclass(frozen=True)
class Profile:
    """A GPU instance profile as NVML describes it (one compute instance spans it)."""

    id: int
    name: str  # e.g. 1g.18gb
    compute_slices: int
    memory_slices: int  # placement size
    memory: int  # bytes
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    starts: tuple[int, ...]  # placements NVML lists

    @property
    def slug(self) -> str:
        return self.name.replace(".", "").replace("+", "")


@dataclasses.dataclass(frozen=True)
class MigDevice:
    """One existing MIG device (a compute instance in a GPU instance)."""

    uuid: str  # MIG-...
    parent_uuid: str
    gpu_instance: int
    compute_instance: int
    profile: Profile
    start: int
    multiprocessors: int
    memory: int


@dataclasses.dataclass(frozen=True)
class MigGpu:
    """What MIG discovery found on one GPU in MIG mode."""

    uuid: str
    profiles: tuple[Profile, ...]
    devices: tuple[MigDevice, ...]


def device_name(minor: int, profile: Profile, start: int, compute_instance: int = 0) -> str:
    suffix = f"-c{compute_instance}" if compute_instance else ""
    return f"hami-gpu-{minor}-mig-{profile.slug}-{start}{suffix}"


def unpublished_name(minor: int, gpu_instance: int, compute_instance: int) -> str:
    """The name the processes of a MIG device this driver does not publish are reported under (an
    admin's instance, one of a profile the driver does not know, one made after a static start,
    a dynamic one no prepared claim records): ``hami-gpu-<minor>-mig-gi<gi>-ci<ci>``. No device is
    ever published so (a published name ends in its placement: `parse_name` refuses this one), so
    no claim holds it and the watchdog calls its processes unheld."""
    return f"hami-gpu-{minor}-mig-gi{gpu_instance}-ci{compute_instance}"


def parse_name(name: str) -> tuple[int, str, int, int] | None:
    """(minor, profile slug, start, compute instance) of a MIG device name, None if it is none."""
    m = _NAME.match(name)
    if m is None:
        return None
    return int(m["minor"]), m["profile"], int(m["start"]), int(m["ci"] or 0)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def profiles(handle: Any, target: str) -> tuple[Profile, ...]:
    """Every GPU instance profile this GPU has, with its placements."""
    out = []
    for index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = nvml.call(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, handle, index, target=target)
        except nvml.NvmlError as exc:
            if nvml.not_supported(exc) or exc.code == pynvml.NVML_ERROR_INVALID_ARGUMENT:
                continue  # a profile this GPU does not have
            raise
        count = ctypes.c_uint(0)
        nvml.call(pynvml.nvmlDeviceGetGpuInstancePossiblePlacements, handle, info.id, None, ctypes.byref(count),
                  target=target)
        placements = (pynvml.c_nvmlGpuInstancePlacement_t * max(count.value, 1))()
        nvml.call(pynvml.nvmlDeviceGetGpuInstancePossiblePlacements, handle, info.id, placements,
                  ctypes.byref(count), target=target)
        starts = tuple(sorted(placements[i].start for i in range(count.value)))
        size = placements[0].size if count.value else 0
        name = _text(info.name).removeprefix("MIG ").strip()
        out.append(Profile(
            id=int(info.id), name=name, compute_slices=int(info.sliceCount), memory_slices=int(size),
            memory=int(info.memorySizeMB) << 20, multiprocessors=int(info.multiprocessorCount),
            copy_engines=int(info.copyEngineCount), decoders=int(info.decoderCount),
            encoders=int(info.encoderCount), jpeg_engines=int(info.jpegCount), ofa_engines=int(info.ofaCount),
            starts=starts))
    return tuple(sorted(out, key=lambda p: (p.compute_slices, p.memory_slices, p.id)))


def _gpu_instance_info(handle: Any, gi_id: int, target: str) -> Any:
    gi = nvml.call(pynvml.nvmlDeviceGetGpuInstanceById, handle, gi_id, target=target)
    return nvml.call(pynvml.nvmlGpuInstanceGetInfo, gi, target=target)


def existing(handle: Any, parent_uuid: str, known: Sequence[Profile], target: str, only: bool = False
             ) -> tuple[MigDevice, ...]:
    """The MIG devices that exist on this GPU now (`only`: just those of the `known` profiles)."""
    by_id = {p.id: p for p in known}
    out = []
    for index in range(nvml.call(pynvml.nvmlDeviceGetMaxMigDeviceCount, handle, target=target)):
        try:
            mig = nvml.call(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, index, target=target)
        except nvml.NvmlError as exc:
            if exc.code == pynvml.NVML_ERROR_NOT_FOUND:
                continue
            raise
        uuid = nvml.call(pynvml.nvmlDeviceGetUUID, mig, target=f"{target} MIG {index}")
        where = f"{target} {uuid}"
        gi_id = nvml.call(pynvml.nvmlDeviceGetGpuInstanceId, mig, target=where)
        ci_id = nvml.call(pynvml.nvmlDeviceGetComputeInstanceId, mig, target=where)
        attrs = nvml.call(pynvml.nvmlDeviceGetAttributes_v2, mig, target=where)
        info = _gpu_instance_info(handle, gi_id, where)
        profile = by_id.get(int(info.profileId))
        if profile is None:
            if not only:
                log.warning("MIG device of an unknown profile left out", extra={"uuid": uuid,
                                                                              "profile_id": info.profileId})
            continue
        out.append(MigDevice(uuid=uuid, parent_uuid=parent_uuid, gpu_instance=int(gi_id), compute_instance=int(ci_id),
                             profile=profile, start=int(info.placement.start),
                             multiprocessors=int(attrs.multiprocessorCount), memory=int(attrs.memorySizeMB) << 20))
    return tuple(sorted(out, key=lambda d: (d.start, d.compute_instance)))


def discover(uuids: Iterable[str]) -> dict[str, MigGpu]:
    """Profiles and existing MIG devices of the GPUs (in MIG mode) with these UUIDs."""
    out = {}
    with nvml.session():
        for uuid in uuids:
            handle = nvml.call(pynvml.nvmlDeviceGetHandleByUUID, uuid, target=uuid)
            known = profiles(handle, uuid)
            out[uuid] = MigGpu(uuid, known, existing(handle, uuid, known, uuid))
    return out


# --- dynamic MIG: create and destroy --------------------------------------------------------------


def _ci_profile_index(compute_slices: int) -> int:
    table = {1: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, 2: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
             3: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, 4: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
             6: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE, 7: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
             8: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE}
    return int(table[compute_slices])


def _instances_at(handle: Any, profile: Profile, target: str) -> Iterator[tuple[Any, Any]]:
    """(GPU instance handle, info) of every GPU instance of `profile` on the GPU."""
    count = ctypes.c_uint(0)
    array = (pynvml.c_nvmlGpuInstance_t * 16)()
    nvml.call(pynvml.nvmlDeviceGetGpuInstances, handle, profile.id, array, ctypes.byref(count), target=target)
    for i in range(count.value):
        yield array[i], nvml.call(pynvml.nvmlGpuInstanceGetInfo, array[i], target=target)


def _compute_instances(gi: Any, target: str) -> list[Any]:
    out = []
    for index in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
        count = ctypes.c_uint(0)
        array = (pynvml.c_nvmlComputeInstance_t * 8)()
        try:
            nvml.call(pynvml.nvmlGpuInstanceGetComputeInstances, gi, index, array, ctypes.byref(count), target=target)
        except nvml.NvmlError as exc:
            if nvml.not_supported(exc) or exc.code == pynvml.NVML_ERROR_INVALID_ARGUMENT:
                continue
            raise
        out += [array[i] for i in range(count.value)]
    return out


@contextmanager
def _gpu(uuid: str) -> Iterator[Any]:
    with nvml.session():
        yield nvml.call(pynvml.nvmlDeviceGetHandleByUUID, uuid, target=uuid)


def _uuids_of(handle: Any, parent_uuid: str, profile: Profile, gi_id: int, target: str) -> set[str]:
    """The MIG UUIDs of GPU instance `gi_id` (one per compute instance; none before its first)."""
    return {d.uuid for d in existing(handle, parent_uuid, [profile], target, only=True) if d.gpu_instance == gi_id}


Identity = tuple[int, str]
"""A MIG instance as a record names it: (GPU instance id, MIG UUID). The placement alone is no
identity: an instance destroyed and made again at one placement may get the same or another id,
and always another UUID."""


def create(parent_uuid: str, profile: Profile, start: int, held: Mapping[Identity, str] | None = None) -> MigDevice:
    """The MIG device of `profile` at `start`: made now (GPU instance + one compute instance spanning
    it), or the one already there when this claim's own earlier prepare made it and crashed before
    its record said so (kubelet's retry; the caller has refused the claim if another record names
    the placement). Never one that another claim's record names (`held`: identity -> that claim),
    and none at all when `held` is None (the records could not be read: whose it is is unknown)."""
    target = f"{parent_uuid} {profile.name}@{start}"
    with _gpu(parent_uuid) as handle:
        gi = None
        for handle_gi, info in _instances_at(handle, profile, target):
            if int(info.placement.start) != start:
                continue
            gi_id = int(info.id)
            uuids = _uuids_of(handle, parent_uuid, profile, gi_id, target)
            owner = next((who for (g, u), who in (held or {}).items() if g == gi_id and (u in uuids or not uuids)), None)
            if held is None or owner is not None:
                whose = f"claim {owner}'s" if owner else "of a claim unknown (a checkpoint record is unreadable)"
                raise PrepareError(f"MIG {profile.name} at slice {start} on {parent_uuid} exists (GPU instance {gi_id},"
                                   f" {', '.join(sorted(uuids)) or 'no compute instance'}) and is {whose}: not adopted;"
                                   " kubelet retries once that claim is unprepared")
            gi = handle_gi
            log.info("MIG instance already there (prepare retried)", extra={"gpu": parent_uuid, "profile": profile.name,
                                                                          "start": start, "gi": gi_id})
        if gi is None:
            placement = pynvml.c_nvmlGpuInstancePlacement_t(start, profile.memory_slices)
            gi = nvml.call(pynvml.nvmlDeviceCreateGpuInstanceWithPlacement, handle, profile.id, ctypes.byref(placement),
                           target=target)
        if not _compute_instances(gi, target):
            ci_profile = nvml.call(pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi,
                                   _ci_profile_index(profile.compute_slices),
                                   pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, target=target)
            nvml.call(pynvml.nvmlGpuInstanceCreateComputeInstance, gi, ci_profile.id, target=target)
        gi_id = int(nvml.call(pynvml.nvmlGpuInstanceGetInfo, gi, target=target).id)
        for dev in existing(handle, parent_uuid, [profile], target, only=True):
            if dev.gpu_instance == gi_id:
                return dev
    raise nvml.NvmlError("nvmlDeviceGetMigDeviceHandleByIndex", target, -1,
                         "the MIG device just created is not listed", "check the GPU with `nvidia-smi mig -lgi`")


Destroyed = Literal["destroyed", "none", "another", "kept"]
"""`destroy`'s outcome: done; no instance at the placement (unprepare retried); the instance there
is not the one named (another id or UUID: left alone); another record names it (left alone)."""


def destroy(parent_uuid: str, profile: Profile, start: int, named: Identity | None = None,
            keep: Collection[str] = ()) -> Destroyed:
    """Destroy the MIG instance of `profile` at `start` (its compute instances first), only when it
    is the one `named` (a prepared record's GPU instance id and MIG UUID; None: a record written
    before the instance existed, or the repair at start) and none of its MIG UUIDs is in `keep`
    (instances other claims' records name)."""
    target = f"{parent_uuid} {profile.name}@{start}"
    with _gpu(parent_uuid) as handle:
        for gi, info in _instances_at(handle, profile, target):
            if int(info.placement.start) != start:
                continue
            uuids = _uuids_of(handle, parent_uuid, profile, int(info.id), target)
            if named is not None and (int(info.id) != named[0] or named[1] not in uuids):
                return "another"
            if uuids & set(keep):
                return "kept"
            for ci in _compute_instances(gi, target):
                nvml.call(pynvml.nvmlComputeInstanceDestroy, ci, target=target)
            nvml.call(pynvml.nvmlGpuInstanceDestroy, gi, target=target)
            return "destroyed"
    return "none"


def instances(parent_uuid: str, known: Sequence[Profile]) -> list[tuple[Profile, int]]:
    """(profile, start) of every GPU instance on the GPU."""
    out = []
    with _gpu(parent_uuid) as handle:
        for profile in known:
            out += [(profile, int(info.placement.start)) for _gi, info in _instances_at(handle, profile, parent_uuid)]
    return out


# --- the device model ----------------------------------------------------------------------------


def _profile_capacity(profile: Profile, memory: int, multiprocessors: int) -> dict[str, Capacity]:
    return {
        "memory": Capacity(str(memory)),
        "multiprocessors": Capacity(str(multiprocessors)),
        "copyEngines": Capacity(str(profile.copy_engines)),
        "decoders": Capacity(str(profile.decoders)),
        "encoders": Capacity(str(profile.encoders)),
        "jpegEngines": Capacity(str(profile.jpeg_engines)),
        "ofaEngines": Capacity(str(profile.ofa_engines)),
    }


def _attributes(parent: dict[str, Attr], gpu: nvml.Gpu, profile: Profile, start: int
                ) -> dict[str, Attr]:
    """The parent GPU's attributes (so selectors on productName, pcieRoot, ... work) with MIG's own."""
    out = {k: v for k, v in parent.items() if k not in ("type", "uuid", "minor", "index")}
    out.update({"type": DEVICE_TYPE, "parentUUID": gpu.uuid, "parentIndex": gpu.index, "parentMinor": gpu.minor,
                "profile": profile.name, "placementStart": start})
    return out


def static_devices(gpu: nvml.Gpu, parent: dict[str, Attr], found: MigGpu) -> list[Device]:
    """The existing MIG devices of `gpu`, each allocatable whole."""
    out = []
    for dev in found.devices:
        attributes = _attributes(parent, gpu, dev.profile, dev.start)
        attributes["uuid"] = dev.uuid
        out.append(Device(name=device_name(gpu.minor, dev.profile, dev.start, dev.compute_instance),
                          attributes=attributes, capacity=_profile_capacity(dev.profile, dev.memory, dev.multiprocessors)))
    return out


def counter_set(gpu: nvml.Gpu, found: MigGpu) -> CounterSet:
    """The GPU's MIG counters: one per memory slice (placements may not overlap) and its compute slices."""
    slices = max((s + p.memory_slices for p in found.profiles for s in p.starts), default=MEMORY_SLICES)
    compute = max((p.compute_slices for p in found.profiles), default=0)
    counters = {memory_counter(i): "1" for i in range(slices)}
    counters[COMPUTE_COUNTER] = str(compute)
    return CounterSet(counter_set_name(gpu.minor), counters)


def dynamic_devices(gpu: nvml.Gpu, parent: dict[str, Attr], found: MigGpu) -> list[Device]:
    """Every profile at every placement, drawing on the GPU's counters."""
    counters = counter_set(gpu, found)
    out = []
    for profile in found.profiles:
        for start in profile.starts:
            take = {memory_counter(i): "1" for i in range(start, start + profile.memory_slices)}
            take[COMPUTE_COUNTER] = str(profile.compute_slices)
            out.append(Device(name=device_name(gpu.minor, profile, start),
                              attributes=_attributes(parent, gpu, profile, start),
                              capacity=_profile_capacity(profile, profile.memory, profile.multiprocessors),
                              consumes_counters=(CounterConsumption(counters, take),)))
    return out


def cap_device_nodes(minor: int, gpu_instance: int, compute_instance: int, dev_root: Path,
                     proc: Path = Path("/proc")) -> tuple[DeviceNode, ...]:
    """Self-contained mode: the ``/dev/nvidia-caps/nvidia-cap<N>`` nodes that grant access to one
    MIG device (its GPU and compute instance), N read from the driver's capability files."""
    base = proc / "driver/nvidia/capabilities" / f"gpu{minor}" / "mig" / f"gi{gpu_instance}"
    nodes = []
    for access in (base / "access", base / f"ci{compute_instance}" / "access"):
        try:
            found = re.search(r"DeviceFileMinor:\s*(\d+)", access.read_text())
        except OSError as exc:
            raise PrepareError(f"{access}: {exc.strerror}: is this MIG instance gone, or /proc not the host's?") from None
        if found is None:
            raise PrepareError(f"{access} names no DeviceFileMinor; cannot expose the MIG device")
        path = f"/dev/nvidia-caps/nvidia-cap{found[1]}"
        nodes.append(DeviceNode(path, host_path=str(dev_root / path.lstrip("/"))))
    return tuple(nodes)
