"""The admission webhook against the real control plane: the API server calls it over HTTPS.

`dra webhook up` (the code `dra webhook up` runs) starts the server and registers it for the
module; nodes get fake GPUs and NPUs as ResourceSlices encoded by the framework's publisher
(drivers `hami-core-gpu.project-hami.io` and `ascend.project-hami.io`, as the real drivers
publish them), and kube-scheduler allocates the claims Kubernetes makes from the webhook's
templates. The failure-policy test stops the server, so it runs last.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_helpers import create_node, pod_scheduled, unique, wait_for
from kubernetes import client
from kubernetes.client.rest import ApiException

from dra._runtime.publish.desired import desired_pool, slice_object
from dra.driver import Capacity, Device, RequestPolicy
from dra.webhook import translate, vendors
from dra.webhook.inventory import SliceInventory
from dra_dev import webhook_local as install
from dra_dev.cluster.controlplane import ControlPlane
from drivers.ascend import dcmi, devices, fake

pytestmark = [pytest.mark.cluster, pytest.mark.scheduler]
GPU = "hami-core-gpu.project-hami.io"
NPU = "ascend.project-hami.io"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "hami-compat"
HAMI_LIMITS = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}


@pytest.fixture(scope="module")
def webhook(cluster: ControlPlane, api_client: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Path]:
    made = []
    resource: Any = client.ResourceV1Api(api_client)
    for cls, expression in ((GPU, f'device.driver == "{GPU}"'), (NPU, f'device.driver == "{NPU}"')):
        try:
            resource.create_device_class({"metadata": {"name": cls}, "spec": {"selectors": [{"cel": {"expression": expression}}]}})
            made.append(cls)
        except ApiException as e:
            if e.status != 409:
                raise
    # The memory-only classes the mapping names, as an admin applies them (the chart makes them too).
    for body in yaml.safe_load_all((EXAMPLES / "deviceclasses.yaml").read_text()):
        try:
            resource.create_device_class(body)
            made.append(body["metadata"]["name"])
        except ApiException as e:
            if e.status != 409:
                raise
    directory = tmp_path_factory.mktemp("webhook")
    install.up(cluster.kubeconfig, directory)
    _WEBHOOK[:] = [directory]
    yield directory
    _WEBHOOK.clear()
    install.down(cluster.kubeconfig, directory)
    for cls in made:
        resource.delete_device_class(cls)


@pytest.fixture
def ns(api_client: client.ApiClient, webhook: Path) -> Iterator[str]:
    name = unique("wh")
    core: Any = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def gpu(name: str, product: str = "NVIDIA A100-SXM4-80GB", memory: str = "80Gi", numa: int = 0,
        uid: str | None = None) -> Device:
    return Device(
        name=name,
        attributes={"uuid": uid or f"GPU-{uuid.uuid4()}", "productName": product, "type": "hami-gpu", "numaNode": numa},
        capacity={"cores": Capacity("100", RequestPolicy(default="100", min="1", max="100", step="1")),
                  "memory": Capacity(memory, RequestPolicy(default=memory, min="1Mi", max=memory, step="1Mi"))},
        allow_multiple_allocations=True)


def npu(name: str, model: str = "Ascend910B3", memory: str = "64Gi") -> Device:
    d = gpu(name, memory=memory)
    return Device(name=name, attributes={"uuid": f"npu-{uuid.uuid4()}", "productName": model, "type": "HAMivNPUCore"},
                  capacity=d.capacity, allow_multiple_allocations=True)


_NODES: list[str] = []  # every node this module made, deleted (with its owned slices) at the end
_WEBHOOK: list[Path] = []  # the module's webhook directory, while it runs


@pytest.fixture(scope="module", autouse=True)
def _delete_nodes(api_client: client.ApiClient) -> Iterator[None]:
    """Later tests share the session's control plane: leave no Node publishing GPUs behind."""
    yield
    core: Any = client.CoreV1Api(api_client)
    resource: Any = client.ResourceV1Api(api_client)
    for node in _NODES:
        for s in resource.list_resource_slice(field_selector=f"spec.nodeName={node}").items:
            resource.delete_resource_slice(s.metadata.name)
        core.delete_node(node)
    _NODES.clear()


def node_with(api: client.ApiClient, driver: str, devices: list[Device]) -> str:
    """A Node whose ResourceSlice for `driver` lists `devices` (encoded by the framework's publisher)."""
    node = unique("whn")
    create_node(api, node)
    _NODES.append(node)
    core: Any = client.CoreV1Api(api)
    resource: Any = client.ResourceV1Api(api)
    uid = core.read_node(node).metadata.uid
    pool = desired_pool(driver, node, devices)
    for i in range(len(pool.slices)):
        resource.create_resource_slice(slice_object(pool, i, 1, uid))
    # The webhook's slice watch is eventually consistent: wait until it knows what the API holds.
    published = sum(len(s.spec.devices or []) for s in resource.list_resource_slice(
        field_selector=f"spec.driver={driver}").items)
    (directory,) = _WEBHOOK
    wait_for(lambda: webhook_devices(directory).get(driver) == published, timeout=10, interval=0.05,
             what=f"the webhook's inventory to hold the {published} {driver} devices the API has")
    return node


def webhook_devices(directory: Path) -> dict[str, int]:
    """Devices per driver the webhook's inventory holds (its /metrics)."""
    state = install.State.load(directory)
    assert state is not None
    with urllib.request.urlopen(f"http://127.0.0.1:{state.health_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    found = (re.match(r'dra_webhook_inventory_devices\{driver="([^"]*)"\} (\S+)$', line) for line in text.splitlines())
    return {m.group(1): int(float(m.group(2))) for m in found if m}


def hami_pod(name: str, limits: dict[str, str], node: str | None = None, annotations: dict[str, str] | None = None,
             labels: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox", "resources": {"limits": dict(limits)}}]}
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": annotations or {}, "labels": labels or {}}, "spec": spec}


def claims_of(api: client.ApiClient, ns: str) -> list[dict[str, Any]]:
    resource: Any = client.ResourceV1Api(api)
    resp = resource.list_namespaced_resource_claim(ns, _preload_content=False)
    return list(json.loads(resp.data)["items"])


def templates_of(api: client.ApiClient, ns: str) -> list[str]:
    resource: Any = client.ResourceV1Api(api)
    return [t.metadata.name for t in resource.list_namespaced_resource_claim_template(ns).items]


def allocation(api: client.ApiClient, ns: str, pod: str, timeout: float = 60) -> list[dict[str, Any]]:
    """The allocation results of the pod's (single) claim once kube-scheduler has allocated it."""

    def done() -> list[dict[str, Any]] | None:
        for c in claims_of(api, ns):
            owners = c["metadata"].get("ownerReferences") or []
            alloc = (c.get("status") or {}).get("allocation")
            if alloc and any(o["kind"] == "Pod" and o["name"] == pod for o in owners):
                return list(alloc["devices"]["results"])
        return None

    try:
        return wait_for(done, timeout, what=f"the claim of pod {ns}/{pod} to be allocated")
    except AssertionError as e:
        raise AssertionError(f"{e}; scheduling: {pod_scheduled(api, ns, pod)}") from None


def create(api: client.ApiClient, ns: str, body: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
    core: Any = client.CoreV1Api(api)
    kwargs = {"dry_run": "All"} if dry_run else {}
    resp = core.create_namespaced_pod(ns, body, _preload_content=False, **kwargs)
    return dict(json.loads(resp.data))


def refusal(api: client.ApiClient, ns: str, body: dict[str, Any]) -> str:
    """The API server's message for a refused pod."""
    with pytest.raises(ApiException) as err:
        create(api, ns, body)
    return str(json.loads(str(err.value.body))["message"])


# --- conversion and allocation ------------------------------------------------------------------


def test_hami_pod_is_stored_with_claims_that_kube_scheduler_allocates(api_client: client.ApiClient, ns: str) -> None:
    # The webhook runs the shipped mapping, which offers a pod without nvidia.com/vgpu-mode no MIG
    # fallback (mode.unannotated, off unless the admin turns it on): its request is `exactly`,
    # whatever DeviceClasses the shared cluster holds (test_mig_e2e leaves the MIG class behind).
    (nvidia,) = [v for v in vendors.load().vendors if v.name == "nvidia"]
    assert nvidia.mode is not None and nvidia.mode.unannotated in ((), ("hami-core",))
    node = node_with(api_client, GPU, [gpu("gpu-0"), gpu("gpu-1")])
    stored = create(api_client, ns, hami_pod("classic", HAMI_LIMITS, node))
    ctr = stored["spec"]["containers"][0]
    assert "limits" not in ctr["resources"] and "requests" not in ctr["resources"]  # no node advertises them
    assert ctr["resources"]["claims"] == [{"name": "nvidia-main"}]
    # What the API server handed over: 3000 arrives as "3k", and still means 3000 MiB.
    converted = json.loads(stored["metadata"]["annotations"][translate.CONVERTED_ANNOTATION])
    assert converted == {"main": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3k", "nvidia.com/gpucores": "30"}}
    (pod_claim,) = stored["spec"]["resourceClaims"]
    resource: Any = client.ResourceV1Api(api_client)
    template = resource.read_namespaced_resource_claim_template(
        pod_claim["resourceClaimTemplateName"], ns)
    (request,) = template.spec.spec.devices.requests
    assert request.first_available is None, "no firstAvailable alternatives without the admin's opt-in"
    exactly = request.exactly
    assert exactly.device_class_name == GPU and exactly.count == 1
    assert exactly.capacity.requests == {"memory": "3000Mi", "cores": "30"}
    (result,) = allocation(api_client, ns, "classic")
    assert result["driver"] == GPU and result["pool"] == node and result["shareID"]
    assert result["consumedCapacity"] == {"memory": "3000Mi", "cores": "30"}
    wait_for(lambda: pod_scheduled(api_client, ns, "classic")[0], 30, what="the pod to be bound")


def test_several_gpus_in_one_request_land_on_distinct_devices(api_client: client.ApiClient, ns: str) -> None:
    two = node_with(api_client, GPU, [gpu("gpu-0"), gpu("gpu-1")])
    create(api_client, ns, hami_pod("pair", {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1000",
                                             "nvidia.com/gpucores": "10"}, two))
    results = allocation(api_client, ns, "pair")
    assert sorted(r["device"] for r in results) == ["gpu-0", "gpu-1"]
    # One device with room for both shares: without the constraint both would land on it.
    one = node_with(api_client, GPU, [gpu("gpu-0")])
    create(api_client, ns, hami_pod("pair-on-one", {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1000",
                                                    "nvidia.com/gpucores": "10"}, one))
    reason = wait_for(lambda: (lambda s: s[1] if "Unschedulable" in s[1] else None)(pod_scheduled(api_client, ns, "pair-on-one")),
                      60, what="kube-scheduler to find the pod unschedulable")
    assert "cannot allocate all claims" in reason or "resourceclaim" in reason.lower(), reason


def test_annotations_select_devices_with_hamis_semantics(api_client: client.ApiClient, ns: str) -> None:
    u = [f"GPU-{uuid.uuid4()}" for _ in range(3)]
    node = node_with(api_client, GPU, [gpu("gpu-0", "NVIDIA A100-SXM4-80GB", uid=u[0]),
                                       gpu("gpu-1", "NVIDIA H200", "141Gi", uid=u[1]),
                                       gpu("gpu-2", "NVIDIA A100-SXM4-80GB", uid=u[2])])
    cases = {
        "type-and-not-uuid": ({"nvidia.com/use-gputype": "a100", "nvidia.com/nouse-gpuuuid": u[0]}, "gpu-2"),
        "uuid": ({"nvidia.com/use-gpuuuid": f" {u[1]} "}, "gpu-1"),
        "not-type": ({"nvidia.com/nouse-gputype": "A100"}, "gpu-1"),
        "hami-full-type-name": ({"nvidia.com/use-gputype": "NVIDIA-NVIDIA H200"}, "gpu-1"),
        "uuid-list-minus-uuid": ({"nvidia.com/use-gpuuuid": f"{u[0]},{u[2]}", "nvidia.com/nouse-gpuuuid": u[0]}, "gpu-2"),
    }
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "500", "nvidia.com/gpucores": "5"}
    for name, (wanted, _) in cases.items():
        create(api_client, ns, hami_pod(name, limits, node, wanted))
    for name, (_, want) in cases.items():
        (result,) = allocation(api_client, ns, name)
        assert result["device"] == want, name
    create(api_client, ns, hami_pod("no-such-type", limits, node, {"nvidia.com/use-gputype": "V100"}))
    wait_for(lambda: "Unschedulable" in pod_scheduled(api_client, ns, "no-such-type")[1], 60,
             what="a V100-only pod to stay unschedulable")


def test_memory_only_pods_share_one_gpu_without_taking_its_compute(api_client: client.ApiClient, ns: str) -> None:
    """HAMi's README pod (gpumem, no gpucores): a memory quota with no compute limit. Two of them
    and a 98-core share fit on one GPU (1 core each is their scheduling cost); the GPU's 100 cores
    then being taken, another memory-only pod waits, as HAMi refuses a cores-0 task on a full GPU."""
    node = node_with(api_client, GPU, [gpu("gpu-0")])
    for name in ("readme-a", "readme-b"):
        create(api_client, ns, hami_pod(name, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}, node))
    create(api_client, ns, hami_pod("busy", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000",
                                             "nvidia.com/gpucores": "98"}, node))
    for name in ("readme-a", "readme-b"):
        (result,) = allocation(api_client, ns, name)
        assert result["device"] == "gpu-0" and result["consumedCapacity"] == {"memory": "3000Mi", "cores": "1"}
    (busy,) = allocation(api_client, ns, "busy")
    assert busy["device"] == "gpu-0" and busy["consumedCapacity"]["cores"] == "98"
    create(api_client, ns, hami_pod("readme-c", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}, node))
    wait_for(lambda: "Unschedulable" in pod_scheduled(api_client, ns, "readme-c")[1], 60,
             what="a memory-only pod to wait while the GPU's 100 cores are taken")


def fake_npus(profile: str) -> list[Device]:
    """The Ascend driver's own devices for one of its fake profiles (what its daemon publishes)."""
    node = fake.profile(profile, "whn")
    npus = tuple(dcmi.Npu(f.uuid, f.logic_id, f.phy_id, f.card, f.chip, "Ascend", f.chip_name, f.ai_cores, f.memory,
                          f.pci_bus_id, f.pci_device_id, None, 0, f.pcie_root, f.numa_node) for f in node.npus)
    return devices.to_devices(dcmi.Inventory(node.driver_version, npus))


def test_hamis_ascend_examples_convert_and_allocate_on_the_drivers_own_devices(api_client: client.ApiClient,
                                                                             ns: str) -> None:
    """HAMi's examples/ascend pods (the default vNPU split: -memory alone, no annotation) on the
    devices the Ascend driver publishes for a 310P3 and a 910C: the memory rounded up to HAMi's
    template and its share of AI cores; a 910C request takes one module (both dies of a card)."""
    p310 = node_with(api_client, NPU, fake_npus("310p3x2"))
    create(api_client, ns, hami_pod("job-310p", {"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "2000"},
                                    p310))
    (r,) = allocation(api_client, ns, "job-310p")
    assert r["consumedCapacity"] == {"memory": "3Gi", "cores": "13"}  # vir01: 3072 MiB, 1 of 8 AI cores
    c910 = node_with(api_client, NPU, fake_npus("910cx4"))
    create(api_client, ns, hami_pod("job-910c", {"huawei.com/Ascend910C": "1", "huawei.com/Ascend910C-memory": "16384"},
                                    c910))
    results = allocation(api_client, ns, "job-910c")
    assert sorted(x["device"] for x in results) in (["npu-0-0", "npu-1-0"], ["npu-2-0", "npu-3-0"])  # one card
    assert {x["consumedCapacity"]["memory"] for x in results} == {"16Gi"}


def test_memory_percentage_is_a_share_of_the_device_it_lands_on(api_client: client.ApiClient, ns: str) -> None:
    node = node_with(api_client, GPU, [gpu("gpu-0", memory="40Gi")])
    body = hami_pod("half", {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50", "nvidia.com/gpucores": "10"}, node)
    stored = wait_for(lambda: _try_create(api_client, ns, body), 10, what="the webhook to see the new device size")
    assert stored["spec"]["resourceClaims"]
    (result,) = allocation(api_client, ns, "half")
    assert result["consumedCapacity"]["memory"] == "20Gi" and "/" in result["request"]  # gpu/size-N


def _try_create(api: client.ApiClient, ns: str, body: dict[str, Any]) -> dict[str, Any] | None:
    try:
        return create(api, ns, body)
    except ApiException as e:
        if "no hami-core-gpu.project-hami.io device is published yet" in str(e.body) or "40Gi" not in str(e.body):
            return None
        raise


def test_hami_compat_examples_are_applied_unchanged_and_allocated(cluster: ControlPlane, api_client: client.ApiClient,
                                                                  ns: str) -> None:
    node_with(api_client, GPU, [gpu("gpu-0")])
    node_with(api_client, NPU, [npu("npu-0", "Ascend910B3")])
    kubectl = str(cluster.bins.path("kubectl"))
    for path in sorted(EXAMPLES.glob("*.yaml")):
        assert path.read_text().startswith("# "), f"{path.name} must open with a comment saying what it shows"
        proc = subprocess.run([kubectl, "--kubeconfig", str(cluster.kubeconfig), "apply", "-n", ns, "-f", str(path)],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
    (g,) = allocation(api_client, ns, "gpu-pod")
    assert g["driver"] == GPU and g["consumedCapacity"] == {"memory": "3000Mi", "cores": "30"}
    (a,) = allocation(api_client, ns, "ascend-pod")
    assert a["driver"] == NPU and a["consumedCapacity"] == {"memory": "28Gi", "cores": "40"}


def test_the_device_inventory_follows_slices_as_they_come_and_go(api_client: client.ApiClient) -> None:
    driver = f"{uuid.uuid4().hex[:8]}.inventory.test"
    inventory = SliceInventory(api_client)
    inventory.start()
    try:
        assert inventory.wait_ready(10)
        assert inventory.memory_sizes(driver, "memory") is None
        node = node_with(api_client, driver, [gpu("gpu-0", memory="24Gi"), gpu("gpu-1", memory="48Gi"),
                                              gpu("gpu-2", memory="24Gi")])
        assert wait_for(lambda: inventory.memory_sizes(driver, "memory"), 10, what="the slice to be seen") == (
            48 << 30, 24 << 30)
        resource: Any = client.ResourceV1Api(api_client)
        for s in resource.list_resource_slice(field_selector=f"spec.nodeName={node}").items:
            resource.delete_resource_slice(s.metadata.name)
        wait_for(lambda: inventory.memory_sizes(driver, "memory") is None, 10, what="the deletion to be seen")
    finally:
        inventory.stop()


# --- nothing leaks ------------------------------------------------------------------------------


class FakeKubelet:
    """Marks the pods bound to `node` Running and Ready, as kubelet would, so Deployments roll out."""

    def __init__(self, api: client.ApiClient, ns: str, node: str) -> None:
        self.core: Any = client.CoreV1Api(api)
        self.ns, self.node = ns, node
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.3):
            try:
                pods = self.core.list_namespaced_pod(self.ns, field_selector=f"spec.nodeName={self.node}").items
                for p in pods:
                    if p.metadata.deletion_timestamp or p.status.phase == "Running":
                        continue
                    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                    conds = [{"type": t, "status": "True", "lastTransitionTime": now}
                             for t in ("Initialized", "ContainersReady", "Ready")]
                    self.core.patch_namespaced_pod_status(p.metadata.name, self.ns, {"status": {
                        "phase": "Running", "conditions": conds, "startTime": now}})
            except ApiException:
                continue

    def __enter__(self) -> FakeKubelet:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


def test_deployment_rolled_out_twice_leaves_no_claim_once_scaled_to_zero(api_client: client.ApiClient, ns: str) -> None:
    node = node_with(api_client, GPU, [gpu("gpu-0"), gpu("gpu-1")])
    apps: Any = client.AppsV1Api(api_client)
    # Small shares: kube-scheduler 1.34 does not move on to the next shared device once the
    # first is full (kubernetes/kubernetes#133705).
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "10"}
    template = {k: v for k, v in hami_pod("x", limits, node).items() if k in ("metadata", "spec")}
    template["metadata"] = {"labels": {"app": "train"}, "annotations": {"rollout": "0"}}
    template["spec"]["terminationGracePeriodSeconds"] = 0  # no kubelet confirms a graceful stop here
    apps.create_namespaced_deployment(ns, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "train"},
                                           "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "train"}},
                                                    "template": template}})

    def rolled_out(generation: int) -> bool:
        d = apps.read_namespaced_deployment("train", ns)
        s = d.status
        return bool((s.observed_generation or 0) >= generation and s.updated_replicas == 3
                    and s.available_replicas == 3 and (s.replicas or 0) == 3)

    seen_claims: set[str] = set()
    with FakeKubelet(api_client, ns, node):
        for rollout in range(3):  # the first roll-out, then two more
            if rollout:
                apps.patch_namespaced_deployment("train", ns, {"spec": {"template": {"metadata": {"annotations": {
                    "rollout": str(rollout)}}}}})
            generation = apps.read_namespaced_deployment("train", ns).metadata.generation
            wait_for(lambda g=generation: rolled_out(g), 120, what=f"roll-out {rollout} to finish")
            seen_claims |= {c["metadata"]["name"] for c in claims_of(api_client, ns)}
        apps.patch_namespaced_deployment_scale("train", ns, {"spec": {"replicas": 0}})
        wait_for(lambda: not claims_of(api_client, ns) and not client.CoreV1Api(api_client).list_namespaced_pod(ns).items,
                 120, what="every pod and ResourceClaim to be gone")
    assert len(seen_claims) >= 9  # three generations of three pods, each with its own claim
    assert len(templates_of(api_client, ns)) == 1  # one shape, one template, reused by every pod


def test_a_deployments_users_see_the_warnings_as_events_on_their_deployment(api_client: client.ApiClient,
                                                                          ns: str) -> None:
    """An admission warning reaches whoever created the pod: for a Deployment's pods, the
    ReplicaSet controller. The webhook also posts it as an Event on the ReplicaSet and the
    Deployment (`kubectl describe deployment` shows it)."""
    apps: Any = client.AppsV1Api(api_client)
    template = {k: v for k, v in hami_pod("x", {"nvidia.com/gpu": "1"}).items() if k in ("metadata", "spec")}
    template["metadata"] = {"labels": {"app": "spread"}, "annotations": {"hami.io/node-scheduler-policy": "spread"}}
    apps.create_namespaced_deployment(ns, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "spread"},
                                           "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "spread"}},
                                                    "template": template}})
    core: Any = client.CoreV1Api(api_client)

    def events_on(kind: str) -> list[Any]:
        return [e for e in core.list_namespaced_event(ns).items
                if e.involved_object.kind == kind and e.reason == "HAMiInputNotHonoured"]

    (event,) = wait_for(lambda: events_on("Deployment"), 60, what="the webhook's Event on the Deployment")
    assert event.involved_object.name == "spread" and event.type == "Warning"
    assert "hami.io/node-scheduler-policy='spread' is not honoured under DRA" in event.message
    assert "LeastAllocated (spread)" in event.message
    assert len(events_on("ReplicaSet")) == 1, "two pods, one warning: one Event per object"
    pods = wait_for(lambda: (lambda p: p if len(p) == 2 else None)(core.list_namespaced_pod(ns).items), 30,
                    what="both pods")
    assert all(p.spec.resource_claims for p in pods)  # converted all the same


def test_a_quota_on_hamis_resources_is_named_when_conversion_bypasses_it(cluster: ControlPlane,
                                                                       api_client: client.ApiClient, ns: str) -> None:
    """The webhook strips nvidia.com/gpu before the ResourceQuota plugin counts the pod: the quota
    stops limiting converted pods. kubectl shows the warning naming it and DRA's per-class quota."""
    core: Any = client.CoreV1Api(api_client)
    core.create_namespaced_resource_quota(ns, {"metadata": {"name": "gpus"}, "spec": {"hard": {
        "requests.nvidia.com/gpu": "1"}}})
    kubectl = [str(cluster.bins.path("kubectl")), "--kubeconfig", str(cluster.kubeconfig), "-n", ns]
    for name in ("q1", "q2"):  # two GPUs under a quota of one: both admitted, as the quota no longer sees them
        proc = subprocess.run([*kubectl, "create", "-f", "-"], input=json.dumps(hami_pod(name, {"nvidia.com/gpu": "1"})),
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert ("Warning: ResourceQuota gpus: requests.nvidia.com/gpu no longer counts this pod (converted to claims);"
                f" DRA's quota counts devices per class: {GPU}.deviceclass.resource.k8s.io/devices") in proc.stderr


def test_the_api_server_keeps_its_connections_to_the_webhook(webhook: Path) -> None:
    state = install.State.load(webhook)
    assert state is not None
    with urllib.request.urlopen(f"http://127.0.0.1:{state.health_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines() if line.startswith("dra_webhook_")}
    admissions = sum(v for k, v in values.items() if k.startswith("dra_webhook_admissions_total"))
    assert values['dra_webhook_admissions_total{endpoint="mutate",verdict="converted"}'] >= 10
    assert values["dra_webhook_connections_total"] < admissions / 3, values  # TLS sessions are reused, not re-made


def test_dry_run_creates_nothing(api_client: client.ApiClient, ns: str) -> None:
    answer = create(api_client, ns, hami_pod("dry", HAMI_LIMITS), dry_run=True)
    assert answer["spec"]["resourceClaims"][0]["resourceClaimTemplateName"].startswith("hami-nvidia-")
    assert "nvidia.com/gpu" not in str(answer["spec"]["containers"])
    # The webhook writes templates inside the admission, so by now a dry run's would exist.
    assert templates_of(api_client, ns) == [] and claims_of(api_client, ns) == []
    assert client.CoreV1Api(api_client).list_namespaced_pod(ns).items == []
    create(api_client, ns, hami_pod("wet", HAMI_LIMITS))
    assert templates_of(api_client, ns) == [answer["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]]
    # Claims come from the controller, later: once the real pod's claim is there, the dry run
    # would have had its own by then too.
    made = wait_for(lambda: claims_of(api_client, ns), timeout=30, what="the real pod's claim")
    assert [c["metadata"]["name"].startswith("wet-") for c in made] == [True], made


# --- refusals -----------------------------------------------------------------------------------


def test_impossible_pods_get_a_clear_rejection_and_leave_nothing(api_client: client.ApiClient, ns: str) -> None:
    msg = refusal(api_client, ns, hami_pod("cores", {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "150"}))
    assert 'denied the request: pod' in msg and "nvidia.com/gpucores=150 is more than a device has (100" in msg
    assert "set it to 1-100" in msg
    msg = refusal(api_client, ns, hami_pod("typo", {"nvidia.com/gpu": "1", "nvidia.com/gpumemory": "3000"}))
    assert "nvidia.com/gpumemory is not a resource this webhook knows (did you mean nvidia.com/gpumem" in msg
    msg = refusal(api_client, ns, hami_pod("huge", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10000000"}))
    assert "is more than any published hami-core-gpu.project-hami.io device has (largest:" in msg
    msg = refusal(api_client, ns, hami_pod("npu", {"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "70000"}))
    assert "huawei.com/Ascend910B3-memory=70000 is more than a Ascend910B3 has (65536 MiB)" in msg
    body = hami_pod("privileged", {"nvidia.com/gpu": "1"})
    body["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    assert "container 'main' is privileged" in refusal(api_client, ns, body)
    assert templates_of(api_client, ns) == [] and client.CoreV1Api(api_client).list_namespaced_pod(ns).items == []


def test_claims_that_could_never_be_prepared_are_refused(api_client: client.ApiClient, ns: str) -> None:
    resource: Any = client.ResourceV1Api(api_client)

    def claim(name: str, exactly: dict[str, Any], config: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        devices: dict[str, Any] = {"requests": [{"name": "gpu", "exactly": exactly}]}
        if config:
            devices["config"] = config
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
                "spec": {"devices": devices}}

    def opaque(**params: Any) -> list[dict[str, Any]]:
        return [{"opaque": {"driver": "gpu.example.com", "parameters": {
            "apiVersion": "gpu.example.com/v1alpha1", "kind": "ExampleConfig", **params}}}]

    with pytest.raises(ApiException) as err:
        resource.create_namespaced_resource_claim(ns, claim("cores", {"deviceClassName": GPU, "capacity": {
            "requests": {"cores": "120"}}}))
    assert "capacity cores=120 is more than a hami-core-gpu.project-hami.io device has (100" in str(err.value.body)
    with pytest.raises(ApiException) as err:
        resource.create_namespaced_resource_claim(ns, claim("typo", {"deviceClassName": "gpu.example.com"},
                                                            opaque(mode="shared", colour="red")))
    assert "config[0] for driver gpu.example.com: field 'colour': unknown field" in str(err.value.body)
    with pytest.raises(ApiException) as err:  # a template is judged the same way
        resource.create_namespaced_resource_claim_template(ns, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "t"},
            "spec": {"spec": claim("t", {"deviceClassName": "gpu.example.com"}, opaque(mode=3))["spec"]}})
    assert "field 'mode'" in str(err.value.body)
    with pytest.raises(ApiException) as err:  # the same verdict as prepare: the config's own validate()
        resource.create_namespaced_resource_claim(ns, claim("bogus", {"deviceClassName": "gpu.example.com"},
                                                            opaque(mode="bogus")))
    assert "invalid: mode must be 'shared' or 'exclusive', not 'bogus'" in str(err.value.body)
    resource.create_namespaced_resource_claim(ns, claim("good", {"deviceClassName": "gpu.example.com"}, opaque(mode="shared")))


# --- who is served ------------------------------------------------------------------------------


def test_opted_out_and_system_namespaces_are_left_alone(api_client: client.ApiClient, ns: str) -> None:
    core: Any = client.CoreV1Api(api_client)
    opted = unique("wh-optout")
    core.create_namespace({"metadata": {"name": opted, "labels": {"hami.io/webhook": "ignore"}}})
    own = "dra-system"
    try:
        core.create_namespace({"metadata": {"name": own}})
    except ApiException as e:
        if e.status != 409:
            raise
    try:
        for where in (opted, own, "kube-system"):
            name = unique("left-alone")
            stored = create(api_client, where, hami_pod(name, HAMI_LIMITS))
            assert stored["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1", where
            assert not stored["spec"].get("resourceClaims"), where
            core.delete_namespaced_pod(name, where, grace_period_seconds=0)
        stored = create(api_client, ns, hami_pod("labelled", HAMI_LIMITS, labels={"hami.io/webhook": "ignore"}))
        assert not stored["spec"].get("resourceClaims")
    finally:
        core.delete_namespace(opted)


# --- the webhook down (last: it stops the server) -------------------------------------------------


def test_webhook_down_behaves_as_its_failure_policy_says(cluster: ControlPlane, api_client: client.ApiClient,
                                                        ns: str, webhook: Path) -> None:
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain"},
             "spec": {"containers": [{"name": "main", "image": "busybox", "resources": {"limits": {"cpu": "1"}}}]}}
    try:
        assert install.stop_server(webhook)
        msg = refusal(api_client, ns, hami_pod("while-down", HAMI_LIMITS))  # Fail: a HAMi pod is refused ...
        assert 'failed calling webhook "pods.dra-webhook.dra.project-hami.io"' in msg
        create(api_client, ns, plain)  # ... and a pod without vendor resources is not affected at all
        install.up(cluster.kubeconfig, webhook, failure_policy="Ignore")
        assert install.stop_server(webhook)
        stored = create(api_client, ns, hami_pod("ignored", HAMI_LIMITS))  # Ignore: stored as it came
        assert stored["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert not stored["spec"].get("resourceClaims")
    finally:
        install.up(cluster.kubeconfig, webhook)  # Fail again, serving
    stored = create(api_client, ns, hami_pod("back", HAMI_LIMITS))
    assert stored["spec"]["resourceClaims"]
    assert translate.CONVERTED_ANNOTATION in stored["metadata"]["annotations"]


def test_down_removes_exactly_what_up_made(cluster: ControlPlane, api_client: client.ApiClient,
                                           tmp_path: Path, webhook: Path) -> None:
    adm: Any = client.AdmissionregistrationV1Api(api_client)
    state = install.State.load(webhook)
    assert state is not None and state.running()
    done = install.down(cluster.kubeconfig, webhook)
    assert done == ["mutating webhook configuration dra-webhook", "validating webhook configuration dra-webhook",
                    f"webhook process {state.pid}"]
    assert not state.running() and not (webhook / "pki").exists() and (webhook / "webhook.log").exists()
    for read in (adm.read_mutating_webhook_configuration, adm.read_validating_webhook_configuration):
        with pytest.raises(ApiException) as err:
            read("dra-webhook")
        assert err.value.status == 404
    assert install.down(cluster.kubeconfig, webhook) == []  # twice is harmless
    install.up(cluster.kubeconfig, webhook)  # for the fixture's own teardown
