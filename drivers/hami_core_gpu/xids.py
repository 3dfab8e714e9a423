"""The XID table: which NVIDIA XID errors take a GPU out of service (data, not code).

An XID is the driver's error report for one GPU (``NVRM: Xid (PCI:...): 48`` in the kernel
log, an ``nvmlEventTypeXidCriticalError`` event in NVML). Most are the application's fault: the
process dies, the GPU is fine. Some mean the GPU needs a reset or the node a reboot; new work
must not land there until then.

- ``IGNORE``: the application's error (or informational); the GPU stays healthy.
- ``TAINT``: the GPU is tainted ``hami-core-gpu.project-hami.io/xid=<code>:NoSchedule`` and
  reported unhealthy to kubelet, until NVML reports it needs no recovery action (below).
- ``PROBE``: XID 154 says NVML's recovery action changed; the monitor re-reads it at once.
XIDs not in the table are treated as ``TAINT`` (unknown means unsafe).

Recovery: the monitor reads ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`` (drivers >= R550) every
probe interval. A tainted GPU is healthy again when that field says ``NONE`` and the GPU answers
queries (a reset GPU does). On drivers without the field the taint stays until the daemon
restarts (after the operator reset the GPU). The codes and meanings follow NVIDIA's XID catalog
(docs.nvidia.com/deploy/xid-errors); the ignore list matches NVIDIA's DRA driver's default.
"""

from __future__ import annotations

import enum


class Action(enum.Enum):
    IGNORE = "ignore"
    TAINT = "taint"
    PROBE = "probe"


XID_TABLE: dict[int, tuple[str, Action]] = {
    8: ("GPU stopped processing (application timeout)", Action.IGNORE),
    13: ("graphics engine exception (application fault)", Action.IGNORE),
    31: ("GPU memory page fault (application fault)", Action.IGNORE),
    43: ("GPU stopped processing a channel (application fault)", Action.IGNORE),
    45: ("preemptive cleanup after a previous error", Action.IGNORE),
    48: ("double-bit ECC error", Action.TAINT),
    61: ("internal micro-controller breakpoint", Action.TAINT),
    62: ("internal micro-controller halt", Action.TAINT),
    63: ("ECC page retirement or row remapping recorded (takes effect at the next reset)", Action.IGNORE),
    64: ("ECC page retirement or row remapping failed", Action.TAINT),
    68: ("video decoder exception (application fault)", Action.IGNORE),
    69: ("graphics engine class error (application fault)", Action.IGNORE),
    74: ("NVLink error", Action.TAINT),
    79: ("GPU has fallen off the bus", Action.TAINT),
    92: ("high single-bit ECC error rate (corrected)", Action.IGNORE),
    94: ("contained ECC error (the application was stopped, the GPU keeps running)", Action.IGNORE),
    95: ("uncontained ECC error", Action.TAINT),
    109: ("context switch timeout (application fault)", Action.IGNORE),
    119: ("GSP RPC timeout", Action.TAINT),
    120: ("GSP error", Action.TAINT),
    140: ("unrecovered ECC error", Action.TAINT),
    154: ("GPU recovery action changed", Action.PROBE),
}

GPU_LOST_XID = 79


def classify(xid: int) -> tuple[str, Action]:
    """What `xid` means and what to do about it; unknown XIDs taint."""
    return XID_TABLE.get(xid, (f"XID {xid} (not in the driver's table)", Action.TAINT))
