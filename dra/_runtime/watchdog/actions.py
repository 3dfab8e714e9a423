"""What a verdict makes the watchdog do: ``report`` (nothing more), ``kill`` (SIGKILL through a
pidfd, only a process still in a claim of this driver, re-checked once pinned) or ``taint`` (a
NoSchedule taint on the device, held until the claim ends or the process exits; on a partition the
driver does not publish, on the published devices that share its hardware)."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dra._runtime import procinfo
from dra._runtime.watchdog.metrics import WatchdogMetrics
from dra._runtime.watchdog.model import ClaimView, Seen, Verdict
from dra.driver import Taint

log = logging.getLogger("dra._runtime.watchdog")

TAINTS_NAMED = 4  # devices an outcome names before "and N more" (an Event's message is 1 KiB)


class Actions:
    """Carries out verdicts' actions for `driver`, and keeps the taints they set."""

    def __init__(self, driver: str, proc: Path, hooks_fs: procinfo.HooksFs, metrics: WatchdogMetrics) -> None:
        self.driver = driver
        self.proc = proc
        self.hooks_fs = hooks_fs
        self.metrics = metrics
        self._taints: dict[str, dict[tuple[str, Any], Taint]] = {}  # device -> (claim uid or pid key) -> taint

    def act(self, v: Verdict, seen: Sequence[Seen]) -> tuple[str, bool]:
        """Carry out `v.action`: what it did, and whether the taints changed."""
        changed = False
        if v.action == "kill":
            outcome = self.kill(v, seen)
        elif v.action == "taint":
            outcome, changed = self.taint(v)
        else:
            outcome = "reported"
            self.metrics.action("report", "done")
        return outcome, changed

    def taint(self, v: Verdict) -> tuple[str, bool]:
        """Taint the verdict's device, or, where it is not published, the devices that share its
        hardware (`Verdict.taint_on`); what was done, and whether the taints changed."""
        targets = (v.device,) if v.taint_on is None else v.taint_on
        if not targets:
            self.metrics.action("taint", "refused")
            return (f"not tainted: device {v.device} is not published and shares its hardware with no device that "
                    "is (nothing to keep new claims off)"), False
        key: tuple[str, Any] = ("claim", v.claim.uid) if v.claim else ("pid", v.pid)
        changed = False
        for device in targets:
            taints = self._taints.setdefault(device, {})
            if key not in taints:
                taints[key] = Taint(f"{self.driver}/watchdog", v.kind, "NoSchedule")
                changed = True
        self.metrics.action("taint", "done")
        rule = f"{self.driver}/watchdog={v.kind}:NoSchedule until " + (
            "the claim ends" if v.claim else f"process {v.pid} exits")
        if v.taint_on is None:
            return f"device {v.device} tainted {rule}", changed
        named = ", ".join(targets[:TAINTS_NAMED]) + (f" and {len(targets) - TAINTS_NAMED} more"
                                                     if len(targets) > TAINTS_NAMED else "")
        return (f"device {v.device} is not published; the {len(targets)} published devices on its hardware "
                f"({named}) tainted {rule}"), changed

    def kill(self, v: Verdict, seen: Sequence[Seen]) -> str:
        """SIGKILL the verdict's process when it is still the one judged and in its claim."""
        d = self.driver
        target = next((s for s in seen if s.proc.pid == v.pid), None)
        if target is None or target.claim is None:
            self.metrics.action("kill", "refused")
            return f"not killed: process {v.pid} is in no claim of {d} (kill never touches such a process)"
        try:
            fd = os.pidfd_open(target.proc.pid)
        except OSError as exc:
            self.metrics.action("kill", "failed")
            return f"not killed: process {v.pid}: {exc.strerror}"
        try:
            # The pidfd pins the process: re-check it is the one judged and still in the claim (one
            # whose mounts cannot be read: still in the pod that put it there).
            w = procinfo.workload(self.proc, target.proc.pid, self.hooks_fs)
            if w is not None and target.readable:
                member = target.claim.uid in w.claims
            else:
                member = w is not None and w.pod_uid is not None and w.pod_uid == target.pod_uid
            if procinfo.start_time(self.proc, target.proc.pid) != target.start or not member:
                self.metrics.action("kill", "refused")
                return f"not killed: process {v.pid} exited or left the claim before the kill"
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except OSError as exc:
            self.metrics.action("kill", "failed")
            return f"not killed: process {v.pid}: {exc.strerror}"
        finally:
            os.close(fd)
        self.metrics.action("kill", "done")
        return f"process {v.pid} killed (SIGKILL)"

    def expire_taints(self, claims: Mapping[str, ClaimView], seen: Sequence[Seen]) -> bool:
        """Lift the taints of claims that ended and processes that exited; whether any went."""
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
        """The taints on `device` now (one per kind)."""
        return tuple(dict.fromkeys(self._taints.get(device, {}).values()))
