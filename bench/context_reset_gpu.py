#!/usr/bin/env python3
"""A tenant that resets its primary context halfway through, under a 30% share: does its work after
the reset stay metered? And what does the driver do with contexts that go?

Run on the GPU machine from a checkout (nvcc, make; no network):

    python3 bench/context_reset_gpu.py --out "$OUT" [--tree OTHER ...]

It builds libvgpu.so from this checkout (`after`) and from each --tree (named by its directory),
and bench/context_reset.cu. First the program's `probe` (no hook): whether a primary context's
handle survives a reset, whether a release that leaves a reference keeps it active, whether a
destroyed context's handle comes back from the next create, and how long a destruction with
300 ms of work queued takes. Then, per tree, side by side and alternating: `steady` (10 spin kernels
of 200 us, wait, again) and `reset` (the same, with cudaDeviceReset() halfway, 10 kernels still
queued), under a 30% share. The share is the kernels' device time over the run's wall time; for
`reset` also before and after the reset. Results: OUT/context-reset.json and OUT/context-reset.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from hook_trees import add_tree_option, build_hook

ROOT = Path(__file__).resolve().parent.parent
US = 200
SHARE = 30


def lines(out: str, tag: str) -> list[list[str]]:
    return [ln.split()[1:] for ln in out.splitlines() if ln.startswith(tag + " ")]


def run_share(exe: Path, lib: Path, ledger: Path, mode: str, secs: float) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOOKCORE_", "CUDA_DEVICE_"))}
    env.update({"LD_PRELOAD": str(lib), "HOOKCORE_LEDGER": str(ledger), "HOOKCORE_MEMORY_LIMIT_0": "8Gi",
                "HOOKCORE_COMPUTE_LIMIT_0": str(SHARE)})
    p = subprocess.run([str(exe), "share", str(secs), str(US), mode], env=env, capture_output=True, text=True,
                       timeout=secs + 60)
    if p.returncode != 0:
        return {"error": (p.stdout + p.stderr)[-2000:]}
    (n, ns), = lines(p.stdout, "RAN")
    (sn, sns), = lines(p.stdout, "SPLIT")
    total, el = int(n), float(ns)
    rec: dict[str, Any] = {"kernels": total, "ns": el, "share": 100 * total * US * 1000 / el}
    if int(sn):
        before, bns = int(sn), float(sns)
        rec["share_before_reset"] = 100 * before * US * 1000 / bns
        rec["share_after_reset"] = 100 * (total - before) * US * 1000 / (el - bns)
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_tree_option(ap)
    ap.add_argument("--secs", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ctxreset-"))
    exe = work / "context_reset"
    subprocess.run(["nvcc", "-O2", "-o", str(exe), str(ROOT / "bench" / "context_reset.cu"), "-lcuda"], check=True)
    trees = {"after": build_hook(ROOT, work, "after") / "libvgpu.so"}
    for t in args.tree:
        trees[Path(t).name] = build_hook(Path(t).resolve(), work, Path(t).name) / "libvgpu.so"

    probe = subprocess.run([str(exe), "probe"], capture_output=True, text=True, timeout=120)
    results: dict[str, Any] = {
        "gpu": subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True).stdout.strip(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "probe": {ln[0]: " ".join(ln[1:]) for ln in lines(probe.stdout, "PROBE")},
        "probe_output": (probe.stdout + probe.stderr)[-2000:],
        "share": SHARE, "kernel_us": US, "secs": args.secs, "runs": {},
    }
    for r in range(args.rounds):
        for name, lib in trees.items():
            for mode in ("steady", "reset"):
                rec = run_share(exe, lib, work / f"{name}-{mode}-{r}.ledger", mode, args.secs)
                results["runs"].setdefault(f"{name}/{mode}", []).append(rec)
                print(name, mode, rec, flush=True)
    (out / "context-reset.json").write_text(json.dumps(results, indent=1))

    def f(v: Any) -> str:
        return f"{v:.1f}" if isinstance(v, float) else "-"

    md = [f"GPU: {results['gpu']}; {results['date']}; {SHARE}% share, {US} us spin kernels, {args.secs} s runs",
          "", "Driver probe (no hook): " + ", ".join(f"{k} = {v}" for k, v in results["probe"].items()), "",
          "| tree / run | share % | before the reset | after the reset |", "|---|---|---|---|"]
    for key, recs in results["runs"].items():
        for rec in recs:
            md.append(f"| {key} | {f(rec.get('share'))} | {f(rec.get('share_before_reset'))} | "
                      f"{f(rec.get('share_after_reset'))} |" if "error" not in rec else f"| {key} | error | | |")
    (out / "context-reset.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
