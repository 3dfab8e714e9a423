"""`dra run hami-core-gpu --fake h200x8 --watchdog taint` against the real control plane: a process on a
GPU in none of the driver's claims taints that device in the published slice (DRADeviceTaints)
until it exits, the Event reaches the Node, and the daemon's /metrics count it; on a MIG node
(``--fake h200x8-mig``, static MIG) the same for a process in a MIG device, which is tainted alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from driver_helpers import assert_watchdog_taints_until_exit, isolated_env
from kubernetes import client

from dra_dev.cluster.controlplane import ControlPlane

pytestmark = pytest.mark.cluster
DRIVER = "hami-core-gpu.project-hami.io"


def test_taint_on_the_device_until_the_process_exits(cluster: ControlPlane, api_client: client.ApiClient,
                                                      stub_nvml: Path) -> None:
    assert_watchdog_taints_until_exit(cluster, api_client, "hami-core-gpu", DRIVER,
                                      ["--fake", "h200x8", "--set", "health=off"], "STUB_NVML_PROCESSES",
                                      "hami-gpu-3", 3)


def test_taint_on_the_mig_device_until_the_process_exits(cluster: ControlPlane, api_client: client.ApiClient,
                                                         stub_nvml: Path) -> None:
    """The fake node's own MIG state (a new file per node: the static layout is cut fresh, GPU 0's
    3g.71gb at slice 0 first, so GPU instance 1, compute instance 0); its 2g.35gb stays untainted."""
    with isolated_env(["HOOKCORE_STUB_NVML_MIG"]):
        assert_watchdog_taints_until_exit(cluster, api_client, "hami-core-gpu", DRIVER,
                                          ["--fake", "h200x8-mig", "--set", "mig=static", "--set", "health=off"],
                                          "STUB_NVML_PROCESSES", "hami-gpu-0-mig-3g71gb-0", "0/1/0",
                                          other="hami-gpu-0-mig-2g35gb-4")
