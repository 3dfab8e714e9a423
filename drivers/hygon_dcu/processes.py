"""Every process on the node's DCUs, as ROCm SMI sees it: the input of the framework's watchdog.

ROCm SMI's process API reads the kernel's KFD process table (``/sys/class/kfd/kfd/proc``: one
entry per process that opened ``/dev/kfd``, named by its host PID, which the daemon sees from the
host PID namespace; written by the kernel driver, never by a process). One poll is:

- ``rsmi_compute_process_info_get``: the PIDs. The count is asked first, then the list is read
  into a buffer a little larger; a list that grew in between is read again with twice the room,
  up to `MAX_PROCESSES` (past that the first ones are checked and the cut is logged once);
- per PID, ``rsmi_compute_process_gpus_get``: the DCUs it has queues on (where it can run kernels,
  whatever VRAM it holds there);
- per PID and DCU, ``rsmi_compute_process_info_by_device_get``: the VRAM it holds there.

A process is on a DCU where it holds VRAM or has queues. The list fills in only PIDs (the library
leaves its other fields unset), so nothing else of it is read. ``RSMI_STATUS_NOT_FOUND`` from a
per-PID call means the process exited since the list: it is left out. A DCU whose query fails
otherwise is skipped with one warning until it answers again (the health monitor taints a lost
one). PID 0 is no process: left out, with one warning. A library without one of the three calls
(``rsmi_compute_process_info_by_device_get`` came with ROCm 5.7; which HyHAL build has it is not
known here) is warned once at start and `read` answers None: the watchdog stays idle.

Utilization is None: ``cu_occupancy`` is the share of the DCU's compute units holding the
process's waves when the kernel's counter is read (``CU_OCCUPANCY_INVALID`` on GPU generations
without the counter), a snapshot of space, not the share of time the limiter enforces; the
watchdog then gives no over-share verdict on a DCU.

`DeviceProcess.device` is the DCU's published name (``dcu-<index>``), `DeviceProcess.uuid` its
hook key (``pci-<bus ID>``), what the claim's `dra.Quota.uuid` names.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Sequence

import dra
from dra import DeviceProcess
from drivers.hygon_dcu import devices, edits, rsmi

log = logging.getLogger(__name__)

CALLS = ("rsmi_compute_process_info_get", "rsmi_compute_process_gpus_get", "rsmi_compute_process_info_by_device_get")
MAX_PROCESSES = 1 << 16  # PIDs read per poll: a 2 MiB buffer
SLACK = 16  # room for processes that start between the count and the read
MAX_QUEUE_DEVICES = 64  # device indices asked per PID (ROCm SMI lists at most its device count)
WARNED_MAX = 1024  # distinct once-only warnings kept (forgotten all at once past it)


class ProcessReader:
    """Reads the processes on `dcus` through `library` (shared with discovery and health: every
    call is serialised by `dra.VendorLibrary`); `read()` once per poll."""

    def __init__(self, library: rsmi.Rsmi, dcus: Sequence[rsmi.Dcu]) -> None:
        self.library = library
        self.dcus = sorted(dcus, key=lambda d: d.index)
        self._failing: set[int] = set()  # DCU indices skipped until they answer again
        self._warn_once = dra.WarnOnce(log, WARNED_MAX)
        self.unsupported = self._missing_call()

    def _missing_call(self) -> str | None:
        """Why the process API cannot be used (a call the library lacks), or None."""
        for name in CALLS:
            try:
                self.library.function(name)
            except rsmi.RsmiError as exc:
                log.warning("ROCm SMI has no process API: the watchdog sees no DCU process; install a ROCm SMI "
                            "(HyHAL or ROCm) that has it", extra={"library": self.library.path, "error": str(exc)})
                return str(exc)
        return None

    def read(self) -> list[DeviceProcess] | None:
        """The processes on every DCU now; None where the library has no process API."""
        if self.unsupported is not None:
            return None
        out: list[DeviceProcess] = []
        failed: set[int] = set()
        answered: set[int] = set()
        for pid in self._pids():
            if pid == 0:
                self._warn_once("pid 0", "ROCm SMI lists PID 0, which is no process: left out")
                continue
            out.extend(self._process(pid, failed, answered))
        for index in sorted((answered - failed) & self._failing):
            self._failing.discard(index)
            log.info("DCU's processes readable again", extra={"device": self._name(index)})
        return out

    def _pids(self) -> list[int]:
        count = ctypes.c_uint32(0)
        self.library.call("rsmi_compute_process_info_get", None, ctypes.byref(count), target="the process list")
        if count.value == 0:
            return []
        size = min(count.value + SLACK, MAX_PROCESSES)
        while True:
            buf = (rsmi.ProcessInfo * size)()
            got = ctypes.c_uint32(size)
            try:
                self.library.call("rsmi_compute_process_info_get", buf, ctypes.byref(got), target="the process list")
            except rsmi.RsmiError as exc:
                if exc.code != rsmi.INSUFFICIENT_SIZE:
                    raise
                if size < MAX_PROCESSES:  # more processes than room: read again with more
                    size = min(2 * size, MAX_PROCESSES)
                    continue
                self._warn_once("cut", "ROCm SMI lists more processes than the watchdog reads; the first are "
                                "checked", max_processes=MAX_PROCESSES)
                got = ctypes.c_uint32(size)  # the library wrote the first `size`
            return list(dict.fromkeys(int(buf[i].process_id) for i in range(min(got.value, size))))

    def _queues(self, pid: int) -> set[int]:
        """The DCU indices `pid` has queues on; empty where the library cannot tell (warned once
        per status: its VRAM is still read on every DCU)."""
        indices = (ctypes.c_uint32 * MAX_QUEUE_DEVICES)()
        n = ctypes.c_uint32(MAX_QUEUE_DEVICES)
        try:
            self.library.call("rsmi_compute_process_gpus_get", pid, indices, ctypes.byref(n), target=f"pid {pid}")
        except rsmi.RsmiError as exc:
            if exc.code == rsmi.INSUFFICIENT_SIZE:
                return {int(i) for i in indices}
            if exc.code != rsmi.NOT_FOUND:  # NOT_FOUND: gone, which the VRAM query tells
                self._warn_once(f"queues {exc.code}", "ROCm SMI does not say which DCUs a process has queues on; "
                                "its VRAM is still read on each", pid=pid, error=str(exc))
            return set()
        return {int(indices[i]) for i in range(min(n.value, MAX_QUEUE_DEVICES))}

    def _process(self, pid: int, failed: set[int], answered: set[int]) -> list[DeviceProcess]:
        """`pid` on each DCU where it holds VRAM or has queues; none once it is gone."""
        queues = self._queues(pid)
        found: list[DeviceProcess] = []
        info = rsmi.ProcessInfo()
        for dcu in self.dcus:
            if dcu.index in failed:
                continue
            try:
                self.library.call("rsmi_compute_process_info_by_device_get", pid, dcu.index, ctypes.byref(info),
                                  target=f"pid {pid}, {dcu.target}")
            except rsmi.RsmiError as exc:
                if exc.code == rsmi.NOT_FOUND:
                    return []  # exited since the list
                failed.add(dcu.index)
                if dcu.index not in self._failing:
                    self._failing.add(dcu.index)
                    log.warning("DCU's processes unreadable; skipped until it answers", extra={
                        "device": devices.device_name(dcu), "pci": dcu.pci_bus_id, "error": str(exc)})
                continue
            answered.add(dcu.index)
            if info.vram_usage or dcu.index in queues:
                found.append(DeviceProcess(devices.device_name(dcu), edits.hook_key(dcu.pci_bus_id), pid,
                                           int(info.vram_usage)))
        return found

    def _name(self, index: int) -> str:
        return next((devices.device_name(d) for d in self.dcus if d.index == index), f"dcu-{index}")
