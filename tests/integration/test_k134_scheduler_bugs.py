"""Known kube-scheduler / API server bugs around shared devices: the naive form shows each bug
on the versions it affects, the form this project writes works on every version (issue 16).

Each test has its own Node, driver name and DeviceClass, devices published by the framework's
`Publisher` (the code a node daemon runs), pods pinned to the node, the session's real
kube-scheduler. Which versions carry which fix was read in the allocator's source of each
release (k8s.io/dynamic-resource-allocation vX.Y.Z, structured/internal/experimental).
"""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_helpers import create_node, unique, wait_for
from kubernetes import client

from dra.cluster.binaries import parse_version
from dra.cluster.controlplane import ControlPlane
from dra.driver import Capacity, ClaimRef, Device, RequestPolicy
from dra.publish import Publisher, PublishSettings, SliceLayout
from dra.testing.daemon import DaemonProcess
from dra.testing.kubelet import KubeletHarness

pytestmark = [pytest.mark.cluster, pytest.mark.scheduler]

# kubernetes#140438 (distinctAttribute kept one value per request name, so a request of count
# N compared each device with the previous one only): fixed by #140600; 1.34.4's constraint.go
# has the map (and compares pointers, kubernetes#135022), 1.37.2's a list of every device's value.
FIXED_140438 = 37


class Rig:
    """A Node, a driver's devices published on it, a DeviceClass of that driver, a namespace."""

    def __init__(self, api: client.ApiClient, devices: list[Device], layout: SliceLayout | None) -> None:
        self.api = api
        self.node, self.ns, self.driver = unique("bug"), unique("bug"), f"{unique('d')}.k134.test"
        self.resource: Any = client.ResourceV1Api(api)
        self.core: Any = client.CoreV1Api(api)
        create_node(api, self.node)
        self.core.create_namespace({"metadata": {"name": self.ns}})
        self.resource.create_device_class({"metadata": {"name": self.driver}, "spec": {"selectors": [
            {"cel": {"expression": f"device.driver == '{self.driver}'"}}]}})
        self.publisher = Publisher(api, self.driver, self.node, lambda: devices, settings=PublishSettings(layout=layout))
        self.publisher.sync_once()

    def close(self) -> None:
        self.core.delete_namespace(self.ns)
        self.core.delete_node(self.node)
        self.resource.delete_device_class(self.driver)

    def claim(self, name: str, requests: list[dict[str, Any]], constraints: list[dict[str, Any]] | None = None) -> None:
        devices: dict[str, Any] = {"requests": requests}
        if constraints:
            devices["constraints"] = constraints
        self.resource.create_namespaced_resource_claim(self.ns, {"metadata": {"name": name}, "spec": {"devices": devices}})
        self.core.create_namespaced_pod(self.ns, {
            "metadata": {"name": name},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": self.node},
                     "resourceClaims": [{"name": "c", "resourceClaimName": name}],
                     "containers": [{"name": "c", "image": "none", "resources": {"claims": [{"name": "c"}]}}]}})

    def request(self, name: str, count: int = 1, **capacity: str) -> dict[str, Any]:
        body: dict[str, Any] = {"deviceClassName": self.driver, "count": count}
        if capacity:
            body["capacity"] = {"requests": capacity}
        return {"name": name, "exactly": body}

    def read(self, name: str) -> dict[str, Any]:
        return dict(json.loads(self.resource.read_namespaced_resource_claim(name, self.ns, _preload_content=False).data))

    def allocated(self, name: str, timeout: float = 90) -> list[str]:
        """The devices allocated to claim `name`, in result order."""
        claim = wait_for(lambda: (c := self.read(name)).get("status", {}).get("allocation") and c, timeout,
                         what=f"claim {name} allocated")
        return [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]]


@pytest.fixture
def rig(api_client: client.ApiClient) -> Iterator[Callable[..., Rig]]:
    made: list[Rig] = []

    def make(devices: list[Device], layout: SliceLayout | None = None) -> Rig:
        made.append(Rig(api_client, devices, layout))
        return made[-1]

    yield make
    for r in made:
        r.close()


def shared(n: int) -> list[Device]:
    """n shareable devices, each with a unique `uuid` attribute and 100 cores."""
    return [Device(name=f"dev-{i}", attributes={"uuid": f"uuid-{i}"}, allow_multiple_allocations=True,
                   capacity={"cores": Capacity("100", RequestPolicy(default="100", min="1", max="100"))})
            for i in range(n)]


def minor_of(cluster: ControlPlane) -> int:
    return parse_version(cluster.k8s_version)[0]


def test_distinct_attribute_within_one_request_lets_a_device_repeat_before_1_37(
    cluster: ControlPlane, rig: Callable[..., Rig]
) -> None:
    """kubernetes#140438, naive form: one request of count 3 with distinctAttribute on the UUID.
    Packed slices even on 1.34, where count > 1 on one-device slices would crash the scheduler
    (kubernetes#133705): this shows the constraint bug alone."""
    r = rig(shared(4), SliceLayout.PACKED)
    distinct = {"distinctAttribute": f"{r.driver}/uuid"}
    r.claim("naive", [r.request("gpus", count=3, cores="10")], [{"requests": ["gpus"], **distinct}])
    got = r.allocated("naive")
    assert len(got) == 3
    if minor_of(cluster) < FIXED_140438:
        assert len(set(got)) < 3, f"expected a repeated device on {cluster.k8s_version} (kubernetes#140438): {got}"
    else:
        assert len(set(got)) == 3, got


def test_distinct_attribute_across_requests_holds_on_every_version(cluster: ControlPlane, rig: Callable[..., Rig]) -> None:
    """Our form (the webhook's and the examples'): one request per device, the constraint across
    them, in the layout the publisher picks for this version: three different devices."""
    r = rig(shared(4))
    names = ["a", "b", "c"]
    r.claim("ours", [r.request(n, cores="10") for n in names], [{"requests": names, "distinctAttribute": f"{r.driver}/uuid"}])
    got = r.allocated("ours")
    assert len(got) == 3 and len(set(got)) == 3, got
    # Distinct per device, yet still shared: a second claim of the same shape reuses the devices.
    r.claim("again", [r.request(n, cores="10") for n in names], [{"requests": names, "distinctAttribute": f"{r.driver}/uuid"}])
    assert len(set(r.allocated("again"))) == 3


@pytest.fixture
def example_daemon(cluster: ControlPlane, api_client: client.ApiClient) -> Iterator[tuple[str, KubeletHarness]]:
    node = unique("neg")
    create_node(api_client, node)
    with tempfile.TemporaryDirectory(prefix="dra-neg-", dir="/tmp") as work:
        daemon = DaemonProcess("example", node, cluster.kubeconfig, Path(work), args=["--set", "count=2"]).start()
        harness = KubeletHarness(daemon.registrar_dir)
        harness.watch()
        try:
            daemon.wait_http("/readyz", timeout=60)
            yield node, harness
        finally:
            harness.close()
            daemon.stop()
            client.CoreV1Api(api_client).delete_node(node)


def test_a_negative_consumed_capacity_is_stored_by_the_api_server_and_refused_by_prepare(
    api_client: client.ApiClient, example_daemon: tuple[str, KubeletHarness]
) -> None:
    """kubernetes#140563: the API server validates no sign of status.allocation...consumedCapacity
    (1.34.4 to 1.37.2 have no rule for it), so whoever may write claim status can make a share
    negative: the scheduler would then count the device as having more room than it has, and a
    naive driver would hand a negative quota to the hook. The daemon refuses the claim, naming
    the device and the fix, and prepares nothing."""
    node, harness = example_daemon
    ns = unique("neg")
    core: Any = client.CoreV1Api(api_client)
    resource: Any = client.ResourceV1Api(api_client)
    core.create_namespace({"metadata": {"name": ns}})
    try:
        resource.create_namespaced_resource_claim(ns, {"metadata": {"name": "negative"}, "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}})
        claim = resource.read_namespaced_resource_claim("negative", ns)
        status = {"status": {"allocation": {
            "devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": node, "device": "gpu-0",
                                     "shareID": str(uuid.uuid4()),
                                     "consumedCapacity": {"memory": "-8Gi", "cores": "-50"}}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}}
        resource.patch_namespaced_resource_claim_status("negative", ns, status)  # accepted: the bug
        stored = json.loads(resource.read_namespaced_resource_claim("negative", ns, _preload_content=False).data)
        assert stored["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] == {"memory": "-8Gi", "cores": "-50"}
        harness.wait_for_plugin("gpu.example.com", timeout=60)
        ref = ClaimRef(claim.metadata.uid, ns, "negative")
        answer = harness.prepare([ref], driver="gpu.example.com")[ref.uid]
        assert "negative capacity" in answer.error and f"{node}/gpu-0 memory=-8589934592" in answer.error, answer.error
        assert "delete the claim" in answer.error
        assert not answer.devices
    finally:
        core.delete_namespace(ns)
