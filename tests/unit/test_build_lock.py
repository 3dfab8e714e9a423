"""The binary cache's build lock: a second builder waits for the first, a dead holder frees it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from dra_dev.cluster.binaries import build_lock

HOLD = """
import sys, time
from pathlib import Path
from dra_dev.cluster.binaries import build_lock
with build_lock(Path(sys.argv[1]), progress=lambda m: None):
    print("holding", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _holder(root: Path, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(root), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
    return proc


def test_a_second_builder_waits_for_the_first(tmp_path: Path) -> None:
    holder = _holder(tmp_path, 1.0)
    said: list[str] = []
    started = time.monotonic()
    with build_lock(tmp_path, progress=said.append):
        waited = time.monotonic() - started
    holder.wait()
    assert waited >= 0.5, waited
    assert said and "waiting for another build" in said[0] and str(tmp_path / ".build.lock") in said[0]


def test_a_killed_holder_does_not_block_the_next_build(tmp_path: Path) -> None:
    holder = _holder(tmp_path, 60)
    holder.kill()
    holder.wait()
    started = time.monotonic()
    with build_lock(tmp_path, progress=lambda m: None):
        assert time.monotonic() - started < 5
