"""Every driver passes the driver conformance suite (dra.testing.conformance), each on its fake
devices in the configurations that change what it writes: the example driver (counted devices,
a fake profile), hami-core-gpu on fake H200s (toolkit and self-contained CDI), ascend on fake
910B3s and Atlas A3 modules, hygon-dcu on fake K100_AIs and Z100s, and cambricon-mlu on fake MLU370-X8s
(sMLU: no hook, the vendor's instances hold the shares) and MLU590s (whole)."""

from __future__ import annotations

import pytest

from dra import Driver
from dra.testing.conformance import DriverConformance
from drivers.ascend.config import NpuConfig
from drivers.ascend.driver import AscendDriver
from drivers.ascend.edits import hook_key
from drivers.cambricon_mlu.config import MluConfig
from drivers.cambricon_mlu.driver import CambriconMluDriver
from drivers.example.driver import ExampleConfig, ExampleDriver
from drivers.hami_core_gpu.config import GpuConfig
from drivers.hami_core_gpu.driver import HamiCoreGpuDriver
from drivers.hygon_dcu import edits as dcu_edits
from drivers.hygon_dcu.config import DcuConfig
from drivers.hygon_dcu.driver import HygonDcuDriver

pytestmark = pytest.mark.cluster


class TestExampleDriverConformance(DriverConformance):
    driver_class = ExampleDriver
    settings = {"count": "2", "memory": "8Gi"}
    sample_configs = [ExampleConfig(), ExampleConfig(mode="exclusive", log_level="debug")]


class TestExampleDriverFromAFakeProfile(DriverConformance):
    """The same driver with its devices from a fake-device description (``--fake``)."""

    driver_class = ExampleDriver
    fake = ("uuid=GPU-0a000000-0000-4000-8000-000000000001,memory=4Gi;"
            "uuid=GPU-0a000000-0000-4000-8000-000000000002,memory=24Gi")
    settings = {"enforce": "true"}
    fault_points = ("prepare.after_hooks", "unprepare.after_hooks")


class TestHamiCoreGpuConformance(DriverConformance):
    driver_class = HamiCoreGpuDriver
    fake = "h200x2"
    settings = {"health": "off"}  # no monitor thread in the suite's forked kubelet calls
    sample_configs = [GpuConfig(), GpuConfig(preload="env", compute_limit=False)]


class TestHamiCoreGpuSelfContained(DriverConformance):
    """The same with the driver's own device nodes and driver files in the CDI spec."""

    driver_class = HamiCoreGpuDriver
    fake = "a100-40gx4"
    settings = {"health": "off", "cdiMode": "self-contained"}
    sample_configs = [GpuConfig(preload="file")]


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


class DcuKeys(DriverConformance):
    def device_keys(self, driver: Driver) -> set[str]:
        # libvhip keys a DCU by its PCI bus ID (what hipDeviceGetPCIBusId reports in the container)
        return {dcu_edits.hook_key(str(d.attributes["resource.kubernetes.io/pciBusID"])) for d in driver.devices()}


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


class TestCambriconMluConformance(DriverConformance):
    """sMLU: each share an instance of the vendor's driver, made at prepare; no hook."""

    driver_class = CambriconMluDriver
    fake = "mlu370-x8x2"
    settings = {"health": "off"}
    sample_configs = [MluConfig(), MluConfig(compute_limit=False)]


class TestCambriconMluWholeConformance(DriverConformance):
    """Whole MLUs (``sharing: whole``), health polling on."""

    driver_class = CambriconMluDriver
    fake = "mlu590x2"
    settings = {"sharing": "whole", "healthInterval": "0.5"}
    fault_points = ("prepare.after_driver", "unprepare.after_driver")
