#!/usr/bin/env python3
"""The compute limiter on the stub CUDA and ACL libraries, on the host's clock (no GPU or NPU).

What a limited client gets of the stub device, beside the same client without a limit, and what
the hook costs a client with a memory quota only; ratios measured side by side in one run, with
the host's load average beside them (a busy host lowers both sides). Not a test: the tests assert
the limiter's books on a virtual clock (tests/limiter_books.py, issue 26), because these figures
move with the host's load.

    python3 bench/limiter_stub_cpu.py [--seconds 1.5] [--shares 30,50,70] [--out FILE]

It builds hookcore (make -C hookcore libs) and the tests' C clients into a temporary directory.
Output: one JSON object (also written to --out): "env" (host, load average before and after) and
"cases", one per workload and share: the native and limited rates (submissions per second), the
share of the native rate the limited client got, and the device time its ledger charged per
second of wall time. "overhead" cases: a memory quota only, hooked rate / native rate, for 1 ms
submissions (device-bound) and 1 us ones (host-bound: the hook's own cost per call).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "hookcore" / "build"
STUB = BUILD / "stub"
NPUS = "uuid=NPU-00000001-00000000-00000000-00000000-00000000,memory=8Gi,phy=4"


def build(tmp: Path) -> tuple[Path, Path]:
    """libvgpu.so, libvnpu.so, the stubs and hk-ledger; the CUDA and ACL clients of the tests."""
    subprocess.run(["make", "-C", str(ROOT / "hookcore"), "-s", f"-j{min(os.cpu_count() or 1, 8)}", "libs"],
                   check=True)
    shim, acl = tmp / "shim_client", tmp / "acl_client"
    shim_src = sorted(str(p) for p in (ROOT / "tests/hook/c").glob("shim_client*.c"))  # one program
    subprocess.run(["cc", "-O2", "-o", str(shim), *shim_src, "-ldl"], check=True)
    subprocess.run(["cc", "-O2", "-o", str(acl), str(ROOT / "tests/ascend/c/acl_client.c"), f"-L{STUB}",
                    "-lascendcl", "-lruntime", f"-Wl,-rpath,{STUB}"], check=True)
    return shim, acl


def environ(api: str, preload: bool, **env: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_", "HOOKCORE_", "STUB_", "ASCEND_"))}
    e.pop("LD_PRELOAD", None)
    e["LD_LIBRARY_PATH"] = str(STUB)
    if api == "acl":
        e["HOOKCORE_STUB_NPUS"] = NPUS
    if preload:
        e["LD_PRELOAD"] = str(BUILD / ("libvgpu.so" if api == "cuda" else "libvnpu.so"))
    e.update(env)
    return e


def charged(ledger: Path) -> int | None:
    """Device time charged to device 0's limiter (build/hk-ledger, the core's own reader)."""
    r = subprocess.run([str(BUILD / "hk-ledger"), "limiter", str(ledger), "0"], capture_output=True, text=True)
    fields = r.stdout.split()
    return int(fields[3]) if r.returncode == 0 and fields[:2] == ["LIMITER", "1"] else None


def rate(argv: list[str], env: dict[str, str], ledger: Path | None = None) -> tuple[float, float | None]:
    """(submissions per second, device time charged per second of wall time or None)."""
    if ledger is not None:
        ledger.unlink(missing_ok=True)
        env = {**env, "HOOKCORE_LEDGER": str(ledger)}
    t0 = time.monotonic()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{argv}: rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    got = float(next(ln for ln in proc.stdout.splitlines() if ln.startswith("RATE ")).split()[1])
    ns = charged(ledger) if ledger is not None else None
    return got, (ns / 1e9 / wall if ns is not None else None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--shares", default="30,50,70")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    shares = [int(s) for s in args.shares.split(",") if s]
    secs = str(args.seconds)
    with tempfile.TemporaryDirectory(prefix="hk-limiter-bench-") as d:
        tmp = Path(d)
        shim, acl = build(tmp)
        ledger = tmp / "ledger"
        workloads = {  # name: (api, argv for 1 ms submissions)
            "cuda launch": ("cuda", [str(shim), "launch", "1000", "0", secs]),
            "cuda graph": ("cuda", [str(shim), "launch", "1000", "1", secs]),
            "cuda copy async": ("cuda", [str(shim), "copy", "dtod-async", "1000000", secs]),
            "cuda copy sync": ("cuda", [str(shim), "copy", "dtod", "1000000", secs]),
            "acl kernel": ("acl", [str(acl), "rate", "kernel", "1000", secs]),
            "acl model sync": ("acl", [str(acl), "rate", "sync", "1000", secs]),
        }
        result: dict[str, Any] = {"env": {"host": platform.node(), "cpus": os.cpu_count(), "loadavg_before": os.getloadavg(),
                                "python": sys.version.split()[0], "seconds": args.seconds},
                        "cases": [], "overhead": []}
        for name, (api, argv) in workloads.items():
            limit = "HOOKCORE_COMPUTE_LIMIT_0"
            native, _ = rate(argv, environ(api, False, STUB_COPY_MBPS="1000"))
            for share in shares:
                got, duty = rate(argv, environ(api, True, STUB_COPY_MBPS="1000", **{limit: str(share)}), ledger)
                result["cases"].append({"workload": name, "share": share, "native_rate": native, "rate": got,
                                        "share_of_native": round(100 * got / native, 2),
                                        "charged_duty": None if duty is None else round(100 * duty, 2)})
                print(f"{name:16s} {share:3d}%: {100 * got / native:6.2f}% of native ({got:.1f}/s of {native:.1f}/s)",
                      flush=True)
        for name, api, argv in (
                ("cuda launch 1 ms", "cuda", [str(shim), "launch", "1000", "0", secs]),
                ("cuda launch 1 us", "cuda", [str(shim), "launch", "1", "0", secs]),
                ("acl kernel 1 ms", "acl", [str(acl), "rate", "kernel", "1000", secs]),
                ("acl kernel 1 us", "acl", [str(acl), "rate", "kernel", "1", secs])):
            pairs = [(rate(argv, environ(api, False))[0],
                      rate(argv, environ(api, True, HOOKCORE_MEMORY_LIMIT_0="1Gi"), ledger)[0]) for _ in range(3)]
            native, hooked = max(p[0] for p in pairs), max(p[1] for p in pairs)   # best of 3: noise only slows
            result["overhead"].append({"workload": name, "native_rate": native, "hooked_rate": hooked,
                                       "hooked_of_native": round(100 * hooked / native, 2)})
            print(f"{name:16s} memory quota only: {100 * hooked / native:6.2f}% of native", flush=True)
        result["env"]["loadavg_after"] = os.getloadavg()
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
