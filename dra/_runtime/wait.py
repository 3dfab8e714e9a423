"""The one poll loop: call a probe until it returns something truthy, or time out.

Every "wait until X" in the framework, the test kit and the dev rig goes through `until`, so the
deadline arithmetic, the last value seen and the error text are written once. The clock and
the sleep are parameters for fake-clock tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(TimeoutError):
    """`until` gave up; `last` is the probe's last result (for the caller's message)."""

    def __init__(self, message: str, last: object) -> None:
        super().__init__(message)
        self.last = last


def until(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    interval: float = 0.05,
    what: str = "the condition",
    error: Callable[[str], Exception] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """The first truthy result of `probe()`, called at least once and then every `interval`
    seconds until `timeout` seconds have passed. On timeout raise ``error(message)`` (default
    `WaitTimeout`), the message naming `what`, the timeout and the last value seen."""
    deadline = clock() + timeout
    while True:
        got = probe()
        if got:
            return got
        if clock() >= deadline:
            message = f"timed out after {timeout:g} s waiting for {what} (last: {got!r})"
            raise error(message) if error is not None else WaitTimeout(message, got)
        sleep(interval)
