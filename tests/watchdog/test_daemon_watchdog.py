"""`dra run hami-core-gpu --fake h200x8 --watchdog taint` against the real control plane: a process on a
GPU in none of the driver's claims taints that device in the published slice (DRADeviceTaints)
until it exits, the Event reaches the Node, and the daemon's /metrics count it."""

from __future__ import annotations

from pathlib import Path

import pytest
from driver_helpers import assert_watchdog_taints_until_exit
from kubernetes import client

from dra_dev.cluster.controlplane import ControlPlane

pytestmark = pytest.mark.cluster
DRIVER = "hami-core-gpu.project-hami.io"


def test_taint_on_the_device_until_the_process_exits(cluster: ControlPlane, api_client: client.ApiClient,
                                                      stub_nvml: Path) -> None:
    assert_watchdog_taints_until_exit(cluster, api_client, "hami-core-gpu", DRIVER,
                                      ["--fake", "h200x8", "--set", "health=off"], "STUB_NVML_PROCESSES",
                                      "hami-gpu-3", 3)
