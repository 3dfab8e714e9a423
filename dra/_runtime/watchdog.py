"""The watchdog: what really runs on the node's devices, checked against what each claim was granted.

A preloaded hook holds only the processes that load it; a static binary, another dynamic
loader, a process talking ioctls to the device or a nested container escapes it. The watchdog
looks from below: every `interval` (1 s) it asks the driver for every process on its devices
(`Driver.processes`: host PID, device memory, utilization), finds each one's pod, container and
claim from /proc (`dra._runtime.procinfo`), and gives three verdicts:

- ``unheld``: a process on a device without its claim's hook library mapped, or in none of this
  driver's claims (a host process, another pod, a nested container);
- ``over-quota``: a claim's processes on a device together hold more memory than the claim's
  quota plus `context_overhead` per process (the hook does not charge the CUDA context, ~520 MiB
  per process on an H200);
- ``over-share``: a claim's processes used more than its compute share plus `share_tolerance`
  percentage points, averaged over `share_window` seconds (only where the driver reports
  per-process utilization; never for a claim without a compute limit).

Evidence (nothing a tenant can write is trusted: the daemon runs with more privilege than the
processes it judges):

- **Quotas** are the daemon's own: the allocation (the checkpoint record's consumed capacity) and
  the hook settings the daemon wrote for the claim (the record's copy of the claim's read-only
  ``config``), never the claim's ledger, which every process of the claim can write.
- **Claim membership** is by file identity (`procinfo.HooksFs`): a file mount of exactly the
  daemon's ``hooks/<uid>/config`` or ``ledger``; a directory, or a file elsewhere named like it,
  never counts.
- **Held** needs the kernel's word: the claim's hook library mapped executable in the process's
  ``/proc/<pid>/maps`` (CAP_SYS_PTRACE, which the chart grants while the watchdog is on). Where
  the daemon may read maps, that is the only evidence; where its root is also readable, the
  ``ledger`` the process sees must be the claim's file (same device and inode), else it is
  unheld. Without CAP_SYS_PTRACE nothing proves a process held: a live slot in the claim's ledger
  (its ``NStgid`` and start time) is recorded as *registered (unverified)*; it spares the process
  the ``unheld`` verdict (which a process without a slot gets after two polls) and nothing more:
  memory is judged from the device's per-process numbers against the daemon's quota as for any
  process, and the kill takes a process not proven held first.
- **A process the watchdog cannot read** in full (its mountinfo unreadable or past its bound, its
  maps unreadable or past theirs) is judged unheld, never skipped; one whose mounts cannot be read
  counts in the claim its pod's other processes on that device are in (the pod from its cgroup,
  which a container cannot leave). A process whose thread-group leader exited is read through a
  live thread (`procinfo.task_dir`).
- **The driver's own processes** on a device (`DeviceProcess.system`, e.g. an MPS server) are
  neither judged nor counted in a claim. Only the driver sets that field; nothing read from
  /proc does.

Each verdict is a Warning Event on the pod (the Node for a host process), one structured log
line and metrics; it fires once when its condition starts and again only after it has cleared.
The action (the strongest ``watchdogAction`` of the claim's devices' configs, else the daemon's
``--watchdog``): ``report`` (nothing more), ``kill`` (SIGKILL one offending process through a
pidfd, after re-checking that it is the same process and still in a claim of this driver: a
process in no claim of this driver is never killed), ``taint`` (a NoSchedule taint on the device
until the claim ends, or the process exits when it is in no claim). Every action is logged with
the process, pod and reason.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import functools
import logging
import os
import queue
import signal
import stat
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge

from dra._runtime import procinfo
from dra._runtime.checkpoint import PREPARED, ClaimRecord
from dra.driver import DeviceProcess, Driver, Taint

log = logging.getLogger("dra._runtime.watchdog")

ACTIONS = ("report", "kill", "taint")
VERDICTS = ("unheld", "over-quota", "over-share")
REASONS = {"unheld": "ProcessUnheld", "over-quota": "MemoryOverQuota", "over-share": "ComputeOverShare"}
CONFIG_KEY = "watchdogAction"
ACTION_RANK = {"report": 0, "taint": 1, "kill": 2}  # a claim's devices' configs: the strongest wins
WARNED_MAX = 4096
LEDGER_TIMEOUT = 0.25  # seconds one ledger read may take (hookcore.read_ledger gives up then)
RECORDS_MAX_AGE = 5.0
GiB = 1 << 30


@dataclasses.dataclass(frozen=True)
class WatchdogSettings:
    """``dra run --watchdog ...`` and its tolerances."""

    action: str = "report"
    interval: float = 1.0
    context_overhead: int = GiB
    """Bytes per process a claim may hold beyond its quota: the context the hook does not charge."""
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
        if self.context_overhead < 0 or self.share_tolerance < 0 or self.share_window < self.interval:
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


class EventSink(Protocol):
    """Where verdicts go as Kubernetes Events (`ApiEvents`; a list in tests)."""

    def emit(self, verdict: Verdict) -> None: ...


def claim_view(record: ClaimRecord, driver: str, hooks_root: Path) -> ClaimView | None:
    """The claim as the watchdog sees it, from its checkpoint record (the daemon's own, never the
    claim's ledger); None when it has no device of `driver` or is not prepared."""
    devices = [d for d in record.devices if d.driver == driver]
    if record.phase != PREPARED or not devices:
        return None
    memory: dict[str, int | None] = {}
    cores: dict[str, int] = {}
    action: str | None = None
    for d in devices:
        memory[d.device] = (memory.get(d.device) or 0) + int(d.consumed_capacity.get("memory", 0)) or None
        cores[d.device] = min(100, cores.get(d.device, 0) + int(d.consumed_capacity.get("cores", 100)))
        configured = (d.config or {}).get(CONFIG_KEY)
        if configured in ACTION_RANK and (action is None or ACTION_RANK[configured] > ACTION_RANK[action]):
            action = configured
    hook: frozenset[tuple[int, int]] = frozenset()
    ledger = None
    config_dir = None
    enforcement = record.enforcement or {}
    if enforcement.get("set") and enforcement.get("stem"):
        found = procinfo.file_id(Path(str(enforcement["set"])) / f"lib{enforcement['stem']}.so")
        hook = frozenset([found]) if found else frozenset()
        _hook_quotas(record, devices, enforcement, memory, cores)
        ledger = _regular_file(hooks_root / record.uid / "ledger")
        config_dir = str(enforcement.get("configDir") or "") or None
    return ClaimView(record.uid, record.namespace, record.name, frozenset(memory), memory, cores, hook, action,
                     ledger, config_dir)


def _hook_quotas(record: ClaimRecord, devices: Sequence[Any], enforcement: Mapping[str, Any],
                 memory: dict[str, int | None], cores: dict[str, int]) -> None:
    """The quotas the hook enforces, which win over the allocation's (a claim whose config lifts
    its compute limit has cores 100 there): the settings the daemon wrote into the claim's
    read-only ``config``, parsed from the daemon's own record by the hook's parser."""
    settings = enforcement.get("settings")
    uuids = {str(d.state.get("uuid")): d.device for d in devices if d.state.get("uuid")}
    if not uuids or not isinstance(settings, Mapping):
        return
    import hookcore

    try:
        config = hookcore.parse_config({str(k): str(v) for k, v in settings.items()},
                                       stem=str(enforcement["stem"]))
    except ValueError as exc:
        log.warning("claim hook settings unreadable in its record; the allocation's quotas are used",
                    extra={"claim": record.uid, "error": str(exc)})
        return
    for dev in config.configured():
        name = uuids.get(dev.uuid or "")
        if name is not None:
            memory[name] = dev.memory
            cores[name] = int(dev.cores)


def _regular_file(path: Path) -> tuple[int, int] | None:
    """(st_dev, st_ino) of `path` when it is a regular file (not followed); None otherwise."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


class Watchdog:
    """Polls `driver.processes()` and judges; `poll()` once (tests), or `start()` a thread."""

    def __init__(self, driver: Driver, records: Callable[[], Iterable[ClaimRecord]], hooks_root: Path,
                 events: EventSink, registry: CollectorRegistry, settings: WatchdogSettings | None = None,
                 on_taints: Callable[[], None] = lambda: None, clock: Callable[[], float] = time.monotonic,
                 records_stamp: Callable[[], object] | None = None) -> None:
        """`records_stamp`: a value that changes when the records may have (the checkpoint dir's
        mtime): records are then re-read only on a change, a claim unknown to a process's mounts,
        or every `RECORDS_MAX_AGE` seconds."""
        self.driver = driver
        self._records_stamp = records_stamp
        self._stamp: object = None
        self._records_at = 0.0
        self.settings = settings or WatchdogSettings()
        self._records = records
        self.hooks_root = Path(hooks_root)
        self._events = events
        self._on_taints = on_taints
        self._clock = clock
        self._claims: dict[str, ClaimView] = {}
        self._record_stamp: dict[str, float] = {}
        self._procs: dict[tuple[int, int], Seen] = {}
        self._active: dict[tuple[Any, ...], Verdict] = {}
        self._share: dict[tuple[str, str], collections.deque[tuple[float, float]]] = {}
        self._taints: dict[str, dict[tuple[str, Any], Taint]] = {}  # device -> (claim uid or pid key) -> taint
        self._warned: set[str] = set()
        self._seen_devices: set[str] = set()
        self._system: Sequence[DeviceProcess] = ()
        self._slots: dict[str, set[tuple[int, int]]] = {}
        self._blind = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.polls = 0
        self.hooks_root.mkdir(parents=True, exist_ok=True)
        hooks_fs = procinfo.hooks_fs(self.settings.proc, self.hooks_root)
        if hooks_fs is None:  # no mountinfo of its own: the path as this process sees it
            st = os.stat(self.hooks_root)
            hooks_fs = procinfo.HooksFs(f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}",
                                        os.path.realpath(self.hooks_root))
            log.warning("the watchdog cannot read its own mountinfo: claims are recognised by the hooks root's "
                        "path as this process sees it", extra={"hooks_root": str(self.hooks_root)})
        self.hooks_fs = hooks_fs
        self.maps = self.settings.maps and procinfo.capable(self.settings.proc, procinfo.CAP_SYS_PTRACE)
        """Held is proven by maps (the daemon has CAP_SYS_PTRACE); else nothing proves it."""
        if not self.maps:
            log.warning("the watchdog does not read processes' maps (no CAP_SYS_PTRACE, or maps off): no process "
                        "is proven to hold its claim's hook; a ledger slot, which the claim's own processes can "
                        "write, marks one registered (unverified) and gives it no authority: memory is judged "
                        "from the device's per-process numbers, and a process without a slot is unheld",
                        extra={"maps_setting": self.settings.maps})
        d = driver.name
        self.m_verdicts = Counter("dra_watchdog_verdicts", "Watchdog verdicts given.", ["driver", "verdict"], registry=registry)
        self.m_actions = Counter("dra_watchdog_actions", "Watchdog actions taken.", ["driver", "action", "result"],
                                 registry=registry)
        self.m_unheld = Gauge("dra_device_processes_unheld", "Processes on the device that no claim's hook holds.",
                              ["driver", "device"], registry=registry)
        self.m_processes = Gauge("dra_device_processes", "Processes on the device.", ["driver", "device"],
                                 registry=registry)
        self.m_unverified = Gauge("dra_device_processes_unverified",
                                  "Processes on the device only their claim's ledger says are held (no maps).",
                                  ["driver", "device"], registry=registry)
        self.m_over_quota = Gauge("dra_claim_memory_over_quota_bytes",
                                  "Device memory of the claim beyond its quota plus the context tolerance.",
                                  ["driver", "namespace", "claim", "claim_uid", "device"], registry=registry)
        self.m_over_share = Gauge("dra_claim_compute_over_share_percent",
                                  "Compute of the claim beyond its share plus the tolerance, over the window.",
                                  ["driver", "namespace", "claim", "claim_uid", "device"], registry=registry)
        self.m_poll = Gauge("dra_watchdog_poll_seconds", "Duration of the last watchdog poll.", ["driver"],
                            registry=registry)
        for v in VERDICTS:
            self.m_verdicts.labels(d, v)
        for a in ACTIONS:
            for r in ("done", "refused", "failed"):
                self.m_actions.labels(d, a, r)
        self.m_poll.labels(d).set(0)

    # --- the loop -----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="watchdog", daemon=True)
        self._thread.start()
        log.info("watchdog running", extra={"action": self.settings.action, "interval": self.settings.interval})

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def close(self) -> None:
        """Stop posting Events (after `stop`)."""
        close = getattr(self._events, "close", None)
        if close is not None:
            close()

    def _run(self) -> None:
        next_at = self._clock()
        failing = ""
        while not self._stop.is_set():
            try:
                self.poll()
                if failing:
                    log.info("watchdog polls again", extra={"after": failing})
                failing = ""
            except Exception as exc:
                if repr(exc) != failing:  # once per distinct failure, not every second
                    log.exception("watchdog poll failed; retrying every interval")
                failing = repr(exc)
            next_at += self.settings.interval
            delay = next_at - self._clock()
            if delay < 0:  # fell behind (a slow poll): keep the cadence, skip the lost ticks
                next_at = self._clock()
                delay = 0
            self._stop.wait(delay)

    # --- one poll -----------------------------------------------------------------------------

    def poll(self) -> list[Verdict]:
        """Read the processes once, judge them, act; the new verdicts."""
        t0 = time.perf_counter()
        with self._lock:
            procs = self.driver.processes()
            if procs is None:
                return []
            claims = self._refresh_claims()
            self._slots = {}
            system = [p for p in procs if p.system]
            seen = self._identify([p for p in procs if not p.system], claims)
            self._note_system(system)
            now = self._clock()
            verdicts = self._judge(seen, now)
            taints_changed = self._expire_taints(claims, seen)
            done = []
            for v in verdicts:
                outcome, changed = self._act(v, seen)
                taints_changed |= changed
                done.append(dataclasses.replace(v, outcome=outcome))
                self._report(done[-1])
            self.polls += 1
        if taints_changed:
            self._on_taints()
        self.m_poll.labels(self.driver.name).set(time.perf_counter() - t0)
        return done

    def _refresh_claims(self, force: bool = False) -> dict[str, ClaimView]:
        if self._records_stamp is not None and not force:
            try:
                stamp = self._records_stamp()
            except OSError:
                stamp = None
            if stamp is not None and stamp == self._stamp and time.monotonic() - self._records_at < RECORDS_MAX_AGE:
                return self._claims
            self._stamp = stamp
        self._records_at = time.monotonic()
        out: dict[str, ClaimView] = {}
        for rec in self._records():
            if rec.uid in self._claims and self._record_stamp.get(rec.uid) == rec.updated_at:
                out[rec.uid] = self._claims[rec.uid]
                continue
            view = claim_view(rec, self.driver.name, self.hooks_root)
            if view is not None:
                out[rec.uid] = view
                self._record_stamp[rec.uid] = rec.updated_at
        gone = set(self._claims) - set(out)
        for uid in gone:
            self._record_stamp.pop(uid, None)
            view = self._claims[uid]
            for dev in view.devices:  # an ended claim's series go with it
                for gauge in (self.m_over_quota, self.m_over_share):
                    try:
                        gauge.remove(self.driver.name, view.namespace, view.name, view.uid, dev)
                    except KeyError:
                        pass
            for key in [k for k in self._share if k[0] == uid]:
                del self._share[key]
        self._claims = out
        return out

    def _identify(self, procs: Sequence[DeviceProcess], claims: Mapping[str, ClaimView]) -> list[Seen]:
        proc_root = self.settings.proc
        seen: list[Seen] = []
        keep: dict[tuple[int, int], Seen] = {}
        invisible = 0
        for p in procs:
            start = procinfo.start_time(proc_root, p.pid)
            if start is None:
                invisible += 1  # exited since the device listed it, or not in our PID namespace
                continue
            if procinfo.exited(proc_root, p.pid):
                continue  # a zombie whose threads are all gone: its device memory is freed
            key = (p.pid, start)
            old = self._procs.get(key)
            s: Seen | None
            if old is not None and old.readable and (old.claim is None or old.claim.uid in claims):
                s = dataclasses.replace(old, proc=p, claim=claims.get(old.claim.uid) if old.claim else None)
                if s.claim is not None and s.claim.hook:
                    s = self._check_held(s)  # every poll: an exec keeps the PID and start time
            else:
                s = self._who(p, start, claims)
            if s is None:
                continue
            keep[key] = s
            seen.append(s)
        self._procs = keep
        self._blind = self._blind + 1 if procs and invisible == len(procs) else 0
        if self._blind >= 3:  # three polls of processes none of which /proc shows
            self._warn_once("blind", "the device lists processes this daemon cannot see in /proc: it needs the "
                            "host PID namespace (the chart's hostPID, on while the watchdog is)",
                            pids=[p.pid for p in procs][:8])
        return self._by_pod(seen)

    def _by_pod(self, seen: list[Seen]) -> list[Seen]:
        """A process whose mounts could not be read counts in the claim its pod's other processes
        on that device are in (the pod from its cgroup, which a container cannot leave)."""
        known: dict[tuple[str, str], ClaimView] = {}
        for s in sorted(seen, key=lambda s: s.claim.uid if s.claim else ""):
            if s.readable and s.claim is not None and s.pod_uid and s.proc.device in s.claim.devices:
                known.setdefault((s.pod_uid, s.proc.device), s.claim)
        return [dataclasses.replace(s, claim=known.get((s.pod_uid, s.proc.device)))
                if not s.readable and s.claim is None and s.pod_uid else s for s in seen]

    def _who(self, p: DeviceProcess, start: int, claims: Mapping[str, ClaimView]) -> Seen | None:
        w = procinfo.workload(self.settings.proc, p.pid, self.hooks_fs)
        if w is None:
            return None  # exited meanwhile
        if any(u not in claims and (self.hooks_root / u).is_dir() for u in w.claims):
            claims = self._refresh_claims(force=True)  # a claim prepared since the records were read
        mine = [claims[u] for u in sorted(w.claims) if u in claims]
        claim = next((c for c in mine if p.device in c.devices), mine[0] if mine else None)
        if not w.complete:
            self._warn_once(f"unreadable-{p.pid}-{start}", "a device process's mounts cannot be read in full "
                            "(unreadable, or past the watchdog's bound): judged unheld", pid=p.pid)
            return Seen(p, start, w.pod_uid, w.container_id, claim, False,
                        why="its mounts could not be read in full", readable=False)
        s = Seen(p, start, w.pod_uid, w.container_id, claim, False if claim is None else None)
        return self._check_held(s) if claim is not None and claim.hook else s

    def _check_held(self, s: Seen) -> Seen:
        """Held only with the kernel's word: the claim's hook mapped executable (maps), and where
        the process's root is readable, its ledger the claim's own file. Without maps, a live
        ledger slot makes it registered (unverified, held stays None); no slot in two polls
        running is unheld (a hook registers a process at its first CUDA call, which can be a moment
        after the device lists it)."""
        claim = s.claim
        assert claim is not None
        proc = self.settings.proc
        if self.maps:
            mapping = procinfo.hook_mapping(proc, s.proc.pid, claim.hook)
            if mapping == procinfo.EMPTY:
                return s  # exiting (no memory map left): as it was; its memory still counts in the claim
            if mapping != procinfo.MAPPED:
                why = {procinfo.ABSENT: "without the claim's hook loaded",
                       procinfo.UNREADABLE: "with its memory map unreadable to the watchdog",
                       procinfo.OVERSIZED: "with a memory map past the watchdog's bound"}[mapping]
                return dataclasses.replace(s, held=False, why=why, registered=False)
            if claim.ledger is not None and claim.config_dir:
                seen_ledger = procinfo.file_in_root(proc, s.proc.pid, f"{claim.config_dir}/ledger")
                if seen_ledger is not None and seen_ledger != claim.ledger:
                    return dataclasses.replace(s, held=False, registered=False,
                                               why="with another file than its claim's ledger at the ledger's path")
            return dataclasses.replace(s, held=True, why="", registered=False)
        if self._in_ledger(claim, s.proc.pid, s.start):
            return dataclasses.replace(s, held=None, registered=True, misses=0, why="")
        misses = s.misses + 1
        return dataclasses.replace(s, held=False if misses >= 2 else None, registered=False, misses=misses,
                                   why="without the claim's hook loaded (no slot in its claim's ledger)")

    def _in_ledger(self, claim: ClaimView, pid: int, start: int) -> bool:
        """Whether the claim's ledger has a live slot of this process (its namespace PID and start
        time): the tenant's word, for the record only. The ledger is read at most once per poll
        per claim, into private memory with a deadline (`hookcore.read_ledger`: never mapped, so a
        tenant truncating it cannot fault the daemon)."""
        slots = self._slots.get(claim.uid)
        if slots is None:
            slots = set()
            path = self.hooks_root / claim.uid / "ledger"
            try:
                import hookcore

                snap = hookcore.read_ledger(path, timeout=LEDGER_TIMEOUT)
                slots = {(p.pid, p.start_time) for p in snap.processes if p.state == "live"}
            except (OSError, ValueError) as exc:
                self._warn_once(f"ledger-{claim.uid}", "claim ledger unreadable", claim=claim.uid, error=str(exc))
            self._slots[claim.uid] = slots
        ns = procinfo.ns_tgid(self.settings.proc, pid)
        return ns is not None and (ns, start) in slots

    def _note_system(self, procs: Sequence[DeviceProcess]) -> None:
        """The driver's own processes (an MPS server): logged once each, never judged."""
        for p in procs:
            self._warn_once(f"system-{p.pid}", "a process the driver runs itself is on a device: not judged",
                            level=logging.INFO, pid=p.pid, device=p.device, system=p.system)
        self._system = procs

    def _judge(self, seen: Sequence[Seen], now: float) -> list[Verdict]:
        d = self.driver.name
        active: dict[tuple[Any, ...], Verdict] = {}
        new: list[Verdict] = []

        def verdict(key: tuple[Any, ...], make: Callable[[], Verdict]) -> None:
            v = self._active.get(key) or make()
            if key not in self._active:
                new.append(v)
            active[key] = v

        unheld: dict[str, int] = collections.Counter()
        unverified: dict[str, int] = collections.Counter()
        per_claim: dict[tuple[str, str], list[Seen]] = collections.defaultdict(list)
        for s in seen:
            if s.claim is not None:
                per_claim[(s.claim.uid, s.proc.device)].append(s)
            if s.registered:
                unverified[s.proc.device] += 1
            if s.held is False:
                unheld[s.proc.device] += 1
                verdict(("unheld", s.proc.pid, s.start), functools.partial(self._unheld, s))
        devices = {s.proc.device for s in seen} | {p.device for p in self._system} | set(self._seen_devices)
        self._seen_devices = devices
        for dev in devices:
            self.m_unheld.labels(d, dev).set(unheld.get(dev, 0))
            self.m_unverified.labels(d, dev).set(unverified.get(dev, 0))
            self.m_processes.labels(d, dev).set(sum(1 for s in seen if s.proc.device == dev)
                                                + sum(1 for p in self._system if p.device == dev))
        for (uid, dev), group in per_claim.items():
            claim = group[0].claim
            assert claim is not None
            labels = (d, claim.namespace, claim.name, claim.uid, dev)
            quota = claim.memory.get(dev)
            if quota is not None:
                used = sum(s.proc.memory for s in group)
                over = used - quota - self.settings.context_overhead * len(group)
                self.m_over_quota.labels(*labels).set(max(0, over))
                if over > 0:
                    verdict(("over-quota", uid, dev), functools.partial(self._over_quota, claim, dev, group, used,
                                                                        quota, over))
            share = claim.cores.get(dev, 100)
            utils = [s.proc.utilization for s in group if s.proc.utilization is not None]
            if share < 100 and utils:
                window = self._share.setdefault((uid, dev), collections.deque())
                window.append((now, sum(utils)))
                while window and window[0][0] < now - self.settings.share_window:
                    window.popleft()
                full = window[0][0] <= now - self.settings.share_window + self.settings.interval / 2
                mean = sum(u for _t, u in window) / len(window)
                over_pp = mean - share - self.settings.share_tolerance
                self.m_over_share.labels(*labels).set(max(0.0, over_pp))
                if full and over_pp > 0:
                    verdict(("over-share", uid, dev), functools.partial(self._over_share, claim, dev, group, mean,
                                                                        share, over_pp))
        self._active = active
        return new

    def _action(self, claim: ClaimView | None) -> str:
        return (claim.action if claim and claim.action else None) or self.settings.action

    def _unheld(self, s: Seen) -> Verdict:
        p = s.proc
        if s.claim is None:
            where = f"in pod {s.pod_uid}" if s.pod_uid else "a host process, in no pod"
            msg = (f"process {p.pid} on device {p.device} holds {_mib(p.memory)} MiB but is in none of "
                   f"{self.driver.name}'s claims ({where}): nothing limits it. Give the pod a claim of "
                   f"this driver, or stop giving it the device another way")
        else:
            why = s.why or "without the claim's hook loaded"
            msg = (f"process {p.pid} of claim {s.claim.namespace}/{s.claim.name} on device {p.device} holds "
                   f"{_mib(p.memory)} MiB {why} (a static binary, another "
                   "loader, a cleared preload, or a process the watchdog cannot read): its quota is not enforced. "
                   "Run it dynamically linked with the preload the claim's containers get")
        return Verdict("unheld", p.device, msg, s.claim, p.pid, s.pod_uid, s.container_id,
                       (s.pod_uid,) if s.pod_uid else (), float(p.memory), self._action(s.claim))

    def _over_quota(self, claim: ClaimView, dev: str, group: Sequence[Seen], used: int, quota: int,
                    over: int) -> Verdict:
        target = max(group, key=lambda s: (s.held is not True, s.proc.memory))  # unheld first, then the largest
        msg = (f"claim {claim.namespace}/{claim.name} holds {_mib(used)} MiB on device {dev} in {len(group)} "
               f"process(es), over its quota of {_mib(quota)} MiB plus {_mib(self.settings.context_overhead)} MiB "
               f"context per process by {_mib(over)} MiB (largest: process {target.proc.pid}, "
               f"{_mib(target.proc.memory)} MiB). Memory the hook did not charge: an unhooked allocation path")
        pods = tuple(sorted({s.pod_uid for s in group if s.pod_uid}))
        return Verdict("over-quota", dev, msg, claim, target.proc.pid, target.pod_uid, target.container_id, pods,
                       float(over), self._action(claim))

    def _over_share(self, claim: ClaimView, dev: str, group: Sequence[Seen], mean: float, share: int,
                    over: float) -> Verdict:
        target = max(group, key=lambda s: (s.held is not True, s.proc.utilization or 0.0))
        msg = (f"claim {claim.namespace}/{claim.name} used {mean:.0f}% of device {dev} over the last "
               f"{self.settings.share_window:g} s, over its share of {share}% plus {self.settings.share_tolerance:g} "
               f"points (busiest: process {target.proc.pid}, {target.proc.utilization or 0:.0f}%)")
        pods = tuple(sorted({s.pod_uid for s in group if s.pod_uid}))
        return Verdict("over-share", dev, msg, claim, target.proc.pid, target.pod_uid, target.container_id, pods,
                       over, self._action(claim))

    # --- actions ------------------------------------------------------------------------------

    def _act(self, v: Verdict, seen: Sequence[Seen]) -> tuple[str, bool]:
        """Carry out `v.action`: what it did, and whether the taints changed."""
        changed = False
        if v.action == "kill":
            outcome = self._kill(v, seen)
        elif v.action == "taint":
            key: tuple[str, Any] = ("claim", v.claim.uid) if v.claim else ("pid", v.pid)
            taints = self._taints.setdefault(v.device, {})
            if key not in taints:
                taints[key] = Taint(f"{self.driver.name}/watchdog", v.kind, "NoSchedule")
                changed = True
            until = "the claim ends" if v.claim else f"process {v.pid} exits"
            outcome = f"device {v.device} tainted {self.driver.name}/watchdog={v.kind}:NoSchedule until {until}"
            self.m_actions.labels(self.driver.name, "taint", "done").inc()
        else:
            outcome = "reported"
            self.m_actions.labels(self.driver.name, "report", "done").inc()
        return outcome, changed

    def _kill(self, v: Verdict, seen: Sequence[Seen]) -> str:
        d = self.driver.name
        target = next((s for s in seen if s.proc.pid == v.pid), None)
        if target is None or target.claim is None:
            self.m_actions.labels(d, "kill", "refused").inc()
            return f"not killed: process {v.pid} is in no claim of {d} (kill never touches such a process)"
        try:
            fd = os.pidfd_open(target.proc.pid)
        except OSError as exc:
            self.m_actions.labels(d, "kill", "failed").inc()
            return f"not killed: process {v.pid}: {exc.strerror}"
        try:
            # The pidfd pins the process: re-check it is the one judged and still in the claim (one
            # whose mounts cannot be read: still in the pod that put it there).
            w = procinfo.workload(self.settings.proc, target.proc.pid, self.hooks_fs)
            if w is not None and target.readable:
                member = target.claim.uid in w.claims
            else:
                member = w is not None and w.pod_uid is not None and w.pod_uid == target.pod_uid
            if procinfo.start_time(self.settings.proc, target.proc.pid) != target.start or not member:
                self.m_actions.labels(d, "kill", "refused").inc()
                return f"not killed: process {v.pid} exited or left the claim before the kill"
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except OSError as exc:
            self.m_actions.labels(d, "kill", "failed").inc()
            return f"not killed: process {v.pid}: {exc.strerror}"
        finally:
            os.close(fd)
        self.m_actions.labels(d, "kill", "done").inc()
        return f"process {v.pid} killed (SIGKILL)"

    def _expire_taints(self, claims: Mapping[str, ClaimView], seen: Sequence[Seen]) -> bool:
        pids = {s.proc.pid for s in seen}
        changed = False
        for dev, taints in list(self._taints.items()):
            for key in list(taints):
                kind, ident = key
                if (kind == "claim" and ident not in claims) or (kind == "pid" and ident not in pids):
                    del taints[key]
                    changed = True
                    log.info("watchdog taint lifted", extra={"device": dev, "claim" if kind == "claim" else "pid": ident})
            if not taints:
                del self._taints[dev]
        return changed

    def taints(self, device: str) -> tuple[Taint, ...]:
        """The watchdog's taints on `device` now (one per kind)."""
        with self._lock:
            return tuple(dict.fromkeys(self._taints.get(device, {}).values()))

    def _report(self, v: Verdict) -> None:
        self.m_verdicts.labels(self.driver.name, v.kind).inc()
        c = v.claim
        log.warning(f"watchdog: {v.kind}", extra={
            "verdict": v.kind, "device": v.device, "pid": v.pid, "pod_uid": v.pod_uid, "container": v.container_id,
            "claim": f"{c.namespace}/{c.name}" if c else None, "claim_uid": c.uid if c else None,
            "action": v.action, "outcome": v.outcome, "reason": v.message})
        try:
            self._events.emit(v)
        except Exception:
            log.exception("watchdog event not queued")

    def _warn_once(self, key: str, message: str, level: int = logging.WARNING, **extra: Any) -> None:
        if key not in self._warned:
            if len(self._warned) >= WARNED_MAX:  # keys per process: forget them all now and then
                self._warned.clear()
            self._warned.add(key)
            log.log(level, message, extra=extra)


def _mib(n: float) -> int:
    return int(n) >> 20


# --- Events through the API --------------------------------------------------------------------


class ApiEvents:
    """Posts each verdict as a Warning Event on its pods, from a thread of its own so that a slow
    API server never delays a poll. Pods are named from the claim's ``status.reservedFor`` (the
    daemon may read claims); a process in no claim of this driver, a host process or another
    pod's (named by UID in the message), gets its Event on the Node: reading every pod of the
    cluster to name it is a permission the daemon is not given."""

    def __init__(self, api: Any, driver: str, node: str, timeout: float = 5.0) -> None:
        self.api = api
        self.driver = driver
        self.node = node
        self.timeout = timeout
        self.posted = 0
        self._queue: queue.Queue[Verdict | None] = queue.Queue(maxsize=1000)
        self._pods: dict[str, tuple[str, str]] = {}  # pod UID -> (namespace, name)
        self._thread = threading.Thread(target=self._run, name="watchdog-events", daemon=True)
        self._thread.start()

    def emit(self, verdict: Verdict) -> None:
        try:
            self._queue.put_nowait(verdict)
        except queue.Full:
            log.error("watchdog events backlogged; verdict left out of the Events (it is logged)",
                      extra={"verdict": verdict.kind, "pid": verdict.pid})

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            v = self._queue.get()
            if v is None:
                return
            try:
                self._post(v)
            except Exception as exc:
                log.warning("watchdog event not posted", extra={"verdict": v.kind, "pid": v.pid, "error": str(exc)})

    def _post(self, v: Verdict) -> None:
        from dra._runtime import client

        targets: list[dict[str, str]] = []
        for uid in v.pod_uids:
            found = self._pod(uid, v.claim)
            if found:
                targets.append({"apiVersion": "v1", "kind": "Pod", "namespace": found[0], "name": found[1], "uid": uid})
        if not targets:
            targets.append({"apiVersion": "v1", "kind": "Node", "name": self.node, "namespace": "default"})
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        note = f"{v.message}. Action {v.action}: {v.outcome}" if v.outcome else v.message
        for obj in targets:
            body = {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{obj['name']}.watchdog-", "namespace": obj["namespace"]},
                "involvedObject": obj, "reason": REASONS[v.kind], "message": note[:1024], "type": "Warning",
                "source": {"component": self.driver, "host": self.node}, "reportingComponent": self.driver,
                "reportingInstance": self.node, "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            }
            client.post_json(self.api, "/api/v1/namespaces/{namespace}/events", {"namespace": obj["namespace"]},
                             body, self.timeout)
            self.posted += 1

    def _pod(self, uid: str, claim: ClaimView | None) -> tuple[str, str] | None:
        from dra._runtime import client

        if uid in self._pods:
            return self._pods[uid]
        if claim is not None:
            doc = client.get_json(self.api, "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}",
                                  {"namespace": claim.namespace, "name": claim.name}, self.timeout) or {}
            for ref in (doc.get("status") or {}).get("reservedFor") or ():
                if ref.get("resource") == "pods" and ref.get("uid") and ref.get("name"):
                    self._pods[str(ref["uid"])] = (claim.namespace, str(ref["name"]))
        return self._pods.get(uid)
