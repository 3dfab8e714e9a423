"""An upgraded control plane gets its slice layout, and prepared claims survive it (issue 16).

A control plane of its own at v1.34.4, the example driver's daemon publishing one device per
slice; a claim allocated and prepared. Then the control plane is stopped and v1.37.2 started on
the same etcd data and ports (an in-place upgrade, as kubeadm does it): the daemon's watch breaks,
it reads the new version, and republishes the same devices packed in one slice of the next pool
generation. The claim stays allocated to the same device and share, prepare answers with the
same CDI devices (from the checkpoint), and a new claim is allocated from the new layout.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_helpers import create_node, wait_for
from kubernetes import client

from dra.driver import ClaimRef
from dra.testing.daemon import DaemonProcess
from dra.testing.kubelet import KubeletHarness
from dra_dev.cluster.binaries import binary_set, build
from dra_dev.cluster.controlplane import ControlPlane, Ports

# The timeout covers building v1.37.2 on first use (11 minutes on two cores; .ci/run builds it
# in the background while the suite runs, so this test may wait for that build's lock).
pytestmark = [pytest.mark.cluster, pytest.mark.scheduler, pytest.mark.slow, pytest.mark.timeout(1800)]
OLD, NEW = "v1.34.4", "v1.37.2"
DRIVER = "gpu.example.com"


@pytest.fixture
def upgradable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    for version in (OLD, NEW):  # built on first use, like the version matrix
        if not binary_set(version).complete():
            build(version, progress=lambda m: print(m, file=sys.stderr))
    directory = Path(tmp_path_factory.mktemp("upgrade"))
    cp = ControlPlane(directory, OLD, ports=Ports.free())
    cp.up()
    try:
        yield cp
    finally:
        ControlPlane(directory, OLD).down()


def pool(api: client.ApiClient, node: str) -> list[dict[str, Any]]:
    data = client.ResourceV1Api(api).list_resource_slice(field_selector=f"spec.nodeName={node}", _preload_content=False).data
    return [s for s in json.loads(data)["items"] if s["spec"]["driver"] == DRIVER]


def claim_and_pod(api: client.ApiClient, ns: str, node: str, name: str) -> None:
    client.ResourceV1Api(api).create_namespaced_resource_claim(ns, {"metadata": {"name": name}, "spec": {"devices": {
        "requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER, "capacity": {"requests": {"cores": "30"}}}}]}}})
    client.CoreV1Api(api).create_namespaced_pod(ns, {"metadata": {"name": name}, "spec": {
        "nodeSelector": {"kubernetes.io/hostname": node}, "resourceClaims": [{"name": "c", "resourceClaimName": name}],
        "containers": [{"name": "c", "image": "none", "resources": {"claims": [{"name": "c"}]}}]}})


def allocation(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    def read() -> dict[str, Any] | None:
        c = json.loads(client.ResourceV1Api(api).read_namespaced_resource_claim(name, ns, _preload_content=False).data)
        return c if (c.get("status") or {}).get("allocation") else None
    return wait_for(read, 90, what=f"claim {name} allocated")


def test_an_upgrade_to_1_37_repacks_the_pool_and_keeps_prepared_claims(upgradable: ControlPlane) -> None:
    cp, node, ns = upgradable, "up-node", "up"
    api = cp.api_client()
    create_node(api, node)
    client.CoreV1Api(api).create_namespace({"metadata": {"name": ns}})
    client.ResourceV1Api(api).create_device_class({"metadata": {"name": DRIVER}, "spec": {"selectors": [
        {"cel": {"expression": f"device.driver == '{DRIVER}'"}}]}})
    with tempfile.TemporaryDirectory(prefix="dra-up-", dir="/tmp") as work:
        daemon = DaemonProcess("example", node, cp.kubeconfig, Path(work), args=["--set", "count=4"]).start()
        harness = KubeletHarness(daemon.registrar_dir)
        harness.watch()
        try:
            daemon.wait_http("/readyz", timeout=60)
            before = pool(api, node)
            assert sorted(len(s["spec"]["devices"]) for s in before) == [1, 1, 1, 1]  # 1.34: one device per slice
            claim_and_pod(api, ns, node, "kept")
            kept = allocation(api, ns, "kept")
            (result,) = kept["status"]["allocation"]["devices"]["results"]
            harness.wait_for_plugin(DRIVER, timeout=60)
            ref = ClaimRef(kept["metadata"]["uid"], ns, "kept")
            first = harness.prepare([ref], driver=DRIVER)[ref.uid]
            assert first.error == "", first.error
            api.close()

            cp.down()
            upgraded = ControlPlane(cp.directory, NEW)  # same directory: etcd data, certificates, ports
            upgraded.up()
            api = upgraded.api_client()
            assert upgraded.health().version == NEW

            after = wait_for(lambda: (p := pool(api, node)) and len(p) == 1 and p, 90, what="the pool repacked")
            assert [d["name"] for d in after[0]["spec"]["devices"]] == [f"gpu-{i}" for i in range(4)]
            assert after[0]["spec"]["pool"]["generation"] > max(s["spec"]["pool"]["generation"] for s in before)
            again = allocation(api, ns, "kept")["status"]["allocation"]["devices"]["results"]
            assert again == [result]  # same device, same share, same consumed capacity
            second = harness.prepare([ref], driver=DRIVER)[ref.uid]
            assert second.error == "" and second == first  # from the checkpoint: same CDI devices
            claim_and_pod(api, ns, node, "new")
            assert allocation(api, ns, "new")["status"]["allocation"]["devices"]["results"][0]["pool"] == node
            assert "Kubernetes 1.37: publishing packed slices" in daemon.log()
        finally:
            harness.close()
            daemon.stop()
            api.close()
