"""The cross-process serialization lock of a plugin instance: flock on ``serialize.lock``.

With rolling updates two instances of a driver (two pods) run on one node and kubelet may
prepare a claim through one and unprepare it through the other. State shared between them
lives in files in the plugin data dir; every read-modify-write of that state must hold this
lock. Usage::

    lock = SerializeLock(paths.lock_file)
    with lock:                      # blocks until no other thread or process holds it
        ...load state, act, store state...
    with lock.acquire(timeout=40):  # raises LockTimeout after 40 s
        ...

Semantics: each acquisition opens the lock file and takes an exclusive ``flock`` on its own
open file description, so the lock excludes other processes AND other threads of this process
(including other `SerializeLock` objects on the same path). It is NOT reentrant: acquiring it
again in a thread that holds it deadlocks (or times out). The kernel drops the lock when the
holder dies (also on SIGKILL), so a crash never leaves it held. The file itself is never
removed (removing it would let two holders lock different inodes).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

from dra._runtime.fsutil import LockTimeout, lock_file, unlock_file

__all__ = ["LockTimeout", "SerializeLock"]


class SerializeLock:
    """An flock-based mutex on `path` (created with its parent dir when missing)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._local = threading.local()  # fd held by the `with lock:` form, per thread

    @contextlib.contextmanager
    def acquire(self, timeout: float | None = None) -> Iterator[None]:
        """Hold the lock for the `with` block; `timeout` None waits forever."""
        fd = self._lock(timeout)
        try:
            yield
        finally:
            unlock_file(fd)

    def __enter__(self) -> None:
        self._local.fd = self._lock(None)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        fd, self._local.fd = self._local.fd, None
        unlock_file(fd)

    def _lock(self, timeout: float | None) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return lock_file(self.path, timeout=timeout)
