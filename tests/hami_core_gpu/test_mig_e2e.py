"""The MIG and MPS examples (examples/hami-core-gpu/mig-mps/) end to end on the rig, applied
unchanged: a fake MIG node (`dra run hami-core-gpu --fake h200x8-mig`, static or dynamic) or a
fake GPU node for MPS, kube-scheduler allocating, the daemon preparing through the kubelet
harness, and a process started with the claim's CDI edits (stub CUDA) seeing exactly its device.
The stub NVML's record (HOOKCORE_STUB_NVML_MIG) shows what was created and destroyed; a kill -9
between creating an instance and recording the claim is repaired by the restarted daemon.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from ci_gate import gate
from driver_helpers import allocate_example
from kube_helpers import create_node, unique, wait_for
from kubernetes import client
from test_examples_e2e import DRIVER, EXAMPLES, Rig, _drop_foreign_gpu_nodes, results

from dra import ClaimRef
from dra._runtime.checkpoint import PREPARING, Checkpoint
from dra._runtime.client import get_json
from dra.fakes.stub import workload_program
from dra.testing.daemon import DaemonProcess
from dra.testing.kubelet import KubeletHarness
from dra.testing.runtime import run_with_cdi, runtime_unavailable
from dra_dev import webhook_local as install
from dra_dev.cluster.controlplane import ControlPlane

MIG_MPS = EXAMPLES / "mig-mps"
FAKE_CONTROL = Path(__file__).resolve().parents[2] / "drivers" / "hami_core_gpu" / "fake_mps" / "nvidia-cuda-mps-control"
MiB = 1 << 20
H200_MIB = 143771
WHY = runtime_unavailable()
pytestmark = [pytest.mark.cluster]
_gate = gate(WHY and f"runtime-like runner: {WHY}")


class MigRig(Rig):
    work: Path
    record: Path

    def start(self, fault: str = "") -> DaemonProcess:
        """(Re)start the node daemon on the same directories (a node's survive its restarts)."""
        since = time.monotonic()
        self.daemon = DaemonProcess("hami-core-gpu", self.node, self.cluster.kubeconfig, self.work,
                                    env={"HOOKCORE_STUB_NVML_MIG": str(self.record), "DRA_FAULT_POINT": fault},
                                    args=self.args).start()
        self.harness.wait_for_plugin(DRIVER, timeout=60, newer_than=since)
        return self.daemon

    args: list[str]

    def lines(self, verb: str) -> list[list[str]]:
        text = self.record.read_text() if self.record.exists() else ""
        return [ln.split()[1:] for ln in text.splitlines() if ln.startswith(verb + " ")]


@contextmanager
def mig_rig(cluster: ControlPlane, api: client.ApiClient, args: list[str]) -> Iterator[MigRig]:
    node, ns = unique("gpu-mig"), unique("gpu-mig")
    create_node(api, node)
    _drop_foreign_gpu_nodes(api, node)
    client.CoreV1Api(api).create_namespace({"metadata": {"name": ns}})
    with tempfile.TemporaryDirectory(prefix="dra-mig-", dir="/tmp") as work:
        harness = KubeletHarness(Path(work) / "registry")
        harness.watch()
        r = MigRig(api, cluster, node, ns, None, harness)  # type: ignore[arg-type]
        r.work, r.record = Path(work), Path(work) / "mig.state"
        r.args = ["--set", "health=off", *args]
        present = set(r.kubectl("get", "deviceclass", "-o", "name").split())
        r.start()
        try:
            r.daemon.wait_http("/readyz", timeout=60)
            r.kubectl("apply", "-f", str(MIG_MPS / "deviceclasses.yaml"))
            yield r
        finally:
            harness.close()
            if r.daemon.alive():
                r.daemon.stop()
            # the classes this rig made go with it: a later test sees the cluster as it found it
            made = set(r.kubectl("get", "deviceclass", "-o", "name").split()) - present
            if made:
                r.kubectl("delete", "--ignore-not-found", "--wait=false", *sorted(made))
            client.CoreV1Api(api).delete_namespace(ns)
            client.CoreV1Api(api).delete_node(node)


@pytest.fixture
def rig_for(cluster: ControlPlane, api_client: client.ApiClient, stub_nvml: Path) -> Iterator[Callable[..., MigRig]]:
    stack: list[Any] = []

    def make(*args: str) -> MigRig:
        cm = mig_rig(cluster, api_client, list(args))
        stack.append(cm)
        return cm.__enter__()

    yield make
    for cm in reversed(stack):
        cm.__exit__(None, None, None)


@contextmanager
def mps_root() -> Iterator[str]:
    """A short MPS root (the control socket's path must fit a unix socket); every control daemon
    left under it is told to quit at the end, also when the test fails midway."""
    with tempfile.TemporaryDirectory(prefix="mps", dir="/tmp") as root:
        try:
            yield root
        finally:
            for gpu in Path(root).iterdir():
                subprocess.run([str(FAKE_CONTROL)], input="quit\n", capture_output=True, timeout=30,
                               env={**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(gpu / "pipe"),
                                    "CUDA_MPS_LOG_DIRECTORY": str(gpu / "log")})


def ref(claim: dict[str, Any]) -> ClaimRef:
    m = claim["metadata"]
    return ClaimRef(m["uid"], m["namespace"], m["name"])


def cdi_spec(rig: MigRig, uid: str) -> dict[str, Any]:
    (path,) = rig.daemon.cdi_dir.glob(f"*{uid}*")
    return dict(json.loads(path.read_text()))


def spec_env(spec: dict[str, Any]) -> dict[str, str]:
    edits = [spec.get("containerEdits") or {}, *[d.get("containerEdits") or {} for d in spec["devices"]]]
    return dict(e.split("=", 1) for c in edits for e in c.get("env") or [])


def run_device(rig: MigRig, ids: list[str], index: int, memory: int) -> dict[str, str]:
    proc = run_with_cdi(rig.daemon.cdi_dir, ids, [str(workload_program()), "--device", str(index)])
    kv = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    assert proc.returncode == 0, f"rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert int(kv["quota_total_bytes"]) == memory, kv
    assert kv["over_quota_alloc"] == "refused" and kv["within_quota_alloc"] == "ok", kv
    return kv


def prepare(rig: MigRig, claim: dict[str, Any]) -> list[str]:
    out = rig.harness.prepare([ref(claim)], driver=DRIVER)[claim["metadata"]["uid"]]
    assert out.error == "", out.error
    return list(dict.fromkeys(i for d in out.devices for i in d.cdi_device_ids))


def test_a_static_mig_claim_gets_exactly_its_mig_device(rig_for: Callable[..., MigRig]) -> None:
    rig = rig_for("--fake", "h200x8-mig")
    devices = rig.slice_devices()
    assert devices and all(d["attributes"]["type"] == {"string": "mig"} for d in devices.values()), \
        "a GPU in MIG mode is offered whole"
    (claim,) = allocate_example(rig, MIG_MPS / "mig-static.yaml", 1).values()
    (r,) = results(claim)
    assert r["device"].endswith("-mig-1g18gb-6")
    ids = prepare(rig, claim)
    env = spec_env(cdi_spec(rig, claim["metadata"]["uid"]))
    assert env["NVIDIA_VISIBLE_DEVICES"] == devices[r["device"]]["attributes"]["uuid"]["string"]
    held = sorted(p.name for p in (rig.daemon.state_dir / "hooks" / claim["metadata"]["uid"]).iterdir())
    assert held == ["claim"], f"no hook config on MIG, only the claim's marker: {held}"
    run_device(rig, ids, 0, H200_MIB // 8 * MiB)


def test_a_dynamic_mig_claim_creates_its_instances_where_the_counters_allow(rig_for: Callable[..., MigRig]) -> None:
    rig = rig_for("--fake", "h200x8-mig", "--set", "mig=dynamic")
    slices = json.loads(client.ResourceV1Api(rig.api).list_resource_slice(
        field_selector=f"spec.nodeName={rig.node}", _preload_content=False).data)["items"]
    sets = [c["name"] for s in slices for c in s["spec"].get("sharedCounters") or []]
    assert sorted(sets) == sorted(f"hami-gpu-{i}-mig" for i in range(8))
    minor = int(re.match(r"\d+", str((get_json(rig.api, "/version", {}, 10) or {})["minor"]))[0])  # type: ignore[index]
    if minor >= 35:  # counter sets in slices of their own
        assert not any(s["spec"].get("devices") and s["spec"].get("sharedCounters") for s in slices)
    else:  # each GPU's counter set in the slice of its devices
        assert len(slices) == 8 and all(len(s["spec"]["sharedCounters"]) == 1 for s in slices)
    (claim,) = allocate_example(rig, MIG_MPS / "mig-dynamic.yaml", 1).values()
    by_request = {r["request"]: r["device"] for r in results(claim)}
    gpu = by_request["big"].split("-mig-")[0]
    assert by_request == {"big": f"{gpu}-mig-4g71gb-0", "small": f"{gpu}-mig-3g71gb-4"}
    assert rig.lines("gi+") == []
    ids = prepare(rig, claim)
    made = rig.lines("gi+")
    assert sorted((m[2], m[3]) for m in made) == [("5", "0"), ("9", "4")]  # 4g at slice 0, 3g at slice 4
    run_device(rig, ids, 0, H200_MIB * 4 // 8 * MiB)
    run_device(rig, ids, 1, H200_MIB * 4 // 8 * MiB)
    assert rig.harness.unprepare([ref(claim)], driver=DRIVER)[claim["metadata"]["uid"]] == ""
    assert len(rig.lines("gi-")) == 2 and len(rig.lines("ci-")) == 2


def test_a_kill_between_create_and_record_is_repaired(rig_for: Callable[..., MigRig]) -> None:
    rig = rig_for("--fake", "h200x8-mig", "--set", "mig=dynamic")
    (claim,) = allocate_example(rig, MIG_MPS / "mig-dynamic.yaml", 1).values()
    uid = claim["metadata"]["uid"]
    rig.daemon.stop()
    rig.start(fault="prepare.after_driver")  # SIGKILL once the instances exist, before "prepared"
    with pytest.raises(Exception):  # noqa: B017 - the daemon dies mid-call, any gRPC error
        rig.harness.prepare([ref(claim)], driver=DRIVER, timeout=30)
    assert rig.daemon.proc is not None and rig.daemon.proc.wait(10) == -signal.SIGKILL
    assert len(rig.lines("gi+")) == 2
    record = Checkpoint(rig.daemon.state_dir).get(uid)
    assert record is not None and record.phase == PREPARING
    rig.start()  # restarted: the record names both devices, so the start keeps their instances
    assert rig.lines("gi-") == []
    ids = prepare(rig, claim)  # kubelet's retry finds the instances: nothing made twice
    assert len(rig.lines("gi+")) == 2
    run_device(rig, ids, 0, H200_MIB * 4 // 8 * MiB)
    assert rig.harness.unprepare([ref(claim)], driver=DRIVER)[uid] == ""
    assert len(rig.lines("gi-")) == 2


def test_an_mps_claim_carries_the_pipe_dir_and_both_limits(rig_for: Callable[..., MigRig]) -> None:
    with mps_root() as root:
        rig = rig_for("--fake", "h200x8", "--set", f"mpsRoot={root}")
        (claim,) = allocate_example(rig, MIG_MPS / "mps.yaml", 1).values()
        (r,) = results(claim)
        assert r["consumedCapacity"] == {"cores": "30", "memory": "8Gi"}
        ids = prepare(rig, claim)
        spec = cdi_spec(rig, claim["metadata"]["uid"])
        env = spec_env(spec)
        assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/run/nvidia-mps"
        assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=8192M"
        uuid = rig.slice_devices()[r["device"]]["attributes"]["uuid"]["string"]
        mounts = {m["containerPath"]: m["hostPath"] for m in (spec.get("containerEdits") or {}).get("mounts") or []}
        assert mounts["/run/nvidia-mps"] == f"{root}/{uuid}/pipe"
        assert not [p for p, h in mounts.items() if h.startswith(root) and p != "/run/nvidia-mps"]  # no log dir
        log = Path(root) / uuid / "log" / "control.log"
        assert f"CUDA_VISIBLE_DEVICES={uuid}" in log.read_text()
        run_device(rig, ids, 0, 8 << 30)  # the hook still holds the claim's memory
        seen = run_with_cdi(rig.daemon.cdi_dir, ids, ["sh", "-c", 'test -S "$CUDA_MPS_PIPE_DIRECTORY/control" && echo ok'])
        assert seen.stdout.strip() == "ok", "the container does not see the MPS control socket: " + seen.stderr
        assert rig.harness.unprepare([ref(claim)], driver=DRIVER)[claim["metadata"]["uid"]] == ""
        wait_for(lambda: not (Path(root) / uuid).exists() or None, 30, what="the MPS daemon quit")


# --- HAMi pods through the webhook ------------------------------------------------------------------


@pytest.fixture
def webhook(cluster: ControlPlane, tmp_path: Path) -> Iterator[None]:
    """`dra webhook up` for this test only (the API server sends it every pod with HAMi resources)."""
    install.up(cluster.kubeconfig, tmp_path / "webhook", name=unique("dra-webhook-mig"))
    yield
    install.down(cluster.kubeconfig, tmp_path / "webhook")


def hami_pod(rig: MigRig, name: str, limits: dict[str, str], annotations: dict[str, str]) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations},
           "spec": {"containers": [{"name": "cuda", "image": "busybox", "resources": {"limits": limits}}]}}
    client.CoreV1Api(rig.api).create_namespaced_pod(rig.namespace, pod)


def allocated_claim(rig: MigRig) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        got = [c for c in rig.claims() if (c.get("status") or {}).get("allocation")]
        return got[0] if got and all(p["spec"].get("nodeName") == rig.node for p in rig.pods()) else None

    claim: dict[str, Any] = wait_for(done, 90, what="the webhook's claim allocated and its pod bound")
    return claim


def test_a_hami_pod_in_mig_mode_gets_a_mig_device(rig_for: Callable[..., MigRig], webhook: None) -> None:
    rig = rig_for("--fake", "h200x8-mig")
    hami_pod(rig, "hami-mig", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "30000"}, {"nvidia.com/vgpu-mode": "mig"})
    claim = allocated_claim(rig)
    (r,) = results(claim)
    device = rig.slice_devices()[r["device"]]
    assert device["attributes"]["type"] == {"string": "mig"}
    memory = int(device["capacity"]["memory"]["value"])
    assert memory >= 30000 * MiB
    run_device(rig, prepare(rig, claim), 0, memory)


def test_a_hami_pod_with_a_mig_profile_resource_gets_that_profile(rig_for: Callable[..., MigRig],
                                                                  webhook: None) -> None:
    rig = rig_for("--fake", "h200x8-mig", "--set", "mig=dynamic")
    hami_pod(rig, "hami-mig-2g", {"nvidia.com/mig-2g.35gb": "1"}, {})
    claim = allocated_claim(rig)
    (r,) = results(claim)
    assert "-mig-2g35gb-" in r["device"]
    run_device(rig, prepare(rig, claim), 0, H200_MIB * 2 // 8 * MiB)
    assert [m[2] for m in rig.lines("gi+")] == ["14"]  # a 2g.35gb instance was made for it


def test_a_hami_pod_in_mps_mode_becomes_an_mps_client(rig_for: Callable[..., MigRig], webhook: None) -> None:
    with mps_root() as root:
        rig = rig_for("--fake", "h200x8", "--set", f"mpsRoot={root}")
        rig.kubectl("apply", "-f", str(EXAMPLES / "deviceclass.yaml"))
        hami_pod(rig, "hami-mps", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"},
                 {"nvidia.com/vgpu-mode": "mps"})
        claim = allocated_claim(rig)
        ids = prepare(rig, claim)
        env = spec_env(cdi_spec(rig, claim["metadata"]["uid"]))
        assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=3000M"
        run_device(rig, ids, 0, 3000 * MiB)
        assert rig.harness.unprepare([ref(claim)], driver=DRIVER)[claim["metadata"]["uid"]] == ""
