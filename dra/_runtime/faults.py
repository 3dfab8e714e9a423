"""Fault points for crash-safety tests: kill the process with SIGKILL at a named step.

Production code calls ``fault("prepare.after_preparing")`` between durable steps. Nothing
happens unless the environment variable ``DRA_FAULT_POINT`` was set when this module was
imported (or `configure` was called); the disabled path is one global read.

``DRA_FAULT_POINT`` forms:
  ``NAME``          kill at the first hit of point NAME;
  ``NAME@N``        kill at the N-th hit of point NAME (1-based);
  ``*@N``           kill at the N-th hit of any point;
  ``random:P[:S]``  kill at each hit with probability P (0 < P <= 1), seeded with S.
"""

from __future__ import annotations

import os
import random
import signal
import threading

ENV = "DRA_FAULT_POINT"

POINTS: tuple[str, ...] = (
    "prepare.start",
    "prepare.after_fetch",
    "prepare.after_preparing",
    "prepare.after_driver",
    "prepare.after_hooks",
    "prepare.after_cdi",
    "prepare.after_prepared",
    "unprepare.start",
    "unprepare.after_driver",
    "unprepare.after_cdi",
    "unprepare.after_hooks",
    "unprepare.after_checkpoint",
    "atomic.before_rename",
    "atomic.after_rename",
    "hookdir.after_lib",
    "hookdir.after_set",
    "hookdir.after_switch",
)
"""Every point the framework places, in the order a prepare/unprepare passes them."""


class _Spec:
    def __init__(self, text: str) -> None:
        self.text = text
        self.name: str | None = None
        self.nth = 1
        self.prob = 0.0
        self.rng: random.Random | None = None
        self.hits = 0
        self.lock = threading.Lock()
        if text.startswith("random:"):
            parts = text.split(":")
            self.prob = float(parts[1])
            if not 0 < self.prob <= 1:
                raise ValueError(f"{ENV}={text!r}: probability must be in (0, 1]")
            self.rng = random.Random(parts[2] if len(parts) > 2 else None)
            return
        name, _, nth = text.partition("@")
        if name != "*" and name not in POINTS:
            raise ValueError(f"{ENV}={text!r}: unknown fault point {name!r}; known: {', '.join(POINTS)}")
        self.name = None if name == "*" else name
        self.nth = int(nth) if nth else 1
        if self.nth < 1:
            raise ValueError(f"{ENV}={text!r}: the hit count after '@' must be >= 1")

    def hit(self, name: str) -> None:
        with self.lock:
            if self.rng is not None:
                fire = self.rng.random() < self.prob
            elif self.name is None or self.name == name:
                self.hits += 1
                fire = self.hits == self.nth
            else:
                fire = False
        if fire:
            os.kill(os.getpid(), signal.SIGKILL)


_spec: _Spec | None = None


def configure(text: str | None) -> None:
    """(Re)arm from a spec string (as in ``DRA_FAULT_POINT``); None or "" disarms."""
    global _spec
    _spec = _Spec(text) if text else None


def fault(name: str) -> None:
    """Kill this process with SIGKILL here when the armed spec says so; no-op when disarmed."""
    if _spec is not None:
        _spec.hit(name)


configure(os.environ.get(ENV))
