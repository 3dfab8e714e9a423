#!/usr/bin/env python3
"""hookcore on a real GPU: memory quota, compute share and overhead, with and without the preload.

Run on the GPU machine from the repository root (a fresh machine: it needs python3 with torch and
CuPy, make and a C compiler; no network, no pip install):

    python3 bench/hookcore_gpu.py --out "$OUT"            # everything, one sitting, about 8 minutes
    python3 bench/hookcore_gpu.py --out "$OUT" --sections probe,compute

It builds libvgpu.so and hk-ledger (make -C hookcore) and the C client, then runs each measurement
in fresh processes (one per configuration) so that every process starts with its own quota.
Results go to OUT/results.json (all numbers) and OUT/summary.md (the table, with GPU, driver and
date); the table is printed last. Sections still to run when --budget seconds have passed are
skipped (and say so) so the whole run fits one 10-minute device call.

Sections:
  probe     torch under the preload with HOOKCORE_LOG=debug: which entry points were hooked
  memory    torch allocation to the quota and past it (clean OOM), default and expandable segments;
            mem_get_info; nvidia-smi under the preload
  compute   share achieved at 10/30/50/70% on a 4096^3 bf16 matmul loop and on a CUDA-graph loop
  strict    the strict cap at 30/50/70% on the matmul loop (full-load clock = the native run's SM
            clock), and at 50% with the library's default reference
  copy      copy-bound loop: 1 GiB device-to-device copy_ (memcpy, no kernel) at 30/50% and
            metered-unthrottled (99%), vs native
  strictcopy the copy loop under a strict cap at 50/30% (what the strict cap costs bandwidth-bound work;
            not in the default list: --sections ...,strictcopy)
  infer     launch-bound small-kernel inference loop (16 x Linear(512)+ReLU, batch 1) at 30/50/99%
  tenants   two processes (two claims) running the matmul loop at once: native, 50/50, 30/70
  launch    launch-bound loop (1-element add_, 1000 per sync), native vs preload (no SM limit)
  alloc     1 MiB cudaMalloc+cudaFree pairs through CuPy, 1 and 8 processes, native vs preload
  start     process start cost of the preload (/bin/true, stub driver, real cuInit)
  context   the context charged (issue 17): a native process's context size measured
            (nvidia-smi's per-process memory minus what torch reserved); then a 4 GiB claim filled
            to OOM in 256 MiB tensors by 1 and by 4 processes, with HOOKCORE_CONTEXT_MEMORY_0 = that
            size + 16 MiB and without it, beside a native process holding 4 GiB: torch's mem_get_info at start
            and nvidia-smi's memory of the claim's processes while they hold (target: <= 4096 MiB)
            (alone: python3 bench/hookcore_gpu.py --out "$OUT" --sections context)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GiB = 1 << 30
MiB = 1 << 20

# ----------------------------------------------------------------------------------------------
# Workers: run in a child process, print one JSON line last.
# ----------------------------------------------------------------------------------------------


def _emit(obj: dict) -> None:
    print("RESULT " + json.dumps(obj), flush=True)


def _wait_until(t: float) -> None:
    while time.time() < t:
        time.sleep(min(0.01, max(0.0, t - time.time())))


def w_probe(args: dict) -> None:
    import torch

    a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    b = a @ a
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            b = a @ a
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        b = a @ a
    g.replay()
    torch.cuda.synchronize()
    _emit({"free": free, "total": total, "ok": bool(torch.isfinite(b.float()).all())})


def w_memory(args: dict) -> None:
    import torch

    out: dict = {}
    free, total = torch.cuda.mem_get_info()
    out["mem_get_info"] = [free, total]
    first = int(args["first_gib"] * GiB)
    second = int(args["second_gib"] * GiB)
    x = torch.empty(first, dtype=torch.uint8, device="cuda")
    out["first_ok"] = True
    out["after_first"] = list(torch.cuda.mem_get_info())
    if args.get("smi"):
        env = dict(os.environ)
        r = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.total,memory.used,memory.free", "--format=csv,noheader"],
            capture_output=True, text=True, env=env, timeout=60,
        )
        out["nvidia_smi"] = (r.stdout.strip() or r.stderr.strip())
    try:
        y = torch.empty(second, dtype=torch.uint8, device="cuda")
        out["second"] = "allocated"
        del y
    except torch.OutOfMemoryError as e:
        out["second"] = "OutOfMemoryError"
        out["oom_message"] = str(e).splitlines()[0][:300]
    except RuntimeError as e:  # anything but a clean OOM is a failure of the quota
        out["second"] = "RuntimeError"
        out["oom_message"] = str(e).splitlines()[0][:300]
    # After an OOM the process must still work: free, then allocate again.
    del x
    torch.cuda.empty_cache()
    z = torch.ones(first, dtype=torch.uint8, device="cuda")
    out["after_oom_alloc_ok"] = int(z[-1].item()) == 1
    out["reserved"] = torch.cuda.memory_reserved()
    _emit(out)


def _matmul_setup():
    import torch

    torch.manual_seed(0)
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(4096, 4096, device="cuda", dtype=torch.bfloat16)
    return a, b, c


WINDOWS: list = []


def _rate(step, per_step: int, warm: float, secs: float, go_at: float | None = None) -> float:
    import torch

    t_end = time.perf_counter() + warm
    while time.perf_counter() < t_end:
        step()
    torch.cuda.synchronize()
    if go_at:
        _wait_until(go_at)
    n = 0
    w0 = time.time()
    t0 = time.perf_counter()
    while True:
        step()
        n += per_step
        if time.perf_counter() - t0 >= secs:
            break
    torch.cuda.synchronize()
    WINDOWS.append([w0, time.time()])
    return n / (time.perf_counter() - t0)



def ledger_charged(tool: str | None, path: str | None) -> int | None:
    """Device time charged so far to device 0's limiter, read with the core's own reader
    (build/hk-ledger, from hookcore/tools/hk_ledger.c); None without a ledger or limiter."""
    if not tool or not path or not os.path.exists(path):
        return None
    r = subprocess.run([tool, "limiter", path, "0"], capture_output=True, text=True)
    fields = r.stdout.split()
    if r.returncode != 0 or len(fields) < 4 or fields[0] != "LIMITER" or fields[1] != "1":
        return None
    return int(fields[3])


def _ledger_charged() -> int | None:
    if not os.environ.get("CUDA_DEVICE_SM_LIMIT"):
        return None
    return ledger_charged(os.environ.get("HK_BENCH_TOOL"), os.environ.get("CUDA_DEVICE_MEMORY_SHARED_CACHE"))


def w_compute(args: dict) -> None:
    import torch

    a, b, c = _matmul_setup()

    ev = [torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)]
    kernel_samples: list = []

    def plain() -> None:
        # events after the first matmul (a throttled launch waits before its kernel) and after the last
        torch.mm(a, b, out=c)
        ev[0].record()
        for _ in range(19):
            torch.mm(a, b, out=c)
        ev[1].record()
        torch.cuda.synchronize()
        kernel_samples.append(ev[0].elapsed_time(ev[1]) / 19)

    out = {}
    go_at = args.get("go_at")
    secs = args.get("secs", 3.0)
    if "plain" in args["loops"]:
        c0 = _ledger_charged()
        t0 = time.time()
        out["plain"] = _rate(plain, 20, 0.5, secs, go_at)
        if c0 is not None:
            out["charged_duty_plain"] = 100.0 * (_ledger_charged() - c0) / 1e9 / (time.time() - t0)
        n = int(out["plain"] * secs / 20)
        out["plain_kernel_ms"] = statistics.median(kernel_samples[-n:])
    if "graph" in args["loops"]:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                torch.mm(a, b, out=c)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(20):
                torch.mm(a, b, out=c)

        def graph() -> None:
            g.replay()
            torch.cuda.synchronize()

        out["graph"] = _rate(graph, 20, 0.5, secs, None)
    out["windows"] = WINDOWS
    _emit(out)


def _pin(args: dict) -> None:
    if args.get("cpu") is not None:
        os.sched_setaffinity(0, {int(args["cpu"])})


def w_launch(args: dict) -> None:
    _pin(args)
    import torch

    x = torch.zeros(1, device="cuda")

    def step() -> None:
        for _ in range(1000):
            x.add_(1)
        torch.cuda.synchronize()

    _emit({"rate": _rate(step, 1000, 0.5, args.get("secs", 2.0))})


def w_alloc(args: dict) -> None:
    _pin(args)
    import cupy

    rt = cupy.cuda.runtime
    cupy.cuda.Device(0).use()
    p = rt.malloc(MiB)  # context creation and first allocation outside the timing
    rt.free(p)
    go_at = args.get("go_at")
    if go_at:
        _wait_until(go_at)
    n = args.get("pairs", 3000)
    samples = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n // 5):
            p = rt.malloc(MiB)
            rt.free(p)
        samples.append((time.perf_counter() - t0) / (n // 5) * 1e6)
    _emit({"us_per_pair": statistics.median(samples), "samples": samples})


def _charged_duty(c0: int | None, t0: float) -> float | None:
    c1 = _ledger_charged()
    if c0 is None or c1 is None:
        return None
    return 100.0 * (c1 - c0) / 1e9 / (time.time() - t0)


def w_copy(args: dict) -> None:
    """Copy-bound: 1 GiB device-to-device copy_ (the runtime's memcpy, no kernel), 10 per sync."""
    import torch

    a = torch.empty(GiB, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    a.fill_(1)

    def step() -> None:
        for _ in range(10):
            b.copy_(a)
        torch.cuda.synchronize()

    c0, t0 = _ledger_charged(), time.time()
    r = _rate(step, 10, 0.5, args.get("secs", 3.0))
    _emit({"rate": r, "gib_per_s": r, "charged_duty": _charged_duty(c0, t0)})


def w_infer(args: dict) -> None:
    """Launch-bound, inference-like: a 16-layer MLP of 512-wide Linear+ReLU at batch 1 (about 32
    small kernels per forward), 20 forwards per sync."""
    import torch

    torch.manual_seed(0)
    layers = []
    for _ in range(16):
        layers += [torch.nn.Linear(512, 512), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).to("cuda", torch.float16).eval()
    x = torch.randn(1, 512, device="cuda", dtype=torch.float16)

    def step() -> None:
        with torch.no_grad():
            for _ in range(20):
                model(x)
        torch.cuda.synchronize()

    c0, t0 = _ledger_charged(), time.time()
    r = _rate(step, 20, 0.5, args.get("secs", 3.0))
    _emit({"rate": r, "charged_duty": _charged_duty(c0, t0)})


def _warm_context() -> None:
    """What every context worker does first: the context, a fill kernel and cuBLAS loaded."""
    import torch

    a = torch.ones(256, 256, device="cuda")
    (a @ a).sum().item()
    torch.cuda.synchronize()


def w_ctxsize(args: dict) -> None:
    import torch

    _warm_context()
    print("HOLDING " + json.dumps({"pid": os.getpid(), "reserved": torch.cuda.memory_reserved()}), flush=True)
    sys.stdin.readline()
    _emit({"reserved": torch.cuda.memory_reserved()})


def w_fill(args: dict) -> None:
    """Allocate `chunk_mib` tensors until OOM (or `cap_mib`), report, hold until told to exit.

    A worker refused while warming up (its cuBLAS workspace or first tensor past the claim's quota,
    as when 4 processes share one 4 GiB claim with their contexts charged) still holds what it has
    (its context) and says so: the claim's footprint is measured with every process on the GPU."""
    import torch

    warm_error = None
    try:
        _warm_context()
    except (RuntimeError, torch.OutOfMemoryError) as e:
        warm_error = str(e).splitlines()[0][:200]
    try:
        free, total = torch.cuda.mem_get_info()
    except RuntimeError:
        free, total = None, None
    chunk = int(args["chunk_mib"]) * MiB
    cap = int(args.get("cap_mib") or 0) * MiB
    held, err = [], None
    while not cap or len(held) * chunk < cap:
        try:
            held.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
        except (torch.OutOfMemoryError, RuntimeError) as e:  # the refusal, however torch words it
            err = str(e).splitlines()[0][:200]
            break
    print("HOLDING " + json.dumps({"pid": os.getpid()}), flush=True)
    sys.stdin.readline()
    _emit({"start_free": free, "start_total": total, "held_mib": len(held) * chunk // MiB, "oom": err,
           "warm_error": warm_error, "reserved": torch.cuda.memory_reserved()})


WORKERS = {"probe": w_probe, "memory": w_memory, "compute": w_compute, "launch": w_launch,
           "alloc": w_alloc, "copy": w_copy, "infer": w_infer, "ctxsize": w_ctxsize, "fill": w_fill}


def smi_process_mib() -> dict[int, int]:
    """nvidia-smi's device memory per process (pid -> MiB)."""
    r = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True, timeout=60)
    out = {}
    for line in r.stdout.splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            out[int(parts[0])] = int(parts[1])
    return out

# ----------------------------------------------------------------------------------------------
# Driver side
# ----------------------------------------------------------------------------------------------


def git_rev() -> str:
    """The hookcore commit measured: HK_BENCH_REV when given (a copied tree may carry a stale .git), else git."""
    if os.environ.get("HK_BENCH_REV"):
        return os.environ["HK_BENCH_REV"]
    r = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else "unknown"


class Bench:
    def __init__(self, out: Path, build: Path) -> None:
        self.out = out
        self.build = build
        self.lib = build / "libvgpu.so"
        self.tool = build / "hk-ledger"
        self.client = build / "shim_client"
        self.tmp = Path(tempfile.mkdtemp(prefix="hkbench-"))
        self.n = 0
        self.results: dict = {"env": {}, "sections": {}}
        self.log = open(out / "bench.log", "a")

    def say(self, msg: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        print(line, flush=True)
        self.log.write(line + "\n")
        self.log.flush()

    def env(self, preload: bool, **quota: str) -> dict:
        e = dict(os.environ)
        for k in list(e):
            if k.startswith("CUDA_DEVICE_") or k in ("LD_PRELOAD", "HOOKCORE_LOG"):
                del e[k]
        e["PYTHONUNBUFFERED"] = "1"
        e["HK_BENCH_TOOL"] = str(self.tool)
        if preload:
            self.n += 1
            e["LD_PRELOAD"] = str(self.lib)
            e["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = str(self.tmp / f"claim{self.n}.ledger")
            e.update(quota)
        return e

    def spawn(self, worker: str, args: dict, env: dict) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, __file__, "--worker", worker, json.dumps(args)],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def collect(self, p: subprocess.Popen, timeout: float = 240, keep: int = 4000) -> dict:
        try:
            so, se = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate()
            return {"error": "timeout", "stderr": se[-2000:]}
        for line in reversed(so.splitlines()):
            if line.startswith("RESULT "):
                r = json.loads(line[7:])
                r["_stderr"] = se[-keep:]
                return r
        return {"error": f"exit {p.returncode}", "stderr": se[-3000:], "stdout": so[-1000:]}

    def run(self, worker: str, args: dict, env: dict, timeout: float = 240, keep: int = 4000) -> dict:
        return self.collect(self.spawn(worker, args, env), timeout, keep)

    # --- sections -----------------------------------------------------------------------------
    def build_libs(self) -> None:
        """libvgpu.so, the stubs, hk-ledger and the C client (no GPU needed)."""
        self.build.mkdir(parents=True, exist_ok=True)
        jobs = str(min(os.cpu_count() or 1, 8))
        r = subprocess.run(["make", "-C", str(ROOT / "hookcore"), f"-j{jobs}", f"BUILD={self.build}", "libs"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit("build failed:\n" + r.stdout[-3000:] + r.stderr[-3000:])
        client_src = sorted(str(p) for p in (ROOT / "tests/hook/c").glob("shim_client*.c"))  # one program
        r = subprocess.run(["cc", "-O2", "-o", str(self.client), *client_src, "-ldl", "-lpthread"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit("client build failed:\n" + r.stderr[-3000:])

    def s_build(self) -> None:
        self.build_libs()
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm,"
                                  "power.limit", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
        except OSError as exc:   # a machine without a GPU (the CPU tests of this script)
            smi = f"unknown ({exc.strerror})"
        try:
            import torch  # versions only; no CUDA work in the parent

            versions = {"torch": torch.__version__, "cuda_runtime": torch.version.cuda}
        except ImportError:
            versions = {"torch": None, "cuda_runtime": None}
        self.results["env"] = {"gpu": smi, **versions,
                               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                               "hookcore": git_rev()}
        self.say(f"built; {self.results['env']}")

    def s_probe(self) -> None:
        e = self.env(True, CUDA_DEVICE_MEMORY_LIMIT="8Gi", CUDA_DEVICE_SM_LIMIT="50")
        e["HOOKCORE_LOG"] = "debug"
        r = self.run("probe", {}, e, keep=10_000_000)
        err = r.pop("_stderr", "") + r.get("stderr", "")
        (self.out / "probe-stderr.txt").write_text(err[-2_000_000:])
        r["requests"] = sum(1 for ln in err.splitlines() if "cuGetProcAddress(" in ln)
        hooked = sorted({ln.split("-> hook ")[1].strip() for ln in err.splitlines() if "-> hook " in ln})
        policed_prefixes = ("cuMemAlloc", "cuMemFree", "cuMemCreate", "cuMemRelease", "cuLaunch",
                            "cuGraphLaunch", "cuArray", "cuMipmapped", "cuMemGetInfo", "cuDeviceTotalMem",
                            "cuStreamBeginCapture", "cuStreamEndCapture", "cuMemcpy", "cuMemset")
        real_policed = sorted({ln.split("(")[1].split(",")[0] for ln in err.splitlines()
                               if "-> real" in ln and ln.split("(")[1].startswith(policed_prefixes)})
        r.update({"hooked": hooked, "policed_names_left_real": real_policed,
                  "log_head": [ln for ln in err.splitlines() if "init:" in ln or "ledger index" in ln
                               or "limiter for" in ln][:10]})
        self.results["sections"]["probe"] = r
        self.say(f"probe: {json.dumps(r)[:1500]}")

    def s_memory(self) -> None:
        res = {}
        args = {"first_gib": 3, "second_gib": 2}
        for alloc_conf in ("", "expandable_segments:True"):
            for preload in (False, True):
                e = self.env(preload, CUDA_DEVICE_MEMORY_LIMIT="4Gi")
                if alloc_conf:
                    e["PYTORCH_CUDA_ALLOC_CONF"] = alloc_conf
                key = f"{'preload' if preload else 'native'}{'+expandable' if alloc_conf else ''}"
                r = self.run("memory", dict(args, smi=True), e)
                r.pop("_stderr", None)
                res[key] = r
                self.say(f"memory {key}: {json.dumps(r)[:600]}")
        self.results["sections"]["memory"] = res

    def clocks(self):
        """Sample SM clock and power every 100 ms in the background; returns a stop function that
        gives the samples as (time, MHz, W)."""
        import threading

        p = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                              "-lms", "100"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        samples: list = []

        def reader() -> None:
            for line in p.stdout:
                try:
                    mhz, w = (float(x) for x in line.split(","))
                    samples.append((time.time(), mhz, w))
                except ValueError:
                    pass

        th = threading.Thread(target=reader, daemon=True)
        th.start()

        def stop() -> list:
            p.terminate()
            p.wait()
            th.join(timeout=2)
            return samples

        return stop

    @staticmethod
    def in_windows(samples: list, windows: list) -> dict:
        sel = [(m, w) for (t, m, w) in samples for (a, b) in windows if a + 0.3 <= t <= b]
        if not sel:
            return {}
        return {"sm_mhz": statistics.median(m for m, _ in sel), "power_w": statistics.median(w for _, w in sel)}

    def s_compute(self) -> None:
        res = {}
        configs = [("native", False, {}), ("100", True, {"CUDA_DEVICE_MEMORY_LIMIT": "64Gi"})]
        configs += [(str(sh), True, {"CUDA_DEVICE_SM_LIMIT": str(sh)}) for sh in (70, 50, 30, 10)]
        configs += [("50-elapsed", True, {"CUDA_DEVICE_SM_LIMIT": "50", "HOOKCORE_LIMITER_CHARGE": "elapsed"})]
        for name, preload, quota in configs:
            stop = self.clocks()
            e = self.env(preload, **{k: v for k, v in quota.items() if k != "HOOKCORE_LIMITER_CHARGE"})
            if "HOOKCORE_LIMITER_CHARGE" in quota:
                e["HOOKCORE_LIMITER_CHARGE"] = quota["HOOKCORE_LIMITER_CHARGE"]
            r = self.run("compute", {"loops": ["plain", "graph"], "secs": 2.5}, e)
            r.update(self.in_windows(stop(), r.get("windows", [])))
            err = r.pop("_stderr", "")
            if "error" in r:
                r["stderr"] = err[-1500:]
            res[name] = r
            native = res["native"]
            if name != "native" and "plain" in r and "plain" in native:
                r["share_plain"] = 100.0 * r["plain"] / native["plain"]
                r["share_graph"] = 100.0 * r["graph"] / native["graph"]
                if r.get("plain_kernel_ms"):
                    # GPU-time duty cycle: matmuls per second x GPU time per matmul
                    r["duty_plain"] = 100.0 * r["plain"] * r["plain_kernel_ms"] / 1e3
            if r.get("charged_duty_plain") is not None:
                r["charged_duty_plain"] = round(r["charged_duty_plain"], 2)
            if name == "native" and r.get("plain_kernel_ms"):
                r["duty_plain"] = 100.0 * r["plain"] * r["plain_kernel_ms"] / 1e3
            self.say(f"compute {name}: {r}")
        self.results["sections"]["compute"] = res

    def s_strict(self) -> None:
        """Strict cap vs the default share on the matmul loop, side by side with the compute section."""
        res: dict = {}
        c = self.results["sections"].get("compute", {})
        native = c.get("native", {}).get("plain")
        ref = c.get("native", {}).get("sm_mhz")
        if not native:
            r = self.run("compute", {"loops": ["plain"], "secs": 2.5}, self.env(False))
            native = r.get("plain")
        res["native_plain"] = native
        res["ref_mhz"] = ref
        # As a claim's config would: the device named by UUID (the strict cap finds its clocks in NVML
        # by it; without one it charges plain device time and says so) and the neutral per-device keys.
        uuid = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader", "-i", "0"],
                              capture_output=True, text=True).stdout.strip()
        res["uuid"] = uuid
        claim = {"HOOKCORE_DEVICE_UUID_0": uuid} if uuid else {}
        configs = [(f"strict-{sh}", sh, {"HOOKCORE_COMPUTE_MODE_0": "strict",
                                          **({"HOOKCORE_COMPUTE_REF_MHZ_0": str(int(ref))} if ref else {})})
                   for sh in (70, 50, 30)]
        configs.append(("strict-50-default-ref", 50, {"HOOKCORE_COMPUTE_MODE_0": "strict"}))
        for name, share, extra in configs:
            stop = self.clocks()
            e = self.env(True, HOOKCORE_COMPUTE_LIMIT_0=str(share), **claim, **extra)
            r = self.run("compute", {"loops": ["plain"], "secs": 2.5}, e)
            r.update(self.in_windows(stop(), r.get("windows", [])))
            err = r.pop("_stderr", "")
            r["log"] = [ln for ln in err.splitlines() if "strict" in ln][:3]
            if "plain" in r and native:
                r["share_plain"] = 100.0 * r["plain"] / native
                if r.get("plain_kernel_ms"):
                    r["duty_plain"] = 100.0 * r["plain"] * r["plain_kernel_ms"] / 1e3
            default = c.get(str(share), {}).get("share_plain")
            r["default_share_plain"] = default
            res[name] = r
            self.say(f"strict {name}: {r}")
        self.results["sections"]["strict"] = res

    def _loop_section(self, worker: str, name: str, shares: tuple[int, ...], extra: dict | None = None) -> None:
        """native, then each share, one process each; share of native throughput + charged duty."""
        res: dict = {}
        r = self.run(worker, {"secs": 3.0}, self.env(False))
        r.pop("_stderr", None)
        res["native"] = r
        if extra:
            res["extra_env"] = extra
        for sh in shares:
            r = self.run(worker, {"secs": 3.0}, self.env(True, CUDA_DEVICE_SM_LIMIT=str(sh), **(extra or {})))
            err = r.pop("_stderr", "")
            if "error" in r:
                r["stderr"] = err[-1500:]
            if r.get("rate") and res["native"].get("rate"):
                r["share"] = 100.0 * r["rate"] / res["native"]["rate"]
            res[str(sh)] = r
            self.say(f"{name} {sh}: {r}")
        self.results["sections"][name] = res

    def s_copy(self) -> None:
        self._loop_section("copy", "copy", (99, 50, 30))

    def s_strictcopy(self) -> None:
        """What a strict cap costs a bandwidth-bound loop: the copy loop at 50/30% strict (full-load
        clock as in the strict section), beside the copy section's default share."""
        c = self.results["sections"].get("compute", {})
        ref = int(c.get("native", {}).get("sm_mhz") or 1500)
        uuid = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader", "-i", "0"],
                              capture_output=True, text=True).stdout.strip()
        self._loop_section("copy", "strictcopy", (50, 30), {"HOOKCORE_DEVICE_UUID_0": uuid, "HOOKCORE_COMPUTE_MODE_0":
                                                            "strict", "HOOKCORE_COMPUTE_REF_MHZ_0": str(ref)})

    def s_infer(self) -> None:
        self._loop_section("infer", "infer", (99, 50, 30))

    def s_tenants(self) -> None:
        res = {}
        solo = self.results["sections"].get("compute", {}).get("native", {}).get("plain")
        if not solo:
            r = self.run("compute", {"loops": ["plain"]}, self.env(False))
            solo = r.get("plain")
        res["solo_native"] = solo
        for name, shares in (("native", (None, None)), ("50+50", (50, 50)), ("30+70", (30, 70)),
                             ("50+50-elapsed", (50, 50))):
            go_at = time.time() + 12   # torch import + CUDA init + warm-up of both fit in it
            procs = []
            for sh in shares:
                e = self.env(sh is not None, **({"CUDA_DEVICE_SM_LIMIT": str(sh)} if sh else {}))
                if name.endswith("-elapsed"):
                    e["HOOKCORE_LIMITER_CHARGE"] = "elapsed"
                procs.append(self.spawn("compute", {"loops": ["plain"], "go_at": go_at, "secs": 4.0,
                                                    "kernel_time": False}, e))
            rs = [self.collect(p) for p in procs]
            for r in rs:
                r.pop("_stderr", None)
            rates = [r.get("plain") for r in rs]
            res[name] = {"rates": rates,
                         "shares": [100.0 * x / solo if (x and solo) else None for x in rates],
                         "raw": rs if any("error" in r for r in rs) else None}
            self.say(f"tenants {name}: {res[name]}")
        self.results["sections"]["tenants"] = res

    def s_launch(self) -> None:
        res = {"native": [], "preload": []}
        for i in range(4):
            for preload in ((False, True) if i % 2 == 0 else (True, False)):
                e = self.env(preload, CUDA_DEVICE_MEMORY_LIMIT="64Gi")
                r = self.run("launch", {"secs": 1.5, "cpu": 3}, e)
                res["preload" if preload else "native"].append(r.get("rate"))
        nn, pp = list(filter(None, res["native"])), list(filter(None, res["preload"]))
        if nn and pp:
            res["native_median"], res["preload_median"] = statistics.median(nn), statistics.median(pp)
            res["runs"] = len(nn)
            res["overhead_pct"] = 100.0 * (res["native_median"] - res["preload_median"]) / res["native_median"]
        self.say(f"launch: {res}")
        self.results["sections"]["launch"] = res

    def s_alloc(self) -> None:
        res = {}
        for nproc, rounds in ((1, 3), (8, 1)):
            for rnd in range(rounds):
                for preload in ((False, True) if rnd % 2 == 0 else (True, False)):
                    go_at = time.time() + (10 if nproc > 1 else 0)
                    # one claim for all 8 processes (shared ledger), as in a container
                    e = self.env(preload, CUDA_DEVICE_MEMORY_LIMIT="64Gi")
                    procs = [self.spawn("alloc", {"pairs": 3000, "go_at": go_at if nproc > 1 else None,
                                                  "cpu": 2 + i}, e) for i in range(nproc)]
                    rs = [self.collect(p) for p in procs]
                    key = f"{nproc}p_{'preload' if preload else 'native'}"
                    d = res.setdefault(key, {"us": []})
                    d["us"] += [r.get("us_per_pair") for r in rs]
                    if any("error" in r for r in rs):
                        d["errors"] = [r.get("stderr", "")[-500:] for r in rs if "error" in r]
                    self.say(f"alloc {key}: {d}")
        for nproc in (1, 8):
            for k in ("native", "preload"):
                d = res[f"{nproc}p_{k}"]
                us = [u for u in d["us"] if u]
                d["median"] = statistics.median(us) if us else None
            n, p = res[f"{nproc}p_native"]["median"], res[f"{nproc}p_preload"]["median"]
            if n and p:
                res[f"{nproc}p_ratio"] = p / n
        self.results["sections"]["alloc"] = res

    def _time_procs(self, argv: list[str], env: dict, n: int) -> float:
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts) * 1e3

    def s_start(self) -> None:
        res = {}
        for preload in (False, True):
            e = self.env(preload, CUDA_DEVICE_MEMORY_LIMIT="4Gi")
            k = "preload" if preload else "native"
            res[f"true_{k}_ms"] = self._time_procs(["/bin/true"], e, 200)
            es = dict(e, LD_LIBRARY_PATH=str(self.build / "stub"))
            res[f"stubinit_{k}_ms"] = self._time_procs([str(self.client), "init"], es, 100)
        res["true_delta_ms"] = res["true_preload_ms"] - res["true_native_ms"]
        res["stubinit_delta_ms"] = res["stubinit_preload_ms"] - res["stubinit_native_ms"]
        # Real driver: dlopen + cuInit, alternating native / hookcore / an empty preloaded library,
        # because cuInit's own time drifts (seen: 100 ms and 185 ms modes, natively too).
        dummy = self.build / "dummy.so"
        subprocess.run(["cc", "-shared", "-fPIC", "-x", "c", "-", "-o", str(dummy)], input="int hk_dummy;\n",
                       text=True, check=False)
        envs = {"native": self.env(False), "preload": self.env(True, CUDA_DEVICE_MEMORY_LIMIT="4Gi"),
                "dummy": dict(self.env(False), LD_PRELOAD=str(dummy))}
        cu: dict = {k: [] for k in envs}
        for _ in range(6):
            for k, e in envs.items():
                r = subprocess.run([str(self.client), "cuinit"], env=e, capture_output=True, text=True)
                cu[k] += [float(ln.split()[2]) / 1e3 for ln in r.stdout.splitlines() if ln.startswith("CUINIT")]
        for k in envs:
            res[f"cuinit_{k}_ms"] = statistics.median(cu[k]) if cu[k] else None
            res[f"cuinit_{k}_all"] = cu[k]
        r = subprocess.run([str(self.client), "cuinit"], env=dict(envs["preload"], HOOKCORE_LOG="debug"),
                           capture_output=True, text=True)
        res["debug_lines"] = [ln for ln in (r.stdout + r.stderr).splitlines() if "init" in ln.lower()]
        if res["cuinit_native_ms"] and res["cuinit_preload_ms"]:
            res["cuinit_delta_ms"] = res["cuinit_preload_ms"] - res["cuinit_native_ms"]
        self.say(f"start: {res}")
        self.results["sections"]["start"] = res

    def hold_together(self, worker: str, args: dict, envs: list[dict], timeout: float = 180) -> dict:
        """Start one worker per env, wait until each holds its memory, read nvidia-smi's memory of
        their processes, let them finish; their results plus the per-process MiB and the sum."""
        procs = [subprocess.Popen([sys.executable, __file__, "--worker", worker, json.dumps(args)], env=e,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for e in envs]
        pids, errors = [], []
        deadline = time.time() + timeout

        def reap() -> None:   # a worker that never reaches HOLDING must not hang the run
            for p in procs:
                if p.poll() is None:
                    p.kill()

        timer = threading.Timer(timeout, reap)
        timer.start()
        for p in procs:
            assert p.stdout is not None
            while time.time() < deadline:
                line = p.stdout.readline()
                if not line:
                    errors.append(f"exit before holding: {p.poll()}")
                    break
                if line.startswith("HOLDING "):
                    pids.append(json.loads(line[8:])["pid"])
                    break
        smi = smi_process_mib() if pids else {}  # the processes that hold, also when others exited
        results = []
        for p in procs:
            assert p.stdin is not None
            try:
                p.stdin.write("\n")
                p.stdin.flush()
            except BrokenPipeError:
                pass
            results.append(self.collect(p, timeout=60, keep=1500))
        timer.cancel()
        per = [smi.get(pid) for pid in pids]
        return {"workers": results, "smi_mib": per, "smi_total_mib": sum(x for x in per if x) if per else None,
                "errors": errors}

    def s_context(self) -> None:
        res: dict = {}
        r = self.hold_together("ctxsize", {}, [self.env(False)])
        smi = (r["smi_mib"] or [None])[0]
        reserved = (r["workers"][0].get("reserved") or 0) // MiB
        ctx_mib = smi - reserved if smi else None
        res["native_context_mib"] = ctx_mib
        res["native_context_detail"] = {"smi_mib": smi, "torch_reserved_mib": reserved}
        self.say(f"context: native context {ctx_mib} MiB (nvidia-smi {smi} MiB, torch reserved {reserved} MiB)")
        if not ctx_mib:
            res["error"] = f"could not measure the context: {r}"
            self.results["sections"]["context"] = res
            return
        # what a node would configure for this GPU model: the measurement plus a margin of 16 MiB for
        # what a context may still load later, rounded up to the 2 MiB page
        charge = f"{-(-(ctx_mib + 16) // 2) * 2}Mi"
        res["charged"] = charge
        res["native-4GiB"] = self.hold_together("fill", {"chunk_mib": 256, "cap_mib": 4096}, [self.env(False)])
        for procs in (1, 4):
            for charged in (False, True):
                quota = {"CUDA_DEVICE_MEMORY_LIMIT": "4Gi"}
                if charged:
                    quota["HOOKCORE_CONTEXT_MEMORY_0"] = charge
                e = self.env(True, **quota)   # one ledger: the processes are one claim
                key = f"{procs}p-{'charged' if charged else 'uncharged'}"
                res[key] = self.hold_together("fill", {"chunk_mib": 256 if procs == 1 else 64}, [e] * procs)
                self.say(f"context {key}: smi {res[key]['smi_mib']} total {res[key]['smi_total_mib']} MiB; "
                         f"{[w.get('held_mib') for w in res[key]['workers']]} MiB held")
        self.results["sections"]["context"] = res

    # --- report -------------------------------------------------------------------------------
    def summary(self) -> str:
        s = self.results["sections"]
        env = self.results["env"]
        L = [f"GPU (name, driver, memory, max SM clock, power limit): {env.get('gpu')}; torch {env.get('torch')} "
             f"(CUDA {env.get('cuda_runtime')}); hookcore {env.get('hookcore')}; {env.get('date')}; "
             f"{self.results.get('total_s', '?')} s in all", ""]
        missing = []
        for k, v in list(s.items()):
            if isinstance(v, dict) and ("skipped" in v or "error" in v):
                missing.append(f"{k} ({v.get('skipped') or v.get('error')})")
                s = {kk: vv for kk, vv in s.items() if kk != k}   # rows come from measured sections only
        if missing:
            L += ["Not measured: " + ", ".join(missing), ""]
        L += ["| measurement | native | hookcore | target | met |", "|---|---|---|---|---|"]

        def row(name, nat, hk, target, ok):
            L.append(f"| {name} | {nat} | {hk} | {target} | {'yes' if ok else ('NO' if ok is not None else '?')} |")

        m = s.get("memory", {})
        for key in ("", "+expandable"):
            n, p = m.get("native" + key, {}), m.get("preload" + key, {})
            if p:
                mg = p.get("mem_get_info", [0, 0])
                row(f"torch 3 GiB then 2 GiB, quota 4 GiB{' (expandable)' if key else ''}",
                    n.get("second"), f"{p.get('second')}; mem_get_info total {mg[1] / GiB:.2f} GiB",
                    "clean OOM, total = quota", p.get("second") == "OutOfMemoryError" and abs(mg[1] - 4 * GiB) < MiB)
        if m.get("preload"):
            row("nvidia-smi under preload (total, used, free)", m.get("native", {}).get("nvidia_smi"),
                m["preload"].get("nvidia_smi"), "total = quota", "4096 MiB" in str(m["preload"].get("nvidia_smi")))
        c = s.get("compute", {})
        nat = c.get("native", {})

        def extra(r: dict) -> str:
            bits = []
            if r.get("duty_plain") is not None:
                bits.append(f"GPU-time duty {r['duty_plain']:.1f}%")
            if r.get("charged_duty_plain") is not None:
                bits.append(f"charged {r['charged_duty_plain']:.1f}%")
            if r.get("plain_kernel_ms") is not None:
                bits.append(f"{r['plain_kernel_ms'] * 1e3:.0f} us/matmul")
            if r.get("sm_mhz") is not None:
                bits.append(f"SM {r['sm_mhz']:.0f} MHz" + (f", {r['power_w']:.0f} W" if r.get("power_w") is not None else ""))
            return f" ({'; '.join(bits)})" if bits else ""

        if nat:
            row("matmul loop / CUDA-graph loop, native (it/s)", f"{nat.get('plain', 0):.0f} / {nat.get('graph', 0):.0f}"
                + extra(nat), "", "reference", None)
        for share in ("70", "50", "30", "10", "50-elapsed"):
            if share not in c:
                continue
            r = c[share]
            want = int(share.split("-")[0])
            label = f"{share}%" if share.isdigit() else f"{want}% (charge = elapsed, no contention estimate)"
            for loop in ("plain", "graph"):
                v = r.get(f"share_{loop}")
                row(f"compute share {label}, {'matmul loop' if loop == 'plain' else 'CUDA graph'} (throughput vs native)",
                    "", (f"{v:.1f}%" + (extra(r) if loop == "plain" else "")) if v is not None else r.get("error"),
                    f"{want} ± 5", v is not None and abs(v - want) <= 5)
        r = c.get("100", {})
        if r.get("share_plain") is not None:
            row("matmul loop, preload without SM limit", "100%", f"{r['share_plain']:.1f}% / graph {r['share_graph']:.1f}%",
                ">= 98%", r["share_plain"] >= 98 and r["share_graph"] >= 98)
        st_ = s.get("strict", {})
        for name in ("strict-70", "strict-50", "strict-30", "strict-50-default-ref"):
            r = st_.get(name)
            if not r:
                continue
            want = int(name.split("-")[1])
            v, d = r.get("share_plain"), r.get("default_share_plain")
            ref = st_.get("ref_mhz")
            label = (f"strict cap {want}%, matmul loop (full-load clock {ref:.0f} MHz)" if name.count("-") == 1 and ref
                     else f"strict cap {want}%, matmul loop (library's default reference)")
            row(label + "; default share beside it", f"default {d:.1f}%" if d is not None else "",
                (f"{v:.1f}%" + extra(r)) if v is not None else r.get("error"), f"{want} ± 5 (throughput)",
                v is not None and abs(v - want) <= 5)
        for sec, what, tol in (("copy", "copy-bound loop (1 GiB D2D copy_, memcpy)", 3),
                               ("infer", "launch-bound inference loop (16 x Linear 512, batch 1)", None)):
            cs = s.get(sec, {})
            nat = cs.get("native", {})
            if nat.get("rate"):
                unit = "GiB/s" if sec == "copy" else "forwards/s"
                row(f"{what}, native ({unit})", f"{nat['rate']:.1f}", "", "reference", None)
            for sh in ("99", "50", "30"):
                r = cs.get(sh)
                if not r:
                    continue
                v, duty = r.get("share"), r.get("charged_duty")
                hk = (f"{v:.1f}% of native" if v is not None else str(r.get("error")))
                if duty is not None:
                    hk += f" (device time charged {duty:.1f}%)"
                if sh == "99":
                    row(f"{what}, metered at 99% (meter cost; native device duty)", "", hk, "reference", None)
                elif sec == "copy":
                    row(f"{what} at {sh}%", "", hk, f"{sh} ± {tol}", v is not None and abs(v - int(sh)) <= tol)
                else:
                    ok = duty is not None and duty <= int(sh) + 3
                    row(f"{what} at {sh}% (device time held; throughput follows)", "", hk,
                        f"charged <= {sh} + 3", ok if duty is not None else None)
        t = s.get("tenants", {})
        for name in ("native", "50+50", "30+70", "50+50-elapsed"):
            v = t.get(name, {}).get("shares")
            if v:
                want = {"native": None, "50+50": (50, 50), "30+70": (30, 70), "50+50-elapsed": (50, 50)}[name]
                ok = None if want is None else all(x is not None and abs(x - w) <= 5 for x, w in zip(v, want, strict=True))
                row(f"two tenants {name} (share of solo native)", "", ", ".join(f"{x:.1f}%" if x else "?" for x in v),
                    "each ± 5" if want else "reference", ok)
        la = s.get("launch", {})
        if la.get("overhead_pct") is not None:
            row(f"launch-bound loop (launches/s, median of {la.get('runs', 6)}, alternating)", f"{la['native_median']:.0f}",
                f"{la['preload_median']:.0f} ({la['overhead_pct']:.2f}% slower)", "<= 2%",
                la["overhead_pct"] <= 2)
        al = s.get("alloc", {})
        for nproc, lim in ((1, 1.3), (8, 1.5)):
            ratio = al.get(f"{nproc}p_ratio")
            if ratio:
                row(f"1 MiB cudaMalloc+cudaFree, {nproc} process(es) (us/pair, median{' of 3 alternating runs' if nproc == 1 else ''})",
                    f"{al[f'{nproc}p_native']['median']:.1f}", f"{al[f'{nproc}p_preload']['median']:.1f} ({ratio:.2f}x)",
                    f"<= {lim}x", ratio <= lim)
        cx = s.get("context", {})
        if cx.get("native_context_mib"):
            nat = cx.get("native-4GiB", {})
            row(f"context size, measured natively (nvidia-smi minus torch reserved; charged {cx.get('charged')})",
                f"{cx['native_context_mib']} MiB", "", "reference", None)
            row("a native process holding 4 GiB of tensors: nvidia-smi (MiB)", f"{nat.get('smi_total_mib')}", "",
                "reference", None)
            for procs in (1, 4):
                for charged in ("charged", "uncharged"):
                    r = cx.get(f"{procs}p-{charged}")
                    if not r:
                        continue
                    ws = r.get("workers", [])
                    totals = sorted({round(w.get("start_total", 0) / GiB, 2) for w in ws if w.get("start_total")})
                    frees = [round(w.get("start_free", 0) / GiB, 2) for w in ws if w.get("start_free") is not None]
                    smi_total = r.get("smi_total_mib")
                    # met: every process of the claim reached its hold (none lost before the reading; one
                    # whose context the hook refused is not on the GPU, holding nothing) and together
                    # they hold at most the quota in nvidia-smi
                    ok = (len(r.get("smi_mib") or []) == procs and not r.get("errors") and smi_total is not None
                          and smi_total <= 4096 and totals == [4.0]) if charged == "charged" else None
                    row(f"4 GiB claim, {procs} process(es), context {charged}: nvidia-smi of the claim (MiB); "
                        f"mem_get_info total / free at start (GiB)", "",
                        f"{smi_total} {r.get('smi_mib')}; total {totals}, free {frees}; held "
                        f"{[w.get('held_mib') for w in ws]} MiB", "<= 4096 MiB, total 4.00" if charged == "charged"
                        else "(the gap)", ok)
        st = s.get("start", {})
        if st:
            row("process start: /bin/true (ms, median of 200)", f"{st['true_native_ms']:.2f}",
                f"{st['true_preload_ms']:.2f} (+{st['true_delta_ms']:.2f})", "+<= 5 ms", st["true_delta_ms"] <= 5)
            row("process start + cuInit, stub driver (ms)", f"{st['stubinit_native_ms']:.2f}",
                f"{st['stubinit_preload_ms']:.2f} (+{st['stubinit_delta_ms']:.2f})", "+<= 5 ms",
                st["stubinit_delta_ms"] <= 5)
            if st.get("cuinit_dummy_ms") is not None:
                row("dlopen + cuInit, real driver, an empty library preloaded (ms, median of 6)",
                    f"{st['cuinit_native_ms']:.1f}", f"{st['cuinit_dummy_ms']:.1f}", "reference", None)
            if st.get("cuinit_delta_ms") is not None:
                row("dlopen + cuInit, real driver (ms, median of 6, alternating)", f"{st['cuinit_native_ms']:.1f}",
                    f"{st['cuinit_preload_ms']:.1f} ({st['cuinit_delta_ms']:+.1f})", "+<= 5 ms",
                    st["cuinit_delta_ms"] <= 5)
        return "\n".join(L)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker")
    ap.add_argument("args", nargs="?")
    ap.add_argument("--out", default=str(ROOT / "bench/out"))
    ap.add_argument("--build", default="/tmp/hookcore-build")
    ap.add_argument("--sections", default="probe,memory,compute,strict,copy,infer,tenants,launch,alloc,start")
    ap.add_argument("--budget", type=float, default=510.0,
                    help="seconds after which the remaining sections are skipped (default 510)")
    a = ap.parse_args()
    if a.worker:
        WORKERS[a.worker](json.loads(a.args or "{}"))
        return
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    b = Bench(out, Path(a.build))
    start = time.time()
    b.s_build()
    for sec in a.sections.split(","):
        if time.time() - start > a.budget:
            b.results["sections"][sec] = {"skipped": f"time budget of {a.budget:.0f} s spent"}
            b.say(f"section {sec} skipped: time budget spent")
            continue
        t0 = time.time()
        try:
            getattr(b, "s_" + sec)()
        except Exception as e:  # keep going: one broken section must not cost the run
            b.results["sections"][sec] = {"error": repr(e)}
            b.say(f"section {sec} failed: {e!r}")
        b.say(f"section {sec} took {time.time() - t0:.0f} s")
        (out / "results.json").write_text(json.dumps(b.results, indent=1))
    b.results["total_s"] = round(time.time() - start, 1)
    (out / "results.json").write_text(json.dumps(b.results, indent=1))
    text = b.summary()
    (out / "summary.md").write_text(text + "\n")
    print("\n" + text)


if __name__ == "__main__":
    main()
