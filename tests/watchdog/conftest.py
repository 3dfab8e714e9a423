"""Fixtures of the watchdog's tests, from `watchdog_rig.py`: the root-only `rig` (skipped with the
reason elsewhere, failed under CI=true), `fake_rig` (processes in a made-up /proc), a static program."""

from __future__ import annotations

from watchdog_rig import fake_rig, rig, static_sleeper, stub_nvml

__all__ = ["fake_rig", "rig", "static_sleeper", "stub_nvml"]
