#!/usr/bin/env python3
"""The hami-core-gpu driver on a real GPU: discovery, the slice, a prepared share, PyTorch in it.

Run on the GPU machine from the repository root (it builds what it needs: the hook, the stub
drivers and the hookcore extension):

    python3 bench/hami_core_gpu_h200.py --out "$OUT"

Steps, each through the real driver and framework code:
1. discovery: `HamiCoreGpuDriver.setup` on this node (NVML through nvidia-ml-py), printed;
2. the ResourceSlice it would publish (the framework's publisher encoding), written to
   ``$OUT/h200-slice.json`` (the test fixture ``tests/data/h200-slice.json``);
3. prepare: a claim of 30 cores + 4Gi as kube-scheduler allocated it (recorded on the control
   plane here: ``bench/data/h200-claim-30c-4gi.json``; its pool and device are rewritten to
   this node's first GPU) through `ClaimPreparer` with the framework's enforcement: hook set,
   the claim's config and ledger, CDI spec (self-contained mode: no NVIDIA toolkit spec there);
4. the CDI edits applied to a PyTorch process as a runtime would: exactly the spec's environment
   (``LD_PRELOAD`` of the hook, as the claim's config asks ``preload: env``;
   ``CUDA_VISIBLE_DEVICES``=the GPU's UUID) and its mounts, bind-mounted at their container
   paths in a private mount namespace (`dra.testing.runtime.run_with_cdi`; targets that do not
   exist are created in overlays, nothing on the host). What is emulated: no image (the
   process sees the machine's root filesystem beside the mounts), no cgroups, no device cgroup
   (the device nodes listed in the spec are the machine's own). Where the machine allows no
   mount namespace, ``--host-links`` applies the directory mounts as symbolic links at the
   container paths instead (``/usr/lib/hookcore``, ``/run/hookcore/vgpu``, driver files; each
   created only where nothing exists, removed after) and the results say which;
5. in that process: ``torch.cuda.mem_get_info()`` (expected total 4 GiB), a 3 GiB tensor (fits),
   2 GiB more (a clean ``torch.OutOfMemoryError``), then a bf16 matmul loop for --seconds,
   against the same loop natively in a process without the edits: the compute share.

``--strict MHZ`` makes the claim's config ask for a strict cap (``computeMode: strict``,
``fullLoadClockMhz: MHZ``): the share is then of full-load throughput, not of GPU time.

``--fake h200x1`` runs steps 1-4 against the stub NVML and stub libcuda (no GPU, no torch): the
workload is then hookcore's stub ``cuda_workload``; this is how the script is tested off the GPU.

Results: ``$OUT/results.json`` (everything), ``$OUT/h200-slice.json``, ``$OUT/cdi-spec.json``,
``$OUT/discovery.json``; a summary is printed last.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CLAIM = ROOT / "bench" / "data" / "h200-claim-30c-4gi.json"
GiB = 1 << 30
NODE_UID = "00000000-0000-0000-0000-000000000000"  # no API server here: the owner Node's UID is a placeholder


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def build() -> None:
    """The hook, stubs and workload (make), and the hookcore extension (in place) if missing."""
    subprocess.run(["make", "-C", str(ROOT / "hookcore"), "-s", "libs"], check=True)
    try:
        import hookcore._hookcore  # noqa: F401
    except ImportError:
        log("building the hookcore extension in place")
        subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=ROOT, check=True)


def check_imports() -> None:
    missing = []
    for mod in ("kubernetes", "pynvml", "yaml", "grpc", "google.protobuf", "prometheus_client", "typer"):
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if missing:
        sys.exit(f"missing Python packages {missing}: carry them as wheels (bench/fetch_wheels.sh writes .whl/; see its header)")


# --- steps ---------------------------------------------------------------------------------------


def discover(node: str, fake: str | None) -> Any:
    import dra
    from drivers.hami_core_gpu.driver import HamiCoreGpuDriver

    driver = HamiCoreGpuDriver()
    settings = {"health": "off", "cdiMode": "self-contained"}
    driver.setup(dra.DriverContext(node_name=node, pool_name=node, settings=settings, fake=fake))
    return driver


def slice_json(driver: Any, node: str) -> dict[str, Any]:
    from dra._runtime.publish.desired import desired_pool, slice_object

    pool = desired_pool(driver.name, node, driver.devices())
    return slice_object(pool, 0, 1, NODE_UID, name=f"{node}-{driver.name}-0")


def prepare(driver: Any, node: str, work: Path, strict_mhz: int | None = None) -> tuple[dict[str, Any], list[str], Any]:
    """The recorded claim, retargeted at this node's first GPU, prepared by the framework; with
    `strict_mhz` its config asks for a strict cap at that full-load clock."""
    import dra
    from dra._runtime.cdi import CDISpecs
    from dra._runtime.checkpoint import Checkpoint
    from dra._runtime.enforcement import ClaimHooks
    from dra._runtime.hookdir import HookDir
    from dra._runtime.prepare import ClaimPreparer
    from dra.testing.claims import RecordedClaims

    claim = json.loads(CLAIM.read_text())
    device = driver.devices()[0].name
    for r in claim["status"]["allocation"]["devices"]["results"]:
        r["pool"], r["device"] = node, device
    claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] = [node]
    if strict_mhz is not None:
        for config in (claim["spec"]["devices"]["config"], claim["status"]["allocation"]["devices"]["config"]):
            for c in config:
                c["opaque"]["parameters"].update(computeMode="strict", fullLoadClockMhz=strict_mhz)
    claims = RecordedClaims()
    claims.add(claim)
    checkpoint = Checkpoint(work / "state", boot_id="bench")
    preparer = ClaimPreparer(driver, claims, node, checkpoint, CDISpecs(driver.cdi_kind, work / "cdi"),
                             hooks=ClaimHooks(checkpoint.state_dir, HookDir(work / "hook-dir"), dra.Preload.FILE),
                             allow_claim_loosening=True)  # the claim's own preload/strict settings: the bench's admin allows them
    meta = claim["metadata"]
    out = preparer.prepare_claims([dra.ClaimRef(meta["uid"], meta["namespace"], meta["name"])])[meta["uid"]]
    if out.error:
        sys.exit(f"prepare failed: {out.error}")
    ids = [i for d in out.devices for i in d.cdi_device_ids]
    return claim, ids, preparer


TORCH_WORKLOAD = r"""
import json, os, sys, time
import torch
GiB = 1 << 30
out = {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "ld_preload": os.environ.get("LD_PRELOAD")}
free, total = torch.cuda.mem_get_info()
out["mem_get_info"] = [free, total]
out["device_name"] = torch.cuda.get_device_name(0)
probe = sys.argv[1] == "quota"
if probe:
    a = torch.empty(3 * GiB, dtype=torch.uint8, device="cuda")
    out["alloc_3GiB"] = "ok"
    try:
        b = torch.empty(2 * GiB, dtype=torch.uint8, device="cuda")
        out["alloc_2GiB_more"] = "allocated"
    except torch.OutOfMemoryError as e:
        out["alloc_2GiB_more"] = "OutOfMemoryError: " + str(e).splitlines()[0]
    del a
    torch.cuda.empty_cache()
x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
for _ in range(20):
    y = x @ x
torch.cuda.synchronize()
seconds = float(sys.argv[2])
n, t0 = 0, time.perf_counter()
while time.perf_counter() - t0 < seconds:
    for _ in range(20):
        y = x @ x
    torch.cuda.synchronize()
    n += 20
out["matmul_per_s"] = n / (time.perf_counter() - t0)
print("RESULT " + json.dumps(out), flush=True)
"""


def parse_result(stdout: str) -> dict[str, Any]:
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line[7:]))
    return {}


def run_workload(cdi_dir: Path, ids: list[str], argv: list[str], host_links: bool, timeout: float) -> tuple[str, Any]:
    """(how the edits were applied, the finished process)."""
    from dra.testing.cdi import apply_cdi
    from dra.testing.runtime import run_with_cdi, runtime_unavailable

    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/root"}
    why = runtime_unavailable()
    if not why:
        return "private mount namespace (run_with_cdi)", run_with_cdi(cdi_dir, ids, argv, base_env=base, timeout=timeout)
    if not host_links:
        sys.exit(f"no private mount namespace here ({why}); rerun with --host-links to emulate the mounts with links")
    env, mounts = apply_cdi(cdi_dir, ids)
    made: list[Path] = []
    skipped: list[str] = []
    try:
        for m in mounts:
            target = Path(m.container_path)
            if not target.exists() and not target.is_symlink():
                try:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.symlink_to(m.host_path)
                except OSError as exc:  # e.g. a read-only driver mount: the process finds the file where it is
                    skipped.append(f"{m.host_path} -> {target} ({exc.strerror})")
                    continue
                made.append(target)
            elif not target.samefile(m.host_path):
                skipped.append(f"{m.host_path} -> {target} (target exists)")
        proc = subprocess.run(argv, env={**base, **env}, capture_output=True, text=True, timeout=timeout)
        return f"host links {[str(p) for p in made]} (removed after); not applied: {skipped or 'none'}", proc
    finally:
        for p in made:
            p.unlink()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    parser.add_argument("--node", default="gpu-node", help="the node (and pool) name the slice and claim use")
    parser.add_argument("--fake", help="a fake-device profile (stub NVML/CUDA, no GPU): tests this script off the GPU")
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each matmul loop")
    parser.add_argument("--strict", type=int, metavar="MHZ",
                        help="the claim asks for a strict cap (computeMode: strict) at this full-load SM clock")
    parser.add_argument("--host-links", action="store_true", help="emulate mounts with links where no mount namespace is allowed")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    check_imports()
    build()
    results: dict[str, Any] = {"node": args.node, "fake": args.fake}

    driver = discover(args.node, args.fake)
    inv = driver.inventory
    results["discovery"] = {"driver_version": inv.driver_version, "cuda_driver_version": inv.cuda_driver_version,
                            "gpus": [vars(g) for g in inv.gpus], "skipped": list(inv.skipped)}
    (args.out / "discovery.json").write_text(json.dumps(results["discovery"], indent=2) + "\n")
    for g in inv.gpus:
        log(f"GPU {g.index}: {g.product_name} {g.uuid} minor {g.minor} {g.memory >> 20} MiB {g.brand}/{g.architecture} "
            f"cc {g.compute_capability} pci {g.pci_bus_id} root {g.pcie_root} numa {g.numa_node} mig {g.mig_enabled}")
    log(f"driver {inv.driver_version}, CUDA {inv.cuda_driver_version}")

    slice_obj = slice_json(driver, args.node)
    (args.out / "h200-slice.json").write_text(json.dumps(slice_obj, indent=2) + "\n")
    log(f"slice: {len(slice_obj['spec']['devices'])} device(s) -> {args.out / 'h200-slice.json'}")

    with tempfile.TemporaryDirectory(prefix="hami-gpu-bench-") as tmp:
        work = Path(tmp)
        claim, ids, _preparer = prepare(driver, args.node, work, args.strict)
        spec_files = sorted((work / "cdi").glob("*"))
        spec = json.loads(spec_files[0].read_text()) if spec_files[0].suffix == ".json" else None
        if spec is None:
            import yaml

            spec = yaml.safe_load(spec_files[0].read_text())
        (args.out / "cdi-spec.json").write_text(json.dumps(spec, indent=2) + "\n")
        results["prepare"] = {"cdi_device_ids": ids,
                              "consumed": claim["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"],
                              "config": claim["status"]["allocation"]["devices"]["config"][0]["opaque"]["parameters"],
                              "hook_config": next((work / "state" / "hooks").glob("*/config")).read_text()}
        log(f"prepared: CDI devices {ids}")

        if args.fake:
            import dra.fakes.stub as stub

            argv = [str(stub.workload_program())]
            how, proc = run_workload(work / "cdi", ids, argv, args.host_links, 60)
            results["workload"] = {"applied": how, "rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr[-2000:]}
        else:
            script = work / "torch_workload.py"
            script.write_text(TORCH_WORKLOAD)
            how, proc = run_workload(work / "cdi", ids, [sys.executable, str(script), "quota", str(args.seconds)],
                                     args.host_links, 600)
            limited = parse_result(proc.stdout)
            native = parse_result(subprocess.run([sys.executable, str(script), "native", str(args.seconds)],
                                                 capture_output=True, text=True, timeout=600).stdout)
            share = limited.get("matmul_per_s", 0) / native["matmul_per_s"] if native.get("matmul_per_s") else None
            results["workload"] = {"applied": how, "rc": proc.returncode, "limited": limited, "native": native,
                                   "compute_share_of_native": share, "stderr": proc.stderr[-3000:]}
    (args.out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    w = results["workload"]
    print(json.dumps({k: v for k, v in w.items() if k != "stderr"}, indent=2, default=str))
    ok = w["rc"] == 0
    if not args.fake:
        mem = w["limited"].get("mem_get_info", [0, 0])
        ok = ok and mem[1] == 4 * GiB and str(w["limited"].get("alloc_2GiB_more", "")).startswith("OutOfMemoryError")
        print(f"mem_get_info total {mem[1] / GiB:.2f} GiB; +2 GiB -> {w['limited'].get('alloc_2GiB_more')}; "
              f"compute share {w['compute_share_of_native']} of native (claim: 30 cores"
              f"{f', strict cap at {args.strict} MHz' if args.strict else ''})")
    shutil.rmtree(args.out / "tmp", ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
