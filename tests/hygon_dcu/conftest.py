"""Fixtures for the Hygon DCU driver's tests: the stub ROCm SMI built once, fake nodes activated per test.

`fake_dcus(spec)` activates a fake-device profile or YAML file the way the driver's fake backend
does (stub librocm_smi64.so loaded, HOOKCORE_STUB_HIP_DEVICES set, a sysfs laid out); the
environment is restored after the test, so the stub re-reads its devices at the next rsmi_init.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from driver_helpers import build_stub_libraries, isolated_env

from drivers.hygon_dcu import fake

STUB_ENV = ("HOOKCORE_STUB_HIP_DEVICES", "HOOKCORE_STUB_RSMI_DRIVER", "HOOKCORE_STUB_RSMI_FAIL",
            "HOOKCORE_STUB_RSMI_STATE", "HOOKCORE_STUB_RSMI_PROCESSES")


@pytest.fixture(scope="session")
def stub_rsmi() -> Path:
    return build_stub_libraries() / "librocm_smi64.so"


@pytest.fixture
def clean_stub_env() -> Iterator[None]:
    with isolated_env(STUB_ENV):
        yield


@pytest.fixture
def fake_dcus(stub_rsmi: Path, clean_stub_env: None) -> Iterator[Callable[..., fake.FakeBackend]]:
    backends: list[fake.FakeBackend] = []

    def activate(spec: str = "k100-aix8", node: str = "node-a") -> fake.FakeBackend:
        backend = fake.FakeBackend(fake.load(spec, node), stub_rsmi)
        backends.append(backend)
        return backend

    yield activate
    for b in backends:
        b.close()
