"""The claim path through upstream parts: a real kubelet calls the node daemon, containerd applies
the CDI spec, and the container's process sees its share.

One node for the module (`real_node`), one `dra run example` daemon serving it through the
node's plugin and registry dirs; each test makes its own namespace, claims and pods, pinned to
the node. Pods run the local `dra-workload:local` image (`imagePullPolicy: Never`).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_helpers import unique, wait_for
from kubernetes import client, watch

from dra.testing.claims import claim_manifest, pod_manifest
from dra.testing.daemon import DaemonProcess
from dra_dev.cluster.controlplane import ControlPlane
from dra_dev.node.images import PAUSE_IMAGE, WORKLOAD_IMAGE
from dra_dev.node.node import RealNode

pytestmark = [pytest.mark.cluster, pytest.mark.node]

DRIVER = "gpu.example.com"
GI = 1 << 30


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="dra-rn-", dir="/tmp") as d:
        yield Path(d)


def start_daemon(cluster: ControlPlane, node: RealNode, workdir: Path) -> DaemonProcess:
    lay = node.layout
    daemon = DaemonProcess("example", node.name, cluster.kubeconfig, workdir, args=["--set", "count=2"],
                           kubelet_dirs={"registrar": lay.registry_dir, "plugins": lay.plugin_dir, "cdi": lay.cdi_dir})
    daemon.start()
    daemon.wait_http("/readyz", timeout=60)  # ready = slices published and registered with kubelet
    return daemon


@pytest.fixture(scope="module")
def daemon(cluster: ControlPlane, real_node: RealNode, workdir: Path) -> Iterator[DaemonProcess]:
    proc = start_daemon(cluster, real_node, workdir)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def device_class(api_client: client.ApiClient) -> Iterator[str]:
    name = unique("rn") + "." + DRIVER
    resource: Any = client.ResourceV1Api(api_client)
    resource.create_device_class({"metadata": {"name": name}, "spec": {"selectors": [
        {"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}})
    yield name
    resource.delete_device_class(name)


@pytest.fixture
def namespace(api_client: client.ApiClient) -> Iterator[str]:
    ns = unique("rn")
    core: Any = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": ns}})
    yield ns
    core.delete_namespace(ns)


def run_pod(api_client: client.ApiClient, ns: str, name: str, device_class: str, node: str, memory: str,
            image: str = WORKLOAD_IMAGE) -> None:
    resource: Any = client.ResourceV1Api(api_client)
    core: Any = client.CoreV1Api(api_client)
    resource.create_namespaced_resource_claim(ns, claim_manifest(name, device_class, cores="25", memory=memory))
    core.create_namespaced_pod(ns, pod_manifest(name, [name], node, image=image))


def pod_phase(api_client: client.ApiClient, ns: str, name: str) -> str:
    return str(client.CoreV1Api(api_client).read_namespaced_pod(name, ns).status.phase)


def wait_phase(api_client: client.ApiClient, ns: str, name: str, phases: tuple[str, ...], timeout: float = 90) -> str:
    def done() -> str | None:
        phase = pod_phase(api_client, ns, name)
        return phase if phase in phases else None

    try:
        return wait_for(done, timeout, 0.3, f"pod {ns}/{name} to reach {phases}")
    except AssertionError:
        events = client.CoreV1Api(api_client).list_namespaced_event(ns).items
        raise AssertionError(f"pod {ns}/{name} is {pod_phase(api_client, ns, name)}; events: "
                             + "; ".join(f"{e.reason}: {e.message}" for e in events)) from None


def workload_report(api_client: client.ApiClient, ns: str, name: str) -> dict[str, str]:
    log = client.CoreV1Api(api_client).read_namespaced_pod_log(name, ns)  # through the API server to kubelet
    return dict(re.findall(r"^(quota_total_bytes|over_quota_alloc)=(\S+)$", log, re.M))


def claim_uid(api_client: client.ApiClient, ns: str, name: str) -> str:
    return str(client.ResourceV1Api(api_client).read_namespaced_resource_claim(name, ns).metadata.uid)


def cdi_files(node: RealNode, uid: str) -> list[Path]:
    return [p for p in node.layout.cdi_dir.iterdir() if uid in p.name]


def state_of(daemon: DaemonProcess, uid: str) -> list[Path]:
    """The daemon's files that name the claim: checkpoint entries, its hook dir and ledger."""
    return [p for p in daemon.state_dir.rglob("*")
            if uid in p.name or (p.is_file() and uid in p.read_text(errors="replace"))]


def delete_pod_and_wait_unprepared(api_client: client.ApiClient, node: RealNode, daemon: DaemonProcess,
                                   ns: str, name: str, uid: str) -> None:
    client.CoreV1Api(api_client).delete_namespaced_pod(name, ns)
    wait_for(lambda: not cdi_files(node, uid) and not state_of(daemon, uid), 60, 0.3,
             f"kubelet's NodeUnprepareResources for claim {ns}/{name} to remove its CDI spec, ledger and checkpoint entry")


# --- the node itself --------------------------------------------------------------------------

def test_node_is_ready_untainted_and_reports_upstream_parts(real_node: RealNode, api_client: client.ApiClient) -> None:
    node = client.CoreV1Api(api_client).read_node(real_node.name)
    assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
    assert not any(t.key == "node.kubernetes.io/not-ready" for t in node.spec.taints or [])
    info = node.status.node_info
    assert info.kubelet_version == real_node.control_plane.k8s_version
    assert info.container_runtime_version == "containerd://2.4.2"
    assert [a.address for a in node.status.addresses if a.type == "InternalIP"] == [real_node.state.node_ip]
    images = {n for img in node.status.images for n in img.names}
    assert {"docker.io/library/" + WORKLOAD_IMAGE, PAUSE_IMAGE} <= images


def test_daemon_registers_with_the_real_kubelet(daemon: DaemonProcess, real_node: RealNode) -> None:
    log = real_node.layout.log("kubelet").read_text(errors="replace")
    registry = re.escape(str(real_node.layout.registry_dir))
    assert re.search(rf'RegisterPlugin started.*"SocketPath":"{registry}/[^"]*gpu\.example\.com', log), \
        "kubelet's plugin watcher did not pick up the daemon's registration socket"
    endpoint = re.escape(str(real_node.layout.plugin_dir / DRIVER))
    assert re.search(rf'driverName="gpu\.example\.com" endpoint="{endpoint}/[^"]+" connected=true', log), \
        "kubelet's DRA manager did not connect to the daemon's DRA socket"


# --- the claim path ---------------------------------------------------------------------------

def test_pod_with_a_claim_runs_with_the_cdi_edits_applied(
    api_client: client.ApiClient, real_node: RealNode, daemon: DaemonProcess, device_class: str, namespace: str
) -> None:
    run_pod(api_client, namespace, "share", device_class, real_node.name, "4Gi")
    assert wait_phase(api_client, namespace, "share", ("Succeeded", "Failed")) == "Succeeded"
    report = workload_report(api_client, namespace, "share")
    assert set(report) == {"quota_total_bytes", "over_quota_alloc"}, report
    spec = real_node.container_spec(namespace, "share")
    env = spec["process"]["env"]
    # Written by the driver and the framework into the claim's CDI spec, applied by containerd.
    assert f"EXAMPLE_MEMORY_LIMIT={4 * GI}" in env and "EXAMPLE_CORES_LIMIT=25" in env, env
    uid = claim_uid(api_client, namespace, "share")
    mounts = {m["destination"]: m["source"] for m in spec["mounts"]}
    hook = "/run/hookcore/vgpu"
    assert {"/usr/lib/hookcore", "/etc/ld.so.preload", f"{hook}/config", f"{hook}/ledger"} <= set(mounts), mounts
    assert hook not in mounts  # two files of the claim's hook dir, not the dir
    assert mounts[f"{hook}/config"] == str(daemon.state_dir / "hooks" / uid / "config")
    assert mounts[f"{hook}/ledger"] == str(daemon.state_dir / "hooks" / uid / "ledger")
    options = {m["destination"]: m.get("options") or [] for m in spec["mounts"]}
    assert "ro" in options[f"{hook}/config"] and "rw" in options[f"{hook}/ledger"], options


def test_container_sees_exactly_its_quota_and_is_refused_past_it(
    api_client: client.ApiClient, real_node: RealNode, daemon: DaemonProcess, device_class: str, namespace: str
) -> None:
    run_pod(api_client, namespace, "quota", device_class, real_node.name, "4Gi")
    assert wait_phase(api_client, namespace, "quota", ("Succeeded", "Failed")) == "Succeeded"
    report = workload_report(api_client, namespace, "quota")
    assert report == {"quota_total_bytes": str(4 * GI), "over_quota_alloc": "refused"}, report


def test_pod_deletion_unprepares_and_leaves_nothing(
    api_client: client.ApiClient, real_node: RealNode, daemon: DaemonProcess, device_class: str, namespace: str
) -> None:
    run_pod(api_client, namespace, "held", device_class, real_node.name, "2Gi", image=PAUSE_IMAGE)
    wait_phase(api_client, namespace, "held", ("Running",))
    uid = claim_uid(api_client, namespace, "held")
    assert cdi_files(real_node, uid) and state_of(daemon, uid)
    assert (daemon.state_dir / "hooks" / uid / "ledger").is_file()  # the claim's ledger, while the pod runs
    delete_pod_and_wait_unprepared(api_client, real_node, daemon, namespace, "held", uid)


def test_daemon_killed_and_restarted_while_pods_run(
    cluster: ControlPlane, api_client: client.ApiClient, real_node: RealNode, daemon: DaemonProcess,
    device_class: str, namespace: str, workdir: Path,
) -> None:
    run_pod(api_client, namespace, "long", device_class, real_node.name, "2Gi", image=PAUSE_IMAGE)
    wait_phase(api_client, namespace, "long", ("Running",))
    uid = claim_uid(api_client, namespace, "long")
    daemon.stop(signal.SIGKILL)
    daemon.start()
    daemon.wait_http("/readyz", timeout=60)
    assert pod_phase(api_client, namespace, "long") == "Running"
    # The restarted daemon prepares new claims and unprepares the one it prepared before the kill.
    run_pod(api_client, namespace, "after", device_class, real_node.name, "2Gi")
    assert wait_phase(api_client, namespace, "after", ("Succeeded", "Failed")) == "Succeeded"
    delete_pod_and_wait_unprepared(api_client, real_node, daemon, namespace, "long", uid)


def test_kubelet_restart_wipes_slices_and_the_daemon_republishes_within_5s(
    api_client: client.ApiClient, real_node: RealNode, daemon: DaemonProcess, device_class: str, namespace: str
) -> None:
    resource: Any = client.ResourceV1Api(api_client)
    selector = f"spec.nodeName={real_node.name}"
    before = resource.list_resource_slice(field_selector=selector)
    assert before.items, "the daemon published no slice for the real node"
    events: list[tuple[float, str, str]] = []
    stop = threading.Event()

    def record() -> None:
        w = watch.Watch()
        for ev in w.stream(resource.list_resource_slice, field_selector=selector,
                           resource_version=before.metadata.resource_version, timeout_seconds=60):
            events.append((time.monotonic(), ev["type"], ev["object"].metadata.name))
            if stop.is_set():
                w.stop()

    watcher = threading.Thread(target=record, daemon=True)
    watcher.start()
    real_node.restart_kubelet()
    deleted = wait_for(lambda: next((t for t, kind, _ in events if kind == "DELETED"), None), 60, 0.1,
                       "kubelet to wipe the node's ResourceSlices on start")
    republished = wait_for(lambda: next((t for t, kind, _ in events if kind == "ADDED" and t >= deleted), None),
                           15, 0.1, "the daemon to republish its slices")
    stop.set()
    print(f"kubelet wiped the slices; the daemon republished {republished - deleted:.2f} s later")
    assert republished - deleted <= 5.0, f"republished {republished - deleted:.1f} s after kubelet wiped the slices"
    # kubelet re-registers the daemon from its socket: a new pod is prepared after the restart.
    wait_for(lambda: real_node.status().ready, 60, 0.5, "the node to be Ready again")
    run_pod(api_client, namespace, "again", device_class, real_node.name, "1Gi")
    assert wait_phase(api_client, namespace, "again", ("Succeeded", "Failed")) == "Succeeded"


def test_the_real_node_example_runs_as_users_apply_it(
    cluster: ControlPlane, api_client: client.ApiClient, real_node: RealNode, daemon: DaemonProcess, namespace: str
) -> None:
    examples = Path(__file__).resolve().parents[2] / "examples" / "gpu.example.com"
    kubectl = [str(cluster.bins.path("kubectl")), "--kubeconfig", str(cluster.kubeconfig), "-n", namespace]
    docs = [d for name in ("deviceclass.yaml", "workload-on-real-node.yaml")
            for d in yaml.safe_load_all((examples / name).read_text())]
    for doc in docs:  # the session's cluster also has fake nodes: pin the pod to the real one
        if doc["kind"] == "Pod":
            doc["spec"]["nodeSelector"] = {"kubernetes.io/hostname": real_node.name}
    proc = subprocess.run([*kubectl, "apply", "-f", "-"], input=yaml.safe_dump_all(docs), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert wait_phase(api_client, namespace, "quota-check", ("Succeeded", "Failed")) == "Succeeded"
    proc = subprocess.run([*kubectl, "logs", "quota-check"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    print(f"kubectl logs quota-check (node {real_node.name}):\n{proc.stdout}")
    assert re.search(r"^quota_total_bytes=\d+$", proc.stdout, re.M) and "over_quota_alloc=" in proc.stdout


def test_kubelet_and_containerd_killed_then_node_up_repairs_keeping_the_pods(
    api_client: client.ApiClient, real_node: RealNode, daemon: DaemonProcess, device_class: str, namespace: str
) -> None:
    run_pod(api_client, namespace, "survivor", device_class, real_node.name, "1Gi", image=PAUSE_IMAGE)
    wait_phase(api_client, namespace, "survivor", ("Running",))
    uid = claim_uid(api_client, namespace, "survivor")
    state = real_node.state
    assert state is not None
    for name in ("kubelet", "containerd"):
        os.kill(state.processes[name].pid, signal.SIGKILL)
    wait_for(lambda: not any(real_node.status().running.values()), 10, 0.1, "both processes to die")
    status = RealNode(real_node.directory).up()  # a new command, as a user would run it
    assert status.healthy, status
    assert pod_phase(api_client, namespace, "survivor") == "Running"
    assert real_node.crictl("ps", "--label", "io.kubernetes.pod.name=survivor", "-q").stdout.strip(), \
        "containerd lost the running container"
    delete_pod_and_wait_unprepared(api_client, real_node, daemon, namespace, "survivor", uid)


# --- hami-core-gpu with its fake backend, beside the example daemon -----------------------------

GPU_DRIVER = "hami-core-gpu.project-hami.io"


@pytest.fixture(scope="module")
def gpu_daemon(cluster: ControlPlane, real_node: RealNode, daemon: DaemonProcess) -> Iterator[DaemonProcess]:
    lay = real_node.layout
    with tempfile.TemporaryDirectory(prefix="dra-rg-", dir="/tmp") as work:
        proc = DaemonProcess("hami-core-gpu", real_node.name, cluster.kubeconfig, Path(work), args=["--fake", "h200x8"],
                             kubelet_dirs={"registrar": lay.registry_dir, "plugins": lay.plugin_dir, "cdi": lay.cdi_dir})
        proc.start()
        proc.wait_http("/readyz", timeout=60)
        yield proc
        proc.stop()


def test_hami_core_gpu_fake_share_is_enforced_on_the_real_node(
    cluster: ControlPlane, api_client: client.ApiClient, real_node: RealNode, gpu_daemon: DaemonProcess, namespace: str
) -> None:
    examples = Path(__file__).resolve().parents[2] / "examples" / "hami-core-gpu"
    proc = subprocess.run([str(cluster.bins.path("kubectl")), "--kubeconfig", str(cluster.kubeconfig), "apply", "-f",
                           str(examples / "deviceclass.yaml")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    run_pod(api_client, namespace, "h200-share", GPU_DRIVER, real_node.name, "8Gi")
    assert wait_phase(api_client, namespace, "h200-share", ("Succeeded", "Failed")) == "Succeeded"
    assert workload_report(api_client, namespace, "h200-share") == {
        "quota_total_bytes": str(8 * GI), "over_quota_alloc": "refused"}
