"""The example driver passes the driver conformance suite (dra.testing.conformance)."""

from __future__ import annotations

import pytest

from dra.testing.conformance import DriverConformance
from drivers.example.driver import ExampleConfig, ExampleDriver

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
