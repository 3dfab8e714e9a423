"""MLU health from CNDev, polled: problems become taints and health reports.

One thread asks ``cndevGetCardHealthState`` of every MLU each interval (what Cambricon's device
plugin's health check asks). CNDev answers a health flag, the device's state (good or in problem)
and the MLU driver's state:

- device good and driver running: healthy;
- device in problem: unhealthy, taint ``cambricon-mlu.project-hami.io/health=in-problem``;
- driver not running (booting, resetting, a boot or reset error, unknown): unhealthy, taint
  ``cambricon-mlu.project-hami.io/health=driver-<state>`` (e.g. ``driver-reset-error``);
- a failed query: Unknown (not tainted: nothing is known to be wrong), with the reason.

Taints use NoSchedule: running pods stay, new claims are not allocated there. On every change
`on_change` is called; `taints()` and `snapshot()` give the current state.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence

from dra import Processed, Taint
from drivers.cambricon_mlu.cndev import DRIVER_RUNNING, Cndev, CndevError, Mlu
from drivers.cambricon_mlu.devices import DRIVER_NAME

log = logging.getLogger(__name__)

TAINT_HEALTH = f"{DRIVER_NAME}/health"
DRIVER_STATES = {0: "early-inited", 1: "bring-up", 2: "booting", 3: "late-init", 4: "running", 5: "boot-error",
                 6: "reset", 7: "reset-error", 8: "unknown"}


@dataclasses.dataclass(frozen=True)
class MluHealth:
    uuid: str
    problem: str | None = None  # the taint value; None: healthy (or not known)
    known: bool = False
    message: str = "not polled yet"

    @property
    def healthy(self) -> bool | None:
        return None if not self.known else self.problem is None

    def taints(self) -> tuple[Taint, ...]:
        return (Taint(TAINT_HEALTH, self.problem, "NoSchedule"),) if self.problem else ()


class HealthMonitor:
    """Polls CNDev health for `mlus`; `on_change()` runs after every change of any MLU's state."""

    def __init__(self, cndev: Cndev, mlus: Sequence[Mlu], on_change: Callable[[], None], interval: float = 5.0) -> None:
        self._cndev = cndev
        self._mlus = list(mlus)
        self._on_change = on_change
        self._interval = interval
        self._lock = threading.Lock()
        self._state = {m.uuid: MluHealth(m.uuid) for m in mlus}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.polls = Processed()  # polls done (tests wait on one after a change before asserting none)

    def start(self) -> None:
        self.poll()  # the first answer is there before the first publish
        self._thread = threading.Thread(target=self._run, name="cambricon-mlu-health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.poll()
            except Exception:  # never let the monitor die silently; the next poll retries
                log.exception("health poll failed")

    def poll(self) -> bool:
        """Ask every MLU once; True (and `on_change()`) when anything changed."""
        changed = False
        for mlu in self._mlus:
            new = self._ask(mlu)
            with self._lock:
                if new != self._state[mlu.uuid]:
                    changed = True
                    log.warning("MLU health changed", extra={"uuid": mlu.uuid, "index": mlu.index,
                                                             "healthy": new.healthy, "health": new.message})
                self._state[mlu.uuid] = new
        if changed:
            self._on_change()
        self.polls.add()
        return changed

    def _ask(self, mlu: Mlu) -> MluHealth:
        try:
            h = self._cndev.health(mlu.index, mlu.target)
        except CndevError as exc:
            return MluHealth(mlu.uuid, message=f"health unknown: {exc}")
        driver = DRIVER_STATES.get(int(h.driverState), f"state-{int(h.driverState)}")
        if int(h.deviceState) != 1:
            return MluHealth(mlu.uuid, "in-problem", True, f"the MLU is in problem (CNDev health {int(h.health)},"
                                                            f" driver {driver})")
        if int(h.driverState) != DRIVER_RUNNING:
            return MluHealth(mlu.uuid, f"driver-{driver}", True, f"the MLU driver is not running: {driver}")
        return MluHealth(mlu.uuid, None, True, "")

    def taints(self) -> dict[str, tuple[Taint, ...]]:
        with self._lock:
            return {u: h.taints() for u, h in self._state.items() if h.taints()}

    def snapshot(self) -> list[tuple[str, bool | None, str]]:
        with self._lock:
            return [(u, h.healthy, h.message) for u, h in self._state.items()]
