"""Who each process on a device is: its pod, container and claim (from /proc, by file identity),
and whether its claim's hook holds it (the kernel's word, maps; without maps, the ledger's slot is
recorded and proves nothing). What was learnt of a process is kept while it runs (its PID and
start time); held is checked again every poll (an exec keeps both)."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from dra._runtime import procinfo
from dra._runtime.watchdog.model import ClaimView, Seen, WatchdogSettings
from dra._runtime.watchdog.records import ClaimRecords
from dra.driver import DeviceProcess

log = logging.getLogger("dra._runtime.watchdog")

LEDGER_TIMEOUT = 0.25  # seconds one ledger read may take (hookcore.read_ledger gives up then)
BLIND_POLLS = 3  # polls of processes none of which /proc shows before saying so

WarnOnce = Callable[..., None]  # (key, message, level=..., **extra): logged once per key


def hooks_fs_of(proc: Path, hooks_root: Path) -> procinfo.HooksFs:
    """The hooks root as mounts name it (its filesystem and path there): from this process's own
    mountinfo, else (unreadable) the path as this process sees it."""
    found = procinfo.hooks_fs(proc, hooks_root)
    if found is not None:
        return found
    st = os.stat(hooks_root)
    log.warning("the watchdog cannot read its own mountinfo: claims are recognised by the hooks root's "
                "path as this process sees it", extra={"hooks_root": str(hooks_root)})
    return procinfo.HooksFs(f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}", os.path.realpath(hooks_root))


def reads_maps(settings: WatchdogSettings) -> bool:
    """Whether held can be proven: maps on in the settings and the daemon has CAP_SYS_PTRACE."""
    maps = settings.maps and procinfo.capable(settings.proc, procinfo.CAP_SYS_PTRACE)
    if not maps:
        log.warning("the watchdog does not read processes' maps (no CAP_SYS_PTRACE, or maps off): no process "
                    "is proven to hold its claim's hook; a ledger slot, which the claim's own processes can "
                    "write, marks one registered (unverified) and gives it no authority: memory is judged "
                    "from the device's per-process numbers, and a process without a slot is unheld",
                    extra={"maps_setting": settings.maps})
    return maps


class Identifier:
    """Identifies a poll's device processes (`identify`); `procs` keeps what it learnt."""

    def __init__(self, proc: Path, hooks_root: Path, hooks_fs: procinfo.HooksFs, maps: bool, records: ClaimRecords,
                 warn_once: WarnOnce) -> None:
        self.proc = proc
        self.hooks_root = hooks_root
        self.hooks_fs = hooks_fs
        self.maps = maps
        self.records = records
        self._warn_once = warn_once
        self.procs: dict[tuple[int, int], Seen] = {}  # (pid, start time) -> what was learnt
        self._slots: dict[str, set[tuple[int, int]]] = {}  # claim uid -> its ledger's live slots, this poll
        self._blind = 0

    def identify(self, procs: Sequence[DeviceProcess], claims: Mapping[str, ClaimView]) -> list[Seen]:
        """Each of `procs` (none of the driver's own) that still runs, with who it is."""
        self._slots = {}
        seen: list[Seen] = []
        keep: dict[tuple[int, int], Seen] = {}
        invisible = 0
        for p in procs:
            start = procinfo.start_time(self.proc, p.pid)
            if start is None:
                invisible += 1  # exited since the device listed it, or not in our PID namespace
                continue
            if procinfo.exited(self.proc, p.pid):
                continue  # a zombie whose threads are all gone: its device memory is freed
            key = (p.pid, start)
            old = self.procs.get(key)
            s: Seen | None
            recheck = old is not None and old.claim is None and old.held is None  # counted for an unmarked claim
            if old is not None and old.readable and not recheck and (old.claim is None or old.claim.uid in claims):
                s = dataclasses.replace(old, proc=p, claim=claims.get(old.claim.uid) if old.claim else None)
                if s.claim is not None and s.claim.hook:
                    s = self._check_held(s)  # every poll: an exec keeps the PID and start time
            else:
                s = self._who(p, start, claims)
            if s is None:
                continue
            keep[key] = s
            seen.append(s)
        self.procs = keep
        self._blind = self._blind + 1 if procs and invisible == len(procs) else 0
        if self._blind >= BLIND_POLLS:
            self._warn_once("blind", "the device lists processes this daemon cannot see in /proc: it needs the "
                            "host PID namespace (the chart's hostPID, on while the watchdog is)",
                            pids=[p.pid for p in procs][:8])
        return by_pod(seen)

    def _who(self, p: DeviceProcess, start: int, claims: Mapping[str, ClaimView]) -> Seen | None:
        w = procinfo.workload(self.proc, p.pid, self.hooks_fs)
        if w is None:
            return None  # exited meanwhile
        if any(u not in claims and (self.hooks_root / u).is_dir() for u in w.claims):
            claims = self.records.refresh(force=True)  # a claim prepared since the records were read
        mine = [claims[u] for u in sorted(w.claims) if u in claims]
        claim = next((c for c in mine if p.device in c.devices), mine[0] if mine else None)
        if not w.complete:
            self._warn_once(f"unreadable-{p.pid}-{start}", "a device process's mounts cannot be read in full "
                            "(unreadable, or past the watchdog's bound): judged unheld", pid=p.pid)
            return Seen(p, start, w.pod_uid, w.container_id, claim, False,
                        why="its mounts could not be read in full", readable=False)
        if claim is not None and claim.marked:  # no hook: its devices hold its shares, on those it was given
            return Seen(p, start, w.pod_uid, w.container_id, claim, p.device in claim.devices,
                        why="" if p.device in claim.devices else "on a device the claim was not given")
        if claim is None and w.pod_uid:
            legacy = next((c for c in claims.values() if c.marked is False and p.device in c.devices), None)
            if legacy is not None:  # maybe that claim's, which nothing marks: counted, not judged
                self._warn_once(f"unmarked-{legacy.uid}", "a claim without a hook was prepared before claims carried"
                                " their marker: processes of pods on its devices are counted and not judged until it"
                                " is prepared again", claim=f"{legacy.namespace}/{legacy.name}", device=p.device)
                return Seen(p, start, w.pod_uid, w.container_id, None, None)
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
        if self.maps:
            mapping = procinfo.hook_mapping(self.proc, s.proc.pid, claim.hook)
            if mapping == procinfo.EMPTY:
                return s  # exiting (no memory map left): as it was; its memory still counts in the claim
            if mapping != procinfo.MAPPED:
                why = {procinfo.ABSENT: "without the claim's hook loaded",
                       procinfo.UNREADABLE: "with its memory map unreadable to the watchdog",
                       procinfo.OVERSIZED: "with a memory map past the watchdog's bound"}[mapping]
                return dataclasses.replace(s, held=False, why=why, registered=False)
            if claim.ledger is not None and claim.config_dir:
                seen_ledger = procinfo.file_in_root(self.proc, s.proc.pid, f"{claim.config_dir}/ledger")
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
        ns = procinfo.ns_tgid(self.proc, pid)
        return ns is not None and (ns, start) in slots


def by_pod(seen: list[Seen]) -> list[Seen]:
    """A process whose mounts could not be read counts in the claim its pod's other processes
    on that device are in (the pod from its cgroup, which a container cannot leave)."""
    known: dict[tuple[str, str], ClaimView] = {}
    for s in sorted(seen, key=lambda s: s.claim.uid if s.claim else ""):
        if s.readable and s.claim is not None and s.pod_uid and s.proc.device in s.claim.devices:
            known.setdefault((s.pod_uid, s.proc.device), s.claim)
    return [dataclasses.replace(s, claim=known.get((s.pod_uid, s.proc.device)))
            if not s.readable and s.claim is None and s.pod_uid else s for s in seen]
