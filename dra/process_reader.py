"""The skeleton of a driver's process list for the watchdog, where the vendor's library answers
one query per device (DCMI, CNDev): a driver subclasses `DeviceProcessReader`, names the query
and says how to read one device; the skeleton does what every such reader must.

- A library without the query is named in one warning at start, and `read` answers None: the
  watchdog stays idle instead of calling a missing function every second.
- A device whose query raises the library's error is skipped, with one warning until it answers
  again and one line when it does (the health monitor taints a lost one); the others are read.
- `warn_once` (a `dra.WarnOnce`) names each distinct trouble of the answers once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import ClassVar, Generic, TypeVar

from dra.driver import DeviceProcess
from dra.library import VendorLibrary
from dra.warn_once import WarnOnce

D = TypeVar("D")


class DeviceProcessReader(Generic[D]):
    """Reads the processes on `devices` through `library`, one query per device; `read()` once per
    poll. A subclass sets the class attributes and `device_processes`."""

    query: ClassVar[str] = ""
    """The library function the reader needs; checked once at start."""
    missing: ClassVar[str] = ""
    """The warning of a library without it: what the watchdog then misses and what to install."""
    check: ClassVar[str] = ""
    """The vendor's tool to run on the node when a device's query fails (``npu-smi info``)."""
    noun: ClassVar[str] = "device"

    def __init__(self, library: VendorLibrary, devices: Sequence[D], log: logging.Logger, warned_max: int = 1024) -> None:
        self.library = library
        self.devices = list(devices)
        self.log = log
        self.warn_once = WarnOnce(log, warned_max)
        self._failing: set[str] = set()  # keys of devices skipped until they answer again
        self.unsupported = self._missing_query()

    def _missing_query(self) -> str | None:
        """Why the query cannot be used (the library lacks it), or None."""
        try:
            self.library.function(self.query)
        except self.library.error as exc:
            self.log.warning(self.missing, extra={"library": self.library.path, "error": str(exc)})
            return str(exc)
        return None

    def read(self) -> list[DeviceProcess] | None:
        """The processes on every device now; None where the library has no query."""
        if self.unsupported is not None:
            return None
        out: list[DeviceProcess] = []
        for dev in self.devices:
            name, key = self.describe(dev)
            try:
                got = self.device_processes(dev)
            except self.library.error as exc:
                if key not in self._failing:
                    self._failing.add(key)
                    self.log.warning(f"{self.noun}'s processes unreadable; skipped until it answers; check "
                                     f"`{self.check}` on the node", extra={"device": name, "uuid": key,
                                                                           "error": str(exc)})
                continue
            if key in self._failing:
                self._failing.discard(key)
                self.log.info(f"{self.noun}'s processes readable again", extra={"device": name, "uuid": key})
            out.extend(got)
        return out

    def describe(self, dev: D) -> tuple[str, str]:
        """(its published name, a key that stays the device's: its UUID)."""
        raise NotImplementedError

    def device_processes(self, dev: D) -> list[DeviceProcess]:
        """The processes on `dev`; raises the library's error where its query fails."""
        raise NotImplementedError
