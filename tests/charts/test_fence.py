"""The admission fence of kubernetes#133705 (helm/dra-common/templates/_fence.tpl).

Offline: `helm template --kube-version v1.34.4` renders it, `--kube-version v1.35.4` does not.
Live: the chart rendered for the session's control plane and its fence objects applied; on 1.34
every request shape that reaches kube-scheduler's out-of-range index for this chart's classes is
refused at creation with a message naming the bug and the way to write it, every other shape
(one request per device, other classes) is admitted, and kube-scheduler keeps running. On 1.35+
nothing is rendered and nothing is refused.
"""

from __future__ import annotations

import copy
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chart_helpers import DRIVER_CHARTS, Tool, render, render_error
from kube_helpers import create_node, unique, wait_for
from kubernetes import client

from dra._runtime.publish import needs_fence
from dra._runtime.publish.fence import DRIVER_ANNOTATION, FENCE_LABEL, fence_policies
from dra.testing.daemon import DaemonProcess
from dra_dev.cluster.binaries import parse_version
from dra_dev.cluster.controlplane import ControlPlane

pytestmark = pytest.mark.scheduler  # `make test-versions` runs it on every minor

GPU_CLASS = "hami-core-gpu.project-hami.io"


def fence_objects(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if FENCE_LABEL in (o["metadata"].get("labels") or {})]


@pytest.mark.parametrize("chart", DRIVER_CHARTS)
def test_the_fence_is_rendered_below_1_35_only(helm: Tool, chart: str) -> None:
    on_134 = fence_objects(render(helm, chart, extra=["--kube-version", "v1.34.4"]))
    assert sorted(o["kind"] for o in on_134) == ["ValidatingAdmissionPolicy"] * 2 + ["ValidatingAdmissionPolicyBinding"] * 2
    for policy in (o for o in on_134 if o["kind"] == "ValidatingAdmissionPolicy"):
        assert policy["spec"]["failurePolicy"] == "Fail"
        assert policy["metadata"]["annotations"][DRIVER_ANNOTATION].endswith(".project-hami.io")
        assert "kubernetes#133705" in policy["spec"]["validations"][0]["messageExpression"]
    for binding in (o for o in on_134 if o["kind"] == "ValidatingAdmissionPolicyBinding"):
        assert binding["spec"]["validationActions"] == ["Deny"]
    assert fence_objects(render(helm, chart, extra=["--kube-version", "v1.35.4"])) == []
    assert fence_objects(render(helm, chart, extra=["--kube-version", "v1.37.2"])) == []
    assert fence_objects(render(helm, chart, values={"schedulerFence.enabled": False}, extra=["--kube-version", "v1.34.4"])) == []


def test_the_fence_covers_every_class_and_extended_resource_of_the_release(helm: Tool) -> None:
    classes = [{"name": GPU_CLASS, "selector": "device.driver == 'hami-core-gpu.project-hami.io'",
                "extendedResourceName": "nvidia.com/gpu"},
               {"name": "strict.project-hami.io", "selector": "device.driver == 'hami-core-gpu.project-hami.io'"}]
    objects = fence_objects(render(helm, "hami-core-gpu", values={"deviceClasses": classes}, extra=["--kube-version", "v1.34.4"]))
    claims, pods = (o for o in objects if o["kind"] == "ValidatingAdmissionPolicy")
    variables = {v["name"]: v["expression"] for p in (claims, pods) for v in p["spec"]["variables"]}
    # then the chart's mode classes of shared devices, by key (MIG devices are allocated whole: not fenced)
    modes = [f"memory-only.{GPU_CLASS}", f"mps.{GPU_CLASS}", f"strict.{GPU_CLASS}"]
    assert json.loads(variables["classes"]) == [GPU_CLASS, "strict.project-hami.io", *modes]
    assert json.loads(variables["names"]) == [f"deviceclass.resource.kubernetes.io/{GPU_CLASS}", "nvidia.com/gpu",
                                              "deviceclass.resource.kubernetes.io/strict.project-hami.io",
                                              *(f"deviceclass.resource.kubernetes.io/{m}" for m in modes)]


@pytest.mark.parametrize("bad", ["uuid' + request.userInfo.username + '", "", "a" * 33, "x/uuid"])
def test_the_distinct_attribute_named_in_the_message_is_an_identifier(helm: Tool, bad: str) -> None:
    """It is written into a CEL string literal: the schema refuses anything but a C identifier."""
    error = render_error(helm, "hami-core-gpu", values={"schedulerFence.distinctAttribute": bad})
    assert "/schedulerFence/distinctAttribute" in error, error


# --- live --------------------------------------------------------------------------------------

def exact(count: int | None = None, mode: str | None = None, cls: str = GPU_CLASS) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": cls, "capacity": {"requests": {"cores": "10"}}}
    if count is not None:
        body["count"] = count
    if mode is not None:
        body["allocationMode"] = mode
        body.pop("capacity")
    return body


def claim(name: str, *requests: dict[str, Any], constraints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name}, "spec": {"devices": devices}}


FENCED = {  # name -> claim spec that reaches Devices[1] of a one-device slice on 1.34
    "count-two": claim("count-two", {"name": "gpus", "exactly": exact(count=2)}),
    "count-many": claim("count-many", {"name": "gpus", "exactly": exact(count=32)}),
    "all-mode": claim("all-mode", {"name": "gpus", "exactly": exact(mode="All")}),
    "first-available": claim("first-available", {"name": "gpus", "firstAvailable": [
        {"name": "one-big", "deviceClassName": "other.example.com"},
        {"name": "two-small", **exact(count=2)}]}),
    "second-request": claim("second-request", {"name": "a", "exactly": exact()}, {"name": "b", "exactly": exact(count=3)}),
}
ADMITTED = {
    "one-share": claim("one-share", {"name": "gpu", "exactly": exact()}),
    "per-device": claim("per-device", {"name": "a", "exactly": exact()}, {"name": "b", "exactly": exact()},
                        constraints=[{"requests": ["a", "b"], "distinctAttribute": f"{GPU_CLASS}/uuid"}]),
    "other-class": claim("other-class", {"name": "x", "exactly": exact(count=2, cls="other.example.com")}),
}


def as_template(c: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": c["metadata"]["name"]}, "spec": {"spec": copy.deepcopy(c["spec"])}}


def pod(name: str, resources: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"containers": [
        {"name": "main", "image": "none", "resources": {"requests": resources, "limits": resources}}]}}


def create(api: client.ApiClient, ns: str, obj: dict[str, Any]) -> str | None:
    """Server-side dry-run create (admission runs, nothing is stored); the refusal's message or None."""
    resource: Any = client.ResourceV1Api(api)
    try:
        if obj.get("kind") == "ResourceClaim":
            resource.create_namespaced_resource_claim(ns, obj, dry_run="All")
        elif obj.get("kind") == "ResourceClaimTemplate":
            resource.create_namespaced_resource_claim_template(ns, obj, dry_run="All")
        else:
            client.CoreV1Api(api).create_namespaced_pod(ns, obj, dry_run="All")
    except client.ApiException as e:
        if e.status in (400, 403, 422):
            return str(json.loads(e.body or "{}").get("message", e.body))
        raise
    return None


@pytest.fixture
def fenced_release(cluster: ControlPlane, helm: Tool, kubectl: Tool, api_client: client.ApiClient) -> Iterator[dict[str, Any]]:
    """The hami-core-gpu chart rendered for this cluster's version; its fence objects applied."""
    release, ns = unique("fence"), unique("fence")
    classes = [{"name": GPU_CLASS, "selector": "device.driver == 'hami-core-gpu.project-hami.io'",
                "extendedResourceName": ""}]
    objects = fence_objects(render(helm, "hami-core-gpu", release=release, values={"deviceClasses": classes},
                                   extra=["--kube-version", cluster.k8s_version]))
    client.CoreV1Api(api_client).create_namespace({"metadata": {"name": ns}})
    manifest = "\n---\n".join(json.dumps(o) for o in objects)
    if objects:
        kubectl.run("apply", "-f", "-", stdin=manifest)
    try:
        yield {"namespace": ns, "objects": objects}
    finally:
        if objects:
            kubectl.run("delete", "--ignore-not-found", "-f", "-", stdin=manifest)
        client.CoreV1Api(api_client).delete_namespace(ns)


@pytest.mark.cluster
@pytest.mark.scheduler
def test_requests_for_several_devices_are_refused_on_1_34_with_the_way_out(
    cluster: ControlPlane, api_client: client.ApiClient, fenced_release: dict[str, Any]
) -> None:
    ns = fenced_release["namespace"]
    minor, _ = parse_version(cluster.k8s_version)
    if not needs_fence((1, minor)):
        assert fenced_release["objects"] == []  # fixed scheduler: nothing to fence
        for obj in [*FENCED.values(), *ADMITTED.values()]:
            assert create(api_client, ns, obj) is None, obj["metadata"]["name"]
        return
    scheduler_pid = cluster.state.processes["kube-scheduler"].pid if cluster.state else None
    assert fence_policies(api_client, "hami-core-gpu.project-hami.io")  # what the daemon's start check finds
    # Policies take effect once the API server's informer has them: wait for the first refusal.
    message = wait_for(lambda: create(api_client, ns, FENCED["count-two"]), 30, what="the fence in force")
    assert "denied request: ResourceClaim count-two: request gpus asks for more than one device" in message, message
    assert "kubernetes#133705" in message and "crashes the scheduler" in message
    assert "one request per device" in message and f"distinctAttribute {GPU_CLASS}/uuid" in message
    for name, obj in FENCED.items():
        for form in (obj, as_template(obj)):
            got = create(api_client, ns, form)
            assert got is not None and "kubernetes#133705" in got, (form["kind"], name, got)
            assert f"{form['kind']} {name}:" in got, got
    for name, obj in ADMITTED.items():
        for form in (obj, as_template(obj)):
            assert create(api_client, ns, form) is None, (form["kind"], name)
    # Written through resource.k8s.io/v1beta2 (served here): converted to v1 and refused alike.
    beta: Any = client.ResourceV1beta2Api(api_client)
    with pytest.raises(client.ApiException) as refused:
        beta.create_namespaced_resource_claim(ns, {**FENCED["count-two"], "apiVersion": "resource.k8s.io/v1beta2"}, dry_run="All")
    assert refused.value.status in (400, 403, 422) and "kubernetes#133705" in (refused.value.body or ""), refused.value.body
    implicit = f"deviceclass.resource.kubernetes.io/{GPU_CLASS}"
    got = create(api_client, ns, pod("two-gpus", {implicit: "2"}))
    assert got is not None and "container main asks for more than one of" in got and "kubernetes#133705" in got, got
    assert create(api_client, ns, pod("one-gpu", {implicit: "1"})) is None
    assert create(api_client, ns, pod("cpu-only", {"cpu": "100m"})) is None
    # Nothing reached the scheduler: it is the same process, leading and healthy.
    health = cluster.health()
    assert health.healthy, health
    assert cluster.state is not None and cluster.state.processes["kube-scheduler"].pid == scheduler_pid


def daemon_log(cluster: ControlPlane, api_client: client.ApiClient) -> str:
    """The log of the example driver's daemon (gpu.example.com) once it has published and checked."""
    node = unique("fence-node")
    create_node(api_client, node)
    try:
        with tempfile.TemporaryDirectory(prefix="dra-fd-", dir="/tmp") as work:
            daemon = DaemonProcess("example", node, cluster.kubeconfig, Path(work), args=["--set", "count=2"]).start()
            try:
                # No kubelet registers it here: the log tells when it has published and checked.
                return wait_for(lambda: (log := daemon.log()) and any(
                    m in log for m in (" W dra._runtime.publish", "fence of kubernetes#133705 found", "packed slices")) and log, 60,
                                what="the daemon's fence check")
            finally:
                daemon.stop()
    finally:
        client.CoreV1Api(api_client).delete_node(node)


@pytest.mark.cluster
def test_a_daemon_on_1_34_warns_once_when_no_fence_guards_its_driver(
    cluster: ControlPlane, helm: Tool, kubectl: Tool, api_client: client.ApiClient
) -> None:
    minor, _ = parse_version(cluster.k8s_version)
    log = daemon_log(cluster, api_client)
    warnings = [line for line in log.splitlines() if "kubernetes#133705" in line and " W dra." in line]
    if not needs_fence((1, minor)):
        assert warnings == [] and "publishing packed slices" in log, log
        return
    assert len(warnings) == 1, log
    assert "no ValidatingAdmissionPolicy labelled dra.project-hami.io/fence=kubernetes-133705" in warnings[0]
    # The chart's fence, its policies annotated for the example driver (the chart's schema pins
    # its own driver name): found, no warning.
    objects = fence_objects(render(helm, "hami-core-gpu", release=unique("fd"), extra=["--kube-version", cluster.k8s_version]))
    for o in objects:
        if o["kind"] == "ValidatingAdmissionPolicy":
            o["metadata"]["annotations"][DRIVER_ANNOTATION] = "gpu.example.com"
    manifest = "\n---\n".join(json.dumps(o) for o in objects)
    kubectl.run("apply", "-f", "-", stdin=manifest)
    try:
        log = daemon_log(cluster, api_client)
        assert "admission fence of kubernetes#133705 found" in log, log
        assert not [line for line in log.splitlines() if "kubernetes#133705" in line and " W dra." in line], log
    finally:
        kubectl.run("delete", "--ignore-not-found", "-f", "-", stdin=manifest)
