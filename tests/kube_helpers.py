"""Small helpers for tests against the real API server: nodes, waiting, unique names."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from kubernetes import client

from dra._runtime import registry
from dra._runtime.wait import until

T = TypeVar("T")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_for(fn: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.2, what: str = "condition") -> T:
    """Poll `fn` until it returns something truthy; AssertionError naming `what` after `timeout`
    seconds (the framework's one poll loop, with a test's failure)."""
    return until(fn, timeout=timeout, interval=interval, what=what, error=AssertionError)


def create_node(api: client.ApiClient, name: str, labels: dict[str, str] | None = None) -> client.V1Node:
    """A schedulable, Ready Node object (no kubelet runs; the node-lifecycle controller is off)."""
    core = client.CoreV1Api(api)
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(
        name=name, labels={"kubernetes.io/hostname": name, **(labels or {})})))
    resources = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    core.patch_node_status(name, {"status": {
        "capacity": resources,
        "allocatable": resources,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "fake node for tests", "lastHeartbeatTime": None}],
    }})
    # TaintNodesByCondition admission marks new nodes not-ready; nothing would lift that here.
    core.patch_node(name, {"spec": {"taints": None}})
    return core.read_node(name)


def pod_scheduled(api: client.ApiClient, namespace: str, name: str) -> tuple[bool, str]:
    """(scheduled, reason/message of the PodScheduled condition)."""
    pod = client.CoreV1Api(api).read_namespaced_pod(name, namespace)
    for cond in pod.status.conditions or []:
        if cond.type == "PodScheduled":
            return cond.status == "True", f"{cond.reason}: {cond.message}"
    return False, "no PodScheduled condition yet"


def clear_driver_nodes(api: client.ApiClient, driver: str, keep_prefix: str = "real-") -> list[str]:
    """Delete the Nodes (and their ResourceSlices) that publish `driver`'s devices, left in the
    session's control plane by earlier tests whose daemons are gone: the demo refuses to run
    beside another node of its driver (a claim could land there). A real node is kept."""
    resource: Any = client.ResourceV1Api(api)
    core = client.CoreV1Api(api)
    gone: list[str] = []
    for s in resource.list_resource_slice().items:
        node = s.spec.node_name or ""
        if s.spec.driver != driver or node.startswith(keep_prefix):
            continue
        with contextlib.suppress(client.ApiException):
            resource.delete_resource_slice(s.metadata.name)
        if node and node not in gone:
            with contextlib.suppress(client.ApiException):
                core.delete_node(node)
            gone.append(node)
    until(lambda: not [s for s in resource.list_resource_slice().items
                       if s.spec.driver == driver and not (s.spec.node_name or "").startswith(keep_prefix)],
          timeout=30, what=f"the old {driver} slices to go")
    return gone


def clear_demo_drivers(api: client.ApiClient) -> list[str]:
    """Before a demo in the session's control plane: the nodes earlier tests left publishing an
    installed driver (the demo refuses to run beside another node of its driver)."""
    return [node for driver in registry.driver_classes() for node in clear_driver_nodes(api, driver)]
