"""The rig judged by upstream behaviour only: kube-scheduler allocates consumable capacity.

No project driver is involved: a hand-written ResourceSlice offers one shareable device with
`cores` (100) and `memory` (16Gi); claims of 60+8Gi and 50+4Gi cannot both fit (110 > 100 cores),
while 60 + 40 can. The scheduler, not our code, decides.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from kube_helpers import create_node, pod_scheduled, unique, wait_for
from kubernetes import client

from dra.testing.claims import claim_manifest, pod_manifest
from dra_dev.cluster.controlplane import ControlPlane

pytestmark = pytest.mark.cluster
DRIVER = "smoke.example.com"


def _claim(name: str, cores: str, memory: str | None = None) -> dict[str, Any]:
    return claim_manifest(name, DRIVER, cores=cores, **({"memory": memory} if memory else {}))


def _pod(name: str, claim: str) -> dict[str, Any]:
    return pod_manifest(name, [claim])


def test_scheduler_shares_one_device_by_consumable_capacity(api_client: client.ApiClient) -> None:
    core, resource = client.CoreV1Api(api_client), client.ResourceV1Api(api_client)
    node_a, node_b = unique("smoke-a"), unique("smoke-b")
    create_node(api_client, node_a)
    create_node(api_client, node_b)
    ns = unique("smoke")
    core.create_namespace({"metadata": {"name": ns}})
    resource.create_device_class({
        "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    })
    resource.create_resource_slice({
        "metadata": {"name": f"{node_a}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_a,
            "pool": {"name": node_a, "generation": 1, "resourceSliceCount": 1},
            "devices": [{
                "name": "dev-0",
                "allowMultipleAllocations": True,
                "capacity": {
                    "cores": {"value": "100", "requestPolicy": {
                        "default": "100", "validRange": {"min": "1", "max": "100", "step": "1"}}},
                    "memory": {"value": "16Gi", "requestPolicy": {
                        "default": "16Gi", "validRange": {"min": "1Mi", "max": "16Gi", "step": "1Mi"}}},
                },
            }],
        },
    })
    # The API server must have kept the consumable-capacity fields (gate on), or nothing below means anything.
    stored = resource.read_resource_slice(f"{node_a}-{DRIVER}").to_dict()
    dev = stored["spec"]["devices"][0]
    assert dev["allow_multiple_allocations"] is True
    assert dev["capacity"]["cores"]["request_policy"]["valid_range"]["max"] == "100"

    resource.create_namespaced_resource_claim(ns, _claim("first", "60", "8Gi"))
    core.create_namespaced_pod(ns, _pod("first", "first"))
    wait_for(lambda: pod_scheduled(api_client, ns, "first")[0], 60, what="pod 'first' to be scheduled")
    assert core.read_namespaced_pod("first", ns).spec.node_name == node_a

    first = resource.read_namespaced_resource_claim("first", ns).to_dict()
    (result,) = first["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"], result["device"]) == (DRIVER, node_a, "dev-0")
    assert result["consumed_capacity"] == {"cores": "60", "memory": "8Gi"}
    assert result["share_id"], "a shared device's result must carry a shareID"
    assert first["status"]["reserved_for"][0]["name"] == "first"

    resource.create_namespaced_resource_claim(ns, _claim("second", "50", "4Gi"))
    core.create_namespaced_pod(ns, _pod("second", "second"))

    def unschedulable() -> str | None:
        ok, why = pod_scheduled(api_client, ns, "second")
        assert not ok, "60 + 50 cores exceed the device's 100: the second pod must not be scheduled"
        return why if why.startswith("Unschedulable") else None

    reason = wait_for(unschedulable, 60, what="pod 'second' to be marked Unschedulable")
    assert "cannot allocate all claims" in reason or "resourceclaim" in reason.lower(), reason
    assert resource.read_namespaced_resource_claim("second", ns).status.allocation is None

    # Without a memory request the policy default (the full 16Gi) would be asked for, which no
    # longer fits beside the first claim's 8Gi: the third claim names its memory.
    resource.create_namespaced_resource_claim(ns, _claim("third", "40", "4Gi"))
    core.create_namespaced_pod(ns, _pod("third", "third"))
    wait_for(lambda: pod_scheduled(api_client, ns, "third")[0], 60, what="pod 'third' (40 cores) to fit")
    third = resource.read_namespaced_resource_claim("third", ns).to_dict()
    (r3,) = third["status"]["allocation"]["devices"]["results"]
    assert r3["device"] == "dev-0" and r3["consumed_capacity"] == {"cores": "40", "memory": "4Gi"}
    assert r3["share_id"] != result["share_id"]
    assert not pod_scheduled(api_client, ns, "second")[0]


def test_binaries_report_the_pinned_version(cluster: ControlPlane) -> None:
    v = cluster.k8s_version
    for name in ("kube-apiserver", "kube-scheduler", "kube-controller-manager"):
        out = subprocess.run([str(cluster.bins.path(name)), "--version"], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == f"Kubernetes {v}", (name, out.stdout)
    kubectl = subprocess.run([str(cluster.bins.path("kubectl")), "version", "--client", "-o", "json"],
                             capture_output=True, text=True, check=True)
    assert f'"gitVersion": "{v}"' in kubectl.stdout
    etcd = subprocess.run([str(cluster.bins.path("etcd")), "--version"], capture_output=True, text=True, check=True)
    assert f"etcd Version: {cluster.bins.etcd_version.lstrip('v')}" in etcd.stdout
    assert cluster.health().version == v
    served = subprocess.run([str(cluster.bins.path("kubectl")), "--kubeconfig", str(cluster.kubeconfig),
                             "version", "-o", "json"], capture_output=True, text=True, check=True)
    assert served.stdout.count(f'"gitVersion": "{v}"') == 2  # client and server
