"""After `helm install` of the GPU and Ascend charts on the real node, every example applies as it
is and its claims allocate: no DeviceClass file to apply by hand first.

What a new user does (issue 29): `helm install` the chart, then `kubectl apply -f` each file under
examples/hami-core-gpu/** (and examples/ascend/**), unchanged. The DeviceClass files among them
apply onto the chart's own classes without changing them; every claim, the MPS, strict and
memory-only ones too, is allocated by kube-scheduler from the classes the chart made. The MIG
examples run after a `helm upgrade` to the fake MIG profile (`daemon.fake=h200x8-mig`; `mig`
static, then dynamic), where the chart's MIG class selects the MIG devices the daemon publishes.
The fenced example is refused by the chart's admission fence on Kubernetes < 1.35 (its purpose)
and allocates on later versions. Pods are applied too; their CUDA images are not on the node, so
they stay Pending on the pull: only allocation is asserted, and the namespace goes after each part.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_helpers import wait_for
from kubernetes import client

from dra_dev.cluster.controlplane import ControlPlane
from dra_dev.node.node import RealNode
from tests.charts.chart_helpers import HELM_DIR, Tool
from tests.helm_node.test_helm_node import (
    GPU_DRIVER,
    NPU_DRIVER,
    NS,
    make_namespace,
    node_slices,
    release_pods,
    values_file,
    wait_ready_pods,
)

pytestmark = [pytest.mark.cluster, pytest.mark.node]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GPU_RELEASE, NPU_RELEASE = "gpu-examples", "npu-examples"
MIG_FILES = {"mig-static.yaml": "static", "mig-dynamic.yaml": "dynamic"}
FENCED = "two-gpus-one-request.yaml"


def manifests(directory: Path) -> list[Path]:
    """Every Kubernetes manifest under `directory` (demo.yaml is the demo's scenario, not one)."""
    out = []
    for path in sorted(directory.rglob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        if docs and all("apiVersion" in d and "kind" in d for d in docs):
            out.append(path)
    return out


def claims(api: client.ApiClient, ns: str) -> list[dict[str, Any]]:
    data = client.ResourceV1Api(api).list_namespaced_resource_claim(ns, _preload_content=False).data
    return list(json.loads(data)["items"])


def wanted_claims(paths: list[Path]) -> int:
    """Claims the files make: their ResourceClaims, and one per pod of a Deployment using a template."""
    n = 0
    for path in paths:
        for d in yaml.safe_load_all(path.read_text()):
            if not d:
                continue
            if d["kind"] == "ResourceClaim":
                n += 1
            elif d["kind"] == "Deployment":
                refs = d["spec"]["template"]["spec"].get("resourceClaims") or []
                n += d["spec"].get("replicas", 1) * sum(1 for r in refs if r.get("resourceClaimTemplateName"))
    return n


def apply_and_allocate(kubectl: Tool, api: client.ApiClient, ns: str, paths: list[Path],
                       timeout: float = 120) -> dict[str, dict[str, Any]]:
    """`kubectl apply -f` each file into `ns`, then every claim of them allocated: claim name -> claim."""
    for path in paths:
        kubectl.run("apply", "-n", ns, "-f", str(path))
    want = wanted_claims(paths)

    def allocated() -> dict[str, dict[str, Any]] | None:
        got = claims(api, ns)
        if len(got) < want or not all((c.get("status") or {}).get("allocation") for c in got):
            return None
        return {c["metadata"]["name"]: c for c in got}

    try:
        return wait_for(allocated, timeout, 0.5, f"the {want} claims of {', '.join(p.name for p in paths)} to be allocated")
    except AssertionError:
        pending = [c["metadata"]["name"] for c in claims(api, ns) if not (c.get("status") or {}).get("allocation")]
        events = [f"{e.involved_object.kind}/{e.involved_object.name} {e.reason}: {e.message}"
                  for e in client.CoreV1Api(api).list_namespaced_event(ns).items if e.type != "Normal"][-10:]
        raise AssertionError(f"claims not allocated: {pending}; events: {events}") from None


def devices(api: client.ApiClient, node: str, driver: str) -> dict[str, dict[str, Any]]:
    return {d.name: {k: (v.string or v.int or v.bool or v.version) for k, v in (d.attributes or {}).items()}
            for s in node_slices(api, node, driver) for d in s.spec.devices or []}


def end(api: client.ApiClient, ns: str) -> None:
    """The namespace deleted and gone (pods ended, claims unprepared and deallocated)."""
    core = client.CoreV1Api(api)
    core.delete_namespace(ns)
    wait_for(lambda: not core.list_namespace(field_selector=f"metadata.name={ns}").items, 180, 0.5,
             f"namespace {ns} to be gone")


def class_specs(api: client.ApiClient, names: list[str]) -> dict[str, Any]:
    resource = client.ResourceV1Api(api)
    return {n: api.sanitize_for_serialization(resource.read_device_class(n).spec) for n in names}


@pytest.fixture(scope="module")
def gpu_chart(chart_node: RealNode, node_helm: Tool, api: client.ApiClient,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The GPU chart installed as a user does, on the fake H200s; its values file for upgrades."""
    values = values_file(chart_node, tmp_path_factory.mktemp("values"), "hami-core-gpu")
    node_helm.run("install", GPU_RELEASE, str(HELM_DIR / "hami-core-gpu"), "-n", NS, "--create-namespace",
                  "-f", values, "--set", "daemon.fake=h200x8", timeout=300)
    wait_ready_pods(api, GPU_RELEASE, 1)
    try:
        yield {"values": values}
    finally:
        node_helm.run("uninstall", GPU_RELEASE, "-n", NS, "--ignore-not-found", "--wait", timeout=180, check=False)


def upgrade_gpu(node_helm: Tool, api: client.ApiClient, node: str, *sets: str) -> dict[str, dict[str, Any]]:
    """`helm upgrade` of the GPU release with `sets`; its new daemon pod Ready and publishing MIG devices."""
    (old,) = release_pods(api, GPU_RELEASE)
    node_helm.run("upgrade", GPU_RELEASE, str(HELM_DIR / "hami-core-gpu"), "-n", NS, "--reuse-values",
                  *(a for s in sets for a in ("--set", s)), timeout=300)
    wait_for(lambda: [p for p in release_pods(api, GPU_RELEASE) if p.metadata.uid != old.metadata.uid], 120, 0.5,
             "the upgraded daemon pod")
    wait_ready_pods(api, GPU_RELEASE, 1)
    return wait_for(lambda: {n: a for n, a in devices(api, node, GPU_DRIVER).items() if a.get("type") == "mig"} or None,
                    60, 0.5, "the MIG devices of the upgraded daemon")


def test_every_gpu_example_applies_after_helm_install_and_its_claims_allocate(
    gpu_chart: dict[str, Any], chart_node: RealNode, node_helm: Tool, node_kubectl: Tool, api: client.ApiClient,
    pod_cluster: ControlPlane,
) -> None:
    directory = EXAMPLES / "hami-core-gpu"
    files = manifests(directory)
    assert {p.name for p in files} >= {"deviceclass.yaml", "deviceclasses.yaml", "mps.yaml", "strict-cap.yaml",
                                       "memory-only.yaml", *MIG_FILES, FENCED}, [p.name for p in files]
    wait_for(lambda: node_slices(api, chart_node.name, GPU_DRIVER), 60, 0.5, "the daemon's ResourceSlices")
    chart_classes = sorted(d.metadata.name for d in client.ResourceV1Api(api).list_device_class(
        label_selector=f"app.kubernetes.io/instance={GPU_RELEASE}").items)
    assert chart_classes == sorted(f"{p}hami-core-gpu.project-hami.io" for p in ("", "mig.", "mps.", "strict.", "memory-only."))
    before = class_specs(api, chart_classes)

    # 1. Every file but the MIG ones on the GPUs with MIG off; the fenced one refused on 1.34.
    minor = int(pod_cluster.k8s_version.split(".")[1])
    fenced = [p for p in files if p.name == FENCED]
    plain = [p for p in files if p.name not in MIG_FILES and (p.name != FENCED or minor >= 35)]
    ns = make_namespace(api)
    # The whole GPU first: the shares are placed where the scheduler likes (it mostly packs them, not
    # always), and a v1.34 CI run once spread them over all eight GPUs before whole-gpu's pod came.
    whole = [p for p in plain if p.name == "whole-gpu.yaml"]
    try:
        got = apply_and_allocate(node_kubectl, api, ns, whole)
        got = apply_and_allocate(node_kubectl, api, ns, [p for p in plain if p not in whole])
    except AssertionError:
        end(api, ns)  # nothing of this namespace left to the uninstall test
        raise
    assert class_specs(api, chart_classes) == before, "applying the examples' class files changed the chart's classes"
    gpus = devices(api, chart_node.name, GPU_DRIVER)
    for name, claim in got.items():
        for r in claim["status"]["allocation"]["devices"]["results"]:
            assert r["driver"] == GPU_DRIVER and gpus[r["device"]]["type"] == "hami-gpu", (name, r)
    from_class = {c["metadata"]["name"]: [x["opaque"]["parameters"] for x in c["status"]["allocation"]["devices"].get("config", [])
                                          if x["source"] == "FromClass"] for c in got.values()}
    assert [p.get("sharing") for p in from_class["mps-30"]] == ["mps"], from_class["mps-30"]
    if minor < 35:
        proc = node_kubectl.run("apply", "--dry-run=server", "-n", ns, "-f", str(fenced[0]), check=False)
        assert proc.returncode != 0 and "kubernetes#133705" in proc.stderr, proc.stderr
    end(api, ns)

    # 2. MIG static (the fake cuts each GPU into 3g, 2g and 1g devices), then MIG dynamic.
    for file, mode in MIG_FILES.items():
        migs = upgrade_gpu(node_helm, api, chart_node.name, "daemon.fake=h200x8-mig", f"daemon.settings.mig={mode}")
        ns = make_namespace(api)
        got = apply_and_allocate(node_kubectl, api, ns, [directory / "mig-mps" / file])
        for claim in got.values():
            results = claim["status"]["allocation"]["devices"]["results"]
            assert results and all(r["device"] in migs for r in results), (file, results, sorted(migs))
            asked = {r["name"]: r["exactly"]["selectors"][0]["cel"]["expression"].split("'")[-2]
                     for r in claim["spec"]["devices"]["requests"]}
            assert {r["request"]: migs[r["device"]]["profile"] for r in results} == asked, file
        end(api, ns)


def test_every_ascend_example_applies_after_helm_install_and_its_claims_allocate(
    chart_node: RealNode, node_helm: Tool, node_kubectl: Tool, api: client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    node_helm.run("install", NPU_RELEASE, str(HELM_DIR / "ascend"), "-n", NS, "--create-namespace",
                  "-f", values_file(chart_node, tmp_path_factory.mktemp("values"), "ascend"),
                  "--set", "daemon.fake=910b3x8", timeout=300)
    try:
        wait_ready_pods(api, NPU_RELEASE, 1)
        wait_for(lambda: node_slices(api, chart_node.name, NPU_DRIVER), 60, 0.5, "the NPU daemon's ResourceSlices")
        ns = make_namespace(api)
        started = time.monotonic()
        got = apply_and_allocate(node_kubectl, api, ns, manifests(EXAMPLES / "ascend"))
        print(f"ascend examples allocated in {time.monotonic() - started:.1f} s: {sorted(got)}")
        assert all(r["driver"] == NPU_DRIVER for c in got.values() for r in c["status"]["allocation"]["devices"]["results"])
        end(api, ns)
    finally:
        node_helm.run("uninstall", NPU_RELEASE, "-n", NS, "--ignore-not-found", "--wait", timeout=180, check=False)
