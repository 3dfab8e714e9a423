"""Every process on the node's NPUs, as DCMI sees it: the input of the framework's watchdog.

DCMI's one process query is ``dcmi_get_device_resource_info(card, chip, proc_info, proc_num)``:
the processes on one chip, each as ``struct dcmi_proc_mem_info`` (``int proc_id``: the host PID;
``unsigned long proc_mem_usage``: the device memory it holds there, in bytes), and in
``proc_num`` how many it wrote. Huawei's reference gives at most 32 processes a chip and the call
takes no buffer size, so the caller's array must have room for 32; this reader passes `BUFFER`
entries (room to spare, should a library write past its documented maximum) and reads no more
than it passed. The daemon runs privileged in the host PID namespace, where DCMI lists every
process on the chip (in an unprivileged container it would list only that container's).

One poll asks each NPU once. A count past the buffer is cut to it (logged once); a count of
exactly 32 is DCMI's documented maximum, past which the library drops processes the watchdog then
cannot see (logged once an NPU). An NPU whose query fails, or which answers a negative count, is
skipped with one warning until it answers again (the health monitor taints a lost one). PID 0 and
negative PIDs are no process: left out, one warning each kind. A PID listed twice on a chip is one
process there, with the larger memory. A library without the call is warned once at start and
`read` answers None: the watchdog stays idle.

Utilization is None: the call reports memory only, so the watchdog gives no over-share verdict on
an NPU. `DeviceProcess.device` is the NPU's published name (``npu-<logic ID>-0``),
`DeviceProcess.uuid` its hook key (``davinci<phy ID>``), what the claim's `dra.Quota.uuid` names.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Sequence

import dra
from dra import DeviceProcess
from drivers.ascend import dcmi, devices, edits

log = logging.getLogger(__name__)

CALL = "dcmi_get_device_resource_info"
MAX_PROCESSES = 32  # DCMI's documented maximum a chip
BUFFER = 256  # entries passed per query (4 KiB): the documented 32 and room past it
WARNED_MAX = 1024  # distinct once-only warnings kept (forgotten all at once past it)


class ProcessReader(dra.DeviceProcessReader[dcmi.Npu]):
    """Reads the processes on `npus` through `library` (shared with discovery and health: every
    call is serialised by `dra.VendorLibrary`); `read()` once per poll."""

    query = CALL
    missing = ("DCMI has no process query: the watchdog sees no NPU process; install an Ascend driver whose "
               "libdcmi.so has dcmi_get_device_resource_info")
    check = "npu-smi info"
    noun = "NPU"

    def __init__(self, library: dcmi.Dcmi, npus: Sequence[dcmi.Npu]) -> None:
        super().__init__(library, sorted(npus, key=lambda n: n.logic_id), log, WARNED_MAX)

    def describe(self, npu: dcmi.Npu) -> tuple[str, str]:
        return devices.device_name(npu), npu.uuid

    def device_processes(self, npu: dcmi.Npu) -> list[DeviceProcess]:
        """The processes on one NPU; DcmiError where its query fails (or answers a negative count)."""
        name = devices.device_name(npu)
        buf = (dcmi.ProcMemInfo * BUFFER)()
        count = ctypes.c_int(0)
        self.library.call(CALL, npu.card, npu.chip, buf, ctypes.byref(count), target=npu.target)
        if count.value < 0:
            raise dcmi.DcmiError(CALL, npu.target, -1, f"a negative process count ({count.value})")
        if count.value > BUFFER:
            self.warn_once("cut", "DCMI counts more processes on an NPU than it was given room for; the first "
                           "are checked", device=name, count=count.value, buffer=BUFFER)
        elif count.value == MAX_PROCESSES:
            self.warn_once(f"full {npu.uuid}", "DCMI lists its documented maximum of processes on an NPU; "
                           "more may run there unseen by the watchdog", device=name, max_processes=MAX_PROCESSES)
        memory: dict[int, int] = {}
        for entry in buf[: min(count.value, BUFFER)]:
            pid = int(entry.proc_id)
            if pid <= 0:
                kind = "PID 0" if pid == 0 else "a negative PID"
                self.warn_once(kind, f"DCMI lists {kind}, which is no process: left out", device=name, pid=pid)
                continue
            memory[pid] = max(memory.get(pid, 0), int(entry.proc_mem_usage))
        key = edits.hook_key(npu.phy_id)
        return [DeviceProcess(name, key, pid, held) for pid, held in memory.items()]
