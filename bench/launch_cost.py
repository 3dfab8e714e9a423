#!/usr/bin/env python3
"""What the compute meter costs one kernel launch on the host, and which driver calls it is made of.

Run on the GPU machine from a checkout (nvcc, make, a C compiler; no network):

    python3 bench/launch_cost.py --out "$OUT"                 # this checkout's hookcore
    python3 bench/launch_cost.py --out "$OUT" --tree OTHER    # another tree's hookcore beside it

It builds libvgpu.so (make -C TREE/hookcore libs) and bench/launch_cost.cu, then runs the program
natively and under the preload: with no compute limit (the fast path), with a 99% default share
and with a 99% strict cap (metered, hardly ever throttled), `--rounds` times each, alternating. Each
run prints the host's median ns per call of an empty-kernel launch and of the driver calls the meter
makes per launch (launch_cost.cu). The medians over the runs go to OUT/launch-cost.json and the
table to OUT/launch-cost.md: the preload's cost per launch is its launch minus the native launch.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from hook_trees import add_tree_option, build_hook

ROOT = Path(__file__).resolve().parent.parent
KEYS = ("launch", "launch_default", "launch_and_record", "is_capturing", "ctx_get_current", "event_record", "event_query",
        "clock_gettime")


def build(tree: Path, work: Path) -> tuple[Path, Path]:
    lib_dir = build_hook(tree, work, tree.name)
    exe = work / "launch_cost"
    if not exe.exists():
        subprocess.run(["nvcc", "-O2", "-o", str(exe), str(ROOT / "bench" / "launch_cost.cu"), "-lcuda"], check=True)
    return lib_dir / "libvgpu.so", exe


def env_for(mode: str, lib: Path, ledger: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKCORE_")}
    env.pop("LD_PRELOAD", None)
    if mode == "native":
        return env
    env.update({"LD_PRELOAD": str(lib), "HOOKCORE_LEDGER": str(ledger), "HOOKCORE_MEMORY_LIMIT_0": "8Gi"})
    if mode != "preload":
        env["HOOKCORE_COMPUTE_LIMIT_0"] = "99"
    if mode == "strict-99":
        env["HOOKCORE_COMPUTE_MODE_0"] = "strict"
    return env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_tree_option(ap)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="launchcost-"))
    trees = [ROOT] + [Path(t).resolve() for t in a.tree]
    libs = {t: build(t, work) for t in trees}
    runs: dict[str, list[dict[str, float]]] = {}
    for r in range(a.rounds):
        for t, (lib, exe) in libs.items():
            for mode in ("native", "preload", "default-99", "strict-99"):
                if mode == "native" and t != ROOT:
                    continue
                key = mode if t == ROOT else f"{t.name}:{mode}"
                ledger = work / f"{t.name}-{mode}-{r}.ledger"
                p = subprocess.run([str(exe)], env=env_for(mode, lib, ledger), capture_output=True, text=True,
                                   timeout=120)
                line = (p.stdout.strip().splitlines() or ["{}"])[-1]
                try:
                    got = json.loads(line)
                except json.JSONDecodeError:
                    got = {"error": (p.stdout + p.stderr)[-500:]}
                runs.setdefault(key, []).append(got)
    med: dict[str, dict[str, Any]] = {}
    for key, got in runs.items():
        ok = [g for g in got if "error" not in g]
        med[key] = {k: statistics.median(g[k] for g in ok) for k in KEYS if ok and k in ok[0]}
        if len(ok) < len(got):
            med[key]["errors"] = [g["error"] for g in got if "error" in g]
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    (out / "launch-cost.json").write_text(json.dumps({"gpu": gpu, "runs": runs, "median": med}, indent=1))
    native = med.get("native", {}).get("launch")
    lines = [f"GPU: {gpu}; median ns per call over {a.rounds} runs each, alternating", "",
             "| run | " + " | ".join(KEYS) + " | preload's cost per launch: created / default stream |",
             "|---|" + "---|" * (len(KEYS) + 1)]
    native_default = med.get("native", {}).get("launch_default")
    for key, m in med.items():
        extra = "-"
        if native and "launch" in m and key != "native":
            extra = f"{m['launch'] - native:.0f}"
            if native_default and "launch_default" in m:
                extra += f" / {m['launch_default'] - native_default:.0f}"
        lines.append(f"| {key} | " + " | ".join(f"{m[k]:.0f}" if k in m else "-" for k in KEYS) + f" | {extra} |")
    text = "\n".join(lines)
    (out / "launch-cost.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
