"""Fixtures of the watchdog's tests: the rig of `watchdog_rig.py` (root only: skipped with the
reason elsewhere, failed under CI=true) and a static program."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from ci_gate import skip_or_fail
from driver_helpers import build_stub_libraries, isolated_env
from watchdog_rig import STUB_ENV, Rig, _unavailable, static_program


@pytest.fixture(scope="session")
def static_sleeper(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return static_program(tmp_path_factory.mktemp("static"))


@pytest.fixture(scope="session")
def stub_nvml() -> Path:
    return build_stub_libraries() / "libnvidia-ml.so.1"


@pytest.fixture
def rig(stub_nvml: Path) -> Iterator[Rig]:
    why = _unavailable()
    skip_or_fail(why and f"the watchdog rig needs root: {why}")
    stub = stub_nvml
    with isolated_env(STUB_ENV):
        with tempfile.TemporaryDirectory(prefix="dra-wd-", dir="/tmp") as work:
            r = Rig(Path(work), stub)
            try:
                yield r
            finally:
                r.close()
