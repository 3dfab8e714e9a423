"""hami-core-gpu passes the driver conformance suite (dra.testing.conformance), on fake H200s."""

from __future__ import annotations

import pytest

from dra.testing.conformance import DriverConformance
from drivers.hami_core_gpu.config import GpuConfig
from drivers.hami_core_gpu.driver import HamiCoreGpuDriver

pytestmark = pytest.mark.cluster


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
