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
from driver_helpers import running_daemon
from kube_helpers import create_node, unique, wait_for
from kubernetes import client

from dra._runtime.publish import Publisher, PublishSettings, SliceLayout
from dra.driver import Capacity, ClaimRef, Device, RequestPolicy
from dra.testing.kubelet import KubeletHarness
from dra_dev.cluster.binaries import parse_version
from dra_dev.cluster.controlplane import ControlPlane

pytestmark = [pytest.mark.cluster, pytest.mark.scheduler]

# kubernetes#140438 (distinctAttribute kept one value per request name, so a request of count
# N compared each device with the previous one only): fixed by #140600; 1.34.4's constraint.go
# has the map (and compares pointers, kubernetes#135022), 1.37.2's a list of every device's value.
# 1.36.3 still has the map, yet measured here it gave this shape three different devices (its
# allocator walks candidates differently); the repeat is shown on 1.34 and 1.35.
REPEATS_BELOW_140438 = 36


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


def test_distinct_attribute_within_one_request_lets_a_device_repeat_on_1_34_and_1_35(
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
    if minor_of(cluster) < REPEATS_BELOW_140438:
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
    try:
        with tempfile.TemporaryDirectory(prefix="dra-neg-", dir="/tmp") as work, \
                running_daemon(cluster, "example", node, Path(work), ["--set", "count=2"]) as (_daemon, harness):
            yield node, harness
    finally:
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


# --- counters with multi-allocatable devices (kubernetes#134100, #139034) ------------------------
# Partitionable devices draw on a shared counter set; with allowMultipleAllocations as well the
# allocator mishandled the counters: #134100 (fixed in 1.35, #134103) refused a second share of a
# device whose counters the first share had drawn, #139034 (fixed in 1.36 by #139040, in 1.37)
# forgot in later scheduling cycles the counters that shared allocations draw, so a device that
# excludes another could be allocated beside it. The framework never publishes the pair (MIG
# partitions draw counters and are exclusive; `desired_pool` refuses a shared device that draws
# counters): shareable devices are bounded by their consumable capacity alone, which the last
# test shows working on every version.
FIXED_134100, FIXED_139034 = 35, 36


def counter_slices(r: Rig, minor: int) -> None:
    """Counter set `mem` of 4; `small` draws 3, `big` draws 4: they exclude each other. Written as
    an admin would, in the layout the version validates (1.35+: counters and devices in separate
    slices of one pool)."""
    def dev(name: str, draws: int) -> dict[str, Any]:
        return {"name": name, "allowMultipleAllocations": True, "attributes": {"size": {"string": name}},
                "capacity": {"cores": {"value": "100", "requestPolicy": {"default": "100", "validRange": {"min": "1", "max": "100"}}}},
                "consumesCounters": [{"counterSet": "mem", "counters": {"units": {"value": str(draws)}}}]}
    counters = [{"name": "mem", "counters": {"units": {"value": "4"}}}]
    devices = [dev("small", 3), dev("big", 4)]
    shapes = [{"sharedCounters": counters}, {"devices": devices}] if minor >= 35 else [{"sharedCounters": counters, "devices": devices}]
    node_uid = r.core.read_node(r.node).metadata.uid
    for spec in shapes:
        r.resource.create_resource_slice({"metadata": {"generateName": f"{r.node}-counters-", "ownerReferences": [
            {"apiVersion": "v1", "kind": "Node", "name": r.node, "uid": node_uid, "controller": True}]},
            "spec": {"driver": r.driver, "nodeName": r.node, "pool": {"name": f"{r.node}-counters", "generation": 1,
                                                                     "resourceSliceCount": len(shapes)}, **spec}})


def share_of(r: Rig, name: str, size: str) -> dict[str, Any]:
    """A request for 10 cores of the device whose `size` attribute is `size` (small or big)."""
    req = r.request(name, cores="10")
    req["exactly"]["selectors"] = [{"cel": {"expression": f"device.attributes['{r.driver}'].size == '{size}'"}}]
    return req


def unschedulable(r: Rig, pod: str, timeout: float = 60) -> str:
    def read() -> str | None:
        for cond in (r.core.read_namespaced_pod(pod, r.ns).status.conditions or []):
            if cond.type == "PodScheduled" and cond.status == "False" and cond.reason == "Unschedulable":
                return str(cond.message)
        return None
    return wait_for(read, timeout, what=f"pod {pod} reported unschedulable")


def test_a_second_share_of_a_counter_drawing_device_in_one_claim_fails_before_1_35(
    cluster: ControlPlane, rig: Callable[..., Rig]
) -> None:
    """kubernetes#134100: two requests of one claim, each a share of `small`: the first draws 3 of
    the 4 counter units; before 1.35 the second is refused for the counters though it would
    share the same device (which draws its counters once)."""
    r = rig([], SliceLayout.PACKED)
    minor = minor_of(cluster)
    counter_slices(r, minor)
    r.claim("two-shares", [share_of(r, "a", "small"), share_of(r, "b", "small")])
    if minor < FIXED_134100:
        assert "cannot allocate all claims" in unschedulable(r, "two-shares")
    else:
        assert r.allocated("two-shares") == ["small", "small"]


def test_a_shared_allocation_keeps_its_counters_in_later_cycles_from_1_36(
    cluster: ControlPlane, rig: Callable[..., Rig]
) -> None:
    """kubernetes#139034: a share of `small` is allocated; in a later scheduling cycle a share of
    `big` (which needs all 4 units, 3 of them drawn by `small`) must be refused; before 1.36 the
    allocator rebuilt the counters without shared allocations and allocated both."""
    r = rig([], SliceLayout.PACKED)
    minor = minor_of(cluster)
    counter_slices(r, minor)
    r.claim("small", [share_of(r, "s", "small")])
    assert r.allocated("small") == ["small"]
    r.claim("big", [share_of(r, "b", "big")])
    if minor < FIXED_139034:
        assert r.allocated("big") == ["big"]  # 3 + 4 units drawn from a set of 4: the bug
    else:
        assert "cannot allocate all claims" in unschedulable(r, "big")


def test_shares_bounded_by_capacity_alone_work_on_every_version(cluster: ControlPlane, rig: Callable[..., Rig]) -> None:
    """Our form: a shared device draws no counters; two requests of one claim and a second claim
    share it up to its 100 cores, and the share past them waits."""
    r = rig(shared(1))
    assert not any("sharedCounters" in s["spec"] or any("consumesCounters" in d for d in s["spec"].get("devices", []))
                   for s in json.loads(r.resource.list_resource_slice(field_selector=f"spec.nodeName={r.node}",
                                                                     _preload_content=False).data)["items"])
    r.claim("two", [r.request("a", cores="40"), r.request("b", cores="40")])
    assert r.allocated("two") == ["dev-0", "dev-0"]
    r.claim("fits", [r.request("c", cores="20")])
    assert r.allocated("fits") == ["dev-0"]
    r.claim("over", [r.request("d", cores="1")])
    assert "cannot allocate all claims" in unschedulable(r, "over")
