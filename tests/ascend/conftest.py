"""Fixtures for the Ascend driver's tests: the stub DCMI built once, fake nodes activated per test.

`fake_npus(spec)` activates a fake-device profile or YAML file the way the driver's fake backend
does (stub libdcmi.so loaded, HOOKCORE_STUB_NPUS set, a sysfs laid out); the environment is
restored after the test, so the stub re-reads its NPUs at the next dcmi_init.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from driver_helpers import build_stub_libraries, isolated_env

from drivers.ascend import fake

STUB_ENV = ("HOOKCORE_STUB_NPUS", "HOOKCORE_STUB_DCMI_DRIVER", "HOOKCORE_STUB_DCMI_FAIL", "HOOKCORE_STUB_DCMI_STATE",
            "HOOKCORE_STUB_DCMI_PROCESSES")


@pytest.fixture(scope="session")
def stub_dcmi() -> Path:
    return build_stub_libraries() / "libdcmi.so"


@pytest.fixture
def clean_stub_env() -> Iterator[None]:
    with isolated_env(STUB_ENV):
        yield


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
