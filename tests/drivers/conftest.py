"""Fixtures of the driver conformance tests (one place for every driver): the stub libraries
built, and the stubs' environment a fake backend sets kept from the tests that run after."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from driver_helpers import build_stub_libraries


@pytest.fixture(scope="session", autouse=True)
def _stubs_built() -> None:
    build_stub_libraries()


@pytest.fixture(autouse=True)
def _stub_environment() -> Iterator[None]:
    """A fake backend describes its devices to the stubs in this process's environment; restore it
    after each test (a later test's stub would see these devices)."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("HOOKCORE_STUB_")}
    yield
    for k in [k for k in os.environ if k.startswith("HOOKCORE_STUB_")]:
        del os.environ[k]
    os.environ.update(saved)
