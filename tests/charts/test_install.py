"""The driver charts against the real API server: every rendered object is accepted, `helm install`,
`upgrade` and `uninstall` work and leave nothing behind, RBAC grants what the daemon needs and no
more, and the ResourceSlice policy holds each node's daemon to its own node, as the API server
enforces it for a service account token bound to the daemon's pod.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_helpers import DRIVER_CHARTS, HELM_DIR, Tool, container, one, render, set_args
from kube_helpers import unique, wait_for
from kubernetes import client
from kubernetes.client.rest import ApiException
from test_commands import container_env, expand
from test_render import VALUE_SETS, chart_values

from dra_dev.cluster.controlplane import ControlPlane

pytestmark = pytest.mark.cluster

DRIVER_NAME = {"hami-core-gpu": "hami-core-gpu.project-hami.io", "ascend": "ascend.project-hami.io",
               "hygon-dcu": "hygon-dcu.project-hami.io", "cambricon-mlu": "cambricon-mlu.project-hami.io"}
# Nodes made here carry this taint so that no other test's pod is scheduled onto them.
TAINT: dict[str, Any] = {"key": "dra-chart-test", "value": "only", "effect": "NoSchedule"}
TOLERATION: dict[str, Any] = {"key": "dra-chart-test", "operator": "Equal", "value": "only", "effect": "NoSchedule"}


def fullname(release: str, chart: str) -> str:
    """The chart's object names (dra-common.fullname)."""
    return release if chart in release else f"{release}-{chart}"


def default_classes(chart: str) -> list[dict[str, Any]]:
    classes: list[dict[str, Any]] = yaml.safe_load((HELM_DIR / chart / "values.yaml").read_text())["deviceClasses"]
    return classes


def mode_classes(chart: str) -> dict[str, Any]:
    modes: dict[str, Any] = yaml.safe_load((HELM_DIR / chart / "values.yaml").read_text()).get("modeClasses") or {}
    return modes


def isolated(chart: str, values: dict[str, Any], tag: str) -> dict[str, Any]:
    """`values` with DeviceClass names of this test only (they are cluster-wide; other tests and
    the other charts' tests must not meet them)."""
    classes = values.get("deviceClasses") or default_classes(chart)
    modes = mode_classes(chart)
    return {**values, "deviceClasses": [{**c, "name": f"{tag}.{c['name']}"} for c in classes],
            **{f"modeClasses.{key}.name": f"{tag}.{c['name']}" for key, c in modes.items()}}


def make_node(api: client.ApiClient, name: str, labels: dict[str, str] | None = None) -> None:
    """A Node object with only the test's taint (admission adds not-ready, which nothing here lifts)."""
    core = client.CoreV1Api(api)
    core.create_node(client.V1Node(
        metadata=client.V1ObjectMeta(name=name, labels={"kubernetes.io/hostname": name, **(labels or {})})))
    core.patch_node(name, {"spec": {"taints": [TAINT]}})


def node_selector(chart: str, label: dict[str, str]) -> dict[str, str | None]:
    """`label` instead of the chart's default node labels (null deletes a default key)."""
    defaults = yaml.safe_load((HELM_DIR / chart / "values.yaml").read_text())["kubeletPlugin"]["nodeSelector"]
    return {**dict.fromkeys(defaults), **label}


@pytest.fixture
def namespace(api_client: client.ApiClient) -> Iterator[str]:
    name = unique("chart")
    core = client.CoreV1Api(api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


@pytest.fixture
def nodes(api_client: client.ApiClient) -> Iterator[list[str]]:
    """Names of Node objects a test makes (deleted afterwards)."""
    made: list[str] = []
    yield made
    for name in made:
        try:
            client.CoreV1Api(api_client).delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise


def labelled_objects(kubectl: Tool, release: str) -> list[str]:
    """Every object in the cluster, of any listable type, carrying the release's instance label."""
    types = kubectl.run("api-resources", "--verbs=list", "-o", "name").stdout.split()
    got = kubectl.run("get", ",".join(types), "--all-namespaces", "--ignore-not-found", "-o", "name",
                      "-l", f"app.kubernetes.io/instance={release}").stdout.split()
    return sorted(got)


# Objects the cluster's controllers make from the chart's (they carry its labels too).
DERIVED = ("controllerrevision.apps/", "replicaset.apps/", "pod/", "endpoints/", "endpointslice.discovery.k8s.io/")


def derived(name: str) -> bool:
    return name.startswith(DERIVED)


def assert_nothing_left(kubectl: Tool, release: str, timeout: float = 120) -> None:
    """No object of `release` anywhere once the garbage collector has removed what the chart's
    objects owned (ReplicaSets, pods, ControllerRevisions)."""
    try:
        wait_for(lambda: not labelled_objects(kubectl, release), timeout, 1, what=f"release {release} gone")
    except AssertionError:
        left = labelled_objects(kubectl, release)
        raise AssertionError(f"release {release} left {left} behind {timeout:.0f} s after uninstall") from None


def helm_release_secrets(kubectl: Tool, namespace: str, release: str) -> list[str]:
    return kubectl.run("get", "secrets", "-n", namespace, "-o", "name", "-l", f"owner=helm,name={release}").stdout.split()


# ---------------------------------------------------------------------------------------------------
# every rendered object, created server-side


@pytest.mark.parametrize("chart", DRIVER_CHARTS)
@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_rendered_object_is_created_by_the_api_server(helm: Tool, kubectl: Tool, namespace: str, chart: str,
                                                            name: str) -> None:
    tag = namespace
    values = isolated(chart, chart_values(chart, name), tag)
    objects = render(helm, chart, release=tag, namespace=namespace, values=values)
    manifest = yaml.safe_dump_all(objects, sort_keys=False)
    applied = kubectl.run("apply", "--server-side", "--field-manager=chart-test", "-o", "json", "-f", "-", stdin=manifest)
    stored = json.loads(applied.stdout)
    items = stored.get("items", [stored])
    try:
        assert sorted(i["kind"] for i in items) == sorted(o["kind"] for o in objects)
        for obj, got in zip(objects, items, strict=True):
            assert got["metadata"]["name"] == obj["metadata"]["name"]
            if obj["kind"] == "DeviceClass":
                # The server keeps every field it was sent: no feature gate dropped one.
                assert got["spec"] == obj["spec"], "the API server dropped DeviceClass fields (DRAExtendedResource off?)"
            if obj["kind"] == "DaemonSet":
                want_args = container(obj["spec"]["template"]["spec"], "daemon")["args"]
                assert container(got["spec"]["template"]["spec"], "daemon")["args"] == want_args
    finally:
        kubectl.run("delete", "--wait=false", "-f", "-", stdin=manifest)


# ---------------------------------------------------------------------------------------------------
# helm install, upgrade, uninstall


def _fenced(kubectl: Tool) -> bool:
    """Whether the cluster is older than 1.35, where the charts render the fence."""
    server = json.loads(kubectl.run("version", "-o", "json").stdout)["serverVersion"]
    return int(server["minor"].rstrip("+")) < 35


@pytest.mark.parametrize("chart", DRIVER_CHARTS)
def test_install_upgrade_uninstall_leaves_nothing_behind(cluster_helm: Tool, kubectl: Tool, api_client: client.ApiClient,
                                                         nodes: list[str], chart: str) -> None:
    release = unique(chart.split("-")[0])
    namespace = release
    label = {"dra-chart-test/node": release}
    values = isolated(chart, {"kubeletPlugin.nodeSelector": node_selector(chart, label),
                              "kubeletPlugin.tolerations": [TOLERATION]}, release)
    path = str(HELM_DIR / chart)
    installed = cluster_helm.run("install", release, path, "-n", namespace, "--create-namespace", *set_args(values))
    try:
        assert "STATUS: deployed" in installed.stdout
        assert f"kubectl -n {namespace} rollout status daemonset/{fullname(release, chart)}" in installed.stdout  # NOTES
        kinds = sorted(n.split("/")[0] for n in labelled_objects(kubectl, release) if not derived(n))
        assert kinds == sorted([
            "clusterrole.rbac.authorization.k8s.io", "clusterrolebinding.rbac.authorization.k8s.io",
            "daemonset.apps", "networkpolicy.networking.k8s.io", "serviceaccount",
            "validatingadmissionpolicy.admissionregistration.k8s.io",
            "validatingadmissionpolicybinding.admissionregistration.k8s.io",
            # its class and the classes of its modes (modeClasses, on by default)
            *["deviceclass.resource.k8s.io"] * (1 + len(mode_classes(chart))),
            # Below 1.35: the two policies and bindings of the kubernetes#133705 fence (test_fence.py).
            *(["validatingadmissionpolicy.admissionregistration.k8s.io",
               "validatingadmissionpolicybinding.admissionregistration.k8s.io"] * 2 if _fenced(kubectl) else []),
        ])

        # A node with the label gets a daemon pod: the pod template passes pod admission too.
        node = unique("chart-node")
        make_node(api_client, node, label)
        nodes.append(node)
        core = client.CoreV1Api(api_client)

        def daemon_pod() -> Any:
            pods: list[Any] = core.list_namespaced_pod(namespace, label_selector=f"app.kubernetes.io/instance={release}").items
            return next((p for p in pods if p.spec.affinity and node in json.dumps(p.spec.affinity.to_dict())), None)

        pod = wait_for(daemon_pod, timeout=60, what=f"the DaemonSet's pod for node {node}")
        assert pod.spec.priority_class_name == "system-node-critical" and pod.spec.priority == 2000001000
        assert pod.spec.service_account_name == fullname(release, chart)

        # upgrade: an extended resource name, a driver setting, no slice policy.
        upgraded_values = {**values, "deviceClasses": [{**c, "extendedResourceName": "example.com/accel"}
                                                       for c in values["deviceClasses"]],
                           "sliceNodePolicy.enabled": False, "daemon.logLevel": "debug"}
        upgraded = cluster_helm.run("upgrade", release, path, "-n", namespace, *set_args(upgraded_values))
        assert "REVISION: 2" in upgraded.stdout and "DRAExtendedResource" in upgraded.stdout
        cls = kubectl.run("get", "deviceclass", values["deviceClasses"][0]["name"], "-o", "json").stdout
        assert json.loads(cls)["spec"]["extendedResourceName"] == "example.com/accel"
        ds = json.loads(kubectl.run("get", "daemonset", fullname(release, chart), "-n", namespace, "-o", "json").stdout)
        assert "--log-level=debug" in container(ds["spec"]["template"]["spec"], "daemon")["args"]
        assert not [n for n in labelled_objects(kubectl, release)
                    if "validatingadmissionpolicy" in n and "-k8s-133705-fence" not in n]  # the fence stays (own value)
    finally:
        uninstalled = cluster_helm.run("uninstall", release, "-n", namespace, "--wait", check=False)
    assert uninstalled.returncode == 0, uninstalled.stderr
    assert_nothing_left(kubectl, release)
    assert helm_release_secrets(kubectl, namespace, release) == []
    wait_for(lambda: not client.CoreV1Api(api_client).list_namespaced_pod(namespace).items, timeout=60,
             what="the daemon pods to be garbage-collected")
    client.CoreV1Api(api_client).delete_namespace(namespace)


# ---------------------------------------------------------------------------------------------------
# RBAC and the ResourceSlice node policy, as the API server applies them


def install_release(cluster_helm: Tool, chart: str) -> dict[str, str]:
    """`chart` installed in its own namespace (isolated DeviceClass names)."""
    release = unique("slices")
    cluster_helm.run("install", release, str(HELM_DIR / chart), "-n", release, "--create-namespace",
                     *set_args(isolated(chart, {}, release)))
    return {"release": release, "namespace": release, "sa": fullname(release, chart), "chart": chart}


@pytest.fixture(scope="module")
def releases(cluster_helm: Tool, api_client: client.ApiClient) -> Iterator[dict[str, dict[str, str]]]:
    """Each driver chart installed once for this module's tests (on first use)."""
    made: dict[str, dict[str, str]] = {}
    yield made
    for rel in made.values():
        cluster_helm.run("uninstall", rel["release"], "-n", rel["namespace"], "--wait")
        client.CoreV1Api(api_client).delete_namespace(rel["namespace"])


def release_of(releases: dict[str, dict[str, str]], cluster_helm: Tool, chart: str) -> dict[str, str]:
    if chart not in releases:
        releases[chart] = install_release(cluster_helm, chart)
    return releases[chart]


@pytest.fixture
def gpu_release(releases: dict[str, dict[str, str]], cluster_helm: Tool) -> dict[str, str]:
    return release_of(releases, cluster_helm, "hami-core-gpu")


def service_account_user(rel: dict[str, str]) -> str:
    return f"system:serviceaccount:{rel['namespace']}:{rel['sa']}"


# (verb, resource, namespace or None, allowed)
DAEMON_ACCESS = [
    ("create", "resourceslices.resource.k8s.io", None, True),
    ("update", "resourceslices.resource.k8s.io", None, True),
    ("delete", "resourceslices.resource.k8s.io", None, True),
    ("watch", "resourceslices.resource.k8s.io", None, True),
    ("get", "resourceclaims.resource.k8s.io", "any-namespace", True),
    ("get", "nodes", None, True),
    ("patch", "resourceslices.resource.k8s.io", None, False),
    ("deletecollection", "resourceslices.resource.k8s.io", None, False),
    ("update", "resourceclaims.resource.k8s.io", "any-namespace", False),
    ("update", "resourceclaims/status", "any-namespace", False),
    ("list", "resourceclaims.resource.k8s.io", "any-namespace", False),
    ("create", "deviceclasses.resource.k8s.io", None, False),
    ("update", "nodes", None, False),
    ("list", "nodes", None, False),
    ("get", "secrets", "kube-system", False),
    ("create", "pods", "any-namespace", False),
    ("create", "namespaces", None, False),
]


@pytest.mark.parametrize(("verb", "resource", "ns", "allowed"), DAEMON_ACCESS,
                         ids=[f"{v}-{r.split('.')[0]}" for v, r, _n, _a in DAEMON_ACCESS])
def test_the_daemons_service_account_may_do_what_it_needs_and_nothing_else(
        kubectl: Tool, gpu_release: dict[str, str], verb: str, resource: str, ns: str | None, allowed: bool) -> None:
    where = ["-n", ns] if ns else []
    proc = kubectl.run("auth", "can-i", verb, resource, *where, f"--as={service_account_user(gpu_release)}", check=False)
    assert proc.stdout.strip() == ("yes" if allowed else "no"), (verb, resource, proc.stdout, proc.stderr)


def daemon_pod_token(kubectl: Tool, api_client: client.ApiClient, rel: dict[str, str], node: str) -> tuple[str, str]:
    """(token, pod UID): the chart's service account token bound to a pod on `node`, as kubelet
    gives it to the daemon's pod (with the pod's and node's names and UIDs in it)."""
    pod = unique("daemon")
    made = client.CoreV1Api(api_client).create_namespaced_pod(rel["namespace"], client.V1Pod(
        metadata=client.V1ObjectMeta(name=pod),
        spec=client.V1PodSpec(node_name=node, service_account_name=rel["sa"], tolerations=[client.V1Toleration(**TOLERATION)],
                              containers=[client.V1Container(name="daemon", image="dra-hami:test")])))
    token = kubectl.run("create", "token", rel["sa"], "-n", rel["namespace"], "--bound-object-kind=Pod",
                        f"--bound-object-name={pod}").stdout.strip()
    return token, made.metadata.uid


def daemon_token(kubectl: Tool, api_client: client.ApiClient, rel: dict[str, str], node: str) -> str:
    return daemon_pod_token(kubectl, api_client, rel, node)[0]


def as_token(cluster: ControlPlane, token: str) -> Any:
    cfg = client.Configuration(host=cluster.server, api_key={"authorization": f"Bearer {token}"})
    cfg.ssl_ca_cert = str(cluster.pki.ca_cert)
    return client.ResourceV1Api(client.ApiClient(cfg))


def slice_body(name: str, node: str, driver: str = DRIVER_NAME["hami-core-gpu"]) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name},
            "spec": {"driver": driver, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": "gpu-0"}]}}


def refused(call: Any, *args: Any) -> str:
    with pytest.raises(ApiException) as info:
        call(*args)
    assert info.value.status == 403, info.value.body
    message: str = json.loads(info.value.body or "{}")["message"]
    return message


def test_a_nodes_daemon_writes_its_own_nodes_slices_and_no_other(
        cluster: ControlPlane, kubectl: Tool, api_client: client.ApiClient, gpu_release: dict[str, str],
        nodes: list[str]) -> None:
    mine, other = unique("node-a"), unique("node-b")
    for n in (mine, other):
        make_node(api_client, n)
        nodes.append(n)
    daemon = as_token(cluster, daemon_token(kubectl, api_client, gpu_release, mine))
    admin: Any = client.ResourceV1Api(api_client)
    policy = f"ValidatingAdmissionPolicy '{gpu_release['sa']}-own-node-slices'"
    own, foreign = unique("own"), unique("foreign")
    created: list[str] = []
    try:
        # Its own node: create, update, delete are allowed.
        daemon.create_resource_slice(slice_body(own, mine))
        created.append(own)
        body = admin.read_resource_slice(own).to_dict()
        stored = daemon.read_resource_slice(own)
        stored.spec.pool.generation = 2
        daemon.replace_resource_slice(own, stored)
        assert admin.read_resource_slice(own).spec.pool.generation == 2, body

        # Another node's slice: neither create nor update nor delete.
        msg = refused(daemon.create_resource_slice, slice_body(foreign, other))
        assert policy in msg
        assert f"the node daemon on node {mine} may write only ResourceSlices of its own node, not one of node {other}" in msg
        admin.create_resource_slice(slice_body(foreign, other))  # the policy binds only the daemon
        created.append(foreign)
        theirs = daemon.read_resource_slice(foreign)
        theirs.spec.pool.generation = 5
        assert f"not one of node {other}" in refused(daemon.replace_resource_slice, foreign, theirs)
        assert f"not one of node {other}" in refused(daemon.delete_resource_slice, foreign)
        assert admin.read_resource_slice(foreign).spec.pool.generation == 1

        # Its own node, but another driver's slice.
        msg = refused(daemon.create_resource_slice, slice_body(unique("other-driver"), mine, "gpu.nvidia.com"))
        assert "may not write ResourceSlices of driver gpu.nvidia.com" in msg

        daemon.delete_resource_slice(own)
        created.remove(own)
    finally:
        for name in created:
            admin.delete_resource_slice(name)


def test_a_token_without_a_pod_binding_may_write_no_slice(
        cluster: ControlPlane, kubectl: Tool, api_client: client.ApiClient, gpu_release: dict[str, str],
        nodes: list[str]) -> None:
    node = unique("node-c")
    make_node(api_client, node)
    nodes.append(node)
    token = kubectl.run("create", "token", gpu_release["sa"], "-n", gpu_release["namespace"]).stdout.strip()
    msg = refused(as_token(cluster, token).create_resource_slice, slice_body(unique("unbound"), node))
    assert "must authenticate with a service account token bound to its pod" in msg


def token_kubeconfig(cluster: ControlPlane, token: str, path: Path) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "daemon",
        "clusters": [{"name": "c", "cluster": {"server": cluster.server, "certificate-authority": str(cluster.pki.ca_cert)}}],
        "users": [{"name": "daemon", "user": {"token": token}}],
        "contexts": [{"name": "daemon", "context": {"cluster": "c", "user": "daemon"}}],
    }))
    return path


FAKE = {"hami-core-gpu": "h200x2", "ascend": "910b3x2", "hygon-dcu": "k100-aix2", "cambricon-mlu": "mlu370-x8x2"}


@pytest.mark.parametrize("chart", DRIVER_CHARTS)
def test_the_charts_daemon_command_publishes_its_node_as_the_charts_service_account(
        cluster: ControlPlane, helm: Tool, cluster_helm: Tool, kubectl: Tool, api_client: client.ApiClient,
        releases: dict[str, dict[str, str]], nodes: list[str], chart: str) -> None:
    """The DaemonSet's own command line (fake devices, host paths in a temp dir), with the token
    its pod would get: the RBAC and the policy let it publish its node's slices, nothing fails."""
    from dra.testing.daemon import free_port

    rel = release_of(releases, cluster_helm, chart)
    node = unique("node-d")
    make_node(api_client, node)
    nodes.append(node)
    token, pod_uid = daemon_pod_token(kubectl, api_client, rel, node)
    work = Path(tempfile.mkdtemp(prefix="dc", dir="/tmp"))  # short: unix socket paths stay < 108 bytes
    port = free_port()
    values = {"paths.kubeletPluginsDir": f"{work}/plugins", "paths.kubeletRegistrarDir": f"{work}/registry",
              "paths.cdiDir": f"{work}/cdi", "paths.hookDir": f"{work}/hooks", "daemon.fake": FAKE[chart],
              "daemon.metricsPort": port, "daemon.settings": {"health": "off"}}
    spec = one(render(helm, chart, values=values), "DaemonSet")["spec"]["template"]["spec"]
    daemon = container(spec, "daemon")
    # run here, the pod's IP is this host's loopback (the metrics port binds to $(POD_IP))
    env = {**container_env(daemon), "NODE_NAME": node, "POD_UID": pod_uid, "POD_IP": "127.0.0.1"}
    assert daemon["command"] == ["dra", "run"]
    argv = [sys.executable, "-m", "dra.cli", "run", *(expand(a, env) for a in daemon["args"]),
            f"--kubeconfig={token_kubeconfig(cluster, token, work / 'kubeconfig')}"]
    log = (work / "daemon.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env={**_clean_env(), **env})
    admin: Any = client.ResourceV1Api(api_client)
    try:
        def published() -> Any:
            assert proc.poll() is None, (work / "daemon.log").read_text()[-3000:]
            got = admin.list_resource_slice(field_selector=f"spec.nodeName={node}").items
            return got if got and sum(len(s.spec.devices or []) for s in got) == 2 else None

        slices = wait_for(published, timeout=90, what=f"the daemon's slices of node {node}")
        assert {s.spec.driver for s in slices} == {DRIVER_NAME[chart]}
        # The liveness probe's endpoint answers on the port the chart declares.
        probe = daemon["livenessProbe"]["httpGet"]["path"]
        with urllib.request.urlopen(f"http://127.0.0.1:{daemon['ports'][0]['containerPort']}{probe}", timeout=5) as r:
            assert r.status == 200
        text = (work / "daemon.log").read_text()
        assert "Forbidden" not in text and "forbidden" not in text, text[-3000:]
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
        for s in admin.list_resource_slice(field_selector=f"spec.nodeName={node}").items:
            admin.delete_resource_slice(s.metadata.name)
        shutil.rmtree(work, ignore_errors=True)


def _clean_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "NODE_NAME", "POD_UID", "DRA_FAKE_DEVICES")}


# ---------------------------------------------------------------------------------------------------
# the feature-gate check, against a control plane whose pods are visible (kubeadm, kind)


@pytest.fixture
def control_plane_pod(api_client: client.ApiClient) -> Iterator[Any]:
    """Make kube-system pods that look like a static-pod control plane's; returns a maker."""
    core = client.CoreV1Api(api_client)
    made: list[str] = []

    def make(component: str, gates: str | None) -> None:
        name = unique(component)
        command = [component, "--v=1", *([f"--feature-gates={gates}"] if gates is not None else [])]
        core.create_namespaced_pod("kube-system", client.V1Pod(
            metadata=client.V1ObjectMeta(name=name, labels={"component": component, "tier": "control-plane"}),
            spec=client.V1PodSpec(node_name="control-plane-not-here", tolerations=[client.V1Toleration(operator="Exists")],
                                  containers=[client.V1Container(name=component, image="registry.k8s.io/x", command=command)])))
        made.append(name)

    yield make
    for name in made:
        core.delete_namespaced_pod(name, "kube-system", grace_period_seconds=0)


@pytest.mark.parametrize("chart", [*DRIVER_CHARTS, "dra-webhook"])
def test_install_is_refused_while_a_required_feature_gate_is_off(cluster_helm: Tool, control_plane_pod: Any,
                                                                 chart: str) -> None:
    release = unique("gates")
    extra: dict[str, Any] = ({"networkPolicy.apiServerFrom": [{"ipBlock": {"cidr": "10.0.0.10/32"}}]}
                             if chart == "dra-webhook" else isolated(chart, {}, release))

    def dry_run(values: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        return cluster_helm.run("install", release, str(HELM_DIR / chart), "-n", release, "--dry-run=server",
                                *set_args({**extra, **values}), check=False)

    assert dry_run({}).returncode == 0, "no control-plane pod visible: nothing to check"
    control_plane_pod("kube-apiserver", "DRADeviceTaints=true")  # 1.34: DRAConsumableCapacity is off unless set
    refused = dry_run({})
    assert refused.returncode != 0
    assert ("kube-apiserver (pod kube-system/kube-apiserver-" in refused.stderr
            and "runs with the feature gate DRAConsumableCapacity off (Kubernetes 1.34; on by default only from 1.36)"
            in refused.stderr), refused.stderr
    assert "featureGates.check=false" in refused.stderr
    assert dry_run({"featureGates.check": False}).returncode == 0
    control_plane_pod("kube-scheduler", "DRAConsumableCapacity=true")
    assert "kube-apiserver" in dry_run({}).stderr, "every component is checked, not just the first"


def test_an_extended_resource_name_needs_its_gate_too(cluster_helm: Tool, control_plane_pod: Any) -> None:
    release = unique("gates")
    control_plane_pod("kube-apiserver", "DRAConsumableCapacity=true,DRAExtendedResource=false")
    values = isolated("hami-core-gpu", {}, release)
    plain = cluster_helm.run("install", release, str(HELM_DIR / "hami-core-gpu"), "-n", release, "--dry-run=server",
                             *set_args(values), check=False)
    assert plain.returncode == 0, plain.stderr
    values["deviceClasses"] = [{**c, "extendedResourceName": "nvidia.com/gpu"} for c in values["deviceClasses"]]
    refused = cluster_helm.run("install", release, str(HELM_DIR / "hami-core-gpu"), "-n", release, "--dry-run=server",
                               *set_args(values), check=False)
    assert refused.returncode != 0 and "the feature gate DRAExtendedResource off" in refused.stderr, refused.stderr
