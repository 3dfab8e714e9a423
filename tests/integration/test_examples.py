"""The shared-device example is allocated by kube-scheduler from slices the `example` driver's
daemon publishes (every example's dry run: tests/drivers/test_shared_device_drivers.py)."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from kube_helpers import create_node, unique, wait_for
from kubernetes import client

from dra.testing.daemon import DaemonProcess
from dra.testing.kubelet import KubeletHarness
from dra_dev.cluster.controlplane import ControlPlane

pytestmark = [pytest.mark.cluster, pytest.mark.scheduler]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def kubectl(cluster: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(cluster.bins.path("kubectl")), "--kubeconfig", str(cluster.kubeconfig), *args],
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def namespace(api_client: client.ApiClient) -> Iterator[str]:
    ns = unique("examples")
    client.CoreV1Api(api_client).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    yield ns
    client.CoreV1Api(api_client).delete_namespace(ns)


def test_shared_device_example_is_allocated_from_the_daemons_slices(
    cluster: ControlPlane, api_client: client.ApiClient, namespace: str
) -> None:
    node = unique("ex")
    create_node(api_client, node)
    with tempfile.TemporaryDirectory(prefix="dra-ex-", dir="/tmp") as work:
        daemon = DaemonProcess("example", node, cluster.kubeconfig, Path(work), args=["--set", "count=1"])
        daemon.start()
        harness = KubeletHarness(daemon.registrar_dir)  # readiness includes kubelet's registration
        harness.watch()
        try:
            daemon.wait_http("/readyz")
            d = EXAMPLES / "gpu.example.com"
            for name in ("deviceclass.yaml", "shared-device.yaml"):
                proc = kubectl(cluster, "apply", "-n", namespace, "-f", str(d / name))
                assert proc.returncode == 0, proc.stderr
            resource = client.ResourceV1Api(api_client)

            def allocated(name: str) -> dict | None:
                c = resource.read_namespaced_resource_claim(name, namespace).to_dict()
                return c if (c.get("status") or {}).get("allocation") else None

            want = {"training": {"cores": "70", "memory": "10Gi"}, "notebook": {"cores": "30", "memory": "4Gi"}}
            for name, consumed in want.items():
                claim = wait_for(lambda n=name: allocated(n), 60, what=f"claim {name} to be allocated")
                (result,) = claim["status"]["allocation"]["devices"]["results"]
                assert result["driver"] == "gpu.example.com" and result["share_id"]
                assert result["consumed_capacity"] == consumed
        finally:
            harness.close()
            daemon.stop()
            client.CoreV1Api(api_client).delete_node(node)
