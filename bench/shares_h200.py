#!/usr/bin/env python3
"""Compute shares on a real GPU: issue 26's table, in one sitting.

What a claim's compute share gives each workload, as a share of one native (unhooked) process's
throughput of the same workload:

- default share and strict cap at 10/30/50/70% on an otherwise idle GPU, for a 4096^3 bf16 torch
  matmul loop, the same 20 matmuls as a CUDA graph, a 1 GiB device-to-device copy (memcpy), an
  elementwise add over 1 GiB tensors (a bandwidth-bound kernel), a launch-bound loop (16 x
  Linear(512)+ReLU at batch 1) and a JAX jit matmul when JAX is importable;
- two claims at once (30 + 70 and 50 + 50 beside the native pair), the two processes of one 50% claim
  (default and strict), and a high- and a normal-priority claim (each alone and both at once).

Run on the GPU machine from a checkout (python3 with torch, make and a C compiler; no network):

    python3 bench/shares_h200.py --out "$OUT"                       # this checkout's hookcore
    python3 bench/shares_h200.py --out "$OUT" --tree OTHER --label before   # another tree's hookcore

`--tree` is the checkout whose hookcore/ is built (make -C TREE/hookcore libs) and measured; the
script itself may come from a newer checkout. A tree whose library lacks a feature (priority) gets
those rows skipped (`--skip priority`). Each measurement runs in fresh processes that import torch
and make their context before the previous measurement ends (one ahead), then warm up for
--warm seconds and count the iterations they complete in one wall-clock window of --secs seconds,
the same for every process of a run, so pairs overlap exactly (a process held back counts less).
The driver samples NVML's SM clock and power every 10 ms for every run (median, spread and the
trace). Results: OUT/shares-<label>.json (every number) and OUT/shares-<label>.md (the table).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GiB = 1 << 30
CAPS = (10, 30, 50, 70)
WORKLOADS = ("matmul", "graph", "memcpy", "elementwise", "launch", "jax")
LABELS = {"matmul": "torch matmul", "graph": "CUDA graph (20 matmuls)", "memcpy": "memcpy 1 GiB D2D",
          "elementwise": "elementwise add, 1 GiB", "launch": "launch-bound (16 x Linear 512, batch 1)",
          "jax": "JAX jit matmul"}

# ----------------------------------------------------------------------------------------------
# Workers: one workload per process, run by `--worker NAME ARGS_JSON`.
# ----------------------------------------------------------------------------------------------


def _torch_workload(name: str) -> tuple[Callable[[], None], Callable[[], None], int]:
    """(prepare, step, units per step): prepare runs after GO (it launches work), step syncs."""
    import torch

    dev = torch.device("cuda")
    if name in ("matmul", "graph"):
        a = torch.empty(4096, 4096, device=dev, dtype=torch.bfloat16)
        b = torch.empty_like(a)
        c = torch.empty_like(a)
        graph: list[Any] = []

        def prep() -> None:
            torch.manual_seed(0)
            a.normal_()
            b.normal_()
            if name == "graph":
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
                graph.append(g)
            torch.cuda.synchronize()

        def mm() -> None:
            for _ in range(20):
                torch.mm(a, b, out=c)
            torch.cuda.synchronize()

        def replay() -> None:
            graph[0].replay()
            torch.cuda.synchronize()

        return prep, (replay if name == "graph" else mm), 20
    if name == "memcpy":
        src = torch.empty(GiB, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)

        def copy() -> None:
            for _ in range(10):
                dst.copy_(src)
            torch.cuda.synchronize()

        return (lambda: src.fill_(1)), copy, 10
    if name == "elementwise":
        x = torch.empty(GiB // 4, dtype=torch.float32, device=dev)
        y = torch.empty_like(x)
        z = torch.empty_like(x)

        def prep_ew() -> None:
            x.fill_(1.0)
            y.fill_(2.0)

        def add() -> None:
            for _ in range(10):
                torch.add(x, y, out=z)
            torch.cuda.synchronize()

        return prep_ew, add, 10
    if name == "launch":
        layers: list[Any] = []
        for _ in range(16):
            layers += [torch.nn.Linear(512, 512), torch.nn.ReLU()]
        model = torch.nn.Sequential(*layers).to(dev, torch.float16).eval()
        inp = torch.empty(1, 512, device=dev, dtype=torch.float16)

        def fwd() -> None:
            with torch.no_grad():
                for _ in range(20):
                    model(inp)
            torch.cuda.synchronize()

        return (lambda: inp.normal_()), fwd, 20
    raise SystemExit(f"unknown workload {name}")


def _jax_workload() -> tuple[Callable[[], None], Callable[[], None], int]:
    import jax
    import jax.numpy as jnp

    # The backend (CUDA context, cuBLAS and friends loaded) before READY, as torch makes its context:
    # the first JAX process of a machine spent seconds of its counted window there (its native ran
    # at 747/s on the H100 of 2026-12-06 07:06, against 4680 in the sitting before).
    jnp.zeros(1).block_until_ready()
    f = jax.jit(lambda a, b: a @ b)
    ab: list[Any] = []

    def prep() -> None:
        k = jax.random.PRNGKey(0)
        a = jax.random.normal(k, (4096, 4096), dtype=jnp.bfloat16)
        ab[:] = [a, a]
        f(*ab).block_until_ready()

    def step() -> None:
        c = None
        for _ in range(20):
            c = f(*ab)
        assert c is not None
        c.block_until_ready()

    return prep, step, 20


def ledger_books(tool: str | None, path: str | None) -> dict[str, int] | None:
    """Device 0's limiter books from the claim's ledger (build/hk-ledger, the core's own reader)."""
    if not tool or not path or not os.path.exists(path):
        return None
    r = subprocess.run([tool, "limiter", path, "0"], capture_output=True, text=True)
    f = r.stdout.split()
    if r.returncode != 0 or len(f) < 7 or f[0] != "LIMITER" or f[1] != "1":
        return None
    names = ["share", "charged_ns", "throttled_ns", "tokens_ns", "granted_ns", "device_ns", "sm_ppm",
             "factor_milli", "elastic_milli", "elastic_fit", "yielded_ns", "elapsed_ns", "throttles"]
    return {n: int(v) for n, v in zip(names, f[2:], strict=False)}


def worker(name: str, args: dict[str, Any]) -> None:
    """Make the context and buffers, say READY, wait for "GO <start> <warm> <secs>" on stdin, then
    prepare and warm up from <start>, count iterations for <secs>, and print RESULT <json>."""
    if os.environ.get("HK_BENCH_FAKE_GPU"):  # the CPU test of the orchestration: no torch, no GPU
        prep, step, per = (lambda: None), (lambda: time.sleep(0.002)), 1
    elif name == "jax":
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        prep, step, per = _jax_workload()
    else:
        import torch

        torch.cuda.init()
        torch.zeros(1, device="cuda")  # the context (a 1-element fill, before READY: next to nothing)
        prep, step, per = _torch_workload(name)
    print("READY", flush=True)
    words = sys.stdin.readline().split()
    if not words or words[0] != "GO":
        return
    start, warm, secs = float(words[1]), float(words[2]), float(words[3])
    while time.time() < start:
        time.sleep(min(0.005, max(0.0, start - time.time())))
    prep()
    # One counting window in wall time for every process of the run, [start + warm, + secs]: a process
    # held back (a normal claim yielding to a high one) counts what it completed inside it, not a
    # window of its own that opens when it is let go.
    w0 = start + warm
    w1 = w0 + secs
    while time.time() < w0:
        step()
    tool, ledger = os.environ.get("HK_BENCH_TOOL"), os.environ.get("HOOKCORE_LEDGER")
    b0 = ledger_books(tool, ledger)
    n = 0
    while True:
        step()
        if time.time() > w1:
            break  # a step that ends past the window is not counted (nor for the native runs)
        n += per
    b1 = ledger_books(tool, ledger)
    out: dict[str, Any] = {"rate": n / secs, "window": [w0, w1], "pid": os.getpid()}
    if b0 and b1:
        out["books"] = {k: b1[k] - b0[k] for k in ("charged_ns", "throttled_ns", "granted_ns", "device_ns",
                                                     "yielded_ns", "elapsed_ns", "throttles") if k in b0 and k in b1}
        out["books"]["secs"] = w1 - w0
        out["books_end"] = b1
    print("RESULT " + json.dumps(out), flush=True)


def clock_probe(args: dict[str, Any]) -> None:
    """How each workload's time follows the SM clock, without the hook: steps run at a duty cycle
    (sleeping between them) after the GPU idled; per step the GPU time (CUDA events), the SM clock
    NVML reports right before and after it, and the power. RESULT {"steps": [...]}."""
    import torch

    nv = Nvml()
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    steps: list[list[Any]] = []
    for name in args["workloads"]:
        prep, step, _ = _torch_workload(name)
        prep()
        step()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for duty in args["duties"]:
            time.sleep(args.get("idle", 1.0))  # the GPU idles: its clock settles where idle puts it
            t_end = time.perf_counter() + args.get("secs", 1.0)
            while time.perf_counter() < t_end:
                f0, _ = nv.sample()
                t0 = time.perf_counter()
                e0.record()
                step()  # syncs
                e1.record()
                e1.synchronize()
                busy = time.perf_counter() - t0
                f1, mw = nv.sample()
                steps.append([name, duty, round(e0.elapsed_time(e1), 4), f0, f1, round(mw / 1000, 1),
                              round(time.perf_counter(), 4)])
                if duty < 1:
                    time.sleep(busy * (1 - duty) / duty)
    print("RESULT " + json.dumps({"steps": steps}), flush=True)


# ----------------------------------------------------------------------------------------------
# The GPU's clock, from NVML (ctypes: no pynvml needed)
# ----------------------------------------------------------------------------------------------


class Nvml:
    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        if self.lib.nvmlInit_v2() != 0:
            raise OSError("nvmlInit_v2 failed")
        self.h = ctypes.c_void_p()
        if self.lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(self.h)) != 0:
            raise OSError("no GPU 0")

    def uuid(self) -> str:
        buf = ctypes.create_string_buffer(96)
        self.lib.nvmlDeviceGetUUID(self.h, buf, 96)
        return buf.value.decode()

    def sample(self) -> tuple[int, int]:
        mhz, mw = ctypes.c_uint(), ctypes.c_uint()
        self.lib.nvmlDeviceGetClockInfo(self.h, 1, ctypes.byref(mhz))  # NVML_CLOCK_SM
        self.lib.nvmlDeviceGetPowerUsage(self.h, ctypes.byref(mw))
        return mhz.value, mw.value


class ClockLog:
    """(time, SM MHz, W) every 10 ms in a thread, for the whole sitting."""

    def __init__(self, nvml: Nvml | None) -> None:
        self.nvml = nvml
        self.samples: list[tuple[float, int, float]] = []
        self._stop = threading.Event()
        self._th = threading.Thread(target=self._run, daemon=True)
        if nvml:
            self._th.start()

    def _run(self) -> None:
        assert self.nvml
        while not self._stop.wait(0.01):
            mhz, mw = self.nvml.sample()
            self.samples.append((time.time(), mhz, mw / 1000.0))

    def stop(self) -> None:
        self._stop.set()

    def window(self, a: float, b: float) -> dict[str, Any]:
        sel = [(m, w) for t, m, w in self.samples if a <= t <= b]
        if not sel:
            return {}
        mhz = sorted(m for m, _ in sel)
        return {"sm_mhz": statistics.median(mhz), "sm_mhz_p10": mhz[len(mhz) // 10], "sm_mhz_p90": mhz[9 * len(mhz) // 10],
                "sm_mhz_min": mhz[0], "sm_mhz_max": mhz[-1], "power_w": statistics.median(w for _, w in sel),
                "n": len(sel)}

    def trace(self, a: float, b: float, step: int = 2) -> list[list[float]]:
        """(seconds after a, MHz, W) every `step`-th sample in [a, b]."""
        sel = [(t, m, w) for t, m, w in self.samples if a <= t <= b]
        return [[round(t - a, 3), m, round(w, 1)] for t, m, w in sel[::step]]


# ----------------------------------------------------------------------------------------------
# The plan: which processes run together, with what claim
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Proc:
    workload: str
    claim: str | None  # None: native (no preload); processes naming one claim share its ledger
    cores: int = 100
    strict: bool = False
    priority: str | None = None  # "high" | "normal" (None: not configured)


@dataclass(frozen=True)
class Job:
    key: str
    procs: tuple[Proc, ...]
    trace: bool = False  # keep the clock trace of this run


@dataclass
class Plan:
    jobs: list[Job] = field(default_factory=list)


def plan(workloads: Sequence[str], caps: Sequence[int], skip: Sequence[str]) -> Plan:
    p = Plan()
    for w in workloads:
        p.jobs.append(Job(f"native/{w}", (Proc(w, None),), trace=True))
    for w in workloads:
        for mode in ("default", "strict"):
            if mode in skip:
                continue
            for cap in caps:
                p.jobs.append(Job(f"{mode}/{w}/{cap}", (Proc(w, f"{mode}-{w}-{cap}", cap, mode == "strict"),),
                                  trace=cap in (30, 70)))
                if w in HOST_BOUND:  # its own native right after it: a host-bound loop's rate drifts with its CPU
                    p.jobs.append(Job(f"native-after/{w}/{mode}/{cap}", (Proc(w, None),)))
        # The native again after the workload's capped runs: its shares are of the mean of the two,
        # and the table shows both (a host-bound loop's native moved 1120..2440 steps/s between sittings).
        p.jobs.append(Job(f"native-again/{w}", (Proc(w, None),)))
    if "pairs" not in skip:
        p.jobs.append(Job("pair/native", (Proc("matmul", None), Proc("matmul", None)), trace=True))
        p.jobs.append(Job("pair/30+70", (Proc("matmul", "p30", 30), Proc("matmul", "p70", 70)), trace=True))
        p.jobs.append(Job("pair/50+50", (Proc("matmul", "pa50", 50), Proc("matmul", "pb50", 50)), trace=True))
        p.jobs.append(Job("pair/strict-50+50", (Proc("matmul", "sa50", 50, True), Proc("matmul", "sb50", 50, True))))
        p.jobs.append(Job("claim2/default-50", (Proc("matmul", "c50", 50), Proc("matmul", "c50", 50)), trace=True))
        p.jobs.append(Job("claim2/strict-50", (Proc("matmul", "cs50", 50, True), Proc("matmul", "cs50", 50, True)),
                          trace=True))
    if "priority" not in skip:
        hi, lo = Proc("matmul", "hi", 100, priority="high"), Proc("matmul", "lo", 50, priority="normal")
        p.jobs.append(Job("priority/high-alone", (hi,)))
        p.jobs.append(Job("priority/normal-alone", (lo,)))
        p.jobs.append(Job("priority/both", (hi, lo), trace=True))
    return p


# ----------------------------------------------------------------------------------------------
# Running it
# ----------------------------------------------------------------------------------------------


class Running:
    """A worker process started ahead of its turn; stdout read by a thread (READY, RESULT)."""

    def __init__(self, proc: Proc, env: dict[str, str], script: Path) -> None:
        self.spec = proc
        self.p = subprocess.Popen([sys.executable, str(script), "--worker", proc.workload, "{}"], env=env,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.ready = threading.Event()
        self.result: dict[str, Any] | None = None
        self.err: list[str] = []
        threading.Thread(target=self._out, daemon=True).start()
        threading.Thread(target=self._err, daemon=True).start()

    def _out(self) -> None:
        assert self.p.stdout
        for line in self.p.stdout:
            if line.startswith("READY"):
                self.ready.set()
            elif line.startswith("RESULT "):
                self.result = json.loads(line[7:])
        self.ready.set()

    def _err(self) -> None:
        assert self.p.stderr
        for line in self.p.stderr:
            self.err.append(line)
            del self.err[:-40]

    def go(self, start: float, warm: float, secs: float) -> None:
        assert self.p.stdin
        try:
            self.p.stdin.write(f"GO {start} {warm} {secs}\n")
            self.p.stdin.flush()
        except BrokenPipeError:
            pass

    def finish(self, timeout: float) -> dict[str, Any]:
        try:
            self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            return {"error": "timeout", "stderr": "".join(self.err)[-1500:]}
        if self.result is None:
            return {"error": f"exit {self.p.returncode}", "stderr": "".join(self.err)[-1500:]}
        if self.err and os.environ.get("HK_BENCH_KEEP_STDERR"):
            self.result["stderr"] = "".join(self.err)[-1500:]
        return self.result


HOST_BOUND = frozenset({"launch"})


def starts_next_beside(job: Job) -> bool:
    """Whether the next job's processes may start (import torch or JAX, make a context) while `job`
    runs. Not beside a host-bound workload: its rate is its CPU's, and on the H200 of 2026-12-06 the
    native launch-bound loop ran 1120 steps/s while a JAX process started beside it and 2147/s
    without (bench/results/h200-2026-12-06-shares)."""
    return not any(p.workload in HOST_BOUND for p in job.procs)


class Bench:
    def __init__(self, out: Path, tree: Path, build: Path, label: str, warm: float, secs: float) -> None:
        self.out, self.tree, self.build, self.label = out, tree, build, label
        self.warm, self.secs = warm, secs
        self.lib = build / "libvgpu.so"
        self.tool = build / "hk-ledger"
        self.tmp = Path(tempfile.mkdtemp(prefix="hkshares-"))
        self.results: dict[str, Any] = {"env": {}, "runs": {}}
        self.ref_mhz: int | None = None
        self.elasticity: float | None = None  # strict's prior (HOOKCORE_COMPUTE_ELASTICITY_0)
        self.calibrate = True  # derive it from the native and default matmul runs (--elasticity auto)
        self.model_defaults = False  # take both from the driver's table for this GPU model (--elasticity model)
        self.uuid = ""
        self.nvml: Nvml | None = None
        self.clock: ClockLog | None = None

    def say(self, msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def build_lib(self) -> None:
        self.build.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["make", "-C", str(self.tree / "hookcore"), f"-j{min(os.cpu_count() or 1, 16)}",
                            f"BUILD={self.build}", "libs"], capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit("build failed:\n" + r.stdout[-3000:] + r.stderr[-3000:])

    def env(self, proc: Proc) -> dict[str, str]:
        e = {k: v for k, v in os.environ.items() if not k.startswith(("HOOKCORE_", "CUDA_DEVICE_"))}
        e.pop("LD_PRELOAD", None)
        e["PYTHONUNBUFFERED"] = "1"
        if proc.claim is None:
            return e
        e["LD_PRELOAD"] = str(self.lib)
        e["HK_BENCH_TOOL"] = str(self.tool)
        e["HOOKCORE_LEDGER"] = str(self.tmp / f"{self.label}-{proc.claim}.ledger")
        e["HOOKCORE_DEVICE_UUID_0"] = self.uuid or "GPU-00000000-0000-0000-0000-000000000000"
        e["HOOKCORE_MEMORY_LIMIT_0"] = "64Gi"
        if proc.cores < 100:
            e["HOOKCORE_COMPUTE_LIMIT_0"] = str(proc.cores)
        if proc.strict:
            e["HOOKCORE_COMPUTE_MODE_0"] = "strict"
            if self.ref_mhz:
                e["HOOKCORE_COMPUTE_REF_MHZ_0"] = str(self.ref_mhz)
            if self.elasticity is not None:
                e["HOOKCORE_COMPUTE_ELASTICITY_0"] = f"{self.elasticity:.3f}".rstrip("0").rstrip(".") or "0"
        if proc.priority:  # the GPU's board, made as the daemon makes it (a normal claim only reads it)
            boards = self.tmp / f"{self.label}-boards"
            boards.mkdir(exist_ok=True)
            board = boards / e["HOOKCORE_DEVICE_UUID_0"]
            if not board.exists():
                board.write_bytes(bytes(4096))
            e["HOOKCORE_PRIORITY_0"] = proc.priority
            e["HOOKCORE_PRIORITY_BOARD"] = str(boards)
        return e

    def spawn(self, job: Job) -> list[Running]:
        return [Running(p, self.env(p), Path(__file__).resolve()) for p in job.procs]

    def run_jobs(self, jobs: list[Job], budget_end: float) -> None:
        ahead: list[Running] | None = None
        for i, job in enumerate(jobs):
            if time.time() > budget_end:
                self.results["runs"][job.key] = {"skipped": "time budget spent"}
                continue
            running = ahead if ahead is not None else self.spawn(job)
            ahead = None
            for r in running:
                r.ready.wait(timeout=120)
            if i + 1 < len(jobs) and time.time() < budget_end and starts_next_beside(job):
                ahead = self.spawn(jobs[i + 1])   # imports torch and makes its context meanwhile
            start = time.time() + 0.2
            for r in running:
                r.go(start, self.warm, self.secs)
            got = [r.finish(timeout=self.warm + self.secs + 90) for r in running]
            end = time.time()
            rec: dict[str, Any] = {"procs": [p.__dict__ for p in job.procs], "results": got}
            windows = [g["window"] for g in got if "window" in g]
            if self.clock and windows:
                a, b = max(w[0] for w in windows), min(w[1] for w in windows)
                rec["clock"] = self.clock.window(a, b)
                if job.trace:
                    rec["trace"] = self.clock.trace(start, end)
            self.results["runs"][job.key] = rec
            self.say(f"{job.key}: " + ", ".join(f"{g.get('rate', 0):.1f}/s" if "rate" in g else str(g.get("error"))
                                                 for g in got) + f" {rec.get('clock', {}).get('sm_mhz', '?')} MHz")
            if job.key == "native/matmul":
                mhz = rec.get("clock", {}).get("sm_mhz")
                self.results["env"]["native_matmul_mhz"] = int(mhz) if mhz else None
                if not self.ref_mhz:
                    self.ref_mhz = int(mhz) if mhz else None
                    self.results["env"]["ref_mhz"] = self.ref_mhz
            if job.key.startswith("default/matmul/") and self.calibrate and self.elasticity is None:
                self.elasticity = calibrated_elasticity(self.results["runs"], self.ref_mhz)
                if self.elasticity is not None:
                    self.results["env"]["elasticity"] = {"value": self.elasticity, "from": job.key}
                    self.say(f"strict's clock elasticity prior: {self.elasticity:.3f} (from {job.key})")
        if ahead:
            for r in ahead:
                r.p.kill()

    def use_model_defaults(self, smi: str) -> None:
        """Strict's full-load clock and elasticity as the driver ships them for this GPU model at its
        power limit (drivers/hami_core_gpu/strict_defaults.py), so strict runs measure what a claim
        with no settings gets; a model or power limit not in the table falls back to calibration."""
        sys.path.insert(0, str(ROOT))
        from drivers.hami_core_gpu.strict_defaults import MEASURED

        name, _, rest = smi.partition(",")
        power = rest.rsplit(",", 1)[-1].strip().split(" ")[0] if rest else ""
        m = MEASURED.get(name.strip())
        try:
            watts = round(float(power))
        except ValueError:
            watts = None
        if m is None or watts != m.power_limit_w:
            self.say(f"no model defaults for {name.strip()!r} at {power} W: calibrating instead")
            return
        self.ref_mhz, self.elasticity, self.calibrate = m.full_load_mhz, m.clock_elasticity, False
        self.results["env"]["ref_mhz"] = m.full_load_mhz
        self.results["env"]["elasticity"] = {"value": m.clock_elasticity, "from": f"model table ({m.source})"}
        self.say(f"strict from the model table: {m.full_load_mhz} MHz, elasticity {m.clock_elasticity}")

    def main(self, workloads: Sequence[str], caps: Sequence[int], skip: Sequence[str], budget: float) -> None:
        t0 = time.time()
        self.build_lib()
        try:
            self.nvml = Nvml()
            self.uuid = self.nvml.uuid()
        except OSError as e:
            self.say(f"no NVML: {e}")
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm,"
                                  "power.limit", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
        except OSError as exc:
            smi = f"unknown ({exc.strerror})"
        rev = subprocess.run(["git", "-C", str(self.tree), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
        self.results["env"].update({"gpu": smi, "label": self.label, "hookcore": os.environ.get("HK_BENCH_REV") or rev,
                                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                    "warm_s": self.warm, "secs": self.secs})
        if self.model_defaults:
            self.use_model_defaults(smi)
        self.clock = ClockLog(self.nvml)
        time.sleep(1.0)
        if self.clock.samples:
            self.results["env"]["idle_clock"] = self.clock.window(t0, time.time())
        self.run_jobs(plan(workloads, caps, skip).jobs, t0 + budget)
        self.clock.stop()
        self.results["total_s"] = round(time.time() - t0, 1)
        derive(self.results)
        (self.out / f"shares-{self.label}.json").write_text(json.dumps(self.results, indent=1))
        text = table(self.results)
        (self.out / f"shares-{self.label}.md").write_text(text + "\n")
        print("\n" + text)


# ----------------------------------------------------------------------------------------------
# The table
# ----------------------------------------------------------------------------------------------


def _rate(run: dict[str, Any] | None, i: int = 0) -> float | None:
    if not run or "results" not in run or len(run["results"]) <= i:
        return None
    r = run["results"][i].get("rate")
    return float(r) if r is not None else None


def calibrated_elasticity(runs: dict[str, Any], ref_mhz: int | None) -> float | None:
    """The clock elasticity of the GPU's power-bound matmul, as an admin measures it once per GPU
    model for strict's prior (`clockElasticity`): a default share charges device time, so a capped
    matmul on the idle, boosted GPU does s = pct/cap times the native (full-load) work per
    device-second. The hook's model (hookcore/core/elastic.h: t(f) = A + B/f) says a batch at clock f
    takes t_full x (1 - phi + phi x), x = f_full / f, so s = 1 / (1 - phi + phi x) and
    phi = (1 - 1/s) / (1 - x): the value that makes hk_elastic_factor_milli charge exactly the boost.
    (Until 2026-12-06 this took s = 1 - phi + phi / x, another model, which reads the same speedup as
    a lower phi: 0.374 and 0.45 for what the hook's model calls 0.46 and 0.54.) From the first default
    matmul run at a cap of 50 or less whose clock held steady (within 3%: the boost); None if there is
    none or the clock did not boost."""
    native = _rate(runs.get("native/matmul"))
    if not native or not ref_mhz:
        return None
    for cap in (30, 10, 50):
        run = runs.get(f"default/matmul/{cap}")
        rate, clock = _rate(run), (run or {}).get("clock", {})
        f, lo, hi = clock.get("sm_mhz"), clock.get("sm_mhz_p10"), clock.get("sm_mhz_p90")
        if not rate or not f or lo is None or hi is None or hi - lo > 0.03 * f or f <= ref_mhz * 1.05:
            continue
        speedup, x = rate / native * 100 / cap, ref_mhz / f
        return round(min(1.0, max(0.0, (1 - 1 / speedup) / (1 - x))), 3)
    return None


def native_rate(runs: dict[str, Any], workload: str) -> float | None:
    """One native process's rate of `workload`: the mean of its run before the capped runs and the
    one after them where both were measured, else the one that was."""
    got = [r for k in (f"native/{workload}", f"native-again/{workload}") if (r := _rate(runs.get(k)))]
    return sum(got) / len(got) if got else None


def adjacent_native(runs: dict[str, Any], key: str, workload: str) -> float | None:
    """A host-bound capped run's native: the mean of the same workload's native runs just before and
    just after it (the runs are in the order they ran). On the H100 of 2026-12-06 the launch-bound
    loop's native moved 1573 -> 2320 steps/s within one sitting: against the mean of the first and
    last, every capped run in between was off by the drift."""
    order = list(runs)
    i = order.index(key)
    natives = [k for k in order if k.startswith("native") and runs[k].get("procs", [{}])[0].get("workload") == workload
               and not k.startswith("native-pair")]
    before = [k for k in natives if order.index(k) < i][-1:]
    after = [k for k in natives if order.index(k) > i][:1]
    got = [r for k in before + after if (r := _rate(runs.get(k)))]
    return sum(got) / len(got) if got else None


def derive(results: dict[str, Any]) -> None:
    """Each run's processes as a percentage of the same workload's native process (for a host-bound
    workload's capped runs, of the natives beside it: adjacent_native)."""
    runs = results["runs"]
    for key, run in runs.items():
        if "results" not in run:
            continue
        w = run["procs"][0]["workload"]
        native = native_rate(runs, w)
        if w in HOST_BOUND and not key.startswith("native") and len(run["procs"]) == 1:
            native = adjacent_native(runs, key, w) or native
            run["native_rate"] = native
        if key.startswith("priority/"):
            alone = _rate(runs.get("priority/high-alone"))
            run["pct_of_high_alone"] = [100 * r / alone if (r := _rate(run, i)) and alone else None
                                        for i in range(len(run["results"]))]
        run["pct"] = [100 * r / native if (r := _rate(run, i)) and native else None
                      for i in range(len(run["results"]))]


def _f(v: float | None) -> str:
    return f"{v:.1f}" if v is not None else "-"


def table(results: dict[str, Any]) -> str:
    runs, env = results["runs"], results["env"]
    lines = [f"GPU: {env.get('gpu')}; hookcore {env.get('hookcore')} ({env.get('label')}); {env.get('date')}; "
             f"full-load clock for strict {env.get('ref_mhz')} MHz (native matmul median "
             f"{env.get('native_matmul_mhz')} MHz), clock elasticity "
             f"prior {(env.get('elasticity') or {}).get('value', 'none: 1')}; warm-up "
             f"{env.get('warm_s')} s, {env.get('secs')} s counted per run; {results.get('total_s', '?')} s in all",
             "", "Share of one native process's throughput of the same workload, % (SM clock median, MHz).", "",
             "| case | 10 | 30 | 50 | 70 |", "|---|---|---|---|---|"]

    def pct(key: str, i: int = 0) -> float | None:
        run = runs.get(key)
        return run["pct"][i] if run and "pct" in run and len(run["pct"]) > i else None

    def cell(key: str) -> str:
        v = pct(key)
        mhz = runs.get(key, {}).get("clock", {}).get("sm_mhz")
        return f"{_f(v)} ({mhz:.0f})" if v is not None and mhz else _f(v)

    natives = [f"{LABELS[w]} {_f(_rate(runs.get(f'native/{w}')))} / {_f(_rate(runs.get(f'native-again/{w}')))}"
               for w in WORKLOADS if f"native/{w}" in runs]
    if natives:
        lines[1:1] = ["", "Native processes, per second before / after the capped runs (the shares are of their mean): "
                      + "; ".join(natives) + "."]
    for mode, what in (("default", "default share"), ("strict", "strict cap")):
        for w in WORKLOADS:
            keys = [f"{mode}/{w}/{c}" for c in CAPS]
            if any(k in runs and "pct" in runs[k] for k in keys):
                lines.append(f"| {what}, {LABELS[w]} | " + " | ".join(cell(k) for k in keys) + " |")
    if "pair/30+70" in runs:
        lines.append(f"| two claims 30 + 70 at once | | {_f(pct('pair/30+70', 0))} | | {_f(pct('pair/30+70', 1))} |")
    if "pair/50+50" in runs:
        lines.append(f"| two claims 50 + 50 at once (native pair: {_f(pct('pair/native', 0))} + "
                     f"{_f(pct('pair/native', 1))}) | | | {_f(pct('pair/50+50', 0))} + {_f(pct('pair/50+50', 1))} | |")
    if "pair/strict-50+50" in runs:
        lines.append(f"| two claims 50 + 50 at once, strict | | | {_f(pct('pair/strict-50+50', 0))} + "
                     f"{_f(pct('pair/strict-50+50', 1))} | |")
    for mode in ("default", "strict"):
        k = f"claim2/{mode}-50"
        a, b = pct(k, 0), pct(k, 1)
        if a is not None and b is not None:
            lines.append(f"| two processes of ONE 50% claim, {mode} | | | {_f(a)} + {_f(b)} = {_f(a + b)} | |")
    pr = runs.get("priority/both")
    if pr and "pct" in pr:
        hi_alone, lo_alone = pct("priority/high-alone"), pct("priority/normal-alone")
        both_hi = pr.get("pct_of_high_alone", [None])[0]
        lines += ["", "Priority (matmul): a high-priority claim without a compute limit beside a normal claim at 50%.",
                  "", "| run | high (% of native) | normal (% of native) |", "|---|---|---|",
                  f"| each alone | {_f(hi_alone)} | {_f(lo_alone)} |",
                  f"| both at once | {_f(pr['pct'][0])} ({_f(both_hi)} % of its own alone) | {_f(pr['pct'][1])} |"]
    skipped = [k for k, r in runs.items() if "skipped" in r]
    errors = [f"{k}: {r['results']}" for k, r in runs.items() if "results" in r and any("error" in g for g in r["results"])]
    if skipped:
        lines += ["", "Not measured (time budget): " + ", ".join(skipped)]
    if errors:
        lines += ["", "Errors: " + "; ".join(e[:300] for e in errors)]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker")
    ap.add_argument("args", nargs="?")
    ap.add_argument("--out", default=str(ROOT / "bench/out"))
    ap.add_argument("--tree", default=str(ROOT), help="the checkout whose hookcore/ is built and measured")
    ap.add_argument("--build", default=None, help="build directory (default: a temporary one)")
    ap.add_argument("--label", default="after")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--caps", default=",".join(map(str, CAPS)))
    ap.add_argument("--skip", default="", help="comma-separated: strict, default, pairs, priority")
    # 2 s: past the strict cap's start (a process's first 1.5 s are charged the given clock until the
    # power readings say whether its work is power-bound, hookcore/README); with 0.8 s a strict copy
    # counted 0.7 s of that start and read 46.9 at a 50% cap on the H100 of 2026-12-06.
    ap.add_argument("--warm", type=float, default=2.0, help="seconds of work before the counted window")
    ap.add_argument("--secs", type=float, default=1.5)
    ap.add_argument("--budget", type=float, default=540.0, help="seconds after which runs left are skipped")
    ap.add_argument("--elasticity", default="auto",
                    help="strict's clock elasticity prior: auto (measured from the default matmul runs), model (the"
                         " driver's table for this GPU model, full-load clock too), a value 0..1, or none (the hook's"
                         " default, 1)")
    ap.add_argument("--plan", action="store_true", help="print the jobs and exit")
    ap.add_argument("--probe", default="", help="first run the clock probe on these workloads (no hook), e.g. matmul,memcpy")
    a = ap.parse_args()
    if a.worker == "clockprobe":
        clock_probe(json.loads(a.args or "{}"))
        return
    if a.worker:
        worker(a.worker, json.loads(a.args or "{}"))
        return
    workloads = [w for w in a.workloads.split(",") if w]
    if "jax" in workloads:
        try:
            import jax  # noqa: F401
        except ImportError:
            workloads.remove("jax")
    caps = [int(c) for c in a.caps.split(",") if c]
    skip = [s for s in a.skip.split(",") if s]
    if a.plan:
        for job in plan(workloads, caps, skip).jobs:
            print(job.key, [p.__dict__ for p in job.procs])
        return
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    build = Path(a.build) if a.build else Path(tempfile.mkdtemp(prefix=f"hkbuild-{a.label}-"))
    if a.probe:
        args = {"workloads": a.probe.split(","), "duties": [0.3, 0.5, 0.7, 1.0], "secs": 1.0, "idle": 1.0}
        r = subprocess.run([sys.executable, __file__, "--worker", "clockprobe", json.dumps(args)], capture_output=True,
                           text=True, timeout=300)
        line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
        (out / "clock-probe.json").write_text(line[7:] if line else json.dumps({"error": r.stderr[-3000:]}))
        print(f"clock probe: {'ok' if line else r.stderr[-2000:]}", flush=True)
    bench = Bench(out, Path(a.tree).resolve(), build, a.label, a.warm, a.secs)
    if a.elasticity == "model":
        bench.model_defaults = True
    elif a.elasticity != "auto":
        bench.calibrate = False
        bench.elasticity = None if a.elasticity == "none" else float(a.elasticity)
        bench.results["env"]["elasticity"] = {"value": bench.elasticity, "from": "--elasticity"}
    bench.main(workloads, caps, skip, a.budget)


if __name__ == "__main__":
    main()
