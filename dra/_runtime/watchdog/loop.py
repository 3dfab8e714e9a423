"""The `Watchdog`: each poll lists the driver's device processes, identifies them, judges them
(`verdicts.judge`), acts on the new verdicts and reports them; `poll()` once (tests), or `start()`
a thread that polls every interval."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry

from dra._runtime.checkpoint import ClaimRecord
from dra._runtime.watchdog import verdicts
from dra._runtime.watchdog.actions import Actions
from dra._runtime.watchdog.identify import Identifier, hooks_fs_of, reads_maps
from dra._runtime.watchdog.metrics import WatchdogMetrics
from dra._runtime.watchdog.model import EventSink, Verdict, WatchdogSettings
from dra._runtime.watchdog.records import ClaimRecords
from dra.driver import DeviceProcess, Driver, Taint
from dra.warn_once import WarnOnce

log = logging.getLogger("dra._runtime.watchdog")

WARNED_MAX = 4096  # keys of warnings given once, kept per process (forgotten all at once past it)


class Watchdog:
    """Polls `driver.processes()` and judges; `poll()` once (tests), or `start()` a thread."""

    def __init__(self, driver: Driver, records: Callable[[], Iterable[ClaimRecord]], hooks_root: Path,
                 events: EventSink, registry: CollectorRegistry, settings: WatchdogSettings | None = None,
                 on_taints: Callable[[], None] = lambda: None, clock: Callable[[], float] = time.monotonic,
                 records_stamp: Callable[[], object] | None = None) -> None:
        """`records_stamp`: a value that changes when the records may have (the checkpoint dir's
        mtime): records are then re-read only on a change, a claim unknown to a process's mounts,
        or every `records.RECORDS_MAX_AGE` seconds."""
        self.driver = driver
        self.settings = settings or WatchdogSettings()
        self.hooks_root = Path(hooks_root)
        self._events = events
        self._on_taints = on_taints
        self._clock = clock
        self._active: dict[verdicts.Key, Verdict] = {}
        self._windows: dict[tuple[str, str], tuple[verdicts.Sample, ...]] = {}
        self._warn_once = WarnOnce(log, WARNED_MAX)
        self._seen_devices: frozenset[str] = frozenset()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.polls = 0
        self.hooks_root.mkdir(parents=True, exist_ok=True)
        self.hooks_fs = hooks_fs_of(self.settings.proc, self.hooks_root)
        self.maps = reads_maps(self.settings)
        """Held is proven by maps (the daemon has CAP_SYS_PTRACE); else nothing proves it."""
        self.metrics = WatchdogMetrics(driver.name, registry)
        self.records = ClaimRecords(records, driver.name, self.hooks_root, records_stamp)
        self.identifier = Identifier(self.settings.proc, self.hooks_root, self.hooks_fs, self.maps, self.records,
                                     self._warn_once)
        self.actions = Actions(driver.name, self.settings.proc, self.hooks_fs, self.metrics)

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
            claims = self.records.refresh()
            system = [p for p in procs if p.system]
            seen = self.identifier.identify([p for p in procs if not p.system], claims)
            for ended in self.records.take_ended():
                self.metrics.forget(ended)
                for key in [k for k in self._windows if k[0] == ended.uid]:
                    del self._windows[key]
            self._note_system(system)
            judgement = verdicts.judge(seen, system, self._clock(), self.settings, self.driver.name, self._active,
                                       self._windows, self._seen_devices)
            self._active = dict(judgement.active)
            self._windows = dict(judgement.windows)
            self._seen_devices = frozenset(judgement.devices)
            self.metrics.observe(judgement)
            taints_changed = self.actions.expire_taints(claims, seen)
            done = []
            for v in judgement.new:
                outcome, changed = self.actions.act(v, seen)
                taints_changed |= changed
                done.append(dataclasses.replace(v, outcome=outcome))
                self._report(done[-1])
            self.polls += 1
        if taints_changed:
            self._on_taints()
        self.metrics.poll.labels(self.driver.name).set(time.perf_counter() - t0)
        return done

    def taints(self, device: str) -> tuple[Taint, ...]:
        """The watchdog's taints on `device` now (one per kind)."""
        with self._lock:
            return self.actions.taints(device)

    def _note_system(self, procs: Sequence[DeviceProcess]) -> None:
        """The driver's own processes (an MPS server): logged once each, never judged."""
        for p in procs:
            self._warn_once(f"system-{p.pid}", "a process the driver runs itself is on a device: not judged",
                            level=logging.INFO, pid=p.pid, device=p.device, system=p.system)

    def _report(self, v: Verdict) -> None:
        self.metrics.verdicts.labels(self.driver.name, v.kind).inc()
        c = v.claim
        log.warning(f"watchdog: {v.kind}", extra={
            "verdict": v.kind, "device": v.device, "pid": v.pid, "pod_uid": v.pod_uid, "container": v.container_id,
            "claim": f"{c.namespace}/{c.name}" if c else None, "claim_uid": c.uid if c else None,
            "action": v.action, "outcome": v.outcome, "reason": v.message})
        try:
            self._events.emit(v)
        except Exception:
            log.exception("watchdog event not queued")

