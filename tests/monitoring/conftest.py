"""Fixtures of the monitoring tests: a real Prometheus and promtool (built from their Go module
once per machine, like the Kubernetes binaries: `dra cluster build` builds them) and helm."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dra_dev.cluster.binaries import build_helm
from dra_dev.cluster.prometheus import build_prometheus


def _say(message: str) -> None:
    print(message, file=sys.stderr)


@pytest.fixture(scope="session")
def prometheus_bin() -> Path:
    """The directory of prometheus and promtool."""
    return build_prometheus(progress=_say)


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    return build_helm(progress=_say)


@pytest.fixture(scope="session")
def stub_nvml() -> Path:
    """The stub NVML (hookcore/stub), built with the hook libraries."""
    from driver_helpers import build_stub_libraries

    return build_stub_libraries() / "libnvidia-ml.so.1"
