"""`dra demo --driver ascend`: the scenario of examples/ascend/demo.yaml runs.

Before the scenario existed this command failed at once ("unknown setting 'count' for
ascend"): the demo hard-coded the example driver's settings for every driver without one.
"""

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


def test_the_ascend_demo_runs_its_examples_and_holds_every_share(
        cluster: ControlPlane, stub_dcmi: Path, monkeypatch: pytest.MonkeyPatch, api_client: Any) -> None:
    clear_demo_drivers(api_client)
    buf = io.StringIO()
    monkeypatch.setattr(console, "out", Console(file=buf, width=220))
    # --node auto, as a new user runs it: the scenario's realNode: false skips the real node
    # (whose workload image speaks CUDA only) even where one could start.
    assert run_demo(cluster.directory, cluster.k8s_version, driver_entry="ascend", node_mode="auto") == 0
    out = buf.getvalue()
    print(out)
    assert "a node daemon `dra run ascend --fake 910b3x8` each" in out
    assert "demo complete: 3 claims on 1 node," in out and "left out" not in out
    # claim, device, consumed memory, memory it sees (acl_workload via the hook), past it, peak.
    rows = [[c.strip() for c in line.strip("│ ").split("│")] for line in out.splitlines() if "│ refused" in line]
    runs = [r for r in rows if len(r) == 6]
    by_claim = {r[0]: r for r in runs}
    assert by_claim["npu-30-16gi"][2:5] == ["16Gi", "16Gi", "refused"], runs
    assert by_claim["npu-memory-only"][2:5] == ["8Gi", "8Gi", "refused"], runs
    assert len([r for r in runs if r[0] == "two-npus"]) == 2, runs  # one workload per NPU of the claim
    assert all(r[2] == r[3] for r in runs), runs
    assert "unprepare errors: none" in out
    assert "heterogeneous claim complete" in out and "a real node" not in out
