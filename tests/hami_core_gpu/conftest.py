"""Fixtures for the NVIDIA driver's tests: the stub NVML built once, fake nodes activated per test.

`fake_node(spec)` activates a fake-device profile or YAML file the way the driver's fake backend
does (stub libnvidia-ml loaded, HOOKCORE_STUB_DEVICES set, a sysfs laid out); the environment is
restored after the test, so the stub re-reads its devices at the next nvmlInit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from driver_helpers import build_stub_libraries, isolated_env

from drivers.hami_core_gpu import fake


@pytest.fixture(scope="session")
def stub_nvml() -> Path:
    return build_stub_libraries() / "libnvidia-ml.so.1"


STUB_ENV = ("HOOKCORE_STUB_DEVICES", "HOOKCORE_STUB_NVML_DRIVER", "HOOKCORE_STUB_NVML_CUDA",
            "HOOKCORE_STUB_NVML_FAIL", "HOOKCORE_STUB_NVML_EVENTS")


@pytest.fixture
def fake_node(stub_nvml: Path) -> Iterator[Callable[..., fake.FakeBackend]]:
    with isolated_env(STUB_ENV):
        backends: list[fake.FakeBackend] = []

        def activate(spec: str = "h200x8", node: str = "node-a") -> fake.FakeBackend:
            backend = fake.FakeBackend(fake.load(spec, node), stub_nvml)
            backends.append(backend)
            return backend

        yield activate
        for b in backends:
            b.close()
