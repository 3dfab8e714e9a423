"""`dra run ascend --fake 910b3x8` against the real control plane: the published slice, health
injected through the stub DCMI becoming device taints and kubelet health, the shipped examples."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from driver_helpers import running_daemon, slice_devices
from kube_helpers import create_node, unique, wait_for
from kubernetes import client

from dra_dev.cluster.controlplane import ControlPlane

pytestmark = pytest.mark.cluster
DRIVER = "ascend.project-hami.io"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "ascend"


@pytest.fixture
def fake_npu_node(cluster: ControlPlane, api_client: client.ApiClient, stub_dcmi: Path) -> Iterator[dict[str, Any]]:
    node = unique("npu")
    create_node(api_client, node)
    with tempfile.TemporaryDirectory(prefix="dra-npu-", dir="/tmp") as work:
        state = Path(work) / "dcmi-state"
        state.write_text("")
        with running_daemon(cluster, "ascend", node, Path(work), ["--fake", "910b3x8", "--set", "healthInterval=0.1"],
                            env={"HOOKCORE_STUB_DCMI_STATE": str(state)}) as (daemon, harness):
            yield {"node": node, "daemon": daemon, "harness": harness, "state": state}


def test_the_fake_node_publishes_eight_910b3(api_client: client.ApiClient, fake_npu_node: dict[str, Any]) -> None:
    devices = wait_for(lambda: slice_devices(api_client, fake_npu_node["node"], DRIVER) or None, 30, what="the NPU slice")
    assert sorted(d["name"] for d in devices) == [f"npu-{i}-0" for i in range(8)]
    d5 = next(d for d in devices if d["name"] == "npu-5-0")
    a = d5["attributes"]
    assert a["type"] == {"string": "HAMivNPUCore"} and a["model"] == {"string": "Ascend910B"}
    assert a["index"] == {"int": 5} and a["physicalID"] == {"int": 5} and a["chipName"] == {"string": "910B3"}
    assert a["uuid"]["string"].startswith("NPU-") and a["numaNode"] == {"int": 1}
    assert a["resource.kubernetes.io/pcieRoot"] == {"string": "pci0000:00"}
    assert d5["capacity"]["memory"]["value"] == "64Gi" and d5["allowMultipleAllocations"] is True
    assert d5["capacity"]["cores"]["requestPolicy"]["validRange"] == {"min": "1", "max": "100", "step": "1"}


def test_a_critical_alarm_taints_the_npu_and_reaches_kubelet_until_it_clears(
    api_client: client.ApiClient, fake_npu_node: dict[str, Any]
) -> None:
    node, state, harness = fake_npu_node["node"], fake_npu_node["state"], fake_npu_node["harness"]
    devices = wait_for(lambda: slice_devices(api_client, node, DRIVER) or None, 30, what="the NPU slice")
    uuid = next(d for d in devices if d["name"] == "npu-3-0")["attributes"]["uuid"]["string"]
    harness.wait_for_plugin(DRIVER)
    with harness.watch_health(driver=DRIVER) as watch:

        def health_of(device: str) -> str | None:
            msg = watch.next(timeout=15)
            return next((h.health for h in msg if h.device_name == device), None)

        wait_for(lambda: health_of("npu-3-0") == "Healthy" or None, 30, interval=0, what="npu-3-0 healthy")
        with state.open("a") as f:
            f.write(f"health {uuid} 3\nerrors {uuid} 80e01801\n")

        def tainted() -> list[dict[str, Any]] | None:
            d = next(d for d in slice_devices(api_client, node, DRIVER) if d["name"] == "npu-3-0")
            return d.get("taints") or None

        taints = wait_for(tainted, 30, what="the health taint in the ResourceSlice")
        assert [(t["key"], t.get("value"), t["effect"]) for t in taints] == [(f"{DRIVER}/health", "critical", "NoSchedule")]
        wait_for(lambda: health_of("npu-3-0") == "Unhealthy" or None, 30, interval=0, what="Unhealthy in kubelet's stream")
        assert not any(d.get("taints") for d in slice_devices(api_client, node, DRIVER) if d["name"] != "npu-3-0")
        with state.open("a") as f:
            f.write(f"health {uuid} 0\nerrors {uuid}\n")
        wait_for(lambda: None if tainted() else True, 30, what="the taint lifted")
        wait_for(lambda: health_of("npu-3-0") == "Healthy" or None, 30, interval=0, what="Healthy again")


@pytest.mark.parametrize("path", sorted(p for p in EXAMPLES.glob("*.yaml") if p.name != "demo.yaml"), ids=lambda p: p.name)
def test_example_is_accepted_by_the_api_server(cluster: ControlPlane, path: Path) -> None:
    assert path.read_text().startswith("# "), f"{path.name} must open with a comment saying what it shows"
    kubectl = [str(cluster.bins.path("kubectl")), "--kubeconfig", str(cluster.kubeconfig)]
    proc = subprocess.run([*kubectl, "apply", "--dry-run=server", "-n", "default", "-f", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
