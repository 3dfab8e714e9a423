"""`dra run example` as a child process against the real control plane, driven by the kubelet harness.

Each test has its own Node and work dir; pods are pinned to the test's node, so kube-scheduler
allocates only from the slices this test's daemon published.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kube_helpers import create_node, unique, wait_for
from kubernetes import client

from dra.driver import ClaimRef
from dra.testing.cdi import apply_cdi, validate_cdi_spec
from dra.testing.claims import claim_manifest, pod_manifest
from dra.testing.daemon import DaemonProcess
from dra.testing.kubelet import KubeletHarness

pytestmark = pytest.mark.cluster

DRIVER = "gpu.example.com"
CDI_SCHEMA = Path(__file__).parent.parent / "data" / "cdi-schema"


@pytest.fixture
def workdir() -> Iterator[Path]:
    # Short and under /tmp: unix socket paths must fit in 107 bytes.
    with tempfile.TemporaryDirectory(prefix="dra-d-", dir="/tmp") as d:
        yield Path(d)


@pytest.fixture
def node(api_client: client.ApiClient) -> Iterator[str]:
    name = unique("dmn")
    create_node(api_client, name)
    yield name
    client.CoreV1Api(api_client).delete_node(name)


@pytest.fixture
def daemon(cluster: Any, node: str, workdir: Path) -> Iterator[DaemonProcess]:
    # One slice whatever the version (the layout by version is test_k134_publish.py's subject).
    proc = DaemonProcess("example", node, cluster.kubeconfig, workdir, args=["--set", "count=2", "--slice-layout", "packed"])
    proc.start()
    yield proc
    if proc.stop() not in (0, -signal.SIGTERM):
        print(proc.log()[-4000:])


@pytest.fixture
def kubelet(daemon: DaemonProcess) -> Iterator[KubeletHarness]:
    harness = KubeletHarness(daemon.registrar_dir)
    harness.watch()
    yield harness
    harness.close()


def slices(api: client.ApiClient, node: str) -> list[dict[str, Any]]:
    resp: Any = client.ResourceV1Api(api).list_resource_slice(
        field_selector=f"spec.nodeName={node},spec.driver={DRIVER}", _preload_content=False
    )
    items: list[dict[str, Any]] = json.loads(resp.data)["items"]
    return items


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one series in a Prometheus exposition."""
    want = {"driver": DRIVER, **labels}
    for line in text.splitlines():
        m = re.match(r"^(\w+)\{(.*)\} (\S+)$", line)
        if m and m.group(1) == name and dict(re.findall(r'(\w+)="([^"]*)"', m.group(2))) == want:
            return float(m.group(3))
    raise AssertionError(f"no series {name}{want} in:\n{text}")


def test_unknown_driver_is_a_user_error_listing_the_installed_ones(workdir: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "dra.cli", "run", "no-such-driver", "--node-name", "n1", "--kubeconfig", "/dev/null"],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out
    assert "No driver named 'no-such-driver' is installed" in out.stderr
    assert re.search(r"installed: ([\w-]+, )*example\b", out.stderr), out.stderr  # every installed driver listed


def test_daemon_publishes_serves_probes_answers_kubelet_and_cleans_up_on_sigterm(
    api_client: client.ApiClient, node: str, daemon: DaemonProcess, kubelet: KubeletHarness
) -> None:
    plugin = kubelet.wait_for_plugin(DRIVER, timeout=60)
    assert plugin.endpoint == str(daemon.plugin_dir / DRIVER / "dra.sock")
    (s,) = wait_for(lambda: slices(api_client, node), timeout=30, what="the daemon's ResourceSlice")
    assert [d["name"] for d in s["spec"]["devices"]] == ["gpu-0", "gpu-1"]

    assert daemon.wait_http("/healthz") == "ok\n"
    assert daemon.wait_http("/readyz") == "ok\n"  # published and registered
    status, text = daemon.get("/metrics")
    assert status == 200
    assert metric(text, "dra_published_devices") == 2
    assert metric(text, "dra_pool_generation") == 1
    # Zero-initialised before any claim.
    assert metric(text, "dra_requests_total", operation="prepare") == 0
    assert metric(text, "dra_errors_total", kind="publish") == 0

    assert kubelet.probe(driver=DRIVER) == {}
    missing = ClaimRef("00000000-0000-0000-0000-000000000001", "default", "no-such-claim")
    answer = kubelet.prepare([missing], driver=DRIVER)[missing.uid]
    assert "not found" in answer.error, answer
    assert kubelet.unprepare([missing], driver=DRIVER) == {missing.uid: ""}
    _, text = daemon.get("/metrics")
    assert metric(text, "dra_requests_total", operation="prepare") == 1
    assert metric(text, "dra_claims_total", operation="prepare", result="error") == 1
    assert metric(text, "dra_errors_total", kind="prepare") == 1
    assert metric(text, "dra_claims_total", operation="unprepare", result="success") == 1

    # kubelet wipes the node's slices at its start: the daemon puts them back.
    client.ResourceV1Api(api_client).delete_collection_resource_slice(field_selector=f"spec.nodeName={node}")
    wait_for(lambda: slices(api_client, node), timeout=5, interval=0.05, what="the slice to be republished")

    sockets = daemon.sockets()
    assert {p.name for p in sockets} == {"dra.sock", f"{DRIVER}-reg.sock"}
    assert daemon.stop(signal.SIGTERM) == 0, daemon.log()[-3000:]
    assert daemon.sockets() == []
    assert all(not p.exists() for p in sockets)
    assert "daemon stopped" in daemon.log()


def _claim_and_pod(api: client.ApiClient, ns: str, name: str, device_class: str, node: str) -> None:
    resource: Any = client.ResourceV1Api(api)
    core: Any = client.CoreV1Api(api)
    resource.create_namespaced_resource_claim(ns, claim_manifest(name, device_class, cores="1", memory="64Mi"))
    core.create_namespaced_pod(ns, pod_manifest(name, [name], node))


def _allocated(api: client.ApiClient, ns: str, name: str) -> ClaimRef | None:
    claim: Any = client.ResourceV1Api(api).read_namespaced_resource_claim(name, ns)
    if claim.status and claim.status.allocation and claim.status.reserved_for:
        return ClaimRef(claim.metadata.uid, ns, name)
    return None


@pytest.fixture
def namespace(api_client: client.ApiClient) -> Iterator[tuple[str, str]]:
    """A namespace and a DeviceClass selecting the example driver's devices."""
    ns = unique("dmn")
    core: Any = client.CoreV1Api(api_client)
    resource: Any = client.ResourceV1Api(api_client)
    core.create_namespace({"metadata": {"name": ns}})
    resource.create_device_class(
        {"metadata": {"name": ns}, "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}
    )
    yield ns, ns
    resource.delete_device_class(ns)
    core.delete_namespace(ns)


def test_pod_claim_allocated_by_the_scheduler_is_prepared_through_the_daemon(
    api_client: client.ApiClient,
    node: str,
    namespace: tuple[str, str],
    daemon: DaemonProcess,
    kubelet: KubeletHarness,
) -> None:
    ns, device_class = namespace
    kubelet.wait_for_plugin(DRIVER, timeout=60)
    wait_for(lambda: slices(api_client, node), timeout=30, what="the daemon's ResourceSlice")
    _claim_and_pod(api_client, ns, "c0", device_class, node)
    ref = wait_for(lambda: _allocated(api_client, ns, "c0"), timeout=60, what="kube-scheduler to allocate c0")

    first = kubelet.prepare([ref], driver=DRIVER)[ref.uid]
    assert first.error == ""
    (dev,) = first.devices
    assert dev.pool_name == node and dev.device_name in ("gpu-0", "gpu-1")
    assert dev.share_id  # consumable capacity: the allocation's shareID is echoed
    (cdi_id,) = dev.cdi_device_ids
    assert cdi_id.startswith("k8s.gpu.example.com/claim=")
    (spec_file,) = [p for p in daemon.cdi_dir.iterdir() if not p.name.startswith(".")]
    assert ref.uid in spec_file.name
    validate_cdi_spec(json.loads(spec_file.read_text()), CDI_SCHEMA)
    env, _ = apply_cdi(daemon.cdi_dir, [cdi_id])  # what a container runtime would apply
    assert env["EXAMPLE_CORES_LIMIT"] == "1"
    assert env["EXAMPLE_MEMORY_LIMIT"] == str(64 << 20)

    assert kubelet.prepare([ref], driver=DRIVER)[ref.uid] == first  # idempotent
    assert kubelet.unprepare([ref], driver=DRIVER) == {ref.uid: ""}
    assert list(daemon.cdi_dir.iterdir()) == []
    _, text = daemon.get("/metrics")
    assert metric(text, "dra_claims_total", operation="prepare", result="success") == 2
    assert metric(text, "dra_request_duration_seconds_count", operation="prepare") == 2


def test_hundred_claims_prepared_concurrently_through_the_daemon(
    api_client: client.ApiClient,
    node: str,
    namespace: tuple[str, str],
    daemon: DaemonProcess,
    kubelet: KubeletHarness,
) -> None:
    ns, device_class = namespace
    n = 100
    kubelet.wait_for_plugin(DRIVER, timeout=60)
    wait_for(lambda: slices(api_client, node), timeout=30, what="the daemon's ResourceSlice")
    for i in range(n):
        _claim_and_pod(api_client, ns, f"c{i}", device_class, node)
    refs = [wait_for(lambda i=i: _allocated(api_client, ns, f"c{i}"), timeout=240, what=f"c{i}") for i in range(n)]

    t0 = time.monotonic()
    with ThreadPoolExecutor(n) as pool:
        answers = list(pool.map(lambda r: kubelet.prepare([r], driver=DRIVER)[r.uid], refs))
    took = time.monotonic() - t0
    assert [a.error for a in answers] == [""] * n
    assert len({d.cdi_device_ids for a in answers for d in a.devices}) == n  # every share its own CDI device
    assert len(list(daemon.cdi_dir.iterdir())) == n
    print(f"\n100 concurrent NodePrepareResources through the daemon: {took * 1000:.0f} ms wall")

    with ThreadPoolExecutor(n) as pool:
        assert list(pool.map(lambda r: kubelet.unprepare([r], driver=DRIVER)[r.uid], refs)) == [""] * n
    assert list(daemon.cdi_dir.iterdir()) == []


def test_rolling_update_two_instances_serve_side_by_side_and_the_old_one_leaves_cleanly(
    api_client: client.ApiClient, cluster: Any, node: str, workdir: Path
) -> None:
    count = ["--set", "count=2", "--slice-layout", "packed"]
    old = DaemonProcess("example", node, cluster.kubeconfig, workdir, args=["--pod-uid", "old-uid", *count]).start()
    new = DaemonProcess("example", node, cluster.kubeconfig, workdir, args=["--pod-uid", "new-uid", *count])
    harness = KubeletHarness(old.registrar_dir)
    try:
        harness.wait_for_plugin(DRIVER, timeout=60)
        old.wait_http("/readyz")
        (before,) = slices(api_client, node)
        new.start()
        harness.wait_for_plugin(DRIVER, timeout=60, count=2)
        new.wait_http("/readyz")  # the pool it found is already right: ready without writing
        (during,) = slices(api_client, node)
        assert during["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
        names = {p.name for p in old.sockets()}
        assert {"dra-old-uid.sock", "dra-new-uid.sock", f"{DRIVER}-old-uid-reg.sock", f"{DRIVER}-new-uid-reg.sock"} <= names

        assert old.stop() == 0
        remaining = {p.name for p in new.sockets()}
        assert remaining == {"dra-new-uid.sock", f"{DRIVER}-new-uid-reg.sock"}
        harness.wait_gone(str(old.registrar_dir / f"{DRIVER}-old-uid-reg.sock"))
        missing = ClaimRef("00000000-0000-0000-0000-000000000002", "default", "gone")
        assert "not found" in harness.prepare([missing], driver=DRIVER)[missing.uid].error  # the new one answers
        (after,) = slices(api_client, node)
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    finally:
        harness.close()
        old.stop()
        new.stop()
