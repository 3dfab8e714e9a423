"""The fake `h200x8` profile against the slice the driver published on a real H200.

`tests/data/h200-slice.json` is what `bench/hami_core_gpu_h200.py` wrote on the GPU machine (the
real NVML, the real driver, the framework's encoder). The fake profile must publish the same
device shape: every attribute the real GPU has, with the same type, the same model values
(product, brand, architecture, compute capability) and the same capacities and request
policies. Identity and placement (UUID, PCI address, PCIe root, NUMA node, minor) differ by
nature and are only checked for form; driver versions belong to the node's install, not the GPU.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from ci_gate import skip_or_fail

from dra._runtime.publish.desired import desired_pool, slice_object
from drivers.hami_core_gpu import devices, nvml

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "h200-slice.json"
MODEL = ("type", "productName", "brand", "architecture", "cudaComputeCapability")
PER_NODE = ("uuid", "minor", "index", "pcieBusID", "resource.kubernetes.io/pciBusID", "resource.kubernetes.io/pcieRoot",
            "numaNode", "driverVersion", "cudaDriverVersion")


@pytest.fixture
def real() -> dict[str, Any]:
    skip_or_fail(None if FIXTURE.exists() else f"{FIXTURE} is missing: run `python3 bench/hami_core_gpu_h200.py --out"
                 " $OUT` on the H200 and commit $OUT/h200-slice.json there")
    return dict(json.loads(FIXTURE.read_text()))


def fake_slice(fake_node) -> dict[str, Any]:
    backend = fake_node("h200x8", "gpu-node")
    inv = nvml.discover(backend.sysfs)
    return slice_object(desired_pool(devices.DRIVER_NAME, "gpu-node", devices.to_devices(inv)), 0, 1, "uid")


def test_the_fixture_is_a_slice_of_this_driver(real: dict[str, Any]) -> None:
    assert real["kind"] == "ResourceSlice" and real["spec"]["driver"] == devices.DRIVER_NAME
    assert real["spec"]["devices"], "the H200 machine published no GPU"
    for d in real["spec"]["devices"]:
        assert re.fullmatch(r"hami-gpu-\d+", d["name"])
        assert re.fullmatch(r"GPU-[0-9a-f-]{36}", d["attributes"]["uuid"]["string"])
        assert re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d", d["attributes"]["pcieBusID"]["string"])
        assert d["allowMultipleAllocations"] is True


def test_fake_h200x8_publishes_what_a_real_h200_publishes(real: dict[str, Any], fake_node) -> None:
    ours = fake_slice(fake_node)["spec"]["devices"]
    assert len(ours) == 8
    for want in real["spec"]["devices"]:
        got = ours[0]
        missing = set(want["attributes"]) - set(got["attributes"])
        assert not missing, f"the fake lacks attributes the real GPU has: {sorted(missing)}"
        for name, value in want["attributes"].items():
            assert set(value) == set(got["attributes"][name]), f"{name}: type {set(value)} vs fake {set(got['attributes'][name])}"
        for name in MODEL:
            assert got["attributes"][name] == want["attributes"][name], name
        unknown = set(want["attributes"]) - set(MODEL) - set(PER_NODE)
        assert not unknown, f"attributes this test does not know how to compare: {sorted(unknown)}"
        assert got["capacity"] == want["capacity"]
