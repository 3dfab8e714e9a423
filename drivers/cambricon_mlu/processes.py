"""Every process on the node's MLUs, as CNDev sees it: the input of the framework's watchdog.

CNDev's process query is ``cndevGetProcessInfo(infoCount, procInfo, device)``: the processes on one
MLU, each as ``cndevProcessInfo_t`` (``version``, set by the caller; ``pid``, unsigned 32 bits;
``physicalMemoryUsed`` and ``virtualMemoryUsed``, the MLU memory it holds, in KiB). ``*infoCount``
is, in, the entries the caller's array has room for and, out, how many processes the MLU has; more
than room answers ``CNDEV_ERROR_INSUFFICIENT_SPACE`` (what the library wrote into the array then is
not documented, so none of it is read). Cambricon's own callers set the version of the first entry
only; so does this reader (``CNDEV_VERSION_6``, as every versioned call of `cndev.py`).

One poll asks each MLU once, with room for what it last needed (`ROOM` at first): where that is too
little, once more with room for the count CNDev answered (and `SLACK` more, for processes started
in between), at most `MAX_PROCESSES`. A list that still does not fit (more than `MAX_PROCESSES`
processes, or one that grew again between the two calls) is not read this poll, warned once an
MLU; a success counting past the room given is cut to it (warned once). No more than was passed
is ever read, and no more than the count. An MLU whose query fails otherwise is skipped with one
warning until it answers again (the health monitor taints a lost one). PID 0 and PIDs past the
kernel's limit (`PID_MAX`: the field is unsigned, so a negative PID arrives as one of these) are no
process: left out, one warning each kind. A PID listed twice on an MLU is one process there, with
the larger memory. A library without the call is warned once at start and `read` answers None:
the watchdog stays idle.

The memory is the physical memory (KiB, made bytes). Utilization is None: CNDev has a per-process
utilization too (``cndevGetProcessUtilization``: ``ipuUtil`` and others), not read here, so the
watchdog gives no over-share verdict on an MLU. An MLU claim has no hook; its containers carry the
daemon's marker (`dra._runtime.claim_marker`), which puts its processes in it: held by the sMLU
instance and judged against the claim's memory; any other process on the MLU is unheld
(docs/watchdog.md). `DeviceProcess.device` is the MLU's published name
(``mlu-<index>``), `DeviceProcess.uuid` its UUID (``MLU-...``; no hook names it by another key).
The PIDs are taken for host PIDs, the daemon running in the host PID namespace, as Cambricon's
exporter does for its per-process series (not verified on an MLU).
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Sequence
from typing import Any

import dra
from dra import DeviceProcess
from drivers.cambricon_mlu import cndev, devices

log = logging.getLogger(__name__)

CALL = "cndevGetProcessInfo"
ROOM = 64  # entries passed at first (1.5 KiB)
SLACK = 16  # room for processes that start between a count and the read
MAX_PROCESSES = 1 << 16  # the most entries ever passed (1.5 MiB)
PID_MAX = 1 << 22  # the kernel's PID_MAX_LIMIT on 64-bit hosts: no PID is larger
WARNED_MAX = 1024  # distinct once-only warnings kept (forgotten all at once past it)


class ProcessReader(dra.DeviceProcessReader[cndev.Mlu]):
    """Reads the processes on `mlus` through `library` (shared with discovery, health and sMLU
    management: every call is serialised by `dra.VendorLibrary`); `read()` once per poll."""

    query = CALL
    missing = ("CNDev has no process query: the watchdog sees no MLU process; install a Cambricon driver whose "
               "libcndev.so has cndevGetProcessInfo")
    check = "cnmon"
    noun = "MLU"

    def __init__(self, library: cndev.Cndev, mlus: Sequence[cndev.Mlu]) -> None:
        super().__init__(library, sorted(mlus, key=lambda m: m.index), log, WARNED_MAX)
        self.cndev = library
        self._room: dict[str, int] = {}  # MLU UUID -> the entries to pass first (what it last needed)

    def describe(self, mlu: cndev.Mlu) -> tuple[str, str]:
        return devices.device_name(mlu), mlu.uuid

    def _ask(self, mlu: cndev.Mlu, room: int) -> tuple[Any, int, bool]:
        """(an array of `room` entries, the count CNDev answered, whether the list fit in it)."""
        buf = (cndev.ProcessInfo * room)()
        buf[0].version = cndev.VERSION
        count = ctypes.c_uint32(room)
        try:
            self.cndev.call(CALL, ctypes.byref(count), buf, self.cndev.handle(mlu.index), target=mlu.target)
        except cndev.CndevError as exc:
            if exc.code != cndev.INSUFFICIENT_SPACE:
                raise
            return buf, int(count.value), False
        return buf, int(count.value), True

    def device_processes(self, mlu: cndev.Mlu) -> list[DeviceProcess]:
        """The processes on one MLU; CndevError where its query fails."""
        name = devices.device_name(mlu)
        room = self._room.get(mlu.uuid, ROOM)
        buf, count, fit = self._ask(mlu, room)
        if not fit and room < MAX_PROCESSES:
            room = min(max(count + SLACK, 2 * room), MAX_PROCESSES)
            buf, count, fit = self._ask(mlu, room)
        self._room[mlu.uuid] = min(max(ROOM, count + SLACK), MAX_PROCESSES)
        if not fit:
            self.warn_once(f"unfit {mlu.uuid}", "CNDev's process list of an MLU does not fit the most room the "
                           "reader gives (too many processes, or a list that grew between two calls): none of its "
                           "processes is seen this poll", device=name, count=count, room=room)
            return []
        if count > room:
            self.warn_once("cut", "CNDev counts more processes on an MLU than it was given room for, yet answers "
                           "success; the first are checked", device=name, count=count, room=room)
        memory: dict[int, int] = {}
        for entry in buf[: min(count, room)]:
            pid = int(entry.pid)
            if pid == 0 or pid > PID_MAX:
                kind = "PID 0" if pid == 0 else "a PID past the kernel's maximum"
                self.warn_once(kind, f"CNDev lists {kind}, which is no process: left out", device=name, pid=pid)
                continue
            memory[pid] = max(memory.get(pid, 0), int(entry.physicalMemoryUsed) << 10)
        return [DeviceProcess(name, mlu.uuid, pid, held) for pid, held in memory.items()]
