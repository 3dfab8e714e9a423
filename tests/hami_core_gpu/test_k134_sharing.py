"""Every GPU of a node is shareable on every Kubernetes version (issue 16, kubernetes#133705).

`dra run hami-core-gpu --fake h200x8` on its own Node, then half-GPU claims (50 cores, 10Gi)
with pods pinned to that node, allocated by the real kube-scheduler of the session's version:

- the layout the daemon picks (per-device slices on 1.34, packed from 1.35) places 16 of them
  on all 8 GPUs, two each, none above 100 cores;
- the naive layout (all GPUs in one slice, `--slice-layout packed`) on 1.34 shows the bug: the
  third claim is never allocated while 7 GPUs are free; from 1.35 it works as well.
"""

from __future__ import annotations

import collections
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from driver_helpers import running_daemon
from kube_helpers import create_node, unique, wait_for
from kubernetes import client

from dra._runtime.publish import needs_fence
from dra_dev.cluster.binaries import parse_version
from dra_dev.cluster.controlplane import ControlPlane

pytestmark = [pytest.mark.cluster, pytest.mark.scheduler]
DRIVER = "hami-core-gpu.project-hami.io"
CLASS = "hami-core-gpu.project-hami.io"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "hami-core-gpu"


class GpuNode:
    """A Node, its daemon, a namespace; claims and pods made and read through the API."""

    def __init__(self, api: client.ApiClient, node: str, namespace: str) -> None:
        self.api, self.node, self.ns = api, node, namespace
        self.resource: Any = client.ResourceV1Api(api)
        self.core: Any = client.CoreV1Api(api)

    def share(self, name: str, cores: int = 50, memory: str = "10Gi") -> None:
        """A claim for one share and a pod on this node using it."""
        self.resource.create_namespaced_resource_claim(self.ns, {
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": CLASS, "capacity": {"requests": {"cores": str(cores), "memory": memory}}}}]}}})
        self.core.create_namespaced_pod(self.ns, {
            "metadata": {"name": name},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": self.node},
                     "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                     "containers": [{"name": "c", "image": "none", "resources": {"claims": [{"name": "gpu"}]}}]}})

    def allocations(self) -> dict[str, dict[str, Any]]:
        """Claim name -> its one result, for allocated claims."""
        data = json.loads(self.resource.list_namespaced_resource_claim(self.ns, _preload_content=False).data)
        return {c["metadata"]["name"]: c["status"]["allocation"]["devices"]["results"][0]
                for c in data["items"] if (c.get("status") or {}).get("allocation")}

    def unschedulable(self, pod: str) -> str | None:
        """The scheduler's message once it has given up on `pod` for now."""
        for cond in (self.core.read_namespaced_pod(pod, self.ns).status.conditions or []):
            if cond.type == "PodScheduled" and cond.status == "False" and cond.reason == "Unschedulable":
                return str(cond.message)
        return None

    def slices(self) -> list[dict[str, Any]]:
        data = self.resource.list_resource_slice(field_selector=f"spec.nodeName={self.node}", _preload_content=False).data
        return [s for s in json.loads(data)["items"] if s["spec"]["driver"] == DRIVER]


def ensure_device_class(api: client.ApiClient) -> None:
    try:
        client.ResourceV1Api(api).create_device_class(yaml.safe_load((EXAMPLES / "deviceclass.yaml").read_text()))
    except client.ApiException as e:
        if e.status != 409:
            raise


@pytest.fixture(params=["auto", "packed"])
def gpu_node(request: pytest.FixtureRequest, cluster: ControlPlane, api_client: client.ApiClient,
             stub_nvml: Path) -> Iterator[GpuNode]:
    node, ns = unique("share"), unique("share")
    create_node(api_client, node)
    ensure_device_class(api_client)
    client.CoreV1Api(api_client).create_namespace({"metadata": {"name": ns}})
    with tempfile.TemporaryDirectory(prefix="dra-sh-", dir="/tmp") as work:
        try:
            with running_daemon(cluster, "hami-core-gpu", node, Path(work),
                                ["--fake", "h200x8", "--set", "health=off", "--slice-layout", request.param,
                                 "--hook-dir", f"{work}/hook-dir"]) as _:
                yield GpuNode(api_client, node, ns)
        finally:
            client.CoreV1Api(api_client).delete_namespace(ns)
            client.CoreV1Api(api_client).delete_node(node)


def fixed_scheduler(cluster: ControlPlane) -> bool:
    """Whether the session's kube-scheduler carries the fix of kubernetes#133705 (1.35+)."""
    minor, _patch = parse_version(cluster.k8s_version)
    return not needs_fence((1, minor))


def test_sixteen_half_gpu_claims_fill_all_eight_gpus(request: pytest.FixtureRequest, cluster: ControlPlane,
                                                     gpu_node: GpuNode) -> None:
    layout = request.node.callspec.params["gpu_node"]
    fixed = fixed_scheduler(cluster)
    slices = gpu_node.slices()
    if layout == "auto":  # what the daemon chose from the server's version
        assert [len(s["spec"]["devices"]) for s in slices] == ([8] if fixed else [1] * 8)
        assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {len(slices)}
    if layout == "packed" and not fixed:
        # The naive layout on 1.34: two shares fill GPU 0; the third is never placed, 7 GPUs empty.
        for i in range(3):
            gpu_node.share(f"half-{i}")
        got = wait_for(lambda: gpu_node.allocations() if len(gpu_node.allocations()) == 2 else None, 90,
                       what="two shares allocated")
        assert {r["device"] for r in got.values()} == {"hami-gpu-0"}
        third = next(n for n in ("half-0", "half-1", "half-2") if n not in got)
        message = wait_for(lambda: gpu_node.unschedulable(third), 90, what=f"{third} reported unschedulable")
        assert "cannot allocate all claims" in message, message
        assert len(gpu_node.allocations()) == 2
        return
    for i in range(16):
        gpu_node.share(f"half-{i}")
    got = wait_for(lambda: gpu_node.allocations() if len(gpu_node.allocations()) == 16 else None, 180,
                   what="16 half-GPU claims allocated")
    cores: collections.Counter[str] = collections.Counter()
    for r in got.values():
        assert r["consumedCapacity"] == {"cores": "50", "memory": "10Gi"}
        cores[r["device"]] += 50
    assert cores == {f"hami-gpu-{i}": 100 for i in range(8)}  # every GPU used, none above 100 cores
