"""The DRA resource health service (``v1alpha1`` and ``v1`` ``DRAResourceHealth``).

One `HealthMonitor` thread consumes the driver's blocking iterator of full snapshots
(`Driver.health()`) and keeps the latest one; every kubelet stream (`NodeWatchResources`, one
per kubelet connection and API version) gets the full device list at once, again on every
change, and again every `resend_interval` seconds without change, because kubelet reads a device
whose last report is older than its health timeout (30 s by default) as Unknown. Each resend
carries a fresh `last_updated_time`: the monitor is alive and the status still stands.

When the driver's iterator raises or ends, every device is reported Unknown (with the reason)
and the iterator is asked for again after `restart_delay`.
"""

from __future__ import annotations

import logging
import threading
import time
import types
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import grpc

from dra.driver import HealthEvent

log = logging.getLogger(__name__)

HealthSource = Callable[[], Iterable[Sequence[HealthEvent]] | None]
"""A callable like `Driver.health`: returns a blocking iterator of full snapshots, or None."""

KUBELET_DEFAULT_HEALTH_TIMEOUT_S = 30
MAX_MESSAGE_CHARS = 1024


def truncate_message(message: str) -> str:
    """Kubelet's limit: at most 1024 characters, longer ones cut to 1021 plus ``...``."""
    return message if len(message) <= MAX_MESSAGE_CHARS else message[: MAX_MESSAGE_CHARS - 3] + "..."


def check_resend_interval(resend_interval: float, device_timeout_s: int = 0) -> None:
    """Raise ValueError unless resends come before kubelet reads the devices as Unknown."""
    limit = device_timeout_s if device_timeout_s > 0 else KUBELET_DEFAULT_HEALTH_TIMEOUT_S
    if not 0 < resend_interval < limit:
        raise ValueError(
            f"health resend interval {resend_interval:g} s must be positive and below the device "
            f"health timeout ({limit} s), or kubelet reads devices as Unknown between resends"
        )


class HealthMonitor:
    """Holds the latest full health snapshot of the driver and wakes streams on change."""

    def __init__(self, source: HealthSource, *, restart_delay: float = 5.0) -> None:
        self._source = source
        self._restart_delay = restart_delay
        self._cond = threading.Condition()
        self._version = 0  # bumped on every snapshot and on kick-less changes
        self._snapshot: list[HealthEvent] | None = None
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, first: Iterable[Sequence[HealthEvent]]) -> None:
        """Consume `first` (already obtained from the source) in a daemon thread."""
        self._thread = threading.Thread(target=self._run, args=(first,), name="dra-health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Wake every stream so it ends; the consumer thread ends at its next snapshot."""
        self._stopped.set()
        self.kick()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def kick(self) -> None:
        """Wake all waiting streams (e.g. a stream's client went away)."""
        with self._cond:
            self._cond.notify_all()

    def publish(self, events: Sequence[HealthEvent]) -> None:
        """Replace the snapshot (the full list of devices) and wake the streams."""
        with self._cond:
            self._snapshot = list(events)
            self._version += 1
            self._cond.notify_all()

    def current(self) -> tuple[int, list[HealthEvent] | None]:
        with self._cond:
            return self._version, self._snapshot

    def wait_newer(self, version: int, timeout: float) -> tuple[int, list[HealthEvent] | None]:
        """Wait until a snapshot newer than `version` exists, `timeout` passes or stop/kick."""
        with self._cond:
            if self._version <= version and not self._stopped.is_set():
                self._cond.wait(timeout)
            return self._version, self._snapshot

    def _run(self, it: Iterable[Sequence[HealthEvent]] | None) -> None:
        while it is not None and not self._stopped.is_set():
            reason = "the driver's health stream ended"
            try:
                for events in it:
                    if self._stopped.is_set():
                        return
                    self.publish(events)
            except Exception as exc:
                reason = f"the driver's health stream failed: {exc}"
                log.exception("health monitor failed")
            else:
                log.error("driver health stream ended")
            _, snap = self.current()
            if snap:
                self.publish([HealthEvent(e.device, None, reason) for e in snap])
            if self._stopped.wait(self._restart_delay):
                return
            try:
                it = self._source()
            except Exception:
                log.exception("restarting the driver's health stream failed")
                it = None
        if it is None and not self._stopped.is_set():
            log.error("driver health stream not restartable; devices stay Unknown")


class HealthFeed:
    """A `HealthSource` fed by pushes (`DriverContext.report_health`): each `push` is a full
    snapshot; the iterator yields every newest snapshot once and ends at `close`."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._version = 0
        self._latest: list[HealthEvent] | None = None
        self._closed = False

    def push(self, events: Sequence[HealthEvent]) -> None:
        with self._cond:
            self._latest = list(events)
            self._version += 1
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def __call__(self) -> Iterator[list[HealthEvent]]:
        return self._iterate()

    def _iterate(self) -> Iterator[list[HealthEvent]]:
        seen = 0
        while True:
            with self._cond:
                while self._version == seen and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                seen, snapshot = self._version, self._latest
            assert snapshot is not None
            yield snapshot


class HealthServicer:
    """`NodeWatchResources` for one API version (`pb` is that version's message module);
    every device is reported in `pool_name` (the framework's pool: drivers never name it)."""

    def __init__(
        self,
        monitor: HealthMonitor,
        pb: types.ModuleType,
        *,
        pool_name: str,
        resend_interval: float = 10.0,
        device_timeout_s: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        check_resend_interval(resend_interval, device_timeout_s)
        self.monitor = monitor
        self.pb = pb
        self.pool_name = pool_name
        self.resend_interval = resend_interval
        self.device_timeout_s = device_timeout_s
        self.clock = clock

    def _status(self, healthy: bool | None) -> int:
        if healthy is None:
            return int(self.pb.HealthStatus.Value("UNKNOWN"))
        return int(self.pb.HealthStatus.Value("HEALTHY" if healthy else "UNHEALTHY"))

    def response(self, events: Sequence[HealthEvent]) -> Any:
        now = int(self.clock())
        return self.pb.NodeWatchResourcesResponse(
            devices=[
                self.pb.DeviceHealth(
                    device=self.pb.DeviceIdentifier(pool_name=self.pool_name, device_name=e.device),
                    health=self._status(e.healthy),
                    last_updated_time=now,
                    health_check_timeout_seconds=self.device_timeout_s,
                    message=truncate_message(e.message),
                )
                for e in events
            ]
        )

    def NodeWatchResources(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        api = self.pb.DESCRIPTOR.package
        if not context.add_callback(self.monitor.kick):
            return
        log.info("kubelet health stream opened", extra={"api": api})
        sent_version = 0
        try:
            while context.is_active() and not self.monitor.stopped:
                version, snap = self.monitor.current()
                if snap is not None:
                    sent_version = version
                    yield self.response(snap)
                self.monitor.wait_newer(sent_version, self.resend_interval)
        finally:
            log.info("kubelet health stream closed", extra={"api": api})
