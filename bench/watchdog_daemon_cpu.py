#!/usr/bin/env python3
"""The node daemon's CPU with the watchdog on against the same daemon with it off, side by side.

Two `dra run hami-core-gpu --fake h200x8` daemons on an embedded control plane, each for its own
Node, the same 64 real processes (sleeping, 8 per GPU) listed to both stub NVMLs through
STUB_NVML_PROCESSES; one runs ``--watchdog report``, the other ``--watchdog off``. After both are
ready and the first verdicts are given, each daemon's CPU time (utime+stime from
/proc/<pid>/stat) is read over the same --seconds: the difference is what watching costs, as a
fraction of one core. Root (the daemon reads the processes' /proc).

    .venv/bin/python bench/watchdog_daemon_cpu.py --seconds 60 --out bench/results/watchdog-daemon-cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--processes", type=int, default=64)
    ap.add_argument("--k8s-version", default=os.environ.get("DRA_TEST_K8S_VERSION", "v1.34.4"))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    from kubernetes import client

    from dra.testing.daemon import DaemonProcess
    from dra.testing.kubelet import KubeletHarness
    from dra_dev.cluster.controlplane import ControlPlane

    sleepers = [subprocess.Popen(["sleep", "3600"]) for _ in range(args.processes)]
    with tempfile.TemporaryDirectory(prefix="dra-wdc-", dir="/tmp") as tmp:
        work = Path(tmp)
        procs = work / "nvml-processes"
        procs.write_text("".join(f"{i % 8} {p.pid} {1 << 30} 5\n" for i, p in enumerate(sleepers)))
        cluster = ControlPlane(work / "cluster", args.k8s_version)
        cluster.up()
        daemons: dict[str, DaemonProcess] = {}
        harnesses: list[KubeletHarness] = []
        try:
            from kubernetes import config

            api = config.new_client_from_config(str(cluster.kubeconfig))
            for mode in ("report", "off"):
                node = f"wdc-{mode}"
                client.CoreV1Api(api).create_node({"metadata": {"name": node}})
                d = DaemonProcess("hami-core-gpu", node, cluster.kubeconfig, work / mode,
                                  args=["--fake", "h200x8", "--set", "health=off", "--watchdog", mode],
                                  env={"STUB_NVML_PROCESSES": str(procs)})
                d.start()
                daemons[mode] = d
                harness = KubeletHarness(d.registrar_dir)  # plays kubelet's registration
                harness.watch()
                harnesses.append(harness)
            for d in daemons.values():
                d.wait_http("/readyz", timeout=120)
            want = f'dra_watchdog_verdicts_total{{driver="hami-core-gpu.project-hami.io",verdict="unheld"}} {args.processes}.0'
            deadline = time.monotonic() + 60
            while want not in daemons["report"].get("/metrics")[1]:  # the first verdicts given: steady state
                if time.monotonic() > deadline:
                    sys.exit("the watchdog did not judge every process in 60 s")
                time.sleep(0.2)
            time.sleep(2)  # their Events posted
            c0 = {m: cpu_seconds(d.pid) for m, d in daemons.items()}
            t0 = time.monotonic()
            time.sleep(args.seconds)
            c1 = {m: cpu_seconds(d.pid) for m, d in daemons.items()}
            wall = time.monotonic() - t0
            _, metrics = daemons["report"].get("/metrics")
        finally:
            for h in harnesses:
                h.close()
            for d in daemons.values():
                d.stop()
            cluster.down()
            for p in sleepers:
                p.kill()
                p.wait()
    used = {m: c1[m] - c0[m] for m in c0}
    verdicts = [line for line in metrics.splitlines() if line.startswith("dra_watchdog_verdicts_total")]
    result = {
        "gpus": 8, "processes": args.processes, "seconds": round(wall, 2),
        "cpu_seconds": {m: round(v, 3) for m, v in used.items()},
        "core_percent": {m: round(100 * v / wall, 3) for m, v in used.items()},
        "watchdog_core_percent": round(100 * (used["report"] - used["off"]) / wall, 3),
        "verdict_series": verdicts,
    }
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
