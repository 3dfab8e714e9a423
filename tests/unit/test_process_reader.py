"""dra.DeviceProcessReader: what every per-device process reader does, on a library double."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import dra
from dra import DeviceProcess

log = logging.getLogger("test.process_reader")


class Error(dra.LibraryError):
    pass


class Library:
    """The two things the skeleton uses of a `dra.VendorLibrary`: `function` and `error`."""

    error = Error
    path = "/lib/libvendor.so"

    def __init__(self, has_query: bool = True) -> None:
        self.has_query = has_query
        self.failing: set[str] = set()

    def function(self, name: str) -> Any:
        if not self.has_query:
            raise Error(name, "", -1, "no such function")
        return object()


class Reader(dra.DeviceProcessReader[str]):
    query = "vendorProcesses"
    missing = "the vendor library has no process query: install a newer driver"
    check = "vendor-smi"
    noun = "XPU"

    def describe(self, dev: str) -> tuple[str, str]:
        return f"xpu-{dev}", f"XPU-{dev}"

    def device_processes(self, dev: str) -> list[DeviceProcess]:
        lib: Any = self.library
        if dev in lib.failing:
            raise Error(self.query, dev, 7, "device lost")
        return [DeviceProcess(f"xpu-{dev}", f"XPU-{dev}", 100 + int(dev), 1 << 20)]


def test_a_failing_device_is_skipped_with_one_warning_until_it_answers(caplog: pytest.LogCaptureFixture) -> None:
    lib = Library()
    reader = Reader(lib, ["0", "1"], log)  # type: ignore[arg-type]
    lib.failing.add("1")
    with caplog.at_level(logging.INFO, logger=log.name):
        assert [p.pid for p in reader.read() or []] == [100]
        assert [p.pid for p in reader.read() or []] == [100]
        lib.failing.clear()
        assert [p.pid for p in reader.read() or []] == [100, 101]
    said = [(r.levelno, r.getMessage(), r.__dict__.get("device")) for r in caplog.records]
    assert said == [
        (logging.WARNING, "XPU's processes unreadable; skipped until it answers; check `vendor-smi` on the node", "xpu-1"),
        (logging.INFO, "XPU's processes readable again", "xpu-1")]


def test_a_library_without_the_query_leaves_the_watchdog_idle(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=log.name):
        reader = Reader(Library(has_query=False), ["0"], log)  # type: ignore[arg-type]
        assert reader.read() is None and reader.read() is None
    assert [r.getMessage() for r in caplog.records] == [Reader.missing]
