"""`dra run hami-core-gpu --fake h200x8` against the real control plane: the published slice, and
health events injected through the stub NVML becoming device taints and kubelet health."""

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
DRIVER = "hami-core-gpu.project-hami.io"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "hami-core-gpu"


@pytest.fixture
def fake_gpu_node(cluster: ControlPlane, api_client: client.ApiClient, stub_nvml: Path) -> Iterator[dict[str, Any]]:
    node = unique("gpu")
    create_node(api_client, node)
    with tempfile.TemporaryDirectory(prefix="dra-gpu-", dir="/tmp") as work:
        events = Path(work) / "nvml-events"
        events.write_text("")
        try:
            with running_daemon(cluster, "hami-core-gpu", node, Path(work),
                                ["--fake", "h200x8", "--set", "healthProbeInterval=0.1"],
                                env={"HOOKCORE_STUB_NVML_EVENTS": str(events)}) as (daemon, harness):
                yield {"node": node, "daemon": daemon, "harness": harness, "events": events}
        finally:
            client.CoreV1Api(api_client).delete_node(node)  # its slices go with it (owned by the Node)


def test_the_fake_node_publishes_eight_h200s(api_client: client.ApiClient, fake_gpu_node: dict[str, Any]) -> None:
    devices = wait_for(lambda: slice_devices(api_client, fake_gpu_node["node"], DRIVER) or None, 30, what="the GPU slice")
    assert sorted(d["name"] for d in devices) == [f"hami-gpu-{i}" for i in range(8)]
    d0 = next(d for d in devices if d["name"] == "hami-gpu-0")
    a = d0["attributes"]
    assert a["type"] == {"string": "hami-gpu"} and a["productName"] == {"string": "NVIDIA H200"}
    assert a["resource.kubernetes.io/pcieRoot"] == {"string": "pci0000:15"} and a["numaNode"] == {"int": 0}
    assert a["driverVersion"] == {"version": "580.159.4"} and a["cudaDriverVersion"] == {"version": "13.0.0"}
    assert d0["capacity"]["memory"]["value"] == "143771Mi" and d0["allowMultipleAllocations"] is True
    assert d0["capacity"]["cores"]["requestPolicy"]["validRange"]["min"] == "1"


def test_an_xid_taints_the_device_and_reaches_kubelet_until_the_gpu_is_reset(
    api_client: client.ApiClient, fake_gpu_node: dict[str, Any]
) -> None:
    node, events, harness = fake_gpu_node["node"], fake_gpu_node["events"], fake_gpu_node["harness"]
    devices = wait_for(lambda: slice_devices(api_client, node, DRIVER) or None, 30, what="the GPU slice")
    uuid = next(d for d in devices if d["name"] == "hami-gpu-3")["attributes"]["uuid"]["string"]
    harness.wait_for_plugin(DRIVER)
    with harness.watch_health(driver=DRIVER) as watch:

        def health_of(device: str) -> str | None:
            msg = watch.next(timeout=15)
            return next((h.health for h in msg if h.device_name == device), None)

        wait_for(lambda: health_of("hami-gpu-3") == "Healthy" or None, 30, interval=0, what="hami-gpu-3 healthy")
        with events.open("a") as f:
            f.write(f"xid {uuid} 48 1\n")  # double-bit ECC error; NVML: the GPU needs a reset

        def tainted() -> list[dict[str, Any]] | None:
            d = next(d for d in slice_devices(api_client, node, DRIVER) if d["name"] == "hami-gpu-3")
            return d.get("taints") or None

        taints = wait_for(tainted, 30, what="the XID taint in the ResourceSlice")
        assert {(t["key"], t.get("value"), t["effect"]) for t in taints} == {
            (f"{DRIVER}/xid", "48", "NoSchedule"), (f"{DRIVER}/recovery-action", "gpu-reset", "NoSchedule")}
        wait_for(lambda: health_of("hami-gpu-3") == "Unhealthy" or None, 30, interval=0, what="Unhealthy in kubelet's stream")
        others = [d for d in slice_devices(api_client, node, DRIVER) if d["name"] != "hami-gpu-3"]
        assert not any(d.get("taints") for d in others)

        with events.open("a") as f:
            f.write(f"reset {uuid}\n")
        wait_for(lambda: None if tainted() else True, 30, what="the taint lifted after the reset")
        wait_for(lambda: health_of("hami-gpu-3") == "Healthy" or None, 30, interval=0, what="Healthy again")


@pytest.mark.parametrize("path", sorted(p for p in EXAMPLES.glob("*.yaml") if p.name != "demo.yaml"), ids=lambda p: p.name)
def test_example_is_accepted_by_the_api_server(cluster: ControlPlane, path: Path) -> None:
    assert path.read_text().startswith("# "), f"{path.name} must open with a comment saying what it shows"
    kubectl = [str(cluster.bins.path("kubectl")), "--kubeconfig", str(cluster.kubeconfig)]
    proc = subprocess.run([*kubectl, "apply", "--dry-run=server", "-n", "default", "-f", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
