"""The Ascend driver passes the driver conformance suite (dra.testing.conformance), on fake NPUs."""

from __future__ import annotations

import pytest

from dra import Driver
from dra.testing.conformance import DriverConformance
from drivers.ascend.config import NpuConfig
from drivers.ascend.driver import AscendDriver
from drivers.ascend.edits import hook_key

pytestmark = pytest.mark.cluster


class AscendKeys(DriverConformance):
    def device_keys(self, driver: Driver) -> set[str]:
        # libvnpu keys an NPU by its physical ID (what a process in the container can observe)
        return {hook_key(int(d.attributes["physicalID"])) for d in driver.devices()}


class TestAscendConformance(AscendKeys):
    driver_class = AscendDriver
    fake = "910b3x2"
    settings = {"health": "off"}
    sample_configs = [NpuConfig(), NpuConfig(preload="env", compute_limit=False)]


class TestAscendConformanceOnA3Modules(AscendKeys):
    """Two chips per module (Atlas A3), health polling on."""

    driver_class = AscendDriver
    fake = "910cx2"
    settings = {"healthInterval": "0.5"}
    fault_points = ("prepare.after_hooks", "unprepare.after_hooks")
