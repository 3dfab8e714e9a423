"""Every process on the node's GPUs, as NVML sees it: the input of the framework's watchdog.

NVML lists the compute and graphics processes of each GPU with their host PIDs (in the host
PID namespace, which the daemon joins) and the device memory each holds, the CUDA context
included; `nvmlDeviceGetProcessUtilization` gives per-process SM utilization samples since a
timestamp. One `ProcessReader` holds an NVML session and the GPU handles for the daemon's
life, so a poll is three NVML calls per GPU and no initialisation.

Where NVML does not give per-process utilization (NOT_SUPPORTED: vGPU guests, some older or
consumer GPUs), the process's utilization is None and the watchdog gives no over-share verdict
for it. A GPU that stops answering (lost) is skipped with one warning until it answers again:
the health monitor taints it.

A GPU in MIG mode runs its processes in its MIG devices (a compute instance of a GPU instance),
and each is reported under the MIG device it runs in. The reader asks each MIG device's own
handle, walking ``nvmlDeviceGetMigDeviceHandleByIndex`` over the GPU's
``nvmlDeviceGetMaxMigDeviceCount`` slots every poll (instances come and go: dynamic MIG makes them
at prepare), and lists ``nvmlDeviceGetComputeRunningProcesses`` of each, with the memory the
process holds in that instance. Not the parent GPU's handle: in MIG mode NVML answers there with
every instance's processes, ``gpuInstanceId`` and ``computeInstanceId`` set (``nvmlProcessInfo_t``,
nvidia-ml-py's ``c_nvmlProcessInfo_v3_t``), "only if the caller has appropriate privileges"
(nvml.h, which does not say which: the daemon, root in an unprivileged container, cannot know it
has them); per-instance information is what NVML documents MIG device handles for (NVIDIA's
dcgm-exporter reads its per-instance process memory so), and they are the handles discovery already
reads (``mig.existing``). No graphics list on a MIG device (MIG runs no graphics APIs: NVIDIA's MIG
User Guide) and no utilization: NVML documents ``nvmlDeviceGetProcessUtilization`` as not
supported on MIG-enabled GPUs, so the utilization is None and the watchdog gives no over-share
verdict there.

A MIG device is named by the driver (`published`, by MIG UUID: a static MIG device's name, a
dynamic instance's placement while a prepared claim records it); any other instance (an admin's,
one of a profile the driver does not know, one made after a static start) is reported under
``mig.unpublished_name``, a name no device has: no claim holds it, so its processes are unheld,
never dropped, and a taint of it goes on the GPU's published MIG devices (``taint_on``: the
instance holds slices of that GPU, as an XID of the GPU takes them all out). An instance destroyed
between the walk and its query (NOT_FOUND) is passed over; any other failure skips the whole GPU
with one warning, as a GPU not in MIG mode.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pynvml

from dra import DeviceProcess
from drivers.hami_core_gpu import mig, nvml

log = logging.getLogger(__name__)

Published = Callable[[], Mapping[str, str]]
"""The published MIG devices now: MIG UUID -> device name."""


class ProcessReader:
    """Reads the processes of `gpus` (published name, UUID) and of the MIG devices of `mig_gpus`
    (GPUs in MIG mode: a name for messages, the minor, the UUID), named by `published`; open once,
    `read()` per poll."""

    def __init__(self, gpus: Sequence[tuple[str, str]], mig_gpus: Sequence[tuple[str, int, str]] = (),
                 published: Published = dict, on_gpu: Mapping[str, tuple[str, ...]] | None = None) -> None:
        """`on_gpu`: the published MIG devices of each MIG GPU (by UUID), which a taint of an
        instance the driver does not publish goes on."""
        self.gpus = list(gpus)
        self.mig_gpus = list(mig_gpus)
        self.published = published
        self.on_gpu = dict(on_gpu or {})
        self._handles: list[tuple[str, str, Any]] = []
        self._mig_handles: list[tuple[str, int, str, Any, int]] = []  # name, minor, UUID, handle, MIG slots
        self._since: dict[str, int] = {}  # per UUID: newest utilization sample seen (µs)
        self._no_utilization: set[str] = set()
        self._failing: set[str] = set()
        self._lock = threading.Lock()
        self._open = False

    def _start(self) -> None:
        nvml.init()
        self._open = True
        self._handles, self._mig_handles = [], []
        for name, uuid in self.gpus:
            try:
                self._handles.append((name, uuid, nvml.call(pynvml.nvmlDeviceGetHandleByUUID, uuid.encode(),
                                                            target=uuid)))
            except nvml.NvmlError as exc:  # lost since discovery: its processes are not listed
                log.warning("GPU left out of the process list", extra={"device": name, "uuid": uuid,
                                                                       "error": str(exc)})
        for name, minor, uuid in self.mig_gpus:
            try:
                handle = nvml.call(pynvml.nvmlDeviceGetHandleByUUID, uuid.encode(), target=uuid)
                slots = int(nvml.call(pynvml.nvmlDeviceGetMaxMigDeviceCount, handle, target=uuid))
                self._mig_handles.append((name, minor, uuid, handle, slots))
            except nvml.NvmlError as exc:
                log.warning("GPU in MIG mode left out of the process list", extra={"device": name, "uuid": uuid,
                                                                                   "error": str(exc)})

    def close(self) -> None:
        with self._lock:
            if self._open:
                self._open = False
                try:
                    pynvml.nvmlShutdown()
                except pynvml.NVMLError as exc:
                    log.warning("nvmlShutdown failed", extra={"error": str(exc)})

    def read(self) -> list[DeviceProcess]:
        """The processes on every GPU now."""
        with self._lock:
            if not self._open:
                self._start()
            out: list[DeviceProcess] = []
            for name, uuid, handle in self._handles:
                self._guarded(out, name, uuid, functools.partial(self._gpu, name, uuid, handle))
            published = dict(self.published()) if self._mig_handles else {}
            for name, minor, uuid, handle, slots in self._mig_handles:
                self._guarded(out, name, uuid, functools.partial(self._mig_gpu, minor, uuid, handle, slots, published))
            return out

    def _guarded(self, out: list[DeviceProcess], name: str, uuid: str, read: Callable[[], list[DeviceProcess]]) -> None:
        """`read()` into `out`; a GPU whose read fails is skipped, warned once until it answers again."""
        try:
            out.extend(read())
        except nvml.NvmlError as exc:
            if uuid not in self._failing:
                self._failing.add(uuid)
                log.warning("GPU's processes unreadable; skipped until it answers",
                            extra={"device": name, "uuid": uuid, "error": str(exc)})
            return
        self._failing.discard(uuid)

    def _gpu(self, name: str, uuid: str, handle: Any) -> list[DeviceProcess]:
        memory: dict[int, int] = {}
        for fn in (pynvml.nvmlDeviceGetComputeRunningProcesses, pynvml.nvmlDeviceGetGraphicsRunningProcesses):
            _merge(memory, nvml.call(fn, handle, target=uuid))  # both lists: one process
        util = self._utilization(uuid, handle) if memory else {}
        return [DeviceProcess(name, uuid, pid, used, util.get(pid)) for pid, used in sorted(memory.items())]

    def _mig_gpu(self, minor: int, uuid: str, handle: Any, slots: int,
                 published: Mapping[str, str]) -> list[DeviceProcess]:
        """The processes of every MIG device of the GPU, each under its device's name."""
        out: list[DeviceProcess] = []
        for index in range(slots):
            try:
                device = nvml.call(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, index,
                                   target=f"{uuid} MIG {index}")
            except nvml.NvmlError as exc:
                if exc.code == pynvml.NVML_ERROR_NOT_FOUND:
                    continue  # no MIG device at this index
                raise
            try:
                out += self._mig_device(minor, uuid, index, device, published, self.on_gpu.get(uuid, ()))
            except nvml.NvmlError as exc:
                if exc.code != pynvml.NVML_ERROR_NOT_FOUND:
                    raise
                # destroyed since the walk found it (a dynamic claim unprepared): its processes are gone
        return out

    @staticmethod
    def _mig_device(minor: int, uuid: str, index: int, device: Any, published: Mapping[str, str],
                    siblings: tuple[str, ...]) -> list[DeviceProcess]:
        target = f"{uuid} MIG {index}"
        memory: dict[int, int] = {}
        _merge(memory, nvml.call(pynvml.nvmlDeviceGetComputeRunningProcesses, device, target=target))
        if not memory:
            return []
        mig_uuid = str(nvml.call(pynvml.nvmlDeviceGetUUID, device, target=target))
        name = published.get(mig_uuid)
        taint_on: tuple[str, ...] | None = None
        if name is None:
            gi = int(nvml.call(pynvml.nvmlDeviceGetGpuInstanceId, device, target=f"{target} {mig_uuid}"))
            ci = int(nvml.call(pynvml.nvmlDeviceGetComputeInstanceId, device, target=f"{target} {mig_uuid}"))
            name, taint_on = mig.unpublished_name(minor, gi, ci), siblings
        return [DeviceProcess(name, mig_uuid, pid, used, None, taint_on=taint_on) for pid, used in sorted(memory.items())]

    def _utilization(self, uuid: str, handle: Any) -> dict[int, float]:
        """Mean SM utilization per PID over the samples since the last read (none: absent)."""
        if uuid in self._no_utilization:
            return {}
        since = self._since.get(uuid, int((time.time() - 2) * 1e6))
        try:
            samples = nvml.call(pynvml.nvmlDeviceGetProcessUtilization, handle, since, target=uuid)
        except nvml.NvmlError as exc:
            if exc.code == pynvml.NVML_ERROR_NOT_FOUND:  # no sample since `since`
                return {}
            if nvml.not_supported(exc):
                self._no_utilization.add(uuid)
                log.info("GPU gives no per-process utilization: no over-share verdicts on it",
                         extra={"uuid": uuid})
                return {}
            raise
        sums: dict[int, list[float]] = {}
        newest = since
        for s in samples:
            newest = max(newest, int(s.timeStamp))
            sums.setdefault(int(s.pid), []).append(float(s.smUtil))
        self._since[uuid] = newest
        return {pid: sum(v) / len(v) for pid, v in sums.items()}


def _merge(memory: dict[int, int], listed: Sequence[Any]) -> None:
    """NVML's process entries into PID -> bytes; a PID listed twice holds the larger figure."""
    for p in listed:
        used = p.usedGpuMemory or 0  # None: not available (Windows WDDM only)
        memory[int(p.pid)] = max(memory.get(int(p.pid), 0), int(used))
