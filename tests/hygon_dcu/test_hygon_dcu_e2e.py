"""`dra run hygon-dcu --fake ...` against the real control plane and kubelet's protocol, end to end.

A fresh Node object, the driver daemon with its fake backend (`dra run hygon-dcu --fake
k100-aix8`, registered with the kubelet harness), the examples applied unchanged with kubectl and
allocated by kube-scheduler, prepared through the harness, and then a process started with the
claim's CDI edits as a runtime would (`dra.testing.runtime.run_with_cdi`) under the stub HIP
runtime and the real libvhip.so: hip_workload must see exactly its memory quota, be refused past
it, and be held to its compute share (the claim's limiter books, on the host's clock: only the
bounds its load cannot break). Also: HAMi's DCU pod through the webhook, and one claim over a GPU,
an NPU and a DCU in one container with the three hooks. The published slice, a fault reaching
kubelet and the examples' dry runs are tests/drivers/test_shared_device_drivers.py's, for every driver.
"""

from __future__ import annotations

import io
import json
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ci_gate import gate
from driver_helpers import allocate_example, slice_devices
from kube_helpers import create_node, unique
from kubernetes import client

import dra
import hookcore
from dra import ClaimRef
from dra._runtime.hookdir import HookDir
from dra.fakes.stub import workload_program
from dra.testing.daemon import DaemonProcess
from dra.testing.kubelet import KubeletHarness
from dra.testing.runtime import run_with_cdi, runtime_unavailable
from dra_dev.cluster.controlplane import ControlPlane
from tests.limiter_books import Run, assert_held

DCU, NPU, GPU = "hygon-dcu.project-hami.io", "ascend.project-hami.io", "hami-core-gpu.project-hami.io"
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
WORKLOAD = {DCU: ROOT / "hookcore/build/workload/hip_workload", NPU: ROOT / "hookcore/build/workload/acl_workload"}
MiB, GiB = 1 << 20, 1 << 30
WHY = runtime_unavailable()
_gate = gate(WHY and f"runtime-like runner: {WHY}")
pytestmark = [pytest.mark.cluster, pytest.mark.scheduler]


class Rig:
    def __init__(self, api: client.ApiClient, cluster: ControlPlane, node: str, namespace: str) -> None:
        self.api, self.cluster, self.node, self.namespace = api, cluster, node, namespace
        self.daemons: dict[str, DaemonProcess] = {}
        self.harnesses: dict[str, KubeletHarness] = {}

    def kubectl(self, *args: str) -> str:
        cmd = [str(self.cluster.bins.path("kubectl")), "--kubeconfig", str(self.cluster.kubeconfig), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def _items(self, listing: Any) -> list[dict[str, Any]]:
        return list(json.loads(listing.data)["items"])

    def claims(self) -> list[dict[str, Any]]:
        return self._items(client.ResourceV1Api(self.api).list_namespaced_resource_claim(self.namespace, _preload_content=False))

    def pods(self) -> list[dict[str, Any]]:
        return self._items(client.CoreV1Api(self.api).list_namespaced_pod(self.namespace, _preload_content=False))

    def devices(self, driver: str = DCU) -> dict[str, dict[str, Any]]:
        return {d["name"]: d for d in slice_devices(self.api, self.node, driver)}

    def prepare(self, claim: dict[str, Any], driver: str = DCU) -> list[str]:
        meta = claim["metadata"]
        res = self.harnesses[driver].prepare([ClaimRef(meta["uid"], meta["namespace"], meta["name"])], driver=driver)
        got = res[meta["uid"]]
        assert got.error == "", got.error
        return list(dict.fromkeys(i for d in got.devices for i in d.cdi_device_ids))

    def run(self, ids: list[str], argv: list[str]) -> dict[str, str]:
        proc = run_with_cdi(next(iter(self.daemons.values())).cdi_dir, ids, argv)
        assert proc.returncode == 0, f"{argv}: rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)

    def hook_file(self, claim: dict[str, Any], name: str, driver: str = DCU) -> Path:
        return self.daemons[driver].state_dir / "hooks" / claim["metadata"]["uid"] / name

    def assert_held(self, claim: dict[str, Any], kv: dict[str, str], share: int, driver: str = DCU) -> None:
        got = Run(int(kv["compute_kernels"]), int(float(kv["compute_ns"])), 1_000_000, 16)  # 1 ms kernels, 16 a sync
        with hookcore.Ledger(self.hook_file(claim, "ledger", driver)) as led:
            assert_held(led.limiter(0), [got], share, span_ns=got.elapsed_ns, virtual=False)


def results(claim: dict[str, Any], driver: str = DCU) -> list[dict[str, Any]]:
    return [r for r in claim["status"]["allocation"]["devices"]["results"] if r["driver"] == driver]


def _rig(cluster: ControlPlane, api: client.ApiClient, drivers: dict[str, list[str]]) -> Iterator[Rig]:
    node, ns = unique("dcu-ex"), unique("dcu-ex")
    create_node(api, node)
    core: Any = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": ns}})
    resource: Any = client.ResourceV1Api(api)
    for s in json.loads(resource.list_resource_slice(_preload_content=False).data)["items"]:  # ours alone
        if s["spec"]["driver"] in drivers and s["spec"].get("nodeName") not in (node, None):
            try:
                core.delete_node(s["spec"]["nodeName"])
            except client.ApiException as e:
                if e.status != 404:
                    raise
    with tempfile.TemporaryDirectory(prefix="dra-dx-", dir="/tmp") as work:
        shared = Path(work)
        hooks = HookDir(shared / "hook-dir")  # every hook library of the node, before any claim (the charts do)
        for stem in ("vgpu", "vnpu", "vhip"):
            hooks.install(dra.hook_library(stem))
        rig = Rig(api, cluster, node, ns)
        try:
            for name, (entry, *args) in drivers.items():
                d = DaemonProcess(entry, node, cluster.kubeconfig, shared / entry, kubelet_dirs={"cdi": shared / "cdi"},
                                  args=[*args, "--hook-dir", str(shared / "hook-dir"), "--allow-claim-loosening"])
                rig.daemons[name] = d.start()
                rig.harnesses[name] = KubeletHarness(d.registrar_dir)
                rig.harnesses[name].watch()
            for d in rig.daemons.values():
                d.wait_http("/readyz", timeout=60)
            for name, example in ((DCU, "hygon-dcu"), (NPU, "ascend"), (GPU, "hami-core-gpu")):
                if name in drivers:
                    rig.kubectl("apply", "-f", str(EXAMPLES / example / "deviceclass.yaml"))
            yield rig
        finally:
            for h in rig.harnesses.values():
                h.close()
            for d in rig.daemons.values():
                d.stop()
            core.delete_namespace(ns)
            core.delete_node(node)


@pytest.fixture
def dcu_rig(cluster: ControlPlane, api_client: client.ApiClient, stub_rsmi: Path, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    state = tmp_path / "rsmi-state"
    state.write_text("")
    monkeypatch.setenv("HOOKCORE_STUB_RSMI_STATE", str(state))  # the daemon inherits it: health the test injects
    yield from _rig(cluster, api_client, {DCU: ["hygon-dcu", "--fake", "k100-aix8", "--set", "healthInterval=0.1"]})


@pytest.fixture
def three_rig(cluster: ControlPlane, api_client: client.ApiClient, stub_rsmi: Path) -> Iterator[Rig]:
    off = ["--set", "health=off"]
    yield from _rig(cluster, api_client, {GPU: ["hami-core-gpu", "--fake", "h200x8", *off],
                                          NPU: ["ascend", "--fake", "910b3x8", *off],
                                          DCU: ["hygon-dcu", "--fake", "k100-aix8", *off]})


def test_share_of_one_dcu(dcu_rig: Rig) -> None:
    (claim,) = allocate_example(dcu_rig, EXAMPLES / "hygon-dcu" / "share-of-one-dcu.yaml", 1).values()
    (r,) = results(claim)
    assert r["consumedCapacity"] == {"cores": "30", "memory": "16Gi"} and r.get("shareID")
    bus = dcu_rig.devices()[r["device"]]["attributes"]["resource.kubernetes.io/pciBusID"]["string"]
    kv = dcu_rig.run(dcu_rig.prepare(claim), [str(WORKLOAD[DCU]), "--compute", "1.5"])
    assert (kv["devices"], kv["pci"]) == ("1", bus)  # the container sees its DCU, as ordinal 0
    assert int(kv["quota_total_bytes"]) == 16 * GiB and kv["over_quota_alloc"] == "refused"
    dcu_rig.assert_held(claim, kv, 30)
    config = dcu_rig.hook_file(claim, "config").read_text()
    assert f"HOOKCORE_DEVICE_UUID_0=pci-{bus}\n" in config and "HOOKCORE_COMPUTE_LIMIT_0=30\n" in config


def test_memory_only_has_no_compute_limit(dcu_rig: Rig) -> None:
    (claim,) = allocate_example(dcu_rig, EXAMPLES / "hygon-dcu" / "memory-only.yaml", 1).values()
    assert results(claim)[0]["consumedCapacity"] == {"cores": "1", "memory": "8Gi"}
    kv = dcu_rig.run(dcu_rig.prepare(claim), [str(WORKLOAD[DCU]), "--compute", "0.5"])
    assert int(kv["quota_total_bytes"]) == 8 * GiB and kv["over_quota_alloc"] == "refused"
    with hookcore.Ledger(dcu_rig.hook_file(claim, "ledger")) as led:
        usage = led.limiter(0)
    assert not usage.active and usage.charged_ns == usage.throttled_ns == 0, usage


def test_two_whole_dcus_on_one_pcie_root(dcu_rig: Rig) -> None:
    (claim,) = allocate_example(dcu_rig, EXAMPLES / "hygon-dcu" / "two-dcus.yaml", 1).values()
    rs = results(claim)
    devices = dcu_rig.devices()
    assert len({r["device"] for r in rs}) == 2 and all(r["consumedCapacity"]["memory"] == "64Gi" for r in rs)
    assert len({devices[r["device"]]["attributes"]["resource.kubernetes.io/pcieRoot"]["string"] for r in rs}) == 1
    ids = dcu_rig.prepare(claim)
    buses = sorted(devices[r["device"]]["attributes"]["resource.kubernetes.io/pciBusID"]["string"] for r in rs)
    for ordinal in (0, 1):  # HIP devices 0 and 1 are the claim's DCUs in bus order, 64Gi each
        kv = dcu_rig.run(ids, [str(WORKLOAD[DCU]), "--device", str(ordinal)])
        assert (kv["devices"], kv["pci"]) == ("2", buses[ordinal])
        assert int(kv["quota_total_bytes"]) == 64 * GiB and kv["over_quota_alloc"] == "refused"


def test_hamis_dcu_pod_through_the_webhook(dcu_rig: Rig, tmp_path: Path) -> None:
    """examples/hami-compat/dcu-pod.yaml, unchanged (hygon.com/dcunum: 1, 2000 MiB, 60%): the
    admission webhook makes its claim, kube-scheduler puts it on a fake DCU of this driver, and
    the workload started with the claim's CDI edits is held to 2000 MiB and 60%."""
    from dra_dev import webhook_local as install

    install.up(dcu_rig.cluster.kubeconfig, tmp_path / "webhook")
    try:
        (claim,) = allocate_example(dcu_rig, EXAMPLES / "hami-compat" / "dcu-pod.yaml", 1).values()
    finally:
        install.down(dcu_rig.cluster.kubeconfig, tmp_path / "webhook")
    (r,) = results(claim)
    assert r["consumedCapacity"] == {"cores": "60", "memory": "2000Mi"}
    kv = dcu_rig.run(dcu_rig.prepare(claim), [str(WORKLOAD[DCU]), "--compute", "1.5"])
    assert int(kv["quota_total_bytes"]) == 2000 * MiB and kv["over_quota_alloc"] == "refused", kv
    dcu_rig.assert_held(claim, kv, 60)


def test_one_claim_over_a_gpu_an_npu_and_a_dcu_in_one_container(three_rig: Rig) -> None:
    rig = three_rig
    (claim,) = allocate_example(rig, EXAMPLES / "heterogeneous" / "gpu-npu-and-dcu.yaml", 1).values()
    (g,), (n,), (d,) = results(claim, GPU), results(claim, NPU), results(claim, DCU)
    assert (g["consumedCapacity"], n["consumedCapacity"], d["consumedCapacity"]) == (
        {"cores": "50", "memory": "10Gi"}, {"cores": "30", "memory": "16Gi"}, {"cores": "40", "memory": "24Gi"})
    ids = [i for driver in (GPU, NPU, DCU) for i in rig.prepare(claim, driver)]  # each prepares only its own
    assert sum(i.startswith("k8s.hygon-dcu.") for i in ids) >= 1
    cuda = rig.run(ids, [str(workload_program())])
    assert int(cuda["quota_total_bytes"]) == 10 * GiB and cuda["over_quota_alloc"] == "refused", cuda
    acl = rig.run(ids, [str(WORKLOAD[NPU])])
    assert int(acl["quota_total_bytes"]) == 16 * GiB and acl["over_quota_alloc"] == "refused", acl
    hip = rig.run(ids, [str(WORKLOAD[DCU]), "--compute", "1.5"])  # HIP_VISIBLE_DEVICES beside the GPU's CUDA one
    assert int(hip["quota_total_bytes"]) == 24 * GiB and hip["over_quota_alloc"] == "refused", hip
    rig.assert_held(claim, hip, 40, DCU)


def test_the_demo_runs_its_examples_and_holds_every_share(cluster: ControlPlane, stub_rsmi: Path,
                                                           monkeypatch: pytest.MonkeyPatch, api_client: Any) -> None:
    """`dra demo --driver hygon-dcu`: the scenario of examples/hygon-dcu/demo.yaml, then the
    heterogeneous claim (GPU + NPU + DCU parts)."""
    from kube_helpers import clear_demo_drivers
    from rich.console import Console

    from dra_dev.demo import console
    from dra_dev.demo.tour import run_demo

    clear_demo_drivers(api_client)
    buf = io.StringIO()
    monkeypatch.setattr(console, "out", Console(file=buf, width=220))
    assert run_demo(cluster.directory, cluster.k8s_version, driver_entry="hygon-dcu", node_mode="auto") == 0
    out = buf.getvalue()
    print(out)
    assert "a node daemon `dra run hygon-dcu --fake k100-aix8` each" in out
    assert "demo complete: 3 claims on 1 node," in out and "left out" not in out
    rows = [[c.strip() for c in line.strip("│ ").split("│")] for line in out.splitlines() if "│ refused" in line]
    by_claim = {r[0]: r for r in rows if len(r) == 6}
    assert by_claim["dcu-30-16gi"][2:5] == ["16Gi", "16Gi", "refused"], rows
    assert by_claim["dcu-memory-only"][2:5] == ["8Gi", "8Gi", "refused"], rows
    assert len([r for r in rows if r[0] == "two-dcus"]) == 2, rows
    assert "unprepare errors: none" in out
    assert "heterogeneous claim complete" in out
    hip = next(line for line in out.splitlines() if " hip_workload " in line)
    assert [c.strip() for c in hip.strip("│┃ ").replace("┃", "│").split("│")] == [
        "hygon-dcu", "hip_workload", str(24 * GiB), "refused", str(24 * GiB)], hip
