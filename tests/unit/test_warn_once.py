"""`dra.WarnOnce`: each trouble named once, in bounded memory."""

from __future__ import annotations

import logging

import pytest

import dra

log = logging.getLogger("test.warn_once")


def test_each_key_is_logged_once_with_its_fields(caplog: pytest.LogCaptureFixture) -> None:
    warn = dra.WarnOnce(log)
    with caplog.at_level(logging.INFO, logger=log.name):
        for _ in range(3):
            warn("npu-0", "NPU 0 unreadable", device="npu-0-0")
            warn("npu-1", "NPU 1 unreadable", level=logging.INFO, device="npu-1-0")
    assert [(r.levelno, r.getMessage(), getattr(r, "device", None)) for r in caplog.records] == [
        (logging.WARNING, "NPU 0 unreadable", "npu-0-0"), (logging.INFO, "NPU 1 unreadable", "npu-1-0")]


def test_past_its_limit_it_forgets_all_keys_at_once(caplog: pytest.LogCaptureFixture) -> None:
    """Keys a tenant can multiply (a PID each) cannot grow the set without bound: past the limit
    all are forgotten, so a trouble that persists is named once more."""
    warn = dra.WarnOnce(log, limit=3)
    with caplog.at_level(logging.WARNING, logger=log.name):
        for pid in (1, 2, 3, 1, 2, 3):
            warn(f"pid {pid}", f"pid {pid}")
        assert len(caplog.records) == 3
        warn("pid 4", "pid 4")  # the fourth key: the first three are forgotten
        warn("pid 1", "pid 1")
    assert [r.getMessage() for r in caplog.records] == ["pid 1", "pid 2", "pid 3", "pid 4", "pid 1"]
    assert len(warn._seen) <= 3
