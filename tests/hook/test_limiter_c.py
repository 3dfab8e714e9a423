"""The limiter's arithmetic in C (hookcore/core/tests/test_limiter.c), fed synthetic numbers: the
clock elasticity a strict cap learns (hookcore/core/elastic.h) converges, holds its prior without
evidence, ignores batches another tenant inflated, stays bounded and moves by damped steps; the
priority board's marks (forged, torn, far-ahead and truncated boards read as no high claim); plain
and under ASan/UBSan. No clock is read, so nothing here depends on the host's load."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.hook.conftest import BUILD, make

EXPECTED = ["elastic_converges", "elastic_prior", "elastic_contention", "elastic_bounded", "elastic_damped",
            "limiter_cost", "board"]


@pytest.mark.parametrize("variant", ["test_limiter", "test_limiter_asan"])
def test_limiter_c_suite(variant: str) -> None:
    make(f"build/tests/{variant}")
    proc = subprocess.run([str(BUILD / "tests" / variant)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all limiter tests passed" in proc.stdout
    for name in EXPECTED:
        assert re.search(rf"^ok {name}\b", proc.stdout, re.M), f"test {name} did not run:\n{proc.stdout}"
    assert "runtime error" not in proc.stderr and "ERROR: AddressSanitizer" not in proc.stderr
