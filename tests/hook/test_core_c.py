"""The core's C test programs, built with the hookcore Makefile and run here.

test_core covers the parser table, config files and aliases, reserve/release, 8 processes hammering
one quota, kill -9 at random points, threads, a slot taken over mid-reservation, PID reuse, fork
(own slot; orphaned child), ledger validation, the creation race and its bounded lock, dormancy
and the config file's authority (see its header); the limiter's arithmetic fed synthetic numbers:
the clock elasticity a strict cap learns (hookcore/core/elastic.h) converges, holds its prior without
evidence, ignores batches another tenant inflated, stays bounded and moves by damped steps, and the
priority board's marks (forged, torn, far-ahead and truncated boards read as no high claim). It runs
plain, under ASan + UBSan and under ThreadSanitizer (which fails on any data race it sees, e.g. the
fail-closed state read torn).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.hook.conftest import CoreTests

EXPECTED = ["parse_mem", "parse_sm", "config", "config_sources", "reserve_release", "two_handles",
            "lost_slot_race", "track", "limiter_books", "limiter_cost", "elastic_converges", "elastic_prior",
            "elastic_contention", "elastic_bounded", "elastic_damped", "board", "validation", "pid_reuse",
            "creation_race", "sigkill", "concurrent", "threads", "global", "global_file", "orphan_child"]


@pytest.mark.parametrize("variant", ["plain", "asan", "tsan"])
def test_core_c_suite(core_tests: CoreTests, tmp_path: Path, variant: str) -> None:
    binary = {"plain": core_tests.test_core, "asan": core_tests.test_core_asan,
              "tsan": core_tests.test_core_tsan}[variant]
    env = {**os.environ, "TSAN_OPTIONS": "halt_on_error=1 exitcode=66"}
    proc = subprocess.run([str(binary), str(tmp_path)], capture_output=True, text=True, timeout=300, env=env)
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
    assert "WARNING: ThreadSanitizer" not in proc.stderr
    assert list(tmp_path.iterdir()) == []  # every test removed its ledger


def test_fuzz_config_one_million(core_tests: CoreTests) -> None:
    proc = subprocess.run([str(core_tests.fuzz_config), "1000000", "7"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = re.search(r"fuzz_config: (\d+) inputs, (\d+) accepted as memory", proc.stdout)
    assert m and int(m.group(1)) == 1_000_000 and int(m.group(2)) > 10_000, proc.stdout
