"""`dra demo` on a real node: kubelet prepares, containerd applies CDI, each pod reports its quota."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from kube_helpers import clear_demo_drivers
from rich.console import Console

from dra_dev.cluster.controlplane import ControlPlane, running
from dra_dev.demo import console
from dra_dev.demo.tour import run_demo

pytestmark = [pytest.mark.cluster, pytest.mark.node]


def test_demo_runs_on_a_real_node_and_says_so(cluster: ControlPlane, real_node: object,
                                              monkeypatch: pytest.MonkeyPatch, api_client: Any) -> None:
    clear_demo_drivers(api_client)
    # `real_node` only to skip (or fail under CI) where no real node can start; the demo starts its own.
    buf = io.StringIO()
    monkeypatch.setattr(console, "out", Console(file=buf, width=400))
    # By its examples directory's name: the real-node part still runs the entry point `example`.
    assert run_demo(cluster.directory, cluster.k8s_version, driver_entry="gpu.example.com", node_mode="real") == 0
    out = buf.getvalue()
    assert "`dra run example --set count=2` each" in out and "demo complete: 6 claims on 2 nodes" in out
    assert "a real node: kubelet" in out and "registers with the real kubelet" in out
    assert out.count("(Succeeded)") == 2 and out.count("/gpu-0 (") == 2
    # Each pod's own process saw exactly its claim's memory (10Gi, 4Gi) and was refused past it.
    assert "quota_total_bytes=10737418240" in out and "quota_total_bytes=4294967296" in out
    assert out.count("over_quota_alloc=refused") == 2 and out.count("holds") == 2
    assert out.count("/usr/lib/hookcore") == 2 and out.count("/etc/ld.so.preload") == 2
    assert "CDI specs left: none" in out
    assert "demo complete on a real node" in out


def test_the_readmes_demo_is_the_full_tour(cluster: ControlPlane, real_node: object, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """`make demo` = `dra demo` with no options: hami-core-gpu's examples on two fake nodes, the
    heterogeneous GPU + NPU claim, then a hami-core-gpu share on a real node, and what is left.
    On a control plane of its own, as `make demo` has (the session's has other tests' nodes)."""
    buf = io.StringIO()
    monkeypatch.setattr(console, "out", Console(file=buf, width=400))
    with running(tmp_path / "cluster", cluster.k8s_version) as own:  # free loopback ports; stopped after
        assert run_demo(own.directory, own.k8s_version, node_mode="real") == 0
    out = buf.getvalue()
    print(out)
    tour = [out.index("demo complete: "), out.index("heterogeneous claim complete"),
            out.index("demo complete on a real node"), out.index("left running: the embedded control plane")]
    assert tour == sorted(tour), "the parts run in order, each to its end"
    assert "on 2 nodes" in out and "registered hami-core-gpu.project-hami.io" in out
    assert "quota_total_bytes=10737418240" in out and "quota_total_bytes=4294967296" in out
    assert out.count("over_quota_alloc=refused") >= 2 and "not enforced" not in out
