#!/usr/bin/env python3
"""The watchdog against real NVML: three processes on one GPU, the verdicts and the time to each.

Run on the GPU machine from the repository root (it builds the hook, the stubs and the hookcore
extension; needs torch, nvidia-ml-py, prometheus_client and Cython, all in its image; root for
mount namespaces):

    python3 bench/watchdog_h200.py --out "$OUT"

What runs, all through the framework's and the driver's own code: the hami-core-gpu driver on
this node (NVML discovery), three claims of 30 cores + 4Gi on the first GPU with real hook dirs,
ledgers and checkpoint records (hook preload ``env``), the `Watchdog` thread polling the driver's
`processes()` (NVML compute/graphics process lists, per-process utilization) every second, and
three PyTorch processes, each in its claim's mounts (a private mount namespace, as
`dra.testing.runtime` applies CDI mounts) and environment:

1. ``within``: under the hook, 1 GiB (inside its quota): no verdict expected;
2. ``contexts``: under the hook, 3 GiB charged (inside the quota) plus --contexts extra CUDA
   contexts, which these claims do not charge (their quotas name no context size, as with the
   driver's ``contextMemory: "0"``): NVML sees more than quota + the watchdog's memory tolerance
   (64 MiB per process): ``over-quota`` expected. Where the hook refuses
   extra contexts, the process starts a child without the preload that holds 4 GiB instead (the
   claim's two processes then hold more than quota + 2 x tolerance; the child is also unheld);
3. ``unhooked``: its claim's mounts but ``LD_PRELOAD`` removed (a process that clears its
   environment), 3 GiB: ``unheld`` expected, and ``over-share`` where NVML reports
   per-process utilization (it runs a bf16 matmul loop unthrottled; the others are held at 30%);
4. ``leaderless``: unhooked too, its 3 GiB held by a thread after the thread-group leader exited
   (review 2026-12-04 #4: its /proc/<pid>/mountinfo then fails with EINVAL, and the watchdog of
   0cee347 gave it no verdict): ``unheld`` expected. The fake run cannot make a leaderless
   process out of ``sleep``: there it is a second unhooked process (the rig's tests have a real one).

Times: unheld from the process's first CUDA call (context made); over-quota from the moment the
extra contexts exist; over-share from the start of its matmul loop (at least --share-window).
Results: ``$OUT/watchdog-h200.json``; a summary is printed last.

``--fake h200x1`` runs it against the stub NVML (no GPU, no torch): the three processes are
``sleep`` under the same mounts and environment, and the script lists them to the stub with the
memory and utilization the real run expects; this is how it is tested off the GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import uuid as uuidlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
GiB = 1 << 30

WORKLOAD = r"""
import ctypes, json, sys, time
import torch
CHILD = ("import sys, time, torch; a = torch.empty(4 << 30, dtype=torch.uint8, device='cuda'); "
         "open(sys.argv[1], 'w').write('ok'); time.sleep(3600)")
mode, ready, contexts = sys.argv[1], sys.argv[2], int(sys.argv[3])
GiB = 1 << 30
out = {"mode": mode}
if mode == "leaderless":  # the GPU work on a thread, then the thread-group leader exits alone
    import os, threading
    def work():
        torch.zeros(1, device="cuda"); torch.cuda.synchronize()
        out["t_ctx"] = time.time()
        keep = torch.empty(3 * GiB, dtype=torch.uint8, device="cuda"); torch.cuda.synchronize()
        out["t_alloc"] = out["t_loop"] = time.time()
        open(ready, "w").write(json.dumps(out))
        time.sleep(3600)
    threading.Thread(target=work).start()
    while not os.path.exists(ready):
        time.sleep(0.05)
    ctypes.CDLL(None).syscall(60, 0)  # SYS_exit on x86-64: this thread only (ctypes drops the GIL)
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
out["t_ctx"] = time.time()
keep = [torch.empty((1 if mode == "within" else 3) * GiB, dtype=torch.uint8, device="cuda")]
if mode == "contexts":
    cu = ctypes.CDLL("libcuda.so.1")
    dev, made, errors = ctypes.c_int(), [], []
    cu.cuDeviceGet(ctypes.byref(dev), 0)
    for _ in range(contexts):
        ctx = ctypes.c_void_p()
        try:
            r = cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev)
        except AttributeError:  # a driver without the old entry point: CUDA 13's form
            try:
                r = cu.cuCtxCreate_v4(ctypes.byref(ctx), None, 0, dev)
            except AttributeError:
                r = "no cuCtxCreate"
        if r != 0:
            errors.append(r); break
        popped = ctypes.c_void_p()
        cu.cuCtxPopCurrent_v2(ctypes.byref(popped))  # torch's context stays current
        made.append(ctx)
    out["contexts_made"], out["context_errors"] = len(made), errors
    if errors:  # the hook refuses extra contexts: a child without the preload holds the rest
        import os, subprocess
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        flag = ready + ".child"
        child = subprocess.Popen([sys.executable, "-c", CHILD, flag], env=env)
        while not os.path.exists(flag):
            if child.poll() is not None:
                raise SystemExit(f"the unhooked child exited with {child.returncode}")
            time.sleep(0.05)
        out["uncharged_path"], out["child_pid"] = "a child started without the preload", child.pid
    else:
        out["uncharged_path"] = f"{len(made)} extra CUDA contexts"
torch.cuda.synchronize()
out["t_alloc"] = time.time()
out["mem_get_info"] = list(torch.cuda.mem_get_info())
x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
out["t_loop"] = time.time()
open(ready, "w").write(json.dumps(out))
while True:
    for _ in range(20):
        y = x @ x
    torch.cuda.synchronize()
"""


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def build() -> None:
    subprocess.run(["make", "-C", str(ROOT / "hookcore"), "-s", "libs"], check=True)
    try:
        import hookcore._hookcore  # noqa: F401
    except ImportError:
        log("building the hookcore extension in place")
        subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=ROOT, check=True)


@dataclasses.dataclass
class Timed:
    """The Event sink: each verdict with the wall time it was given."""

    got: list[tuple[float, Any]] = dataclasses.field(default_factory=list)

    def emit(self, verdict: Any) -> None:
        self.got.append((time.time(), verdict))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("bench-out"))
    ap.add_argument("--fake", help="a fake-device profile (stub NVML, no GPU): tests this script off the GPU")
    ap.add_argument("--seconds", type=float, default=90.0, help="the most to wait for every verdict")
    ap.add_argument("--share-window", type=float, default=5.0)
    ap.add_argument("--contexts", type=int, default=16, help="extra CUDA contexts of the `contexts` process")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    build()

    from prometheus_client import CollectorRegistry

    import dra
    from dra._runtime.checkpoint import PREPARED, Checkpoint, ClaimRecord, DeviceRecord
    from dra._runtime.enforcement import ClaimHooks
    from dra._runtime.hookdir import HookDir
    from dra._runtime.watchdog.loop import Watchdog
    from dra._runtime.watchdog.model import WatchdogSettings
    from dra.testing.runtime import mount_script, runtime_unavailable
    from drivers.hami_core_gpu.driver import HamiCoreGpuDriver

    why = runtime_unavailable()
    if why:
        sys.exit(f"needs a private mount namespace: {why}")
    driver = HamiCoreGpuDriver()
    driver.setup(dra.DriverContext(node_name="gpu-node", pool_name="gpu-node", settings={"health": "off"},
                                   fake=args.fake))
    device = driver.devices()[0].name
    gpu = driver.by_name[device]
    results: dict[str, Any] = {"fake": args.fake, "gpu": {"name": gpu.product_name, "uuid": gpu.uuid,
                                                          "driver": driver.inventory.driver_version if driver.inventory else None},
                               "share_window_s": args.share_window,
                               "memory_tolerance_bytes": WatchdogSettings().memory_tolerance}
    log(f"GPU {device}: {gpu.product_name} {gpu.uuid}")
    children: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="dra-wdh-") as tmp:
        work = Path(tmp)
        state = work / "state"
        checkpoint = Checkpoint(state, boot_id="bench")
        hook_dir = HookDir(work / "hook-dir")
        library = dra.hook_library("vgpu")
        hset = hook_dir.install(library)
        hooks = ClaimHooks(state, hook_dir, dra.Preload.ENV)
        procs_file = work / "nvml-processes"
        if args.fake:
            os.environ["STUB_NVML_PROCESSES"] = str(procs_file)
        claims: dict[str, Any] = {}
        for mode in ("within", "contexts", "unhooked", "leaderless"):
            uid = str(uuidlib.uuid4())
            plan = hooks.plan(dra.Enforcement(library, [dra.Quota(gpu.uuid, 4 * GiB, 30)], dra.Preload.ENV))
            hooks.create(uid, plan)
            checkpoint.put(ClaimRecord(uid, "bench", f"claim-{mode}", PREPARED, "bench", devices=(DeviceRecord(
                driver.name, "gpu", "gpu-node", device, str(uuidlib.uuid4()), {"memory": 4 * GiB, "cores": 30},
                state={"uuid": gpu.uuid}),), enforcement={**plan.to_json(), "set": str(hset.path)},
                updated_at=time.time()))
            claims[mode] = (uid, hooks.edits(uid, plan, hset))
        sink = Timed()
        wd = Watchdog(driver, checkpoint.records, state / "hooks", sink, CollectorRegistry(),
                      WatchdogSettings(action="report", share_window=args.share_window))
        wd.start()
        pids: dict[str, int] = {}
        ready: dict[str, dict[str, Any]] = {}
        try:
            for mode, (uid, edits) in claims.items():
                ready_file = work / f"ready-{mode}"
                if args.fake:
                    argv = ["sleep", "600"]
                else:
                    argv = [sys.executable, "-c", WORKLOAD, mode, str(ready_file), str(args.contexts)]
                if mode in ("unhooked", "leaderless"):
                    argv = ["env", "-u", "LD_PRELOAD", *argv]
                env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/root",
                       "CUDA_VISIBLE_DEVICES": gpu.uuid, **edits.env}
                scratch = tempfile.mkdtemp(prefix="rt-", dir=work)
                lines = mount_script(edits.mounts, scratch)
                lines.append("exec env -i " + " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()) + " "
                             + " ".join(shlex.quote(a) for a in argv))
                child = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                                          "\n".join(lines)], stdout=subprocess.DEVNULL, start_new_session=True)
                children.append(child)
                pids[mode] = child.pid  # sh execs the workload: the same PID
                log(f"started {mode} as PID {child.pid} (claim {uid})")
            if args.fake:
                deadline = time.monotonic() + 10  # the execs done and the sleeps begun (preloads mapped)
                while not all(_sleeping(pids[m], "sleep") for m in pids):
                    if time.monotonic() > deadline:
                        sys.exit("the fake workloads did not start in 10 s")
                    time.sleep(0.02)
                now = time.time()
                expected = {"within": (int(1.5 * GiB), 25), "contexts": (int(7.5 * GiB), 28),
                            "unhooked": (int(3.5 * GiB), 70), "leaderless": (int(3.5 * GiB), 0)}
                procs_file.write_text("".join(f"{gpu.index} {pids[m]} {mem} {util}\n"
                                              for m, (mem, util) in expected.items()))
                ready = {m: {"mode": m, "t_ctx": now, "t_alloc": now, "t_loop": now} for m in pids}
            deadline = time.monotonic() + args.seconds
            want = {("unheld", "unhooked"), ("over-quota", "contexts"), ("unheld", "leaderless")}
            while time.monotonic() < deadline:
                for m in pids:
                    f = work / f"ready-{m}"
                    if m not in ready and f.exists() and f.stat().st_size:
                        ready[m] = json.loads(f.read_text())
                        log(f"{m} ready: {ready[m]}")
                got = {(v.kind, _mode(v, claims)) for _t, v in sink.got}
                share_ok = ("over-share", "unhooked") in got or time.monotonic() > deadline - 1
                if want <= got and share_ok and len(ready) == len(pids):
                    break
                for m, c in zip(pids, children, strict=True):
                    if c.poll() is not None and m not in ready:
                        sys.exit(f"workload {m} exited with {c.returncode} before it was ready")
                time.sleep(0.1)
            listed = driver.processes()
            leader_state = _state(pids["leaderless"])
        finally:
            wd.stop()
            for c in children:
                try:
                    os.killpg(c.pid, signal.SIGKILL)  # the workload and any child it started
                except ProcessLookupError:
                    pass
                c.wait()
            driver.close()
    by_pid = {p.pid: p for p in listed}
    results["processes"] = {m: {"pid": pid, **ready.get(m, {}),
                                "nvml_memory_bytes": by_pid[pid].memory if pid in by_pid else None,
                                "nvml_utilization_percent": by_pid[pid].utilization if pid in by_pid else None}
                            for m, pid in pids.items()}
    results["utilization_reported"] = any(p.utilization is not None for p in listed)
    results["leaderless_leader_state"] = leader_state  # Z on the GPU: the leader exited, a thread runs on
    verdicts = []
    for t, v in sink.got:
        mode = _mode(v, claims)
        since = {"unheld": "t_ctx", "over-quota": "t_alloc", "over-share": "t_loop"}[v.kind]
        t_ref = ready.get(mode, {}).get(since) if mode else None
        verdicts.append({"verdict": v.kind, "process": mode, "pid": v.pid, "claim": v.claim.name if v.claim else None,
                         "seconds_after_" + since[2:]: round(t - t_ref, 3) if t_ref else None,
                         "amount": v.amount, "message": v.message})
    results["verdicts"] = verdicts
    results["expected_seen"] = {
        "unheld(unhooked)": any(v["verdict"] == "unheld" and v["process"] == "unhooked" for v in verdicts),
        "over-quota(contexts)": any(v["verdict"] == "over-quota" and v["process"] == "contexts" for v in verdicts),
        "over-share(unhooked)": any(v["verdict"] == "over-share" and v["process"] == "unhooked" for v in verdicts),
        "unheld(leaderless)": any(v["verdict"] == "unheld" and v["process"] == "leaderless" for v in verdicts),
        "nothing for within": not any(v["process"] == "within" for v in verdicts),
    }
    (args.out / "watchdog-h200.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps({"expected_seen": results["expected_seen"], "utilization_reported": results["utilization_reported"],
                      "verdicts": [{k: v for k, v in x.items() if k != "message"} for x in verdicts]}, indent=2))
    return 0 if all(results["expected_seen"][k] for k in ("unheld(unhooked)", "over-quota(contexts)",
                                                           "unheld(leaderless)", "nothing for within")) else 1


def _sleeping(pid: int, comm: str) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    name, rest = stat.split("(", 1)[1].rsplit(")", 1)
    return name == comm and rest.split()[0] == "S"


def _state(pid: int) -> str | None:
    """The process state letter of /proc/<pid>/stat (Z: its thread-group leader has exited)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _mode(verdict: Any, claims: dict[str, Any]) -> str | None:
    if verdict.claim is None:
        return None
    return next((m for m, (uid, _e) in claims.items() if uid == verdict.claim.uid), None)


if __name__ == "__main__":
    sys.exit(main())
