"""`dra node` as a user runs it: status names the daemon's dirs, up is idempotent, down leaves
nothing on the machine (also after containerd was killed), errors are one paragraph."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from kube_helpers import wait_for
from kubernetes import client

from dra.testing.claims import pod_manifest
from dra_dev.cluster.controlplane import ControlPlane
from dra_dev.node.images import PAUSE_IMAGE
from dra_dev.node.node import RealNode, unavailable_reason


def dra(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dra.cli", *args], capture_output=True, text=True, timeout=timeout)


def one_paragraph_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and proc.stderr.startswith("error:"), proc.stderr
    return " ".join(proc.stderr.split())


def test_up_without_a_control_plane_says_how_to_start_one(tmp_path: Path) -> None:
    msg = one_paragraph_error(dra("node", "up", "--dir", str(tmp_path / "n"), "--cluster-dir", str(tmp_path / "none")))
    expected = unavailable_reason() or "no control plane answers in"
    assert " ".join(expected.split())[:40] in msg
    if unavailable_reason() is None:
        assert "dra cluster up --dir" in msg


def test_bad_node_name_is_a_clear_error(tmp_path: Path) -> None:
    msg = one_paragraph_error(dra("node", "up", "--name", "Bad_Name", "--dir", str(tmp_path)))
    assert "not a valid Kubernetes node name" in msg


def test_status_and_down_of_an_absent_node(tmp_path: Path) -> None:
    proc = dra("node", "status", "--dir", str(tmp_path))
    assert proc.returncode == 1 and "no node in" in proc.stdout
    proc = dra("node", "down", "--dir", str(tmp_path))
    assert proc.returncode == 0 and "nothing was running" in proc.stdout


@pytest.mark.cluster
@pytest.mark.node
def test_status_prints_the_daemons_directories_and_up_is_idempotent(real_node: RealNode) -> None:
    before = real_node.state
    proc = dra("node", "up", "--dir", str(real_node.directory))
    assert proc.returncode == 0, proc.stderr
    assert "already running" in proc.stderr
    assert {n: r.pid for n, r in real_node.state.processes.items()} == {n: r.pid for n, r in before.processes.items()}
    proc = dra("node", "status", "--dir", str(real_node.directory))
    assert proc.returncode == 0, proc.stdout
    out = " ".join(proc.stdout.split())
    lay = real_node.layout
    for path in (lay.plugin_dir, lay.registry_dir, lay.cdi_dir):
        assert str(path) in out
    assert f"node {real_node.name} Ready" in out and "taints: none" in out
    assert f"dra run DRIVER --node-name {real_node.name}" in out and f"--registrar-dir {lay.registry_dir}" in out


@pytest.mark.cluster
@pytest.mark.node
def test_down_after_containerd_was_killed_leaves_nothing_behind(cluster: ControlPlane, api_client: client.ApiClient,
                                                                real_node: RealNode) -> None:
    # A second node beside the session's: each has its own cgroup root, bridge, sockets and dirs.
    directory = Path(tempfile.mkdtemp(prefix="dra-node2-", dir="/tmp"))
    node = RealNode(directory, f"second-{uuid.uuid4().hex[:6]}", cluster.directory)
    core = client.CoreV1Api(api_client)
    try:
        node.up()
        core.create_namespaced_pod("default", pod_manifest(node.name, [], node.name, image=PAUSE_IMAGE))
        wait_for(lambda: core.read_namespaced_pod(node.name, "default").status.phase == "Running", 60, 0.3,
                 "the pod on the second node to run")
        state = node.state
        assert state is not None
        os.kill(state.processes["containerd"].pid, signal.SIGKILL)
        node.down(purge=True)
    finally:
        node.down(purge=True)
        core.delete_namespaced_pod(node.name, "default", grace_period_seconds=0)
    assert not directory.exists()
    assert subprocess.run(["ip", "link", "show", state.bridge], capture_output=True).returncode != 0
    assert not [h for h in Path("/sys/fs/cgroup").iterdir() if (h / state.cgroup_root.lstrip("/")).exists()]
    assert str(directory) not in Path("/proc/self/mountinfo").read_text()
    leftover = [p.name for p in Path("/proc").iterdir() if p.name.isdigit()
                and str(directory).encode() in _cmdline(p)]
    assert not leftover, f"processes of the removed node still run: {leftover}"
    assert real_node.status().healthy, "the session's node was disturbed"


def _cmdline(proc_dir: Path) -> bytes:
    try:
        return (proc_dir / "cmdline").read_bytes()
    except OSError:
        return b""
