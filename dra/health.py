"""Device health for a driver's monitor: what the skeleton asks of one (`HealthWatch`), a count a
test waits on (`Processed`), and the one polled monitor (`PolledHealth`).

Most vendor libraries answer "how is this device now?" and nothing more, so their drivers poll:
one thread asks every device each interval, keeps the last answer by device UUID, and calls
`on_change` when any device's state changed. `PolledHealth` is that loop; a vendor's subclass
supplies only `ask(device)` (read this device's health, as a record of its own: whether it is
healthy, the message kubelet shows, its taints and what counts as a change) and `unpolled(device)`
(the record before the first answer).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar, Generic, Protocol, TypeVar

from dra.driver import Taint


class HasUuid(Protocol):
    """A discovered device: the health monitor and the hook know it by UUID."""

    @property
    def uuid(self) -> str: ...


class HealthWatch(Protocol):
    """What the skeleton needs of a vendor's health monitor (keyed by device UUID)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def taints(self) -> Mapping[str, tuple[Taint, ...]]: ...

    def snapshot(self) -> list[tuple[str, bool | None, str]]: ...


class Processed:
    """A count of the work a health monitor's thread has finished (events consumed, polls or
    probes done), so a test waits for evidence that what it injected was handled before it
    asserts that nothing happened, instead of sleeping and hoping."""

    def __init__(self) -> None:
        self._count = 0
        self._cond = threading.Condition()

    @property
    def count(self) -> int:
        with self._cond:
            return self._count

    def add(self, n: int = 1) -> None:
        with self._cond:
            self._count += n
            self._cond.notify_all()

    def wait(self, count: int, timeout: float = 10.0) -> bool:
        """Whether `count` were done within `timeout` seconds."""
        with self._cond:
            return self._cond.wait_for(lambda: self._count >= count, timeout)


class DeviceHealth(Protocol):
    """One device's health as a vendor's `PolledHealth.ask` answers it."""

    @property
    def healthy(self) -> bool | None:
        """False: unhealthy; None: not known (a failed query is not a fault of the device)."""
        ...

    @property
    def message(self) -> str: ...

    def taints(self) -> tuple[Taint, ...]: ...

    def state(self) -> object:
        """What counts as a change: two answers of one state are the same health, whatever their
        messages say (the last message is kept, and no change is reported)."""
        ...


D = TypeVar("D", bound=HasUuid)
H = TypeVar("H", bound=DeviceHealth)


class PolledHealth(Generic[D, H]):
    """Polls `ask` for every device each `interval` seconds, keyed by device UUID; `on_change()`
    runs after a poll in which any device's `state()` changed. A `HealthWatch`: `start` polls once
    (the first answer is there before the first publish) and then from a daemon thread, which
    logs a failed poll and retries at the next interval; `taints()` and `snapshot()` give the
    current state; `poll()` is one round, for tests."""

    noun: ClassVar[str] = "device"
    """What a device is called in the log ("NPU health changed")."""
    thread_name: ClassVar[str] = "health"

    def __init__(self, devices: Sequence[D], on_change: Callable[[], None], interval: float = 5.0) -> None:
        self._devices = list(devices)
        self._on_change = on_change
        self._interval = interval
        self._lock = threading.Lock()
        self._state: dict[str, H] = {d.uuid: self.unpolled(d) for d in self._devices}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._log = logging.getLogger(type(self).__module__)  # the vendor's logger, as its own loop had
        self.polls = Processed()  # polls done (tests wait on one after a change before asserting none)

    # --- what only the vendor knows -------------------------------------------------------------
    def ask(self, device: D) -> H:
        """`device`'s health now; a failed query is an answer too (healthy None, with the reason)."""
        raise NotImplementedError

    def unpolled(self, device: D) -> H:
        """`device`'s record before the first poll."""
        raise NotImplementedError

    def log_fields(self, device: D) -> Mapping[str, object]:
        """What the log names `device` by besides its UUID (an index, a logic ID)."""
        return {}

    # --- the loop -------------------------------------------------------------------------------
    def start(self) -> None:
        self.poll()  # the first answer is there before the first publish
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
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
                self._log.exception("health poll failed")

    def poll(self) -> bool:
        """Ask every device once; True (and `on_change()`) when any device's state changed."""
        changed = False
        for device in self._devices:
            new = self.ask(device)
            with self._lock:
                if new.state() != self._state[device.uuid].state():
                    changed = True
                    self._log.warning(f"{self.noun} health changed", extra={
                        "uuid": device.uuid, **self.log_fields(device), "healthy": new.healthy, "health": new.message})
                self._state[device.uuid] = new
        if changed:
            self._on_change()
        self.polls.add()
        return changed

    def taints(self) -> dict[str, tuple[Taint, ...]]:
        with self._lock:
            return {u: h.taints() for u, h in self._state.items() if h.taints()}

    def snapshot(self) -> list[tuple[str, bool | None, str]]:
        with self._lock:
            return [(u, h.healthy, h.message) for u, h in self._state.items()]
