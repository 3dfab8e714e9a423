"""The daemon's log set-up: structured lines, to whatever stderr is when a record is written."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator

import pytest

from dra._runtime import logging as dra_logging


@pytest.fixture
def root_logger() -> Iterator[logging.Logger]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield root
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_lines_carry_the_extra_fields(root_logger: logging.Logger, monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    dra_logging.setup("json", "info")
    logging.getLogger("dra.test").info("claim prepared", extra={"claim": "uid-1", "device": "gpu-0"})
    line = json.loads(out.getvalue().splitlines()[-1])
    assert (line["msg"], line["claim"], line["device"], line["level"]) == ("claim prepared", "uid-1", "gpu-0", "info")


def test_a_swapped_and_closed_stderr_does_not_break_logging(root_logger: logging.Logger,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Set up under one stderr that is later closed (a test's capture, a supervisor's redirect): the
    next records go to the stderr of the moment, with no "Logging error" traceback."""
    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    dra_logging.setup("text", "info")
    first.close()
    monkeypatch.setattr(sys, "stderr", second)
    logging.getLogger("dra.test").warning("driver stream failed", extra={"driver": "x"})
    assert "driver stream failed driver=x" in second.getvalue()
    assert "Logging error" not in second.getvalue()
