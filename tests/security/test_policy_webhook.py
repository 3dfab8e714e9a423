"""The webhook survives its callers (security review 2026-12, §4 and findings 6 and 8; review
2026-12-04 #12: at most `translate.MAX_SHAPES_PER_POD` templates per admission).

At 165651d: a valid quantity such as ``nvidia.com/gpumem: "1e999999999"`` stalled a replica for
minutes in ``int(Decimal)``; ``/mutate`` created templates in whatever namespace the request body
named; a template was adopted by its label alone; nothing authenticated the caller and every
connection got a thread. Each is shown answered here: in-process (timed), over HTTPS (client
certificates, bounded threads) and through the real API server (the refusal a user sees).
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_helpers import create_node, unique, wait_for
from kubernetes import client
from kubernetes.client.rest import ApiException

from dra._runtime import registry
from dra._runtime.publish.desired import desired_pool, slice_object
from dra.driver import Capacity, Device, RequestPolicy
from dra.webhook import translate, vendors
from dra.webhook.classes import DeviceClassReader
from dra.webhook.inventory import StaticInventory
from dra.webhook.review import Admission
from dra.webhook.server import BACKLOG, WORKERS, WebhookServer
from dra.webhook.templates import TemplateStore
from dra_dev import webhook_local as install
from dra_dev.cluster.certs import new_ca, new_serving_cert, write_pair, write_pki
from dra_dev.cluster.controlplane import ControlPlane

GPU = "hami-core-gpu.project-hami.io"
MAPPING = vendors.load()
HUGE = ["1e999999999", "1e1000000", "-1e30", "9" * 200]


class RecordingTemplates:
    def __init__(self) -> None:
        self.created: list[Mapping[str, Any]] = []

    def ensure(self, body: Mapping[str, Any]) -> None:
        self.created.append(body)


def pod_review(limits: Mapping[str, str], namespace: str = "team-a", object_namespace: str | None = None,
               kind: str = "Pod") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p"}
    if object_namespace is not None:
        meta["namespace"] = object_namespace
    pod = {"metadata": meta, "spec": {"containers": [{"name": "main", "resources": {"limits": dict(limits)}}]}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": kind}, "operation": "CREATE",
        "namespace": namespace, "object": pod}}


def admission(templates: Any = None) -> Admission:
    return Admission(MAPPING, StaticInventory({GPU: (80 << 30,)}), templates, registry.driver_classes())


@pytest.mark.parametrize("value", HUGE)
def test_a_huge_quantity_is_refused_with_the_limit_in_milliseconds(value: str) -> None:
    t = RecordingTemplates()
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": value}
    webhook = admission(t)
    t0 = time.thread_time()  # CPU time of this thread: the parse's cost, not the machine's load
    mutated = webhook.mutate(pod_review(limits))["response"]
    validated = webhook.validate(pod_review(limits))["response"]
    took = time.thread_time() - t0
    assert took < 0.1, f"{value}: {took * 1000:.1f} ms"
    assert mutated["allowed"] is True and "patch" not in mutated and t.created == []  # left for /validate
    assert validated["allowed"] is False
    assert "10^18" in validated["status"]["message"] and "nvidia.com/gpumem" in validated["status"]["message"]


@pytest.mark.parametrize("value", HUGE)
def test_a_huge_claim_capacity_is_refused_with_the_limit_in_milliseconds(value: str) -> None:
    claim = {"metadata": {"name": "c"}, "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": GPU, "capacity": {"requests": {"memory": value, "cores": value}}}}]}}}
    review = pod_review({}, kind="ResourceClaim")
    review["request"]["object"] = claim
    webhook = admission()
    t0 = time.thread_time()
    resp = webhook.validate(review)["response"]
    assert time.thread_time() - t0 < 0.1
    assert resp["allowed"] is False and "10^18" in resp["status"]["message"]


@pytest.mark.parametrize(("namespace", "object_namespace"), [("kube-system", "team-a"), ("team-b", "team-a"),
                                                              ("", "team-a"), ("kube-system", None)])
def test_templates_are_created_only_in_the_namespace_of_the_pod(namespace: str, object_namespace: str | None) -> None:
    t = RecordingTemplates()
    resp = admission(t).mutate(pod_review({"nvidia.com/gpu": "1"}, namespace, object_namespace))["response"]
    assert resp["allowed"] is False and "request.namespace" in resp["status"]["message"]
    assert t.created == []  # no create call: the forged review names another namespace
    admission(t).mutate(pod_review({"nvidia.com/gpu": "1"}, "team-a", "team-a"))
    assert [b["metadata"]["namespace"] for b in t.created] == ["team-a"]


def shaped_pod_review(containers: int, init_containers: int = 0, distinct: bool = True) -> dict[str, Any]:
    """A pod whose every container (and init container) asks for its own `nvidia.com/gpumem`; the
    init containers' more than any container's, so none uses a container's claim (translate's rule)."""
    review = pod_review({})
    spec = review["request"]["object"]["spec"]

    def ctr(name: str, i: int, base: int = 1024) -> dict[str, Any]:
        return {"name": name, "resources": {"limits": {"nvidia.com/gpumem": str(base + (i if distinct else 0))}}}

    spec["initContainers"] = [ctr(f"init-{i}", i, 60000) for i in range(init_containers)]
    spec["containers"] = [ctr(f"c-{i}", init_containers + i) for i in range(containers)]
    return review


def test_a_pod_of_200_distinct_shapes_is_refused_by_mutate_before_any_template() -> None:
    """review 2026-12-04 #12 (WH2): 200 containers of distinct nvidia.com/gpumem made 200
    ResourceClaimTemplates in one admission (2000 in the probe); now /mutate refuses the pod with
    the limit in its message and creates none."""
    t = RecordingTemplates()
    resp = admission(t).mutate(shaped_pod_review(200))["response"]
    assert resp["allowed"] is False and t.created == []
    message = resp["status"]["message"]
    assert "200 distinct device requests" in message and f"at most {translate.MAX_SHAPES_PER_POD} per pod" in message
    assert "--max-shapes-per-pod" in message and "nothing was created" in message


@pytest.mark.parametrize(("init", "containers", "allowed"), [(0, 32, True), (16, 16, True), (16, 17, False),
                                                             (33, 0, False)])
def test_containers_and_init_containers_count_toward_the_shape_limit(init: int, containers: int,
                                                                     allowed: bool) -> None:
    """review 2026-12-04 #12: 32 distinct shapes are converted (32 templates); the 33rd, in a
    container or an init container, refuses the pod."""
    t = RecordingTemplates()
    resp = admission(t).mutate(shaped_pod_review(containers, init))["response"]
    assert resp["allowed"] is allowed, resp
    assert len(t.created) == (32 if allowed else 0)
    assert ("patch" in resp) is allowed


def test_many_containers_of_one_shape_make_one_template_and_the_limit_is_a_setting() -> None:
    """review 2026-12-04 #12: the limit counts shapes, not containers; the admin may change it."""
    t = RecordingTemplates()
    assert admission(t).mutate(shaped_pod_review(200, distinct=False))["response"]["allowed"] is True
    assert len(t.created) == 1
    strict = Admission(MAPPING, StaticInventory({GPU: (80 << 30,)}), RecordingTemplates(), registry.driver_classes(),
                       max_shapes_per_pod=2)
    resp = strict.mutate(shaped_pod_review(3))["response"]
    assert resp["allowed"] is False and "at most 2 per pod" in resp["status"]["message"]


# --- over HTTPS: who may call, and how many connections cost a thread ---------------------------


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[WebhookServer, Path, Any]]:
    ca, ca_key = new_ca("serving-ca")
    cert, key = new_serving_cert(ca, ca_key, "dra-webhook", ["localhost"], ["127.0.0.1"])
    write_pair(tmp_path / "ca.crt", tmp_path / "ca.key", ca, ca_key)
    write_pair(tmp_path / "tls.crt", tmp_path / "tls.key", cert, key)
    callers = write_pki(tmp_path / "api-server-pki")  # its CA signs the API server's client certificate
    srv = WebhookServer(admission(RecordingTemplates()), tmp_path / "tls.crt", tmp_path / "tls.key", port=0,
                        host="127.0.0.1", health_port=0, client_ca=callers.ca_cert)
    srv.start()
    yield srv, tmp_path / "ca.crt", callers
    srv.stop()


def post(port: int, ctx: ssl.SSLContext) -> int:
    body = json.dumps(pod_review({"nvidia.com/gpu": "1"})).encode()
    req = urllib.request.Request(f"https://127.0.0.1:{port}/validate", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, context=ctx, timeout=5) as resp:
        return int(resp.status)


def test_only_a_caller_with_the_api_servers_client_certificate_is_answered(served: tuple[WebhookServer, Path, Any]
                                                                            ) -> None:
    srv, ca, callers = served
    anonymous = ssl.create_default_context(cafile=str(ca))
    with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
        post(srv.port, anonymous)
    other, other_key = new_ca("someone-else")  # a self-made certificate is no better
    write_pair(ca.parent / "other.crt", ca.parent / "other.key", other, other_key)
    forged = ssl.create_default_context(cafile=str(ca))
    forged.load_cert_chain(str(ca.parent / "other.crt"), str(ca.parent / "other.key"))
    with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
        post(srv.port, forged)
    api_server = ssl.create_default_context(cafile=str(ca))
    api_server.load_cert_chain(str(callers.admin_cert), str(callers.admin_key))
    assert post(srv.port, api_server) == 200


def test_idle_connections_cost_no_thread_past_the_pool(served: tuple[WebhookServer, Path, Any]) -> None:
    srv, ca, callers = served
    before = threading.active_count()
    socks = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(300)]
    try:
        # Past workers + backlog, a new connection is closed at once instead of waiting.
        wait_for(lambda: srv.metrics.refused._value.get() >= 300 - WORKERS - BACKLOG or None, 10,
                 what="the connections past the pool and backlog to be closed")
        assert threading.active_count() - before <= 2 * WORKERS  # both ports' pools at most, not 300
    finally:
        for s in socks:
            s.close()
    api_server = ssl.create_default_context(cafile=str(ca))
    api_server.load_cert_chain(str(callers.admin_cert), str(callers.admin_key))

    def answered() -> int | None:
        try:
            return post(srv.port, api_server)
        except (OSError, urllib.error.URLError):
            return None

    # the idle ones time out (REQUEST_TIMEOUT) and free their workers
    assert wait_for(answered, 15, 0.05, what="a request served after the idle connections closed") == 200


# --- through the real API server ------------------------------------------------------------------

@pytest.fixture(scope="module")
def webhook(cluster: ControlPlane, api_client: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[str]:
    resource: Any = client.ResourceV1Api(api_client)
    made = False
    try:
        resource.create_device_class({"metadata": {"name": GPU}, "spec": {"selectors": [
            {"cel": {"expression": f'device.driver == "{GPU}"'}}]}})
        made = True
    except ApiException as e:
        if e.status != 409:
            raise
    directory = tmp_path_factory.mktemp("policy-webhook")
    install.up(cluster.kubeconfig, directory, name="dra-policy-webhook")
    node = unique("polwh")
    create_node(api_client, node)
    memory = "80Gi"
    dev = Device(name="gpu-0", attributes={"uuid": "GPU-policy-0", "productName": "NVIDIA H200"},
                 capacity={"cores": Capacity("100", RequestPolicy(default="100", min="1", max="100", step="1")),
                           "memory": Capacity(memory, RequestPolicy(default=memory, min="1Mi", max=memory,
                                                                    step="1Mi"))},
                 allow_multiple_allocations=True)
    pool = desired_pool(GPU, node, [dev])
    uid = client.CoreV1Api(api_client).read_node(node).metadata.uid
    resource.create_resource_slice(slice_object(pool, 0, 1, uid))
    ns = unique("polwh")
    client.CoreV1Api(api_client).create_namespace({"metadata": {"name": ns}})
    yield ns
    install.down(cluster.kubeconfig, directory, name="dra-policy-webhook")
    client.CoreV1Api(api_client).delete_namespace(ns)
    for s in resource.list_resource_slice(field_selector=f"spec.nodeName={node}").items:
        resource.delete_resource_slice(s.metadata.name)
    client.CoreV1Api(api_client).delete_node(node)
    if made:
        resource.delete_device_class(GPU)


def refusal(call: Any) -> tuple[str, float]:
    t0 = time.monotonic()
    with pytest.raises(ApiException) as err:
        call()
    return str(json.loads(str(err.value.body))["message"]), time.monotonic() - t0


def hami_pod(name: str, limits: Mapping[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "main", "image": "busybox", "resources": {"limits": dict(limits)}}]}}


@pytest.mark.cluster
def test_the_api_server_refuses_a_huge_quantity_at_once(api_client: client.ApiClient, webhook: str) -> None:
    # 1e1000000: int() of it took 35 s at 165651d. (kube-apiserver v1.34.4 itself times out on
    # 1e999999999 before calling any webhook: measured 34 s with no webhook registered.)
    core: Any = client.CoreV1Api(api_client)
    message, took = refusal(lambda: core.create_namespaced_pod(webhook, hami_pod("huge", {
        "nvidia.com/gpu": "1", "nvidia.com/gpumem": "1e1000000"})))
    assert "10^18" in message, message
    assert took < 5, f"{took:.1f} s: the webhook must answer in milliseconds, not at the API server's timeout"


@pytest.mark.cluster
def test_the_api_server_refuses_a_claim_that_lifts_its_compute_limit(api_client: client.ApiClient,
                                                                    webhook: str) -> None:
    resource: Any = client.ResourceV1Api(api_client)
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "opt-out"},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU}}],
                                  "config": [{"requests": ["gpu"], "opaque": {"driver": GPU, "parameters": {
                                      "apiVersion": "hami-core-gpu.project-hami.io/v1alpha1", "kind": "GpuConfig",
                                      "computeLimit": False}}}]}}}
    message, _ = refusal(lambda: resource.create_namespaced_resource_claim(webhook, claim))
    assert "computeLimit=false is weaker than the default true" in message and "allowClaimLoosening" in message


def webhook_template(limits: Mapping[str, str], namespace: str, mapping: vendors.VendorMapping = MAPPING
                     ) -> dict[str, Any]:
    """The ResourceClaimTemplate the webhook writes for a pod asking `limits`: what a tenant copies."""
    inventory = StaticInventory({GPU: (80 << 30,)})
    plan = translate.plan_pod(hami_pod("x", limits), mapping, inventory, lambda name: True)
    assert not plan.problems, plan.problems
    (share,) = {cs.share for cs in plan.shares}
    return translate.template_object(share, namespace, inventory)


def tampered(body: Mapping[str, Any]) -> dict[str, Any]:
    """`body` with the first request's memory cut to 1Mi: valid, and the victims would get 1Mi."""
    planted: dict[str, Any] = json.loads(json.dumps(body))
    request = planted["spec"]["spec"]["devices"]["requests"][0]
    first = request["exactly"] if "exactly" in request else request["firstAvailable"][0]
    first["capacity"]["requests"]["memory"] = "1Mi"
    return planted


def referenced(api: client.ApiClient, namespace: str, limits: Mapping[str, str]) -> list[str]:
    """The templates the API server's webhook makes a pod asking `limits` reference (a dry run:
    nothing is created)."""
    core: Any = client.CoreV1Api(api)
    resp = core.create_namespaced_pod(namespace, hami_pod("probe", limits), dry_run="All", _preload_content=False)
    return [c["resourceClaimTemplateName"] for c in json.loads(resp.data)["spec"]["resourceClaims"]]


def plant_then_victim(api: client.ApiClient, namespace: str, limits: Mapping[str, str]) -> None:
    """A tenant plants the template the webhook would use for `limits`, with the webhook's name and
    label and 1Mi of memory: the victim's pod is refused; the webhook's own template is adopted."""
    body = webhook_template(limits, namespace)
    # The test's assumption, checked: this is the template the running webhook would reference.
    assert referenced(api, namespace, limits) == [body["metadata"]["name"]]
    resource: Any = client.ResourceV1Api(api)
    resource.create_namespaced_resource_claim_template(namespace, tampered(body))
    core: Any = client.CoreV1Api(api)
    victim = unique("victim")
    message, _ = refusal(lambda: core.create_namespaced_pod(namespace, hami_pod(victim, limits)))
    assert "another spec" in message and body["metadata"]["name"] in message, message
    # The webhook's own template (same name, its spec) is adopted: delete the planted one, retry.
    resource.delete_namespaced_resource_claim_template(body["metadata"]["name"], namespace)
    resource.create_namespaced_resource_claim_template(namespace, body)
    core.create_namespaced_pod(namespace, hami_pod(victim, limits))


@pytest.mark.cluster
def test_a_planted_template_with_the_webhooks_label_is_not_adopted(api_client: client.ApiClient, webhook: str) -> None:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000", "nvidia.com/gpucores": "20"}
    body = webhook_template(limits, webhook)
    resource: Any = client.ResourceV1Api(api_client)
    planted = json.loads(json.dumps(body))
    planted["spec"]["spec"]["devices"]["config"] = [{"requests": [], "opaque": {"driver": GPU, "parameters": {
        "apiVersion": "hami-core-gpu.project-hami.io/v1alpha1", "kind": "GpuConfig", "preload": "env"}}}]
    message, _ = refusal(lambda: resource.create_namespaced_resource_claim_template(webhook, planted))
    assert "preload=env is weaker" in message  # a loosening plant does not even get stored
    plant_then_victim(api_client, webhook, limits)


MIG_CLASSES = Path(__file__).resolve().parents[2] / "examples" / "hami-core-gpu" / "mig-mps" / "deviceclasses.yaml"
MIG_CLASS = f"mig.{GPU}"


@pytest.fixture
def mig_class(api_client: client.ApiClient) -> Iterator[str]:
    """The MIG DeviceClass exists (as after tests/hami_core_gpu/test_mig_e2e.py, or on a MIG cluster)."""
    resource: Any = client.ResourceV1Api(api_client)
    (body,) = [d for d in yaml.safe_load_all(MIG_CLASSES.read_text()) if d["metadata"]["name"] == MIG_CLASS]
    made = False
    try:
        resource.create_device_class(body)
        made = True
    except ApiException as e:
        if e.status != 409:
            raise
    yield MIG_CLASS
    if made:
        resource.delete_device_class(MIG_CLASS)


@pytest.mark.cluster
def test_a_planted_template_is_not_adopted_where_the_mig_class_exists(api_client: client.ApiClient, webhook: str,
                                                                      mig_class: str) -> None:
    # At 39eba50 the MIG class changed a plain pod's claims (a MIG fallback), so the template the
    # tenant copied from the shipped mapping was not the one the webhook used: the victim got
    # the webhook's own, and this check was never reached. Now the claims do not depend on it.
    plant_then_victim(api_client, webhook, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2500",
                                            "nvidia.com/gpucores": "25"})


@pytest.mark.cluster
def test_with_the_mig_fallback_on_a_planted_template_is_not_adopted(api_client: client.ApiClient, webhook: str,
                                                                    mig_class: str) -> None:
    """The admin's opt-in (--unannotated-modes nvidia=hami-core,mig): the template is firstAvailable
    [hami-core, mig]; a planted copy with 1Mi in its first alternative is refused the same way.
    The admission logic runs in-process against the real API server (the registered webhook runs
    the shipped mapping)."""
    fallback = vendors.with_unannotated(MAPPING, ["nvidia=hami-core,mig"])
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3500", "nvidia.com/gpucores": "35"}
    body = webhook_template(limits, webhook, fallback)
    alternatives = body["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"]
    assert [a["deviceClassName"] for a in alternatives] == [GPU, mig_class]
    adm = Admission(fallback, StaticInventory({GPU: (80 << 30,)}), TemplateStore(api_client),
                    registry.driver_classes(), DeviceClassReader(api_client))
    resource: Any = client.ResourceV1Api(api_client)
    resource.create_namespaced_resource_claim_template(webhook, tampered(body))
    review = pod_review(limits, namespace=webhook)
    answer = adm.mutate(review)["response"]
    assert answer["allowed"] is False, "a planted template was adopted"
    assert "another spec" in answer["status"]["message"] and body["metadata"]["name"] in answer["status"]["message"]
    resource.delete_namespaced_resource_claim_template(body["metadata"]["name"], webhook)
    answer = adm.mutate(review)["response"]
    assert answer["allowed"] is True, answer
    made = resource.read_namespaced_resource_claim_template(body["metadata"]["name"], webhook, _preload_content=False)
    stored = json.loads(made.data)["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"]
    assert stored[0]["capacity"]["requests"]["memory"] == "3500Mi"
