"""The Hygon DCU driver passes the driver conformance suite (dra.testing.conformance), on fake DCUs."""

from __future__ import annotations

import pytest

from dra import Driver
from dra.testing.conformance import DriverConformance
from drivers.hygon_dcu.config import DcuConfig
from drivers.hygon_dcu.driver import HygonDcuDriver
from drivers.hygon_dcu.edits import hook_key

pytestmark = pytest.mark.cluster


class DcuKeys(DriverConformance):
    def device_keys(self, driver: Driver) -> set[str]:
        # libvhip keys a DCU by its PCI bus ID (what hipDeviceGetPCIBusId reports in the container)
        return {hook_key(str(d.attributes["resource.kubernetes.io/pciBusID"])) for d in driver.devices()}


class TestHygonDcuConformance(DcuKeys):
    driver_class = HygonDcuDriver
    fake = "k100-aix2"
    settings = {"health": "off"}
    sample_configs = [DcuConfig(), DcuConfig(preload="env", compute_limit=False)]


class TestHygonDcuConformanceWithHealth(DcuKeys):
    """Z100s, health polling on."""

    driver_class = HygonDcuDriver
    fake = "z100x2"
    settings = {"healthInterval": "0.5"}
    fault_points = ("prepare.after_hooks", "unprepare.after_hooks")
