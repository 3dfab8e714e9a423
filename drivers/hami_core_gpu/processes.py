"""Every process on the node's GPUs, as NVML sees it: the input of the framework's watchdog.

NVML lists the compute and graphics processes of each GPU with their host PIDs (in the host
PID namespace, which the daemon joins) and the device memory each holds, the CUDA context
included; `nvmlDeviceGetProcessUtilization` gives per-process SM utilization samples since a
timestamp. One `ProcessReader` holds an NVML session and the GPU handles for the daemon's
life, so a poll is three NVML calls per GPU and no initialisation.

Where NVML does not give per-process utilization (NOT_SUPPORTED: vGPU guests, some older or
consumer GPUs, MIG instances), the process's utilization is None and the watchdog gives no
over-share verdict for it. A GPU that stops answering (lost) is skipped with one warning until
it answers again: the health monitor taints it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import pynvml

from dra import DeviceProcess
from drivers.hami_core_gpu import nvml

log = logging.getLogger(__name__)


class ProcessReader:
    """Reads the processes of `gpus` (published name, UUID); open once, `read()` per poll."""

    def __init__(self, gpus: Sequence[tuple[str, str]]) -> None:
        self.gpus = list(gpus)
        self._handles: list[tuple[str, str, Any]] = []
        self._since: dict[str, int] = {}  # per UUID: newest utilization sample seen (µs)
        self._no_utilization: set[str] = set()
        self._failing: set[str] = set()
        self._lock = threading.Lock()
        self._open = False

    def _start(self) -> None:
        nvml.init()
        self._open = True
        self._handles = []
        for name, uuid in self.gpus:
            try:
                self._handles.append((name, uuid, nvml.call(pynvml.nvmlDeviceGetHandleByUUID, uuid.encode(),
                                                            target=uuid)))
            except nvml.NvmlError as exc:  # lost since discovery: its processes are not listed
                log.warning("GPU left out of the process list", extra={"device": name, "uuid": uuid,
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
                try:
                    out.extend(self._gpu(name, uuid, handle))
                except nvml.NvmlError as exc:
                    if uuid not in self._failing:
                        self._failing.add(uuid)
                        log.warning("GPU's processes unreadable; skipped until it answers",
                                    extra={"device": name, "uuid": uuid, "error": str(exc)})
                    continue
                self._failing.discard(uuid)
            return out

    def _gpu(self, name: str, uuid: str, handle: Any) -> list[DeviceProcess]:
        memory: dict[int, int] = {}
        for fn in (pynvml.nvmlDeviceGetComputeRunningProcesses, pynvml.nvmlDeviceGetGraphicsRunningProcesses):
            for p in nvml.call(fn, handle, target=uuid):
                used = p.usedGpuMemory or 0  # None: not available (Windows WDDM only)
                memory[int(p.pid)] = max(memory.get(int(p.pid), 0), int(used))  # both lists: one process
        util = self._utilization(uuid, handle) if memory else {}
        return [DeviceProcess(name, uuid, pid, used, util.get(pid)) for pid, used in sorted(memory.items())]

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
