"""`dra run hami-core-gpu --fake h200x8 --watchdog taint` against the real control plane: a process on a
GPU in none of the driver's claims taints that device in the published slice (DRADeviceTaints)
until it exits, the Event reaches the Node, and the daemon's /metrics count it."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from driver_helpers import running_daemon, slice_devices
from kube_helpers import create_node, unique, wait_for
from kubernetes import client

from dra_dev.cluster.controlplane import ControlPlane

pytestmark = pytest.mark.cluster
DRIVER = "hami-core-gpu.project-hami.io"
TAINT = f"{DRIVER}/watchdog"


def taints(api: client.ApiClient, node: str, device: str) -> list[dict[str, Any]] | None:
    devices = {d["name"]: d for d in slice_devices(api, node, DRIVER)}
    return devices[device].get("taints") or [] if device in devices else None


def test_taint_on_the_device_until_the_process_exits(cluster: ControlPlane, api_client: client.ApiClient,
                                                      stub_nvml: Path) -> None:
    node = unique("wdd")
    create_node(api_client, node)
    core = client.CoreV1Api(api_client)
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        with tempfile.TemporaryDirectory(prefix="dra-wdd-", dir="/tmp") as work:
            procs = Path(work) / "nvml-processes"
            procs.write_text("")
            with running_daemon(cluster, "hami-core-gpu", node, Path(work),
                                ["--fake", "h200x8", "--set", "health=off", "--watchdog", "taint"],
                                env={"STUB_NVML_PROCESSES": str(procs)}) as (daemon, _harness):
                wait_for(lambda: taints(api_client, node, "hami-gpu-3") is not None or None, 30, what="the slice")
                assert taints(api_client, node, "hami-gpu-3") == []
                procs.write_text(f"3 {sleeper.pid} {1 << 30}\n")
                got = wait_for(lambda: taints(api_client, node, "hami-gpu-3") or None, 15, 0.1, "the watchdog taint")
                assert [(t["key"], t["value"], t["effect"]) for t in got] == [(TAINT, "unheld", "NoSchedule")]
                assert taints(api_client, node, "hami-gpu-2") == []
                event = wait_for(lambda: [e for e in core.list_namespaced_event("default").items
                                          if e.involved_object.name == node and e.reason == "ProcessUnheld"] or None,
                                 15, 0.1, "the Event on the Node")
                assert f"process {sleeper.pid}" in event[0].message and "tainted" in event[0].message
                _, metrics = daemon.get("/metrics")
                assert 'dra_watchdog_verdicts_total{driver="hami-core-gpu.project-hami.io",verdict="unheld"} 1.0' in metrics
                sleeper.kill()
                sleeper.wait()
                wait_for(lambda: taints(api_client, node, "hami-gpu-3") == [] or None, 15, 0.1, "the taint lifted")
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
        core.delete_node(node)
