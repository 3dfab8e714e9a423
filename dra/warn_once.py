"""A warning given once per distinct trouble, for code that polls (watchdog readers, health
monitors): a device that stays broken is named in the log once, not at every poll.

The keys are kept in a bounded set: past `limit` distinct keys (troubles keyed by a PID or a
device a tenant can multiply), all are forgotten at once, so memory stays bounded and a trouble
that persists is named again, once.
"""

from __future__ import annotations

import logging
from typing import Any


class WarnOnce:
    """``warn(key, message, **extra)`` logs `message` on `log` the first time `key` is seen."""

    def __init__(self, log: logging.Logger, limit: int = 1024) -> None:
        self.log = log
        self.limit = limit
        self._seen: set[str] = set()

    def __call__(self, key: str, message: str, level: int = logging.WARNING, **extra: Any) -> None:
        """Log `message` unless `key` was logged before (`extra`: the record's structured fields)."""
        if key in self._seen:
            return
        if len(self._seen) >= self.limit:
            self._seen.clear()
        self._seen.add(key)
        self.log.log(level, message, extra=extra)

