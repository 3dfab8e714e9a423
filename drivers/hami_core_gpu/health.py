"""GPU health from NVML: XID events and recovery actions become taints and health reports.

One thread holds an NVML session and an event set with every GPU registered for XID critical
errors. It waits for events (up to one probe interval) and then probes every GPU:

- an XID is classified by the table in `xids.py`: ``TAINT`` marks the GPU unhealthy with taint
  ``<driver>/xid=<code>``; XID 79 (fallen off the bus) with ``<driver>/gpu-lost``;
- a probe reads ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``: a GPU that answers
  ``NVML_ERROR_GPU_IS_LOST`` is lost, one whose recovery action is not ``NONE`` is unhealthy
  (taint ``<driver>/recovery-action=<action>``); a tainted GPU whose probe answers and says
  ``NONE``, at least `settle` seconds after its last event, is healthy again;
- a GPU whose events cannot be registered is reported Unknown (not tainted: nothing is known
  to be wrong), with the reason.

On every change `on_change` is called; `taints()` and `snapshot()` give the current state.
Taints use NoSchedule: running pods stay (their process has already seen the error), new claims
are not allocated there.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pynvml

from dra import Device, HealthEvent, HealthWatch, Processed, Taint
from drivers.hami_core_gpu import nvml
from drivers.hami_core_gpu.devices import DRIVER_NAME
from drivers.hami_core_gpu.mps import MpsDaemons
from drivers.hami_core_gpu.xids import GPU_LOST_XID, Action, classify

log = logging.getLogger(__name__)

TAINT_XID = f"{DRIVER_NAME}/xid"
TAINT_LOST = f"{DRIVER_NAME}/gpu-lost"
TAINT_RECOVERY = f"{DRIVER_NAME}/recovery-action"
RECOVERY_ACTIONS = {
    0: "none", 1: "gpu-reset", 2: "node-reboot", 3: "drain-p2p", 4: "drain-and-reset",
    5: "recover-imex-domain", 6: "bus-reset", 7: "system-reboot",
}


@dataclasses.dataclass
class GpuHealth:
    """The health of one GPU as the monitor sees it."""

    uuid: str
    monitored: bool = False  # until its XID events are registered
    xid: int | None = None  # the XID that tainted it
    lost: bool = False
    recovery: int = 0  # NVML recovery action, 0 = none
    message: str = ""
    last_event: float = 0.0

    @property
    def healthy(self) -> bool | None:
        if self.lost or self.xid is not None or self.recovery:
            return False
        return True if self.monitored else None

    def taints(self) -> tuple[Taint, ...]:
        out = []
        if self.lost:
            out.append(Taint(TAINT_LOST, "", "NoSchedule"))
        if self.xid is not None and not (self.lost and self.xid == GPU_LOST_XID):
            out.append(Taint(TAINT_XID, str(self.xid), "NoSchedule"))
        if self.recovery and not self.lost:
            out.append(Taint(TAINT_RECOVERY, RECOVERY_ACTIONS.get(self.recovery, str(self.recovery)), "NoSchedule"))
        return tuple(out)

    def state(self) -> tuple[Any, ...]:
        return (self.monitored, self.xid, self.lost, self.recovery)


class HealthMonitor:
    """Watches `uuids` through NVML in a thread; `start()`, then `stop()`."""

    def __init__(
        self,
        uuids: Sequence[str],
        on_change: Callable[[], None],
        *,
        probe_interval: float = 5.0,
        settle: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._gpus = {u: GpuHealth(u) for u in uuids}
        self._on_change = on_change
        self.probe_interval = probe_interval
        self.settle = 2 * probe_interval if settle is None else settle
        self._clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._recovery_field = True  # cleared when the driver lacks NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
        self.xids = Processed()  # XID events consumed (tests wait on them before asserting no change)
        self.probes = Processed()  # probe rounds done over every GPU
        self.watching = Processed()  # 1 once XID events are registered: what is injected now is seen

    # --- state ------------------------------------------------------------------------------------
    def taints(self) -> dict[str, tuple[Taint, ...]]:
        with self._lock:
            return {u: g.taints() for u, g in self._gpus.items() if g.taints()}

    def snapshot(self) -> list[tuple[str, bool | None, str]]:
        """(uuid, healthy, message) for every GPU; healthy None = not monitored."""
        with self._lock:
            return [(u, g.healthy, g.message) for u, g in self._gpus.items()]

    # --- thread -------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="hami-core-gpu-health", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with nvml.session():
                    self._watch()
                return
            except Exception as exc:  # NVML itself failed: everything is Unknown until it answers again
                log.exception("GPU health monitor failed; retrying")
                why = f"health monitor failed: {exc}"
                self._update_all(functools.partial(_unmonitored, why=why))
                if self._stop.wait(self.probe_interval):
                    return

    def _watch(self) -> None:
        handles: dict[str, Any] = {}
        by_address: dict[int | None, str] = {}
        for uuid in self._gpus:
            handle = nvml.call(pynvml.nvmlDeviceGetHandleByUUID, uuid, target=uuid)
            handles[uuid] = handle
            by_address[ctypes.cast(handle, ctypes.c_void_p).value] = uuid
        events = nvml.call(pynvml.nvmlEventSetCreate)
        try:
            for uuid, handle in handles.items():
                try:
                    nvml.call(pynvml.nvmlDeviceRegisterEvents, handle, pynvml.nvmlEventTypeXidCriticalError, events,
                              target=uuid)
                except nvml.NvmlError as exc:
                    log.warning("XID events unavailable for GPU; health Unknown", extra={"uuid": uuid, "error": str(exc)})
                    self._update(uuid, functools.partial(_unmonitored, why=f"NVML cannot report XID events: {exc}"))
                else:
                    self._update(uuid, _monitored)
            self.watching.add()
            self._loop(events, handles, by_address)
        finally:
            try:
                pynvml.nvmlEventSetFree(events)
            except pynvml.NVMLError as exc:
                log.warning("nvmlEventSetFree failed", extra={"error": str(exc)})

    def _loop(self, events: Any, handles: dict[str, Any], by_address: dict[int | None, str]) -> None:
        next_probe = self._clock()
        while not self._stop.is_set():
            wait_ms = max(0, int((next_probe - self._clock()) * 1000))
            try:
                data = pynvml.nvmlEventSetWait_v2(events, wait_ms)
            except pynvml.NVMLError as exc:
                if getattr(exc, "value", None) != pynvml.NVML_ERROR_TIMEOUT:
                    raise nvml.NvmlError("nvmlEventSetWait_v2", "", int(getattr(exc, "value", -1)), str(exc)) from None
            else:
                uuid = by_address.get(ctypes.cast(data.device, ctypes.c_void_p).value)
                if uuid is not None and data.eventType & pynvml.nvmlEventTypeXidCriticalError:
                    if self._xid(uuid, int(data.eventData)):
                        next_probe = self._clock()
                self.xids.add()
                continue
            for uuid, handle in handles.items():
                self._probe(uuid, handle)
            self.probes.add()
            next_probe = self._clock() + self.probe_interval

    def _xid(self, uuid: str, xid: int) -> bool:
        """Apply one XID event; True when the GPU should be probed at once."""
        what, action = classify(xid)
        log.warning("XID event", extra={"uuid": uuid, "xid": xid, "meaning": what, "action": action.value})
        if action is Action.IGNORE:
            return False
        if action is Action.PROBE:
            return True

        def taint(g: GpuHealth) -> None:
            g.xid = xid
            g.lost = g.lost or xid == GPU_LOST_XID
            g.last_event = self._clock()
            g.message = f"XID {xid}: {what}"

        self._update(uuid, taint)
        return True

    def _probe(self, uuid: str, handle: Any) -> None:
        try:
            if self._recovery_field:
                value = nvml.call(pynvml.nvmlDeviceGetFieldValues, handle, [pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION],
                                  target=uuid)[0]
                if value.nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED:
                    log.warning("NVML has no recovery-action field: XID taints stay until the daemon restarts")
                    self._recovery_field = False
                    return
                if value.nvmlReturn != pynvml.NVML_SUCCESS:
                    raise nvml.NvmlError("nvmlDeviceGetFieldValues", f"{uuid}, GPU_RECOVERY_ACTION",
                                         int(value.nvmlReturn), "field not read")
                action = int(value.value.uiVal)
            else:
                nvml.call(pynvml.nvmlDeviceGetUUID, handle, target=uuid)  # does the GPU still answer?
                action = None
        except nvml.NvmlError as exc:
            if exc.code == pynvml.NVML_ERROR_GPU_IS_LOST:
                self._update(uuid, lambda g: _lost(g, self._clock()))
                return
            raise
        self._update(uuid, lambda g: self._answered(g, action))

    def _answered(self, g: GpuHealth, action: int | None) -> None:
        """The GPU answered a probe; `action` is its recovery action (None: unknown)."""
        if action is None:
            g.lost = False if g.xid is None else g.lost
            return
        settled = self._clock() - g.last_event >= self.settle
        if action:
            g.recovery = action
            g.message = g.message or f"NVML recovery action: {RECOVERY_ACTIONS.get(action, action)}"
        elif settled and (g.xid is not None or g.lost or g.recovery):
            log.info("GPU healthy again (NVML reports no recovery action)", extra={"uuid": g.uuid})
            g.xid, g.lost, g.recovery, g.message = None, False, 0, ""

    # --- bookkeeping ----------------------------------------------------------------------------------
    def _update(self, uuid: str, change: Callable[[GpuHealth], None]) -> None:
        with self._lock:
            g = self._gpus[uuid]
            before = g.state()
            change(g)
            changed = g.state() != before
        if changed:
            self._notify()

    def _update_all(self, change: Callable[[GpuHealth], None]) -> None:
        for uuid in list(self._gpus):
            self._update(uuid, change)

    def _notify(self) -> None:
        try:
            self._on_change()
        except Exception:
            log.exception("health change callback failed")


def _monitored(g: GpuHealth) -> None:
    g.monitored = True
    if g.healthy:
        g.message = ""


def _unmonitored(g: GpuHealth, why: str) -> None:
    g.monitored = False
    if g.healthy is not False:
        g.message = why


def _lost(g: GpuHealth, now: float) -> None:
    if not g.lost:
        g.lost = True
        g.last_event = now
        g.message = "GPU has fallen off the bus (NVML: GPU is lost)"


def health_events(gpus: Mapping[str, nvml.Gpu], monitor: HealthWatch | None, mps: MpsDaemons,
                  mig_devices: Sequence[Device]) -> list[HealthEvent]:
    """Every shared GPU's health (by name, in minor order; healthy None: not monitored): a GPU
    whose MPS control daemon is being restarted is unhealthy, a MIG device is as healthy as its
    GPU. None at all while neither NVML nor MPS watches anything."""
    view = {u: (healthy, message) for u, healthy, message in (monitor.snapshot() if monitor else [])}
    if monitor is None and not mps.status():  # (the snapshot first: the order the locks are taken in)
        return []
    out = []
    for name, gpu in sorted(gpus.items(), key=lambda kv: kv[1].minor):
        healthy, message = view.get(gpu.uuid, (None, ""))
        if mps.healthy(gpu.uuid) is False:
            healthy, message = False, "MPS control daemon not answering; restarting it"
        out.append(HealthEvent(name, healthy, message))
    return out + [HealthEvent(d.name, *view.get(str(d.attributes["parentUUID"]), (None, ""))) for d in mig_devices]
