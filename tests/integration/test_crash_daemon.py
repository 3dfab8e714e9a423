"""Crash safety through the real daemon: `dra run example` is SIGKILLed (``DRA_FAULT_POINT``) at
each step of prepare and unprepare while the kubelet harness calls it over its gRPC socket; a
fresh daemon on the same directories then gets kubelet's repeated call. No CDI spec may leak, no
claim may be lost, every answered CDI ID must resolve and validate.

The randomized variant (200+ kills) runs at the ClaimPreparer level in test_crash_safety.py:
a daemon start costs seconds, a forked preparer milliseconds.
"""

from __future__ import annotations

import json
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import Env, create_claim, create_pod, request, wait_allocated
from kube_helpers import create_node, unique, wait_for
from kubernetes import client

from dra._runtime import faults
from dra._runtime.checkpoint import PREPARED, Checkpoint
from dra.driver import ClaimRef
from dra.testing.cdi import apply_cdi, validate_cdi_spec
from dra.testing.daemon import DaemonProcess
from dra.testing.kubelet import KubeletHarness
from drivers.example.driver import ExampleDriver

pytestmark = pytest.mark.cluster
DRIVER = "gpu.example.com"
SCHEMA = Path(__file__).parent.parent / "data" / "cdi-schema"
# The hook library is installed at daemon start (Driver.hook_libraries), so its points fire there.
START_POINTS = [p for p in faults.POINTS if p.startswith("hookdir.")]
PREPARE_POINTS = [p for p in faults.POINTS if not p.startswith(("unprepare.", "hookdir."))]
UNPREPARE_POINTS = [p for p in faults.POINTS if p.startswith("unprepare.")]


@pytest.fixture(scope="module")
def site(api_client: client.ApiClient) -> Iterator[Env]:
    """A node, a namespace and a DeviceClass for the example driver's devices on that node."""
    node = unique("crash")
    create_node(api_client, node)
    ns = unique("crash")
    core: Any = client.CoreV1Api(api_client)
    resource: Any = client.ResourceV1Api(api_client)
    core.create_namespace({"metadata": {"name": ns}})
    resource.create_device_class({"metadata": {"name": ns}, "spec": {"selectors": [{"cel": {
        "expression": f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].index >= 0'}}]}})
    yield Env(api_client, ExampleDriver(count=2), node, ns, ns)
    resource.delete_device_class(ns)


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="dra-c-", dir="/tmp") as d:  # short: socket paths <= 107 bytes
        yield Path(d)


class Node:
    """The daemon's directories survive restarts, as a node's do; the process does not."""

    def __init__(self, cluster: Any, env: Env, workdir: Path) -> None:
        self.cluster, self.env, self.workdir = cluster, env, workdir
        self.kubelet = KubeletHarness(workdir / "registry")
        self.daemon: DaemonProcess | None = None

    def start(self, fault: str | None = None) -> DaemonProcess:
        since = time.monotonic()
        self.daemon = DaemonProcess("example", self.env.node, self.cluster.kubeconfig, self.workdir,
                                    env={"DRA_FAULT_POINT": fault or ""}, args=["--set", "count=2"]).start()
        self.kubelet.wait_for_plugin(DRIVER, timeout=60, newer_than=since)
        return self.daemon

    def call(self, op: str, refs: list[ClaimRef]) -> Any:
        """The kubelet call; None when the daemon died during it (killed at the fault point)."""
        assert self.daemon is not None
        try:
            if op == "prepare":
                return self.kubelet.prepare(refs, driver=DRIVER, timeout=30)
            return self.kubelet.unprepare(refs, driver=DRIVER, timeout=30)
        except Exception:
            if self.daemon.proc is not None:
                self.daemon.proc.wait(10)
            if self.daemon.alive() or self.daemon.proc is None or self.daemon.proc.returncode != -signal.SIGKILL:
                raise
            return None

    def close(self) -> None:
        if self.daemon is not None and self.daemon.alive():
            self.daemon.stop()
        self.kubelet.close()


@pytest.fixture(scope="module")
def claims(site: Env, cluster: Any) -> list[ClaimRef]:
    """Allocated once, by kube-scheduler, from the slices the first daemon publishes."""
    with tempfile.TemporaryDirectory(prefix="dra-c-", dir="/tmp") as d:
        node = Node(cluster, site, Path(d))
        node.start()
        try:
            wait_for(lambda: client.ResourceV1Api(site.api).list_resource_slice(
                field_selector=f"spec.nodeName={site.node},spec.driver={DRIVER}").items, 30, what="slices")
            create_claim(site, "a", [request("gpu", site.device_class, cores="10", memory="1Gi")])
            create_claim(site, "xy", [request("x", site.device_class, cores="5", memory="1Gi"),
                                      request("y", site.device_class, cores="5", memory="512Mi")])
            for name in ("a", "xy"):
                create_pod(site, name, [name])
            allocated = [wait_allocated(site, n) for n in ("a", "xy")]
        finally:
            node.close()
    return [ClaimRef(c.uid, c.namespace, c.name) for c in allocated]


def check_prepared(node: Node, refs: list[ClaimRef], answer: Any) -> None:
    d = node.daemon
    assert d is not None
    cp = Checkpoint(d.state_dir)
    for r in refs:
        got = answer[r.uid]
        assert got.error == "", got.error
        rec = cp.get(r.uid)
        assert rec is not None and rec.phase == PREPARED
        ids = [i for dev in got.devices for i in dev.cdi_device_ids]
        assert ids == [i for dev in rec.devices for i in dev.cdi_ids]
        spec = json.loads((d.cdi_dir / f"k8s.gpu.example.com-claim_{r.uid}.json").read_text())
        validate_cdi_spec(spec, SCHEMA)
        env, _ = apply_cdi(d.cdi_dir, ids)
        assert env["EXAMPLE_MODE"] == "shared"
    assert sorted(p.name for p in d.cdi_dir.iterdir()) == sorted(
        f"k8s.gpu.example.com-claim_{r.uid}.json" for r in refs)


def check_clean(node: Node) -> None:
    d = node.daemon
    assert d is not None
    assert list(d.cdi_dir.iterdir()) == [], "CDI spec leaked"
    assert Checkpoint(d.state_dir).uids() == set(), "checkpoint record left"
    assert [p.name for p in (d.state_dir / "claims").iterdir()] == []


@pytest.mark.parametrize("point", PREPARE_POINTS)
def test_daemon_killed_during_prepare(cluster: Any, site: Env, claims: list[ClaimRef], workdir: Path,
                                      point: str) -> None:
    node = Node(cluster, site, workdir)
    try:
        node.start(fault=point)
        assert node.call("prepare", claims) is None, f"the daemon was not killed at {point}"
        node.start()  # kubelet's retry reaches a fresh instance
        answer = node.call("prepare", claims)
        check_prepared(node, claims, answer)
        again = node.call("prepare", claims)
        assert {u: (a.error, a.devices) for u, a in again.items()} == \
            {u: (a.error, a.devices) for u, a in answer.items()}
        assert node.call("unprepare", claims) == {r.uid: "" for r in claims}
        check_clean(node)
    finally:
        node.close()


@pytest.mark.parametrize("point", UNPREPARE_POINTS)
def test_daemon_killed_during_unprepare(cluster: Any, site: Env, claims: list[ClaimRef], workdir: Path,
                                        point: str) -> None:
    node = Node(cluster, site, workdir)
    try:
        node.start(fault=point)
        check_prepared(node, claims, node.call("prepare", claims))
        assert node.call("unprepare", claims) is None, f"the daemon was not killed at {point}"
        node.start()
        assert node.call("unprepare", claims) == {r.uid: "" for r in claims}
        check_clean(node)
        assert node.call("unprepare", claims) == {r.uid: "" for r in claims}  # and again
    finally:
        node.close()


@pytest.mark.parametrize("point", START_POINTS)
def test_daemon_killed_while_installing_its_hook_library(cluster: Any, site: Env, claims: list[ClaimRef],
                                                         workdir: Path, point: str) -> None:
    node = Node(cluster, site, workdir)
    try:
        dying = DaemonProcess("example", site.node, cluster.kubeconfig, workdir,
                              env={"DRA_FAULT_POINT": point}, args=["--set", "count=2"]).start()
        assert dying.proc is not None and dying.proc.wait(60) == -signal.SIGKILL, f"not killed at {point}"
        node.start()  # the next start repairs the hook dir and installs again
        hook_dir = node.daemon.hook_dir if node.daemon else workdir / "hook-dir"
        assert not [*hook_dir.glob("libs/.tmp-*"), *hook_dir.glob("sets/.tmp-*"), *hook_dir.glob(".current.*")]
        check_prepared(node, claims, node.call("prepare", claims))
        assert node.call("unprepare", claims) == {r.uid: "" for r in claims}
        check_clean(node)
    finally:
        node.close()
