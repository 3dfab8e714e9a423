"""`helm install` for real: the charts' pods, of the image built from the Dockerfile, on a real
kubelet + containerd node with a Service network and ServiceAccount tokens.

What a user does first, end to end and in this order (one module, one node): the GPU chart with
`-f <(dra node values)` and the fake profile, its daemon Ready on the node, registered with the
real kubelet and publishing through its in-cluster config; the webhook chart, called by the API
server through its Service, converting a pod written for HAMi that the daemon pod then
prepares; `helm upgrade` under a running workload; the DCU and MLU charts on their fakes, a
claim's pod held by the HIP hook or by its sMLU instance; `helm uninstall` leaving nothing.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_helpers import unique, wait_for
from kubernetes import client

import hookcore
from dra._runtime import procinfo
from dra.testing.claims import claim_manifest, pod_manifest
from dra_dev.node.images import PAUSE_IMAGE, WORKLOAD_IMAGE
from dra_dev.node.node import RealNode
from tests.charts.chart_helpers import HELM_DIR, Tool

pytestmark = [pytest.mark.cluster, pytest.mark.node]

NS = "dra-system"
GPU_CHART, NPU_CHART, WEBHOOK_CHART = "hami-core-gpu", "ascend", "dra-webhook"
GPU_DRIVER, NPU_DRIVER = "hami-core-gpu.project-hami.io", "ascend.project-hami.io"
DCU_CHART, MLU_CHART = "hygon-dcu", "cambricon-mlu"
DCU_DRIVER, MLU_DRIVER = "hygon-dcu.project-hami.io", "cambricon-mlu.project-hami.io"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GI = 1 << 30


# --- helpers ------------------------------------------------------------------------------------

def values_file(node: RealNode, directory: Path, chart: str) -> str:
    path = directory / f"values-{chart}.yaml"
    path.write_text(yaml.safe_dump(node.helm_values(chart)))
    return str(path)


def release_pods(api: client.ApiClient, release: str) -> list[Any]:
    return list(client.CoreV1Api(api).list_namespaced_pod(NS, label_selector=f"app.kubernetes.io/instance={release}").items)


def ready(pod: Any) -> bool:
    return bool(pod.status.phase == "Running" and not pod.metadata.deletion_timestamp
                and any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []))


def wait_ready_pods(api: client.ApiClient, release: str, count: int, timeout: float = 120) -> list[Any]:
    def done() -> list[Any] | None:
        pods = release_pods(api, release)
        return pods if len(pods) == count and all(ready(p) for p in pods) else None

    try:
        return wait_for(done, timeout, 0.5, f"{count} Ready pod(s) of release {release}")
    except AssertionError:
        events = client.CoreV1Api(api).list_namespaced_event(NS).items
        raise AssertionError(f"release {release}: " + "; ".join(
            f"{e.involved_object.name} {e.reason}: {e.message}" for e in events[-20:])) from None


def node_slices(api: client.ApiClient, node: str, driver: str) -> list[Any]:
    return [s for s in client.ResourceV1Api(api).list_resource_slice().items
            if s.spec.node_name == node and s.spec.driver == driver]


def leftovers(api: client.ApiClient, release: str, driver: str | None) -> list[str]:
    """Every object of the release still in the API: pods, slices, DeviceClasses, policies,
    webhook configurations, RBAC, ServiceAccounts, Services."""
    sel = f"app.kubernetes.io/instance={release}"
    core, rbac, adm = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api), client.AdmissionregistrationV1Api(api)
    resource = client.ResourceV1Api(api)
    found = [f"pod/{p.metadata.name}" for p in release_pods(api, release)]
    if driver:
        found += [f"resourceslice/{s.metadata.name}" for s in resource.list_resource_slice().items if s.spec.driver == driver]
    found += [f"deviceclass/{d.metadata.name}" for d in resource.list_device_class(label_selector=sel).items]
    found += [f"clusterrole/{r.metadata.name}" for r in rbac.list_cluster_role(label_selector=sel).items]
    found += [f"clusterrolebinding/{r.metadata.name}" for r in rbac.list_cluster_role_binding(label_selector=sel).items]
    found += [f"role/{r.metadata.name}" for r in rbac.list_namespaced_role(NS, label_selector=sel).items]
    found += [f"validatingadmissionpolicy/{p.metadata.name}" for p in adm.list_validating_admission_policy(label_selector=sel).items]
    found += [f"validatingadmissionpolicybinding/{p.metadata.name}"
              for p in adm.list_validating_admission_policy_binding(label_selector=sel).items]
    found += [f"mutatingwebhookconfiguration/{w.metadata.name}" for w in adm.list_mutating_webhook_configuration(label_selector=sel).items]
    found += [f"validatingwebhookconfiguration/{w.metadata.name}"
              for w in adm.list_validating_webhook_configuration(label_selector=sel).items]
    found += [f"serviceaccount/{s.metadata.name}" for s in core.list_namespaced_service_account(NS, label_selector=sel).items]
    found += [f"service/{s.metadata.name}" for s in core.list_namespaced_service(NS, label_selector=sel).items]
    return found


def files_under(*dirs: Path) -> list[str]:
    return sorted(str(p) for d in dirs if d.exists() for p in d.rglob("*") if not p.is_dir())


def wait_phase(api: client.ApiClient, ns: str, name: str, phases: tuple[str, ...], timeout: float = 120) -> str:
    core = client.CoreV1Api(api)

    def done() -> str | None:
        phase = str(core.read_namespaced_pod(name, ns).status.phase)
        return phase if phase in phases else None

    try:
        return wait_for(done, timeout, 0.5, f"pod {ns}/{name} to reach {phases}")
    except AssertionError:
        events = core.list_namespaced_event(ns).items
        raise AssertionError(f"pod {ns}/{name}: " + "; ".join(f"{e.reason}: {e.message}" for e in events)) from None


def make_namespace(api: client.ApiClient) -> str:
    """A namespace whose `default` ServiceAccount exists (ServiceAccount admission refuses pods before)."""
    ns = unique("hn")
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": ns}})
    wait_for(lambda: core.list_namespaced_service_account(ns, field_selector="metadata.name=default").items, 30, 0.2,
             f"the default ServiceAccount of {ns}")
    return ns


def hami_pod(name: str) -> dict[str, Any]:
    """A pod written for HAMi: one GPU, 4096 MiB, 30 % of its cores."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "restartPolicy": "Never", "terminationGracePeriodSeconds": 2,
        "containers": [{"name": "cuda", "image": WORKLOAD_IMAGE, "imagePullPolicy": "Never", "resources": {"limits": {
            "nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096", "nvidia.com/gpucores": "30"}}}]}}


def wait_webhook_reachable(api: client.ApiClient, timeout: float = 60) -> float:
    """Seconds until the API server reaches a webhook replica through the chart's Service.

    Ready pods are not yet a reachable Service: the EndpointSlice controller lists them, then
    kube-proxy programs the ClusterIP (until then its REJECT rule answers "connection refused",
    and with failurePolicy Fail such pods are refused). A dry-run create is what a user's pod
    meets, without side effects (the webhook declares ``sideEffects: NoneOnDryRun``)."""
    started = time.monotonic()
    ns = make_namespace(api)
    core = client.CoreV1Api(api)

    def converted() -> bool | None:
        try:
            pod = core.create_namespaced_pod(ns, hami_pod("probe"), dry_run="All")
        except client.ApiException as exc:
            if exc.status == 500 and "failed calling webhook" in str(exc.body):
                return None
            raise
        assert pod.spec.resource_claims, f"the webhook answered but did not convert the pod: {pod.spec}"
        return True

    try:
        wait_for(converted, timeout, 0.5, "the API server to reach the webhook through its Service")
    finally:
        core.delete_namespace(ns)
    return time.monotonic() - started


def cdi_specs_naming(node: RealNode, uid: str) -> list[Path]:
    return [p for p in node.layout.cdi_dir.iterdir() if uid in p.name] if node.layout.cdi_dir.exists() else []


@contextlib.contextmanager
def installed(helm: Tool, node: RealNode, api: client.ApiClient, values_dir: Path, chart: str,
              fake: str) -> Iterator[tuple[Any, float]]:
    """A driver chart installed as a user does on this node, its daemon on the named fake: its one
    pod once Ready, and the seconds from `helm install` to then; uninstalled after."""
    started = time.monotonic()
    helm.run("install", chart, str(HELM_DIR / chart), "-n", NS, "--create-namespace",
             "-f", values_file(node, values_dir, chart), "--set", f"daemon.fake={fake}", timeout=300)
    (pod,) = wait_ready_pods(api, chart, 1)
    try:
        yield pod, time.monotonic() - started
    finally:
        helm.run("uninstall", chart, "-n", NS, "--ignore-not-found", "--wait", timeout=180, check=False)


def assert_serves_the_node(pod: Any, chart: str, driver: str, node: RealNode, api: client.ApiClient, devices: int) -> None:
    """The daemon pod runs on the node as the chart's ServiceAccount, publishes the node's `devices`
    and registered with the real kubelet through the node's registry dir (its own socket)."""
    assert pod.spec.node_name == node.name and pod.spec.service_account_name == chart
    slices = wait_for(lambda: node_slices(api, node.name, driver), 30, 0.5, f"the {chart} daemon's ResourceSlices")
    assert len([d for s in slices for d in s.spec.devices or []]) == devices
    log = node.layout.log("kubelet").read_text(errors="replace")
    registry = re.escape(str(node.layout.registry_dir))
    assert re.search(rf'RegisterPlugin started.*"SocketPath":"{registry}/[^"]*{re.escape(driver)}', log), \
        f"kubelet's plugin watcher did not pick up the {chart} daemon pod's registration socket"
    assert re.search(rf'driverName="{re.escape(driver)}" endpoint="[^"]+" connected=true', log), \
        f"kubelet's DRA manager did not connect to the {chart} daemon pod's DRA socket"


def claim_pod(api: client.ApiClient, node: RealNode, ns: str, name: str, driver: str, command: list[str],
              **capacity: str) -> tuple[str, str]:
    """A claim of one share of `driver`'s device class and a pod of the workload image running
    `command` with it, on the node: (claim UID, pod UID) once the pod runs."""
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    resource.create_namespaced_resource_claim(ns, claim_manifest(name, driver, request=name, **capacity))
    pod = pod_manifest(name, [name], node.name, image=WORKLOAD_IMAGE)
    pod["spec"]["containers"][0]["command"] = command
    core.create_namespaced_pod(ns, pod)
    wait_phase(api, ns, name, ("Running", "Succeeded", "Failed"))
    claim = resource.read_namespaced_resource_claim(name, ns)
    return str(claim.metadata.uid), str(core.read_namespaced_pod(name, ns).metadata.uid)


def container_process(pod_uid: str, program: str) -> int:
    """The host PID of the pod's process running `program` (its cgroup names the pod)."""
    def find() -> int | None:
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and (entry / "comm").read_text().strip() == program and \
                        procinfo.pod_of((entry / "cgroup").read_text())[0] == pod_uid:
                    return int(entry.name)
            except OSError:  # gone meanwhile
                continue
        return None

    return wait_for(find, 30, 0.2, f"{program} of pod {pod_uid}")


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def report(api: client.ApiClient, ns: str, name: str) -> dict[str, str]:
    """The key=value lines a workload program printed, once its pod succeeded (the quota held)."""
    core = client.CoreV1Api(api)
    phase = wait_phase(api, ns, name, ("Succeeded", "Failed"))
    log = core.read_namespaced_pod_log(name, ns)
    assert phase == "Succeeded", f"{name}: {phase}\n{log}"
    return dict(line.split("=", 1) for line in log.splitlines() if "=" in line)


# --- fixtures -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gpu_release(chart_node: RealNode, node_helm: Tool, api: client.ApiClient,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The GPU chart as a user installs it on this node; how long until its daemon was Ready."""
    with installed(node_helm, chart_node, api, tmp_path_factory.mktemp("values"), GPU_CHART, "h200x8") as (pod, ready_s):
        print(f"helm install {GPU_CHART} to a Ready daemon pod: {ready_s:.1f} s")
        yield {"pod": pod, "ready_seconds": ready_s}


@pytest.fixture(scope="module")
def npu_release(chart_node: RealNode, node_helm: Tool, api: client.ApiClient,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with installed(node_helm, chart_node, api, tmp_path_factory.mktemp("values"), NPU_CHART, "910b3x8") as (pod, _):
        yield pod


@pytest.fixture(scope="module")
def dcu_release(chart_node: RealNode, node_helm: Tool, api: client.ApiClient,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with installed(node_helm, chart_node, api, tmp_path_factory.mktemp("values"), DCU_CHART, "k100-aix8") as (pod, _):
        yield pod


@pytest.fixture(scope="module")
def mlu_release(chart_node: RealNode, node_helm: Tool, api: client.ApiClient,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with installed(node_helm, chart_node, api, tmp_path_factory.mktemp("values"), MLU_CHART, "mlu370-x8x8") as (pod, _):
        yield pod


@pytest.fixture(scope="module")
def webhook_release(chart_node: RealNode, node_helm: Tool, api: client.ApiClient, gpu_release: dict[str, Any],
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Any]]:
    node_helm.run("install", WEBHOOK_CHART, str(HELM_DIR / WEBHOOK_CHART), "-n", NS,
                  "-f", values_file(chart_node, tmp_path_factory.mktemp("values"), WEBHOOK_CHART), timeout=300)
    pods = wait_ready_pods(api, WEBHOOK_CHART, 2)
    print(f"webhook pods Ready to reachable through the Service: {wait_webhook_reachable(api):.1f} s")
    yield pods
    node_helm.run("uninstall", WEBHOOK_CHART, "-n", NS, "--ignore-not-found", "--wait", timeout=180, check=False)


# --- tests, in the order a user meets them ------------------------------------------------------

def test_gpu_daemon_pod_is_ready_registered_and_publishes_through_its_in_cluster_config(
    gpu_release: dict[str, Any], chart_node: RealNode, api: client.ApiClient
) -> None:
    pod = gpu_release["pod"]
    assert gpu_release["ready_seconds"] < 60, f"{gpu_release['ready_seconds']:.0f} s from helm install to a Ready daemon"
    # Its identity is the chart's ServiceAccount, through a token kubelet projected for it.
    assert any(v.projected and any(s.service_account_token for s in v.projected.sources) for v in pod.spec.volumes), \
        "ServiceAccount admission gave the daemon pod no token volume"
    daemon = next(c for c in pod.spec.containers if c.name == "daemon")
    assert not any("kubeconfig" in a for a in daemon.args), "the chart passes no kubeconfig: in-cluster config only"
    # Published: the node's 8 fake GPUs, by the pod (the only client that could write them), and
    # registered with the real kubelet.
    assert_serves_the_node(pod, GPU_CHART, GPU_DRIVER, chart_node, api, devices=8)


def test_hami_pod_is_converted_by_the_webhook_pod_and_prepared_by_the_daemon_pod(
    webhook_release: list[Any], chart_node: RealNode, api: client.ApiClient
) -> None:
    assert {p.spec.node_name for p in webhook_release} == {chart_node.name}
    ns = make_namespace(api)
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(ns, hami_pod("hami"))
    stored = core.read_namespaced_pod("hami", ns)
    # Converted at admission by the webhook's pod, which the API server reached through its Service.
    assert stored.spec.resource_claims and stored.spec.resource_claims[0].resource_claim_template_name, stored.spec
    assert not any(k.startswith("nvidia.com/") for k in (stored.spec.containers[0].resources.limits or {}))
    assert wait_phase(api, ns, "hami", ("Succeeded", "Failed")) == "Succeeded"
    log = core.read_namespaced_pod_log("hami", ns)
    report = dict(re.findall(r"^(quota_total_bytes|over_quota_alloc)=(\S+)$", log, re.M))
    assert report == {"quota_total_bytes": str(4 * GI), "over_quota_alloc": "refused"}, log
    core.delete_namespace(ns)


def test_heterogeneous_claim_is_prepared_by_both_daemon_pods(
    gpu_release: dict[str, Any], npu_release: Any, chart_node: RealNode, api: client.ApiClient
) -> None:
    """examples/heterogeneous: one claim, a GPU and an NPU share, each prepared by its own chart's pod."""
    wait_for(lambda: node_slices(api, chart_node.name, NPU_DRIVER), 30, 0.5, "the NPU daemon's ResourceSlices")
    claim, pod = yaml.safe_load_all((EXAMPLES / "heterogeneous" / "gpu-and-npu.yaml").read_text())
    container = pod["spec"]["containers"][0]
    container.update(image=PAUSE_IMAGE, imagePullPolicy="Never")  # the example's CUDA+CANN image is not here
    container.pop("command", None)
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": chart_node.name}
    ns = make_namespace(api)
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    resource.create_namespaced_resource_claim(ns, claim)
    core.create_namespaced_pod(ns, pod)
    wait_phase(api, ns, pod["metadata"]["name"], ("Running",))
    uid = str(resource.read_namespaced_resource_claim(claim["metadata"]["name"], ns).metadata.uid)
    specs = [yaml.safe_load(p.read_text())["kind"] for p in cdi_specs_naming(chart_node, uid)]
    assert len(specs) == 2 and {d for d in (GPU_DRIVER, NPU_DRIVER) for k in specs if f".{d}/" in k} == {GPU_DRIVER, NPU_DRIVER}, \
        f"one CDI spec of each driver for claim {uid}: {specs}"
    core.delete_namespaced_pod(pod["metadata"]["name"], ns)
    wait_for(lambda: not cdi_specs_naming(chart_node, uid), 60, 0.3, "both daemon pods to unprepare the claim")
    core.delete_namespace(ns)


def test_helm_upgrade_replaces_the_daemon_while_a_workload_runs_and_the_new_one_unprepares_it(
    gpu_release: dict[str, Any], chart_node: RealNode, node_helm: Tool, api: client.ApiClient, tmp_path: Path
) -> None:
    ns = make_namespace(api)
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    resource.create_namespaced_resource_claim(ns, claim_manifest("long", GPU_DRIVER, cores="20", memory="2Gi"))
    core.create_namespaced_pod(ns, pod_manifest("long", ["long"], chart_node.name, image=PAUSE_IMAGE))
    wait_phase(api, ns, "long", ("Running",))
    uid = str(resource.read_namespaced_resource_claim("long", ns).metadata.uid)
    assert cdi_specs_naming(chart_node, uid)
    (old,) = release_pods(api, GPU_CHART)
    node_helm.run("upgrade", GPU_CHART, str(HELM_DIR / GPU_CHART), "-n", NS, "--reuse-values",
                  "--set", "daemon.logLevel=debug", timeout=300)
    (new,) = wait_for(lambda: [p for p in release_pods(api, GPU_CHART) if p.metadata.uid != old.metadata.uid and ready(p)],
                      120, 0.5, "the upgraded daemon pod to be Ready beside the old one")
    wait_for(lambda: all(p.metadata.uid == new.metadata.uid for p in release_pods(api, GPU_CHART)), 90, 0.5,
             "the old daemon pod to be gone")
    assert "--log-level=debug" in next(c for c in new.spec.containers if c.name == "daemon").args
    workload = core.read_namespaced_pod("long", ns)
    assert workload.status.phase == "Running" and workload.status.container_statuses[0].restart_count == 0
    core.delete_namespaced_pod("long", ns)
    wait_for(lambda: not cdi_specs_naming(chart_node, uid), 60, 0.3,
             "the new daemon pod to unprepare the claim (its CDI spec removed)")
    core.delete_namespace(ns)


def test_dcu_chart_serves_the_node_and_a_claims_pod_runs_under_the_hip_hook(
    dcu_release: Any, chart_node: RealNode, api: client.ApiClient
) -> None:
    """`helm install hygon-dcu --set daemon.fake=k100-aix8`: a 30 % + 16Gi claim's pod runs
    hip_workload, which sees its DCU, its hook and the hook's config, and is held to 16Gi."""
    assert_serves_the_node(dcu_release, DCU_CHART, DCU_DRIVER, chart_node, api, devices=8)
    ns = make_namespace(api)
    claim_uid, pod_uid = claim_pod(api, chart_node, ns, "dcu", DCU_DRIVER, ["/usr/local/bin/hip_workload", "--compute", "8"],
                                   cores="30", memory="16Gi")
    device = client.ResourceV1Api(api).read_namespaced_resource_claim("dcu", ns).status.allocation.devices.results[0].device
    (bus,) = [d.attributes["resource.kubernetes.io/pciBusID"].string for s in node_slices(api, chart_node.name, DCU_DRIVER)
              for d in s.spec.devices or [] if d.name == device]
    # What the container sees, read from the host through its process while it computes.
    pid = container_process(pod_uid, "hip_workload")
    env = environ(pid)
    root = Path(f"/proc/{pid}/root")
    config = (root / str(hookcore.container_config_path("libvhip.so")).lstrip("/")).read_text()
    assert env["HIP_VISIBLE_DEVICES"] == "0" and f"pci={bus}" in env["HOOKCORE_STUB_HIP_DEVICES"], env
    assert "libvhip.so" in (root / "etc/ld.so.preload").read_text()
    assert f"HOOKCORE_DEVICE_UUID_0=pci-{bus}\n" in config and "HOOKCORE_COMPUTE_LIMIT_0=30\n" in config, config
    assert cdi_specs_naming(chart_node, claim_uid), "the claim's CDI spec, on the node's CDI dir"
    kv = report(api, ns, "dcu")
    assert (kv["devices"], kv["pci"]) == ("1", bus)
    assert int(kv["quota_total_bytes"]) == 16 * GI and kv["over_quota_alloc"] == "refused", kv
    client.CoreV1Api(api).delete_namespaced_pod("dcu", ns)
    wait_for(lambda: not cdi_specs_naming(chart_node, claim_uid), 60, 0.3, "the DCU daemon pod to unprepare the claim")
    client.CoreV1Api(api).delete_namespace(ns)


def test_mlu_chart_serves_the_node_and_a_claims_pod_runs_in_its_smlu_instance(
    mlu_release: Any, chart_node: RealNode, api: client.ApiClient
) -> None:
    """`helm install cambricon-mlu --set daemon.fake=mlu370-x8x8`: a 30 % + 16Gi claim becomes an
    sMLU instance, whose settings the claim's pod gets (mlu_workload prints them) and is held to."""
    assert_serves_the_node(mlu_release, MLU_CHART, MLU_DRIVER, chart_node, api, devices=8)
    ns = make_namespace(api)
    claim_uid, _ = claim_pod(api, chart_node, ns, "mlu", MLU_DRIVER, ["/usr/local/bin/mlu_workload"],
                             cores="30", memory="16Gi")
    kv = report(api, ns, "mlu")
    assert kv["smlu_instance"].startswith("/dev/cambricon-caps/cap_dev"), kv  # from VIRTUAL_DEVICES
    assert (kv["smlu_name"], kv["smlu_quota_percent"], kv["smlu_memory_bytes"]) == (f"dra-{claim_uid}", "30", str(16 * GI))
    assert int(kv["quota_total_bytes"]) == 16 * GI and kv["over_quota_alloc"] == "refused", kv
    client.CoreV1Api(api).delete_namespaced_pod("mlu", ns)
    wait_for(lambda: not cdi_specs_naming(chart_node, claim_uid), 60, 0.3, "the MLU daemon pod to unprepare the claim")
    client.CoreV1Api(api).delete_namespace(ns)


def test_helm_uninstall_of_the_dcu_and_mlu_charts_leaves_nothing_of_theirs(
    dcu_release: Any, mlu_release: Any, chart_node: RealNode, node_helm: Tool, api: client.ApiClient
) -> None:
    for release in (DCU_CHART, MLU_CHART):
        node_helm.run("uninstall", release, "-n", NS, "--wait", timeout=180)
    wait_for(lambda: not (leftovers(api, DCU_CHART, DCU_DRIVER) + leftovers(api, MLU_CHART, MLU_DRIVER)), 60, 0.5,
             "nothing of the DCU and MLU releases left in the API")
    lay = chart_node.layout
    assert files_under(lay.plugin_dir / DCU_DRIVER, lay.plugin_dir / MLU_DRIVER) == []
    assert [p for p in files_under(lay.registry_dir, lay.cdi_dir) if DCU_DRIVER in p or MLU_DRIVER in p] == []


def test_helm_uninstall_of_all_three_leaves_nothing_of_ours_within_60_s(
    gpu_release: dict[str, Any], npu_release: Any, webhook_release: list[Any], chart_node: RealNode, node_helm: Tool,
    api: client.ApiClient
) -> None:
    started = time.monotonic()
    for release in (WEBHOOK_CHART, NPU_CHART, GPU_CHART):
        node_helm.run("uninstall", release, "-n", NS, "--wait", timeout=180)

    def left() -> list[str]:
        return leftovers(api, GPU_CHART, GPU_DRIVER) + leftovers(api, NPU_CHART, NPU_DRIVER) + leftovers(api, WEBHOOK_CHART, None)

    wait_for(lambda: not left(), 60, 0.5, "nothing of the three releases left in the API")
    print(f"helm uninstall of three releases to nothing left: {time.monotonic() - started:.1f} s")
    lay = chart_node.layout
    assert files_under(lay.registry_dir, lay.plugin_dir / GPU_DRIVER, lay.plugin_dir / NPU_DRIVER, lay.cdi_dir) == []
