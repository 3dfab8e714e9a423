"""What every part of the demo does around its claims: fake Node objects, best-effort clean-up,
and the closing note on what is left running."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dra_dev.cluster.controlplane import ControlPlane


def create_fake_node(core: Any, node: str) -> None:
    """A Ready, untainted Node object for a node whose kubelet the demo plays."""
    core.create_node({"metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}}})
    res = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    core.patch_node_status(node, {"status": {"capacity": res, "allocatable": res, "conditions": [
        {"type": "Ready", "status": "True", "reason": "DemoNode", "message": "no kubelet: the demo plays it"}]}})
    core.patch_node(node, {"spec": {"taints": None}})


def clean_up(deletes: list[Callable[[], object]], work: Path) -> None:
    """Delete the demo's objects (each best effort: one failing does not keep the others) and its files."""
    for delete in deletes:
        try:
            delete()
        except Exception:  # best-effort clean-up of demo objects
            pass
    shutil.rmtree(work, ignore_errors=True)


def left_running(cp: ControlPlane, keep: bool, work: Path | None) -> str:
    """What the demo leaves behind, and how to stop or remove it."""
    lines = [f"left running: the embedded control plane (etcd, kube-apiserver, kube-scheduler,"
             f" kube-controller-manager) in {cp.directory}; it serves the next `dra demo` and `make test`.",
             f"  stop it:  {sys.executable} -m dra.cli cluster down --dir {cp.directory}"]
    if keep and work is not None:
        lines.append(f"  kept (--keep): the demo's namespace, node and DeviceClass, and its files in {work}")
    return "\n".join(lines)


def workload_report(stdout: str) -> dict[str, str]:
    """The workload programs' report: one ``key=value`` per line."""
    return dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)
