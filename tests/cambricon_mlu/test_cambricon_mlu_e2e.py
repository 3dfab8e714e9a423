"""examples/cambricon-mlu and the four-vendor heterogeneous claim, end to end on the rig.

A fresh Node object, `dra run cambricon-mlu --fake mlu370-x8x8` registered with kubelet's
protocol (the harness), the examples applied unchanged with kubectl and allocated by
kube-scheduler, prepared by the daemon, and then the MLU program started with the claim's CDI
edits as a runtime would (`run_with_cdi`): it prints the sMLU instance the daemon made for its
claim (quota and memory, from CNDev) and the stub runtime holds it to that instance's memory. No
hook: the daemon installs none and the claim's spec mounts none. For the heterogeneous claim the
GPU, NPU and DCU daemons run beside it, and each workload in the one container is held to its share.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from ci_gate import gate
from driver_helpers import allocate_example
from kube_helpers import create_node, unique, wait_for
from kubernetes import client

import dra
from dra import ClaimRef
from dra._runtime.hookdir import HookDir
from dra.fakes.stub import workload_program
from dra.testing.daemon import DaemonProcess
from dra.testing.kubelet import KubeletHarness
from dra.testing.runtime import run_with_cdi, runtime_unavailable
from dra_dev.cluster.controlplane import ControlPlane

MLU, NPU, GPU = "cambricon-mlu.project-hami.io", "ascend.project-hami.io", "hami-core-gpu.project-hami.io"
DCU = "hygon-dcu.project-hami.io"
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
MLU_WORKLOAD = workload_program().parent / "mlu_workload"
GiB = 1 << 30
WHY = runtime_unavailable()
_gate = gate(WHY and f"runtime-like runner: {WHY}")
pytestmark = [pytest.mark.cluster, pytest.mark.scheduler]


@dataclass
class Rig:
    api: client.ApiClient
    cluster: ControlPlane
    node: str
    namespace: str
    work: Path
    daemons: dict[str, DaemonProcess] = field(default_factory=dict)
    harnesses: dict[str, KubeletHarness] = field(default_factory=dict)

    def kubectl(self, *args: str) -> str:
        cmd = [str(self.cluster.bins.path("kubectl")), "--kubeconfig", str(self.cluster.kubeconfig), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def _items(self, listing: Any) -> list[dict[str, Any]]:
        return list(json.loads(listing.data)["items"])

    def claims(self) -> list[dict[str, Any]]:
        return self._items(client.ResourceV1Api(self.api).list_namespaced_resource_claim(self.namespace,
                                                                                        _preload_content=False))

    def pods(self) -> list[dict[str, Any]]:
        return self._items(client.CoreV1Api(self.api).list_namespaced_pod(self.namespace, _preload_content=False))

    def slice_devices(self) -> dict[str, dict[str, Any]]:
        slices = self._items(client.ResourceV1Api(self.api).list_resource_slice(
            field_selector=f"spec.nodeName={self.node}", _preload_content=False))
        return {d["name"]: d for s in slices if s["spec"]["driver"] == MLU for d in s["spec"].get("devices", [])}

    def allocate(self, example: Path, want_claims: int) -> dict[str, dict[str, Any]]:
        return allocate_example(self, example, want_claims)

    def ref(self, claim: dict[str, Any]) -> ClaimRef:
        meta = claim["metadata"]
        return ClaimRef(meta["uid"], meta["namespace"], meta["name"])

    def prepare(self, claim: dict[str, Any], driver: str = MLU) -> list[str]:
        """NodePrepareResources of `claim` by `driver`'s daemon: its CDI device IDs."""
        res = self.harnesses[driver].prepare([self.ref(claim)], driver=driver)[claim["metadata"]["uid"]]
        assert res.error == "", res.error
        return list(dict.fromkeys(i for d in res.devices for i in d.cdi_device_ids))

    def run(self, ids: list[str], argv: list[str]) -> dict[str, str]:
        proc = run_with_cdi(self.work / "cdi", ids, argv)
        kv = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
        assert proc.returncode == 0, f"{argv}: rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        return kv


def _drop_foreign_nodes(api: client.ApiClient, keep: str, drivers: Iterable[str]) -> None:
    """The examples' pods have no node selector: only this test's node may offer these devices."""
    resource: Any = client.ResourceV1Api(api)
    slices = json.loads(resource.list_resource_slice(_preload_content=False).data)["items"]
    for node in {s["spec"].get("nodeName") for s in slices if s["spec"]["driver"] in set(drivers)} - {keep, None}:
        try:
            client.CoreV1Api(api).delete_node(node)
        except client.ApiException as e:
            if e.status != 404:
                raise
        wait_for(lambda n=node: not any(x["spec"].get("nodeName") == n for x in json.loads(
            resource.list_resource_slice(_preload_content=False).data)["items"]) or None,
            60, what=f"slices of {node} collected")


def _rig(cluster: ControlPlane, api: client.ApiClient, drivers: dict[str, list[str]]) -> Iterator[Rig]:
    node, ns = unique("mlu-ex"), unique("mlu-ex")
    create_node(api, node)
    _drop_foreign_nodes(api, node, drivers)
    core: Any = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": ns}})
    with tempfile.TemporaryDirectory(prefix="dra-mx-", dir="/tmp") as tmp:
        work = Path(tmp)
        hooks = HookDir(work / "hook-dir")  # as the charts' init containers: every hook of the node first
        for stem in [stem for d, stem in ((GPU, "vgpu"), (NPU, "vnpu"), (DCU, "vhip")) if d in drivers]:
            hooks.install(dra.hook_library(stem))
        rig = Rig(api, cluster, node, ns, work)
        try:
            for name, (entry, *args) in drivers.items():
                d = DaemonProcess(entry, node, cluster.kubeconfig, work / entry, kubelet_dirs={"cdi": work / "cdi"},
                                  # memory-only.yaml lifts its own compute limit: the admin's permission
                                  args=[*args, "--set", "health=off", "--hook-dir", str(work / "hook-dir"),
                                        "--allow-claim-loosening"])
                d.start()
                rig.daemons[name], rig.harnesses[name] = d, KubeletHarness(d.registrar_dir)
                rig.harnesses[name].watch()
            for d in rig.daemons.values():
                d.wait_http("/readyz", timeout=60)
            for directory in ["cambricon-mlu", *(d.split(".")[0] for d in (NPU, GPU, DCU) if d in drivers)]:
                rig.kubectl("apply", "-f", str(EXAMPLES / directory / "deviceclass.yaml"))
            yield rig
        finally:
            for h in rig.harnesses.values():
                h.close()
            for d in rig.daemons.values():
                d.stop()
            core.delete_namespace(ns)
            core.delete_node(node)


@pytest.fixture
def mlu_rig(cluster: ControlPlane, api_client: client.ApiClient, stub_cndev: Path) -> Iterator[Rig]:
    yield from _rig(cluster, api_client, {MLU: ["cambricon-mlu", "--fake", "mlu370-x8x8"]})


def results(claim: dict[str, Any], driver: str = MLU) -> list[dict[str, Any]]:
    return [r for r in claim["status"]["allocation"]["devices"]["results"] if r["driver"] == driver]


def test_the_daemon_registers_and_publishes_shared_mlus_with_no_hook(mlu_rig: Rig) -> None:
    plugins = mlu_rig.harnesses[MLU].plugins()
    assert [p.name for p in plugins] == [MLU]
    devices = mlu_rig.slice_devices()
    assert sorted(devices) == [f"mlu-{i}" for i in range(8)]
    assert all(d["allowMultipleAllocations"] and d["capacity"]["memory"]["value"] == "48Gi" for d in devices.values())
    assert not any((mlu_rig.work / "hook-dir").glob("*/lib*.so"))  # the daemon installed no hook


def test_share_of_one_mlu_is_an_smlu_instance_the_workload_prints_and_is_held_to(mlu_rig: Rig) -> None:
    (claim,) = mlu_rig.allocate(EXAMPLES / "cambricon-mlu" / "share-of-one-mlu.yaml", 1).values()
    (r,) = results(claim)
    assert r["consumedCapacity"] == {"cores": "30", "memory": "16Gi"} and r.get("shareID")
    index = mlu_rig.slice_devices()[r["device"]]["attributes"]["index"]["int"]
    ids = mlu_rig.prepare(claim)
    kv = mlu_rig.run(ids, [str(MLU_WORKLOAD)])
    assert kv["smlu_instance"].startswith(f"/dev/cambricon-caps/cap_dev{index}_mi")
    assert (kv["smlu_name"], kv["smlu_quota_percent"], kv["smlu_memory_bytes"]) == (
        f"dra-{claim['metadata']['uid']}", "30", str(16 * GiB))
    assert int(kv["quota_total_bytes"]) == 16 * GiB and kv["over_quota_alloc"] == "refused"
    spec = json.loads(next((mlu_rig.work / "cdi").glob(f"*{claim['metadata']['uid']}*.json")).read_text())
    edits = [spec.get("containerEdits") or {}, *(d["containerEdits"] for d in spec["devices"])]
    paths = {m["containerPath"] for e in edits for m in e.get("mounts") or ()}
    assert not {p for p in paths if p == "/etc/ld.so.preload" or "/hookcore" in p}, paths  # no hook, no hook config
    # the fake node's sMLU table (the vendor's driver's, on a node): the claim's instance, until unprepare
    table = Path(next(m["hostPath"] for e in edits for m in e.get("mounts") or ()
                      if m["containerPath"] == "/run/cambricon-mlu-fake/smlu")) / "table"
    assert f"dra-{claim['metadata']['uid']}" in table.read_text()
    ref = mlu_rig.ref(claim)
    assert mlu_rig.harnesses[MLU].unprepare([ref], driver=MLU) == {ref.uid: ""}
    assert f"dra-{claim['metadata']['uid']}" not in table.read_text()


def test_memory_only_and_two_whole_mlus(mlu_rig: Rig) -> None:
    (claim,) = mlu_rig.allocate(EXAMPLES / "cambricon-mlu" / "memory-only.yaml", 1).values()
    kv = mlu_rig.run(mlu_rig.prepare(claim), [str(MLU_WORKLOAD)])
    assert (kv["smlu_quota_percent"], kv["quota_total_bytes"], kv["over_quota_alloc"]) == ("100", str(8 * GiB), "refused")
    claims = mlu_rig.allocate(EXAMPLES / "cambricon-mlu" / "two-mlus.yaml", 2)
    two = claims["two-mlus"]
    rs = results(two)
    devices = mlu_rig.slice_devices()
    assert len({r["device"] for r in rs}) == 2
    assert len({devices[r["device"]]["attributes"]["resource.kubernetes.io/pcieRoot"]["string"] for r in rs}) == 1
    ids = mlu_rig.prepare(two)
    for index in (0, 1):  # the container numbers its MLUs by index: each a 100% instance of all of it
        kv = mlu_rig.run(ids, [str(MLU_WORKLOAD), "--device", str(index)])
        assert (kv["smlu_quota_percent"], kv["quota_total_bytes"]) == ("100", str(48 * GiB))


@pytest.fixture
def mixed_rig(cluster: ControlPlane, api_client: client.ApiClient, stub_cndev: Path) -> Iterator[Rig]:
    yield from _rig(cluster, api_client, {MLU: ["cambricon-mlu", "--fake", "mlu370-x8x8"],
                                          NPU: ["ascend", "--fake", "910b3x8"], GPU: ["hami-core-gpu", "--fake", "h200x8"],
                                          DCU: ["hygon-dcu", "--fake", "k100-aix8"]})


def test_one_claim_over_four_vendors_each_held_in_one_container(mixed_rig: Rig) -> None:
    """Three shares held by their hooks, the MLU's by its sMLU instance, all in one container."""
    (claim,) = mixed_rig.allocate(EXAMPLES / "heterogeneous" / "gpu-npu-dcu-and-mlu.yaml", 1).values()
    ids = [i for driver in (GPU, NPU, DCU, MLU) for i in mixed_rig.prepare(claim, driver)]
    runs = [mixed_rig.run(ids, [str(workload_program().parent / name)])
            for name in ("cuda_workload", "acl_workload", "hip_workload", "mlu_workload")]
    assert [int(kv["quota_total_bytes"]) for kv in runs] == [10 * GiB, 16 * GiB, 24 * GiB, 12 * GiB]
    assert all(kv["over_quota_alloc"] == "refused" for kv in runs)
    assert runs[3]["smlu_quota_percent"] == "20"
