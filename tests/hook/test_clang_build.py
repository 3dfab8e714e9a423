"""The core's C tests built with clang beside the default cc (gcc): `make -C hookcore check CC=clang`.

A second compiler catches what one lets through (its own -Wall -Wextra warnings, made errors here
by WERROR, and undefined behaviour its sanitizers instrument differently). Plain and ASan/UBSan
builds of test_core and the config fuzzer, and every library of the hook, in build/clang. Where
clang is missing the test skips, except under CI=true, where it fails: the Makefile's c-deps
target installs it (root + apt), and `make test` runs that target first.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from ci_gate import gate

from tests.hook.conftest import BUILD, make

CLANG = shutil.which("clang")
_gate = gate(None if CLANG else "clang missing (make c-deps installs it: root + apt)")

SAN_ENV = {"ASAN_OPTIONS": "detect_leaks=0 halt_on_error=1 exitcode=66",
           "UBSAN_OPTIONS": "halt_on_error=1 exitcode=66 print_stacktrace=1"}


@pytest.fixture(scope="module")
def clang_build() -> str:
    assert CLANG is not None  # the gate failed or skipped each test without it
    out = BUILD / "clang"
    make(f"BUILD={out}", f"CC={CLANG}", "libs", "core-tests")
    return str(out)


@pytest.mark.parametrize("program", ["test_core", "test_core_asan"])
def test_core_tests_pass_built_with_clang(clang_build: str, program: str) -> None:
    proc = subprocess.run([f"{clang_build}/tests/{program}"], env={**os.environ, **SAN_ENV}, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and "all core tests passed" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-4000:]


def test_config_fuzzer_built_with_clang(clang_build: str) -> None:
    proc = subprocess.run([f"{clang_build}/tests/fuzz_config", "50000"], env={**os.environ, **SAN_ENV},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "no crash" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-4000:]


def test_it_really_is_clang(clang_build: str) -> None:
    """The build directory was compiled by clang, not by a cc that ignored CC=."""
    assert f"{CLANG} " in (BUILD / "clang" / ".cflags").read_text()
