"""The watchdog's Events through the real API server: on the pod the claim is reserved for, and on
the Node for a process in no claim."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kube_helpers import create_node, unique, wait_for
from kubernetes import client

from dra._runtime.watchdog.events import ApiEvents
from dra._runtime.watchdog.model import ClaimView, Verdict

pytestmark = pytest.mark.cluster
DRIVER = "hami-core-gpu.project-hami.io"


@pytest.fixture
def namespace(api_client: client.ApiClient) -> Iterator[str]:
    ns = unique("wde")
    core: Any = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": ns}})
    yield ns
    core.delete_namespace(ns)


def reserved_claim(api: client.ApiClient, ns: str, node: str, pod_name: str, pod_uid: str) -> Any:
    resource = client.ResourceV1Api(api)
    claim = resource.create_namespaced_resource_claim(ns, {
        "metadata": {"name": "gpu"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "hami-core-gpu.project-hami.io"}}]}}})
    body = resource.read_namespaced_resource_claim("gpu", ns).to_dict()
    status = {"allocation": {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": node,
                                                       "device": "hami-gpu-0"}]},
                             "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                                 {"key": "metadata.name", "operator": "In", "values": [node]}]}]}},
              "reservedFor": [{"resource": "pods", "name": pod_name, "uid": pod_uid}]}
    resource.replace_namespaced_resource_claim_status("gpu", ns, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "gpu", "namespace": ns, "resourceVersion": body["metadata"]["resource_version"]},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "hami-core-gpu.project-hami.io"}}]}},
        "status": status})
    return claim


def test_events_land_on_the_claims_pod_and_on_the_node(api_client: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api_client)
    node = unique("wde-node")
    create_node(api_client, node)
    try:
        pod = core.create_namespaced_pod(namespace, {"metadata": {"name": "tenant"}, "spec": {
            "containers": [{"name": "main", "image": "registry.invalid/none:0"}]}})
        claim = reserved_claim(api_client, namespace, node, "tenant", pod.metadata.uid)
        view = ClaimView(claim.metadata.uid, namespace, "gpu", frozenset({"hami-gpu-0"}), {"hami-gpu-0": 1 << 30},
                         {"hami-gpu-0": 30}, frozenset())
        events = ApiEvents(api_client, DRIVER, node)
        try:
            events.emit(Verdict("unheld", "hami-gpu-0", "process 42 of claim ... holds 1024 MiB", view, 42,
                                pod.metadata.uid, None, (pod.metadata.uid,), 1.0, "kill", "process 42 killed (SIGKILL)"))
            events.emit(Verdict("unheld", "hami-gpu-1", "process 7 on device hami-gpu-1 ... (no pod)", None, 7))
            on_pod = wait_for(lambda: [e for e in core.list_namespaced_event(namespace).items
                                       if e.reason == "ProcessUnheld"] or None, 20, 0.1, "the Event on the pod")
            on_node = wait_for(lambda: [e for e in core.list_namespaced_event("default").items
                                        if e.reason == "ProcessUnheld" and e.involved_object.name == node] or None,
                               20, 0.1, "the Event on the Node")
        finally:
            events.close()
        e = on_pod[0]
        assert (e.involved_object.kind, e.involved_object.name, e.involved_object.uid) == ("Pod", "tenant",
                                                                                          pod.metadata.uid)
        assert e.type == "Warning" and e.source.component == DRIVER and e.source.host == node
        assert "Action kill: process 42 killed (SIGKILL)" in e.message
        assert on_node[0].involved_object.kind == "Node" and "process 7" in on_node[0].message
        assert events.posted == 2
    finally:
        core.delete_node(node)
