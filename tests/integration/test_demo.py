"""`dra demo --driver example` (the template driver alone) runs to the end on the session's control plane."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

import dra_dev.demo
from dra_dev.cluster.controlplane import ControlPlane

pytestmark = pytest.mark.cluster


def test_demo_shares_one_device_and_prepares_both_claims(cluster: ControlPlane, monkeypatch: pytest.MonkeyPatch) -> None:
    buf = io.StringIO()
    monkeypatch.setattr(dra_dev.demo, "_out", Console(file=buf, width=200))
    assert dra_dev.demo.run_demo(cluster.directory, cluster.k8s_version, driver_entry="example", node_mode="harness") == 0
    out = buf.getvalue()
    print(out)  # shown with pytest -s
    assert "published pool demo-node-" in out and "devices gpu-0, gpu-1" in out
    # Both claims landed on gpu-0 (the class selects index 0) with their own shares and quotas.
    assert out.count("/gpu-0") == 2
    assert "EXAMPLE_CORES_LIMIT=70" in out and "EXAMPLE_CORES_LIMIT=30" in out
    assert "EXAMPLE_MEMORY_LIMIT=4294967296" in out and "EXAMPLE_MEMORY_LIMIT=10737418240" in out
    # Each claim's workload, started with its CDI edits, sees its consumed memory as the device's
    # total and is refused past it; so is a child started with an empty environment.
    rows = {line.split()[1]: line for line in out.splitlines() if line.split()[1:2] in (["training"], ["notebook"])
            and "refused" in line}
    for claim, memory in (("training", 10 << 30), ("notebook", 4 << 30)):
        cells = [c.strip() for c in rows[claim].strip("│┃ ").replace("┃", "│").split("│")]
        assert cells[1:4] == [str(memory), str(memory), "refused"], rows[claim]
        assert cells[4] == f"{memory} / refused", rows[claim]
    assert "unprepare errors: none; CDI files left: none" in out
    assert "demo complete" in out
    assert "left running: the embedded control plane" in out and "cluster down --dir" in out
