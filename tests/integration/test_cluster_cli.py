"""`dra cluster` as a user runs it: idempotent `up`, clean `down`, clear errors with exit code 2."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from ci_gate import skip_or_fail

from dra_dev.cluster.binaries import DEFAULT_K8S_VERSION, binary_set
from dra_dev.cluster.controlplane import ClusterState, ControlPlane, _pid_runs

pytestmark = pytest.mark.cluster


def dra(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dra.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def binaries_missing() -> str | None:
    """Why a test that starts `dra cluster up` cannot run here (`make test` builds the binaries first)."""
    if binary_set(DEFAULT_K8S_VERSION).complete():
        return None
    return f"the Kubernetes {DEFAULT_K8S_VERSION} binaries are not built (`dra cluster build`)"


def _one_paragraph_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error:"), proc.stderr
    return " ".join(proc.stderr.split())


def test_unknown_version_format_is_a_clear_error() -> None:
    msg = _one_paragraph_error(dra("cluster", "up", "--k8s-version", "1.34"))
    assert "unknown Kubernetes version '1.34'" in msg and "v1.MINOR.PATCH" in msg


def test_unreleased_version_is_a_clear_error(tmp_path: Path) -> None:
    msg = _one_paragraph_error(dra("cluster", "build", "--k8s-version", "v1.34.999",
                                   env={"DRA_K8S_CACHE": str(tmp_path)}))
    assert "unknown Kubernetes version v1.34.999" in msg and "Go module proxy" in msg


def test_missing_go_toolchain_is_a_clear_error(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.symlink(sys.executable, bindir / "python3")
    msg = _one_paragraph_error(dra("cluster", "build", env={"DRA_K8S_CACHE": str(tmp_path / "cache"),
                                                            "PATH": str(bindir)}))
    assert "Go toolchain ('go') is not on PATH" in msg


def test_occupied_port_is_a_clear_error(tmp_path: Path) -> None:
    skip_or_fail(binaries_missing())
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cp = ControlPlane(tmp_path)
        tmp_path.mkdir(exist_ok=True)
        from dra_dev.cluster.controlplane import Ports

        ports = Ports.free()
        ports.apiserver = port
        ClusterState(DEFAULT_K8S_VERSION, ports).save(cp.state_file)
        msg = _one_paragraph_error(dra("cluster", "up", "--dir", str(tmp_path)))
    assert f"port {port} on 127.0.0.1 (for apiserver) is already in use" in msg
    assert not (tmp_path / "logs").exists(), "nothing may start when a port is taken"


def test_up_twice_is_one_healthy_cluster_and_down_leaves_no_process(tmp_path: Path) -> None:
    skip_or_fail(binaries_missing())
    d = str(tmp_path / "c")
    first = dra("cluster", "up", "--dir", d, "--free-ports")
    if first.returncode != 0:
        dra("cluster", "down", "--dir", d)
    assert first.returncode == 0, first.stderr
    assert f"export KUBECONFIG={Path(d).resolve() / 'admin.kubeconfig'}" in first.stdout
    pids = {k: v["pid"] for k, v in json.loads((Path(d) / "cluster.json").read_text())["processes"].items()}
    assert set(pids) == {"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager"}
    try:
        second = dra("cluster", "up", "--dir", d, "--free-ports")
        assert second.returncode == 0, second.stderr
        assert "already running" in second.stderr
        again = {k: v["pid"] for k, v in json.loads((Path(d) / "cluster.json").read_text())["processes"].items()}
        assert again == pids, "a second `up` must not start another control plane"
        status = dra("cluster", "status", "--dir", d)
        assert status.returncode == 0 and "healthy" in status.stdout, status.stdout
        kubectl = str(binary_set(DEFAULT_K8S_VERSION).path("kubectl"))  # in the binary set the test needs
        nodes = subprocess.run([kubectl, "--kubeconfig", f"{d}/admin.kubeconfig", "get", "ns", "-o", "name"],
                               capture_output=True, text=True, timeout=30)
        assert "namespace/kube-system" in nodes.stdout, nodes.stderr
    finally:
        down = dra("cluster", "down", "--dir", d)
    assert down.returncode == 0, down.stderr
    assert "stopped:" in down.stdout
    state = ClusterState.load(Path(d) / "cluster.json")
    assert state is not None and state.processes == {}
    for pid in pids.values():
        assert not Path(f"/proc/{pid}").exists() or not _pid_runs_any(pid), f"pid {pid} survived `down`"
    after = dra("cluster", "status", "--dir", d)
    assert after.returncode == 1


def _pid_runs_any(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_pid_reuse_is_not_mistaken_for_ours() -> None:
    from dra_dev.cluster.controlplane import ProcessRecord

    assert not _pid_runs(ProcessRecord(os.getpid(), "/nonexistent/kube-apiserver", "x"))
