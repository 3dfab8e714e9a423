"""`dra top` against the embedded control plane and a running node daemon (fake H200s, the real
hook under the stub CUDA): `dra top --once -o json` lists every claim with its device, the memory
and cores it asked for (its allocation's consumed capacity) and the memory and cores it uses (the
daemon's /metrics, while a workload of one claim holds 1 GiB and launches kernels). The command
runs as a user runs it, a separate process with the cluster's kubeconfig.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kube_helpers import wait_for
from test_examples_e2e import DRIVER, EXAMPLES, WORKLOAD, Rig, allocate, results, rig  # noqa: F401 (rig: the fixture)

from dra import ClaimRef
from dra._runtime.client import quantity_to_int
from dra.testing.runtime import run_with_cdi

pytestmark = [pytest.mark.cluster]
ROOT = Path(__file__).resolve().parents[2]
GiB = 1 << 30


def dra_top(r: Rig, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "dev"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "dra.cli", "top", "--kubeconfig", str(r.cluster.kubeconfig),
                           "--node", r.node, "--metrics", f"{r.node}=http://127.0.0.1:{r.daemon.metrics_port}/metrics",
                           *args], capture_output=True, text=True, timeout=120, env=env)


def metric(r: Rig, name: str, uid: str) -> float | None:
    _, body = r.daemon.get("/metrics")
    for line in body.splitlines():
        if line.startswith(name + "{") and f'claim_uid="{uid}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def test_dra_top_once_json_lists_every_claim_with_device_requested_and_used(rig: Rig) -> None:  # noqa: F811
    allocate(rig, "cores-and-memory.yaml", 1)
    claims = allocate(rig, "whole-gpu.yaml", 2)
    busy, idle = claims["gpu-30-3000mi"], claims["whole-gpu"]
    refs = {n: ClaimRef(c["metadata"]["uid"], c["metadata"]["namespace"], n) for n, c in claims.items()}
    prepared = rig.harness.prepare(list(refs.values()), driver=DRIVER)
    assert all(not p.error for p in prepared.values()), prepared
    out = prepared[busy["metadata"]["uid"]]
    ids = list(dict.fromkeys(i for d in out.devices for i in d.cdi_device_ids))
    uid = busy["metadata"]["uid"]
    with ThreadPoolExecutor(1) as pool:
        # 1 GiB held while 200 us kernels run for 20 s (then it exits: stdin is not a terminal here)
        running = pool.submit(run_with_cdi, rig.daemon.cdi_dir, ids, [sys.executable, str(WORKLOAD), "--launch", "20",
                                                                      str(GiB)], timeout=90)
        wait_for(lambda: metric(rig, "dra_claim_memory_used_bytes", uid) == GiB or None, 30, 0.1, "the held GiB")
        wait_for(lambda: (metric(rig, "dra_claim_compute_seconds_total", uid) or 0) > 0 or None, 30, 0.1,
                 "the limiter charging the claim")
        proc = dra_top(rig, "--once", "-o", "json", "--interval", "2")
        table = dra_top(rig, "--once", "--interval", "0")
        running.result(90)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    rows = {c["name"]: c for c in doc["claims"]}
    assert set(rows) == set(claims), (sorted(rows), sorted(claims))
    for name, c in claims.items():
        (r,) = results(c)
        row = rows[name]
        assert (row["namespace"], row["uid"], row["node"], row["device"], row["driver"]) == (
            rig.namespace, c["metadata"]["uid"], rig.node, r["device"], DRIVER)
        assert row["requested"] == {"memory": quantity_to_int(r["consumedCapacity"]["memory"]),
                                    "cores": quantity_to_int(r["consumedCapacity"]["cores"])}, row
        assert row["pods"] == [f"{rig.namespace}/{name}"]  # the example's pod has the claim's name
    assert rows["gpu-30-3000mi"]["requested"] == {"memory": 3000 << 20, "cores": 30}
    used = rows["gpu-30-3000mi"]["used"]
    assert used["memory"] == GiB and used["processes"] == 1 and used["memory_peak"] >= GiB
    assert used["cores"] is not None and used["cores"] > 0, used  # device time charged between the two scrapes
    assert rows["gpu-30-3000mi"]["limit"] == {"memory": 3000 << 20, "cores": 30}
    assert rows["whole-gpu"]["used"]["memory"] == 0 and rows["whole-gpu"]["used"]["cores"] is None
    assert doc["interval_seconds"] and doc["nodes"][0]["metrics"][0]["error"] is None
    (node,) = doc["nodes"]
    assert len(node["devices"]) == 8 and sum(len(d["claims"]) for d in node["devices"]) == 2
    # The table: every claim under its device.
    assert table.returncode == 0, table.stderr
    for name, c in claims.items():
        assert f"{rig.namespace}/{name}" in table.stdout and results(c)[0]["device"] in table.stdout
    idle_uid: Any = idle["metadata"]["uid"]
    rig.harness.unprepare([refs[n] for n in claims], driver=DRIVER)
    assert metric(rig, "dra_claim_memory_used_bytes", idle_uid) is None
