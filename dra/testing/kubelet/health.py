"""A `NodeWatchResources` stream (DRAResourceHealth) read on a thread, one device list per message."""

from __future__ import annotations

import queue
import threading
from types import TracebackType
from typing import Any

import grpc

from dra.testing.kubelet.results import DeviceHealth

_HEALTH_NAMES = {0: "Unknown", 1: "Healthy", 2: "Unhealthy"}


class HealthWatch:
    """A `NodeWatchResources` stream; `next()` returns each full device list as it arrives."""

    def __init__(self, call: Any) -> None:
        self._call = call
        self._queue: queue.Queue[list[DeviceHealth] | BaseException | None] = queue.Queue()
        self._thread = threading.Thread(target=self._read, name="harness-health", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for resp in self._call:
                self._queue.put(
                    [
                        DeviceHealth(
                            pool_name=d.device.pool_name,
                            device_name=d.device.device_name,
                            health=_HEALTH_NAMES.get(d.health, "Unknown"),
                            last_updated_time=d.last_updated_time,
                            health_check_timeout_seconds=d.health_check_timeout_seconds,
                            message=d.message,
                        )
                        for d in resp.devices
                    ]
                )
            self._queue.put(None)
        except grpc.RpcError as exc:
            self._queue.put(exc)

    def next(self, timeout: float = 10.0) -> list[DeviceHealth]:
        """The next message; raises TimeoutError, the stream's RpcError, or EOFError at its end."""
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no health message within {timeout:g} s") from None
        if item is None:
            self._queue.put(None)
            raise EOFError("health stream ended")
        if isinstance(item, BaseException):
            self._queue.put(item)
            raise item
        return item

    def close(self) -> None:
        self._call.cancel()

    def __enter__(self) -> HealthWatch:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
