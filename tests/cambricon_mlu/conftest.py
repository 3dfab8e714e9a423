"""Fixtures for the Cambricon MLU driver's tests: the stubs built once, the stubs' environment
kept from leaking between tests (each fake backend makes its own sMLU table unless one is named)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from driver_helpers import build_stub_libraries, fake_drivers, isolated_env

from drivers.cambricon_mlu.driver import CambriconMluDriver

STUB_ENV = ("HOOKCORE_STUB_MLUS", "HOOKCORE_STUB_CNDEV_DRIVER", "HOOKCORE_STUB_CNDEV_FAIL", "HOOKCORE_STUB_CNDEV_STATE",
            "HOOKCORE_STUB_CNDEV_SMLU", "HOOKCORE_STUB_CNDEV_PROCESSES")


@pytest.fixture(scope="session")
def stub_cndev() -> Path:
    return build_stub_libraries() / "libcndev.so"


@pytest.fixture
def clean_stub_env() -> Iterator[None]:
    with isolated_env(STUB_ENV):
        yield


@pytest.fixture
def driver(stub_cndev: Path, clean_stub_env: None) -> Iterator[Callable[..., CambriconMluDriver]]:
    """`driver(fake=..., settings=..., recorder=...)`: a driver set up on fake MLUs (mlu370-x8x8)."""
    yield from fake_drivers(CambriconMluDriver, "mlu370-x8x8")
