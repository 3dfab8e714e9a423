"""The watchdog's vocabulary: its settings, what it knows of a claim and of a device process, and
a verdict. Plain frozen records; nothing here reads or writes anything."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from dra.driver import DeviceProcess

ACTIONS = ("report", "kill", "taint")
VERDICTS = ("unheld", "over-quota", "over-share")
REASONS = {"unheld": "ProcessUnheld", "over-quota": "MemoryOverQuota", "over-share": "ComputeOverShare"}
CONFIG_KEY = "watchdogAction"
ACTION_RANK = {"report": 0, "taint": 1, "kill": 2}  # a claim's devices' configs: the strongest wins
MiB = 1 << 20


@dataclasses.dataclass(frozen=True)
class WatchdogSettings:
    """``dra run --watchdog ...`` and its tolerances."""

    action: str = "report"
    interval: float = 1.0
    memory_tolerance: int = 64 * MiB
    """Bytes per process a claim's processes may hold beyond its quota on the device's count: the
    gap between the device's per-process memory and the hook's charge (which includes the context,
    `dra.Quota.context_memory`); measured with ``bench/context_gap_h200.py``."""
    share_window: float = 10.0
    share_tolerance: float = 10.0
    proc: Path = Path("/proc")
    maps: bool = True
    """Read /proc/<pid>/maps for the evidence that a process is held (used only when the daemon has
    CAP_SYS_PTRACE): without it no process is proven held, and a ledger slot only makes one
    "registered (unverified)"."""

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"watchdog action must be one of {', '.join(ACTIONS)}, not {self.action!r}")
        if not 0.05 <= self.interval <= 60:
            raise ValueError(f"watchdog interval must be 0.05..60 seconds, not {self.interval}")
        if self.memory_tolerance < 0 or self.share_tolerance < 0 or self.share_window < self.interval:
            raise ValueError("watchdog tolerances must be >= 0 and the share window at least one interval")


@dataclasses.dataclass(frozen=True)
class ClaimView:
    """What the watchdog needs of one prepared claim of this driver."""

    uid: str
    namespace: str
    name: str
    devices: frozenset[str]
    memory: Mapping[str, int | None]  # per device name: the quota in bytes (None: none)
    cores: Mapping[str, int]  # per device name: percent (100: no compute limit)
    hook: frozenset[tuple[int, int]]  # (st_dev, st_ino) of its hook library; empty: not enforced
    action: str | None = None  # the strongest watchdogAction of its devices' configs
    ledger: tuple[int, int] | None = None  # (st_dev, st_ino) of its hooks/<uid>/ledger
    config_dir: str | None = None  # where its containers see config and ledger (/run/hookcore/<stem>)
    marked: bool | None = None
    """None: a hooked claim (its hook's files mark its processes). True: no hook (its devices hold
    its shares) and its containers carry its marker (`claim_marker`). False: no hook and no marker
    (prepared by a daemon from before markers): nothing tells its processes from others."""


@dataclasses.dataclass(frozen=True)
class Seen:
    """One process on a device this poll, with who it is."""

    proc: DeviceProcess
    start: int
    pod_uid: str | None
    container_id: str | None
    claim: ClaimView | None
    held: bool | None
    """True: the hook is mapped (the kernel's word). False: unheld. None: not decided yet, only
    registered in the ledger (unverified), or the claim is not enforced."""
    misses: int = 0  # polls in which the ledger had no slot of it (no maps)
    registered: bool = False  # a live slot of the claim's ledger names it: the tenant's word, no authority
    why: str = ""  # what made it unheld, for the message
    readable: bool = True  # its mountinfo was read in full


@dataclasses.dataclass(frozen=True)
class Verdict:
    kind: str
    device: str
    message: str
    claim: ClaimView | None = None
    pid: int | None = None
    pod_uid: str | None = None
    container_id: str | None = None
    pod_uids: tuple[str, ...] = ()  # every pod of the claim's processes on the device
    amount: float = 0.0  # bytes over (over-quota), percentage points over (over-share)
    action: str = "report"
    outcome: str = ""  # what the action did
    taint_on: tuple[str, ...] | None = None  # `DeviceProcess.taint_on` of an unpublished device


class EventSink(Protocol):
    """Where verdicts go as Kubernetes Events (`events.ApiEvents`; a list in tests)."""

    def emit(self, verdict: Verdict) -> None: ...


def mib(n: float) -> int:
    """Whole MiB of `n` bytes, for messages."""
    return int(n) >> 20
