"""hami-core-gpu on MIG GPUs passes the driver conformance suite (dra.testing.conformance): static
MIG devices, and dynamic ones whose instances a kill at any fault point must not leak: after
each kill test (prepare, unprepare, with kills between) the stub NVML's record has none left."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dra import Driver
from dra._runtime import faults
from dra.testing.conformance import NODE, DriverConformance, result
from drivers.hami_core_gpu.config import GpuConfig
from drivers.hami_core_gpu.driver import HamiCoreGpuDriver

pytestmark = pytest.mark.cluster
# MIG claims load no hook: the points on the hook's path (its config, its library set) are never passed
NO_HOOK_POINTS = tuple(p for p in faults.POINTS if p != "prepare.after_hooks" and not p.startswith("hookdir."))


def live_instances(record: Path) -> int:
    if not record.exists():
        return 0
    lines = record.read_text().splitlines()
    return sum(ln.startswith("gi+ ") for ln in lines) - sum(ln.startswith("gi- ") for ln in lines)


@pytest.fixture(autouse=True)
def _stub_environment(tmp_path: Path) -> Iterator[Path]:
    """Each test its own MIG partitioning; the fake's variables kept from the tests after these."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("HOOKCORE_STUB_")}
    record = tmp_path / "mig.state"
    os.environ["HOOKCORE_STUB_NVML_MIG"] = str(record)
    yield record
    for k in [k for k in os.environ if k.startswith("HOOKCORE_STUB_")]:
        del os.environ[k]
    os.environ.update(saved)


class TestStaticMigConformance(DriverConformance):
    driver_class = HamiCoreGpuDriver
    fake = "h200x2-mig"
    settings = {"health": "off", "mig": "static"}
    sample_configs = [GpuConfig()]
    fault_points = NO_HOOK_POINTS


class TestDynamicMigConformance(DriverConformance):
    driver_class = HamiCoreGpuDriver
    fake = "h200x2-mig"
    settings = {"health": "off", "mig": "dynamic"}
    sample_configs = [GpuConfig()]
    fault_points = NO_HOOK_POINTS

    def results(self, driver: Driver) -> list[dict[str, Any]]:
        """Placements that fit together (one claim cannot hold every placement of a GPU): a
        4g.71gb at slice 0 and a 3g.71gb at slice 4 on each GPU."""
        names = [d.name for d in driver.devices() if d.name.endswith(("-mig-4g71gb-0", "-mig-3g71gb-4"))]
        assert len(names) == 4
        return [result(n, request=f"r{i}", driver=driver.name, pool=NODE) for i, n in enumerate(names)]

    @pytest.fixture(autouse=True)
    def _no_instance_left(self, _stub_environment: Path, request: pytest.FixtureRequest) -> Iterator[None]:
        """The kill test ends each round with an unprepare: then every instance must be gone."""
        yield
        if request.node.name.startswith("test_a_kill_at_each_fault_point"):
            assert live_instances(_stub_environment) == 0, _stub_environment.read_text()
