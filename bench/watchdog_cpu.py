#!/usr/bin/env python3
"""What watching costs: the watchdog's CPU with 8 fake GPUs and 64 processes on them (stub NVML).

What runs: the hami-core-gpu driver on ``--fake h200x8`` (its real NVML code against the stub
library), 16 prepared claims (2 per GPU, real hook dirs and checkpoint records), 64 real
processes placed as a runtime places them (4 per claim, each in its claim's mounts and a pod
cgroup; 1 in 8 a static binary, so unheld verdicts are part of the load), all listed to the
stub through STUB_NVML_PROCESSES with memory and utilization; the framework's `Watchdog` thread
polling every second, as `dra run` runs it. Measured: the process's CPU time (user+system) over
the run, with nothing else running in it, as a fraction of one core; and the mean poll time.
Root only (mount namespaces, cgroups).

    sudo .venv/bin/python bench/watchdog_cpu.py --seconds 30 --out bench/results/watchdog-cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "watchdog"), str(ROOT / "tests")]  # the tests' rig

from driver_helpers import build_stub_libraries, isolated_env  # noqa: E402
from watchdog_rig import STUB_ENV, Rig, static_program  # noqa: E402

GiB = 1 << 30


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--processes", type=int, default=64)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    stub = build_stub_libraries() / "libnvidia-ml.so.1"
    with isolated_env(STUB_ENV), tempfile.TemporaryDirectory(prefix="dra-wdb-", dir="/tmp") as work:
        rig = Rig(Path(work), stub)
        try:
            static = static_program(Path(work))
            claims = [rig.claim(device=f"hami-gpu-{i % args.gpus}", memory=8 * GiB, cores=25)
                      for i in range(2 * args.gpus)]
            for n in range(args.processes):
                c = claims[n % len(claims)]
                pid = rig.start(c, [str(static)] if n % 8 == 7 else ["sleep", "3600"])
                rig.on_gpu(pid, c.device, GiB + n * (1 << 20), 5)
            wd = rig.watchdog(share_window=10)
            wd._clock = time.monotonic
            polls0 = wd.polls
            t0, c0 = time.monotonic(), os.times()
            wd.start()
            time.sleep(args.seconds)
            wd.stop()
            t1, c1 = time.monotonic(), os.times()
            cpu = (c1.user - c0.user) + (c1.system - c0.system)
            polls = wd.polls - polls0
            result = {
                "gpus": args.gpus, "processes": args.processes, "claims": len(claims), "seconds": round(t1 - t0, 2),
                "polls": polls, "cpu_seconds": round(cpu, 3),
                "core_fraction_percent": round(100 * cpu / (t1 - t0), 3),
                "cpu_ms_per_poll": round(1000 * cpu / max(polls, 1), 2),
                "verdicts": len(rig.events.got),
                "processes_seen": int(sum(1 for _ in rig.driver.processes())),
            }
        finally:
            rig.close()
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
