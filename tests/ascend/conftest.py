"""Fixtures for the Ascend driver's tests: the stub DCMI built once, fake nodes activated per test.

`fake_npus(spec)` activates a fake-device profile or YAML file the way the driver's fake backend
does (stub libdcmi.so loaded, HOOKCORE_STUB_NPUS set, a sysfs laid out); the environment is
restored after the test, so the stub re-reads its NPUs at the next dcmi_init.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import hookcore
from drivers.ascend import fake

ROOT = Path(__file__).resolve().parents[2]
STUB_ENV = ("HOOKCORE_STUB_NPUS", "HOOKCORE_STUB_DCMI_DRIVER", "HOOKCORE_STUB_DCMI_FAIL", "HOOKCORE_STUB_DCMI_STATE")


@pytest.fixture(scope="session")
def stub_dcmi() -> Path:
    proc = subprocess.run(["make", "-C", str(ROOT / "hookcore"), "-s", "libs"], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"make -C hookcore libs failed:\n{proc.stdout}\n{proc.stderr}", pytrace=False)
    return hookcore.stub_dir() / "libdcmi.so"


@pytest.fixture
def clean_stub_env() -> Iterator[None]:
    saved = {k: os.environ.pop(k) for k in STUB_ENV if k in os.environ}
    yield
    for k in STUB_ENV:
        os.environ.pop(k, None)
    os.environ.update(saved)


@pytest.fixture
def fake_npus(stub_dcmi: Path, clean_stub_env: None) -> Iterator[Callable[..., fake.FakeBackend]]:
    backends: list[fake.FakeBackend] = []

    def activate(spec: str = "910b3x8", node: str = "node-a") -> fake.FakeBackend:
        backend = fake.FakeBackend(fake.load(spec, node), stub_dcmi)
        backends.append(backend)
        return backend

    yield activate
    for b in backends:
        b.close()
