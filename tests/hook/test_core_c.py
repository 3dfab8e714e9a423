"""The core's C test programs, built with the hookcore Makefile and run here.

test_core covers the parser table, reserve/release, 8 processes hammering one quota, kill -9 at
random points, threads, PID reuse, fork (own slot; orphaned child), ledger validation, the
creation race and its bounded lock (see its header); it runs plain and under ASan + UBSan.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.hook.conftest import CoreTests

EXPECTED = ["parse_mem", "parse_sm", "config", "reserve_release", "two_handles", "track", "validation",
            "pid_reuse", "creation_race", "sigkill", "concurrent", "threads", "global", "orphan_child"]


@pytest.mark.parametrize("variant", ["plain", "asan"])
def test_core_c_suite(core_tests: CoreTests, tmp_path: Path, variant: str) -> None:
    binary = core_tests.test_core if variant == "plain" else core_tests.test_core_asan
    proc = subprocess.run([str(binary), str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all core tests passed" in proc.stdout
    for name in EXPECTED:
        assert re.search(rf"^ok {name}\b", proc.stdout, re.M), f"test {name} did not run:\n{proc.stdout}"
    m = re.search(r"ok concurrent: (\d+) procs, max held (\d+) of (\d+), (\d+) admitted, (\d+) refused",
                  proc.stdout)
    assert m, proc.stdout
    procs, held, limit, admitted, refused = map(int, m.groups())
    assert procs == 8 and held <= limit and admitted > 1000 and refused > 0
    m = re.search(r"ok threads: max held (\d+) of (\d+)", proc.stdout)
    assert m and int(m.group(1)) <= int(m.group(2)), proc.stdout
    assert "ERROR: AddressSanitizer" not in proc.stderr and "runtime error" not in proc.stderr
    assert list(tmp_path.iterdir()) == []  # every test removed its ledger


def test_fuzz_config_one_million(core_tests: CoreTests) -> None:
    proc = subprocess.run([str(core_tests.fuzz_config), "1000000", "7"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = re.search(r"fuzz_config: (\d+) inputs, (\d+) accepted as memory", proc.stdout)
    assert m and int(m.group(1)) == 1_000_000 and int(m.group(2)) > 10_000, proc.stdout
