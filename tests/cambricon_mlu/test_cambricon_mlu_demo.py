"""`dra demo --driver cambricon-mlu`: the scenario of examples/cambricon-mlu/demo.yaml runs, and the
heterogeneous claim that ends every demo holds its MLU part through the vendor's sMLU instance."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from kube_helpers import clear_demo_drivers
from rich.console import Console

from dra_dev.cluster.controlplane import ControlPlane
from dra_dev.demo import console
from dra_dev.demo.tour import run_demo

pytestmark = pytest.mark.cluster


def test_the_mlu_demo_runs_its_examples_and_holds_every_share(
        cluster: ControlPlane, stub_cndev: Path, monkeypatch: pytest.MonkeyPatch, api_client: Any) -> None:
    clear_demo_drivers(api_client)
    buf = io.StringIO()
    monkeypatch.setattr(console, "out", Console(file=buf, width=220))
    assert run_demo(cluster.directory, cluster.k8s_version, driver_entry="cambricon-mlu", node_mode="auto") == 0
    out = buf.getvalue()
    print(out)
    assert "a node daemon `dra run cambricon-mlu --fake mlu370-x8x8` each" in out
    assert "demo complete: 3 claims on 1 node," in out and "left out" not in out
    # claim, device, consumed memory, memory it sees (its sMLU instance's), past it, ledger peak (none: no hook)
    rows = [[c.strip() for c in line.strip("│ ").split("│")] for line in out.splitlines() if "│ refused" in line]
    runs = [r for r in rows if len(r) == 6]
    by_claim = {r[0]: r for r in runs}
    assert by_claim["mlu-30-16gi"][2:6] == ["16Gi", "16Gi", "refused", "-"], runs
    assert by_claim["mlu-memory-only"][2:5] == ["8Gi", "8Gi", "refused"], runs
    assert len([r for r in runs if r[0] == "two-mlus"]) == 2, runs
    assert all(r[2] == r[3] for r in runs), runs
    assert "unprepare errors: none" in out
    assert "heterogeneous claim complete" in out and "skipped" not in out and "a real node" not in out
