"""The watchdog on a real node: upstream kubelet and containerd run a held workload and unheld ones
(the static pause program) in pods with hami-core-gpu claims on fake GPUs; the stub NVML lists
their host PIDs; the daemon's watchdog names the right pod in an Event within 2 s and, where the
claim's config says kill, kills that pod's process and leaves its neighbour running; a held pod
given more memory than its hook charged gets MemoryOverQuota.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_helpers import unique, wait_for
from kubernetes import client

from dra._runtime import procinfo
from dra.testing.claims import claim_manifest, pod_manifest
from dra.testing.daemon import DaemonProcess
from dra_dev.cluster.controlplane import ControlPlane
from dra_dev.node.images import PAUSE_IMAGE, WORKLOAD_BINARY, WORKLOAD_IMAGE
from dra_dev.node.node import RealNode

pytestmark = [pytest.mark.cluster, pytest.mark.node]

DRIVER = "hami-core-gpu.project-hami.io"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "hami-core-gpu"
GiB = 1 << 30


@pytest.fixture(scope="module")
def watched(cluster: ControlPlane, real_node: RealNode) -> Iterator[dict[str, Any]]:
    lay = real_node.layout
    with tempfile.TemporaryDirectory(prefix="dra-wn-", dir="/tmp") as work:
        procs = Path(work) / "nvml-processes"
        procs.write_text("")
        daemon = DaemonProcess("hami-core-gpu", real_node.name, cluster.kubeconfig, Path(work),
                               args=["--fake", "h200x8", "--set", "health=off", "--watchdog", "report"],
                               env={"STUB_NVML_PROCESSES": str(procs)},
                               kubelet_dirs={"registrar": lay.registry_dir, "plugins": lay.plugin_dir,
                                             "cdi": lay.cdi_dir})
        daemon.start()
        try:
            daemon.wait_http("/readyz", timeout=60)
            yield {"daemon": daemon, "procs": procs}
        finally:
            daemon.stop()


@pytest.fixture
def namespace(api_client: client.ApiClient) -> Iterator[str]:
    ns = unique("wd")
    core: Any = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": ns}})
    yield ns
    core.delete_namespace(ns)


def run(api: client.ApiClient, ns: str, name: str, node: str, image: str, command: list[str] | None = None,
        action: str | None = None) -> None:
    claim = claim_manifest(name, DRIVER, cores="25", memory="4Gi")
    if action:
        claim["spec"]["devices"]["config"] = [{"requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": {
            "apiVersion": "hami-core-gpu.project-hami.io/v1alpha1", "kind": "GpuConfig", "watchdogAction": action}}}]
    pod = pod_manifest(name, [name], node, image=image)
    if command:
        pod["spec"]["containers"][0]["command"] = command
    client.ResourceV1Api(api).create_namespaced_resource_claim(ns, claim)
    client.CoreV1Api(api).create_namespaced_pod(ns, pod)


def running(api: client.ApiClient, ns: str, name: str) -> tuple[str, str, int]:
    """(pod UID, claim UID, GPU index) once the pod runs."""
    core = client.CoreV1Api(api)

    def up() -> client.V1Pod | None:
        pod = core.read_namespaced_pod(name, ns)
        if pod.status.phase in ("Failed", "Succeeded"):
            events = core.list_namespaced_event(ns).items
            raise AssertionError(f"pod {name} ended: {[(e.reason, e.message) for e in events]}")
        return pod if pod.status.phase == "Running" else None

    pod = wait_for(up, 120, 0.3, f"pod {ns}/{name} running")
    claim = client.ResourceV1Api(api).read_namespaced_resource_claim(name, ns)
    device = claim.status.allocation.devices.results[0].device  # hami-gpu-<NVML index> on the fake node
    return str(pod.metadata.uid), str(claim.metadata.uid), int(device.rsplit("-", 1)[1])


def host_pid(pod_uid: str, claim_uid: str, hooks: procinfo.HooksFs) -> int:
    """The host PID of the pod's container process: in the pod's cgroup and the claim's mounts
    (the pod's sandbox is in the cgroup but not the mounts)."""
    def find() -> int | None:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            w = procinfo.workload(Path("/proc"), int(entry.name), hooks)
            if w is not None and w.pod_uid == pod_uid and claim_uid in w.claims:
                return int(entry.name)
        return None

    return wait_for(find, 30, 0.2, f"the process of pod {pod_uid}")


def events(api: client.ApiClient, ns: str, pod: str, reason: str) -> list[Any]:
    return [e for e in client.CoreV1Api(api).list_namespaced_event(ns).items
            if e.involved_object.name == pod and e.reason == reason]


def test_unheld_pod_gets_the_event_in_2s_and_kill_spares_the_neighbour(
    cluster: ControlPlane, api_client: client.ApiClient, real_node: RealNode, watched: dict[str, Any], namespace: str
) -> None:
    kubectl = [str(cluster.bins.path("kubectl")), "--kubeconfig", str(cluster.kubeconfig)]
    proc = subprocess.run([*kubectl, "apply", "-f", str(EXAMPLES / "deviceclass.yaml")], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    node = real_node.name
    run(api_client, namespace, "held", node, WORKLOAD_IMAGE, [WORKLOAD_BINARY, "--hold", "600"])
    run(api_client, namespace, "static", node, PAUSE_IMAGE)  # statically linked: no preload reaches it
    held_pod, held_claim, held_gpu = running(api_client, namespace, "held")
    static_pod, static_claim, static_gpu = running(api_client, namespace, "static")
    hooks = procinfo.hooks_fs(Path("/proc"), watched["daemon"].state_dir / "hooks")
    assert hooks is not None
    held_pid = host_pid(held_pod, held_claim, hooks)
    static_pid = host_pid(static_pod, static_claim, hooks)

    lines = [f"{held_gpu} {held_pid} {GiB}", f"{static_gpu} {static_pid} {GiB}"]
    watched["procs"].write_text("".join(x + "\n" for x in lines))
    t0 = time.monotonic()
    got = wait_for(lambda: events(api_client, namespace, "static", "ProcessUnheld") or None, 10, 0.05,
                   "the ProcessUnheld Event on pod static")
    took = time.monotonic() - t0
    assert took < 2.0, f"the Event took {took:.2f} s"
    assert f"process {static_pid}" in got[0].message and got[0].type == "Warning"
    assert got[0].involved_object.uid == static_pod
    assert events(api_client, namespace, "held", "ProcessUnheld") == []  # the hook holds it
    # What a daemon without CAP_SYS_PTRACE records as "registered (unverified)": the hook registered
    # the container's process in its claim's ledger under the PID it has in the pod's PID namespace.
    import hookcore

    slots = {(p.pid, p.start_time) for p in hookcore.read_ledger(
        watched["daemon"].state_dir / "hooks" / held_claim / "ledger").processes}
    ns_pid = procinfo.ns_tgid(Path("/proc"), held_pid)
    assert ns_pid is not None and ns_pid != held_pid  # the pod has its own PID namespace
    assert (ns_pid, procinfo.start_time(Path("/proc"), held_pid)) in slots
    print(f"watchdog: ProcessUnheld Event on the unheld pod {took:.2f} s after it appeared on the GPU")

    # The same escape in a claim whose config says kill: only that pod's process dies.
    run(api_client, namespace, "rogue", node, PAUSE_IMAGE, action="kill")
    rogue_pod, rogue_claim, rogue_gpu = running(api_client, namespace, "rogue")
    rogue_pid = host_pid(rogue_pod, rogue_claim, hooks)
    lines.append(f"{rogue_gpu} {rogue_pid} {GiB}")
    watched["procs"].write_text("".join(x + "\n" for x in lines))
    t0 = time.monotonic()
    core = client.CoreV1Api(api_client)
    wait_for(lambda: not Path(f"/proc/{rogue_pid}").exists() or None, 10, 0.02, "pod rogue's process killed")
    gone = time.monotonic() - t0
    assert gone < 2.0, f"the kill took {gone:.2f} s"
    wait_for(lambda: core.read_namespaced_pod("rogue", namespace).status.phase == "Failed" or None, 30, 0.1,
             "pod rogue Failed")
    killed = wait_for(lambda: events(api_client, namespace, "rogue", "ProcessUnheld") or None, 10, 0.1,
                      "the Event on pod rogue")
    assert "killed (SIGKILL)" in killed[0].message
    state = core.read_namespaced_pod("rogue", namespace).status.container_statuses[0].state.terminated
    assert state.exit_code == 137 or state.signal == 9, state
    assert core.read_namespaced_pod("held", namespace).status.phase == "Running"
    assert Path(f"/proc/{held_pid}").exists()
    print(f"watchdog: rogue pod's process killed {gone:.2f} s after it appeared on the GPU (pod Failed after "
          f"{time.monotonic() - t0:.2f} s); neighbour running")
    # the static pod's claim says report: it was reported, never killed
    assert core.read_namespaced_pod("static", namespace).status.phase == "Running"

    # The held pod's process given memory its hook did not charge (NVML sees 5 GiB + 64 MiB, the
    # quota is 4Gi + the 64Mi tolerance): MemoryOverQuota on that pod, reported (its claim says nothing).
    lines[0] = f"{held_gpu} {held_pid} {5 * GiB + 64 * (1 << 20)}"
    watched["procs"].write_text("".join(x + "\n" for x in lines[:2]))
    t0 = time.monotonic()
    over = wait_for(lambda: events(api_client, namespace, "held", "MemoryOverQuota") or None, 10, 0.05,
                    "the MemoryOverQuota Event on pod held")
    took = time.monotonic() - t0
    assert took < 2.0 and "1024 MiB" in over[0].message and over[0].involved_object.uid == held_pod
    assert Path(f"/proc/{held_pid}").exists()
    print(f"watchdog: MemoryOverQuota Event on the held pod {took:.2f} s after NVML showed it over")
