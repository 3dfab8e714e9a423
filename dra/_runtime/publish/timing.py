"""Time and retry policy for the sync loop, injectable so tests can run it without waiting.

`Clock` is the only way the publisher reads time or sleeps; `Backoff` is exponential with
jitter and a ceiling, reset after every success.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""
        ...

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        """Block until `event` is set (True) or `timeout` seconds pass (False)."""
        ...


class SystemClock:
    """Real time."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        return event.wait(timeout)


@dataclasses.dataclass
class Backoff:
    """Exponential backoff: `initial`, times `factor` per failure, capped at `maximum` seconds.

    `jitter` spreads each delay by up to that fraction (both ways) so that many daemons hit by one
    API outage do not retry in lockstep.
    """

    initial: float = 0.2
    factor: float = 2.0
    maximum: float = 5.0
    jitter: float = 0.1
    rng: random.Random = dataclasses.field(default_factory=random.Random, repr=False)
    failures: int = 0

    def next_delay(self) -> float:
        """The delay before the next attempt; counts one more failure."""
        base = min(self.maximum, self.initial * self.factor**self.failures)
        self.failures += 1
        spread = base * self.jitter
        return max(0.0, min(self.maximum, base + self.rng.uniform(-spread, spread)))

    def reset(self) -> None:
        self.failures = 0
