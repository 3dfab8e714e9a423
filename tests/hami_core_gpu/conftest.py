"""Fixtures for the NVIDIA driver's tests: the stub NVML built once, fake nodes activated per test.

`fake_node(spec)` activates a fake-device profile or YAML file the way the driver's fake backend
does (stub libnvidia-ml loaded, HOOKCORE_STUB_DEVICES set, a sysfs laid out); the environment is
restored after the test, so the stub re-reads its devices at the next nvmlInit.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import hookcore
from drivers.hami_core_gpu import fake

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def stub_nvml() -> Path:
    proc = subprocess.run(["make", "-C", str(ROOT / "hookcore"), "-s", "libs"], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"make -C hookcore libs failed:\n{proc.stdout}\n{proc.stderr}", pytrace=False)
    return hookcore.stub_dir() / "libnvidia-ml.so.1"


STUB_ENV = ("HOOKCORE_STUB_DEVICES", "HOOKCORE_STUB_NVML_DRIVER", "HOOKCORE_STUB_NVML_CUDA",
            "HOOKCORE_STUB_NVML_FAIL", "HOOKCORE_STUB_NVML_EVENTS")


@pytest.fixture
def fake_node(stub_nvml: Path) -> Iterator[Callable[..., fake.FakeBackend]]:
    saved = {k: os.environ.pop(k) for k in STUB_ENV if k in os.environ}
    backends: list[fake.FakeBackend] = []

    def activate(spec: str = "h200x8", node: str = "node-a") -> fake.FakeBackend:
        backend = fake.FakeBackend(fake.load(spec, node), stub_nvml)
        backends.append(backend)
        return backend

    yield activate
    for b in backends:
        b.close()
    for k in STUB_ENV:
        os.environ.pop(k, None)
    os.environ.update(saved)
