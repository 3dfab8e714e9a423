#!/usr/bin/env python3
"""MPS beside hookcore on one GPU: two tenants at 30% and 70%, matmul throughput, as JSON.

Run on the GPU machine from the repository root (python3 with torch, make, a C compiler; no
network, nothing installed):

    python3 bench/mps_h200.py --out "$OUT"          # about 3 minutes

What it runs, each configuration in fresh processes on GPU 0, every tenant the same 4096^3 bf16
matmul loop (`bench/hookcore_gpu.py`'s), started together and measured over the same 4 s window:

  native        one process alone (the reference: 100%), then two at once
  hook 30+70    two processes under hookcore's libvgpu.so (CUDA_DEVICE_SM_LIMIT=30 / 70), as the
                hami-core-gpu driver runs two claims
  mps 30, 70    one MPS client alone at CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30, then 70
  mps 30+70     two MPS clients at once, 30% and 70% of the SMs
  mps memory    a client with CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8G allocating 256 MiB blocks until
                refused: how close the limit holds

The MPS control daemon is started as this user (`nvidia-cuda-mps-control -d`) with private pipe
and log directories under /tmp, and stopped (`echo quit | nvidia-cuda-mps-control`) before the
script ends, also on an error or a signal; the result says whether it stopped. Nothing changes
the GPU's MIG mode, compute mode or clocks. Output: OUT/mps-results.json (every number) and
OUT/mps-summary.md (the table); the table is printed last.

`--cpu-selftest` runs the same sequence without a GPU: the fake control daemon of
drivers/hami_core_gpu/fake_mps and a CPU loop in place of the matmul (the numbers mean nothing;
it proves the orchestration, the JSON and the daemon's stop).
"""
from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAKE_CONTROL = ROOT / "drivers" / "hami_core_gpu" / "fake_mps"
GiB, MiB = 1 << 30, 1 << 20


# --- workers (child processes; the last stdout line is "RESULT {json}") ----------------------------


def _emit(obj: dict) -> None:
    print("RESULT " + json.dumps(obj), flush=True)


def _until(t: float) -> None:
    while time.time() < t:
        time.sleep(min(0.01, max(0.0, t - time.time())))


def w_matmul(args: dict) -> None:
    """Matmuls per second over `secs`, after a warm-up, starting at `go_at` (wall clock)."""
    if args.get("cpu"):
        step, sync = (lambda: sum(i * i for i in range(20000))), (lambda: None)
    else:
        import torch

        torch.manual_seed(0)
        a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(4096, 4096, device="cuda", dtype=torch.bfloat16)

        def step() -> None:
            for _ in range(8):
                torch.matmul(a, b, out=c)

        sync = torch.cuda.synchronize
    t_end = time.perf_counter() + args.get("warm", 2.0)
    while time.perf_counter() < t_end:
        step()
    sync()
    _until(args["go_at"])
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < args["secs"]:
        step()
        n += 8
    sync()
    _emit({"rate": n / (time.perf_counter() - t0), "pid": os.getpid()})


def w_memory(args: dict) -> None:
    """Bytes allocated in 256 MiB blocks until the allocator refuses (or `cap` is reached)."""
    got, blocks = 0, []
    if args.get("cpu"):
        _emit({"allocated": 0, "refused": None})
        return
    import torch

    err = None
    while got < args["cap"]:
        try:
            blocks.append(torch.empty(256 * MiB, dtype=torch.uint8, device="cuda"))
            got += 256 * MiB
        except RuntimeError as e:  # torch.OutOfMemoryError is a RuntimeError
            err = str(e).splitlines()[0][:300]
            break
    torch.cuda.synchronize()
    _emit({"allocated": got, "refused": err})


WORKERS = {"matmul": w_matmul, "memory": w_memory}


# --- the run ---------------------------------------------------------------------------------------


class MpsDaemon:
    """The MPS control daemon of this run: private dirs, started once, stopped for sure."""

    def __init__(self, root: Path, control: str) -> None:
        self.pipe, self.log = root / "pipe", root / "log"
        self.pipe.mkdir(parents=True)
        self.log.mkdir(parents=True)
        self.control = control
        self.started = False
        self.stopped: bool | None = None
        self.stop_output = ""

    def env(self) -> dict:
        return {"CUDA_MPS_PIPE_DIRECTORY": str(self.pipe), "CUDA_MPS_LOG_DIRECTORY": str(self.log)}

    def start(self) -> None:
        self.started = True  # before: a signal during the start still gets the quit
        r = subprocess.run([self.control, "-d"], env={**os.environ, **self.env()}, capture_output=True, text=True,
                           timeout=30)
        if r.returncode != 0:
            raise RuntimeError(f"{self.control} -d failed ({r.returncode}): {r.stderr.strip()[:500]}")
        self.started = True

    def command(self, line: str) -> str:
        r = subprocess.run([self.control], input=line + "\n", env={**os.environ, **self.env()}, capture_output=True,
                           text=True, timeout=30)
        return (r.stdout + r.stderr).strip()

    def stop(self) -> None:
        """`echo quit | nvidia-cuda-mps-control`, then wait for its socket to go (10 s)."""
        if not self.started or self.stopped is not None:
            return
        try:
            self.stop_output = self.command("quit")
        except (OSError, subprocess.TimeoutExpired) as e:
            self.stop_output = f"quit failed: {e}"
        # The real daemon leaves its socket behind: it has stopped when no process of ours (the
        # control daemon or its server, found by our pipe dir in their environment) is left and it
        # said so in its log, or (the fake) its socket is gone.
        deadline = time.time() + 10
        while time.time() < deadline and not self._gone():
            time.sleep(0.1)
        self.stopped = self._gone()

    def _gone(self) -> bool:
        if self._pids():
            return False
        return not (self.pipe / "control").exists() or "Exit with status" in self.log_tail()

    def _pids(self) -> list[int]:
        """Processes whose environment names this run's pipe dir (the daemon, its server)."""
        mark = f"CUDA_MPS_PIPE_DIRECTORY={self.pipe}".encode()
        out = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            try:
                argv0 = (proc / "cmdline").read_bytes().split(b"\0", 1)[0]
                if not os.path.basename(argv0).startswith(b"nvidia-cuda-mps"):
                    continue
                if mark in (proc / "environ").read_bytes().split(b"\0"):
                    out.append(int(proc.name))
            except OSError:
                continue
        return out

    def log_tail(self) -> str:
        path = self.log / "control.log"
        return path.read_text()[-3000:] if path.exists() else ""


class Run:
    def __init__(self, out: Path, cpu: bool, build: Path) -> None:
        self.out, self.cpu, self.build = out, cpu, build
        self.tmp = Path(tempfile.mkdtemp(prefix="mpsbench-"))
        self.results: dict = {"env": {"cpu_selftest": cpu, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")},
                              "configs": {}}
        self.mps: MpsDaemon | None = None
        self.n = 0
        self.children: list[subprocess.Popen] = []  # workers still running (ended before MPS stops)

    def say(self, msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def base_env(self) -> dict:
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("CUDA_DEVICE_", "CUDA_MPS_")) and k not in ("LD_PRELOAD", "HOOKCORE_LOG")}
        e["PYTHONUNBUFFERED"] = "1"
        if not self.cpu:
            e["CUDA_VISIBLE_DEVICES"] = "0"
        return e

    def hook_env(self, sm: int) -> dict:
        self.n += 1
        return {**self.base_env(), "LD_PRELOAD": str(self.build / "libvgpu.so"), "CUDA_DEVICE_SM_LIMIT": str(sm),
                "CUDA_DEVICE_MEMORY_SHARED_CACHE": str(self.tmp / f"claim{self.n}.ledger")}

    def mps_env(self, threads: int | None = None, pinned: str | None = None) -> dict:
        assert self.mps is not None
        e = {**self.base_env(), **self.mps.env()}
        if threads is not None:
            e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(threads)
        if pinned is not None:
            e["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = pinned
        return e

    def spawn(self, worker: str, args: dict, env: dict) -> subprocess.Popen:
        args = {**args, "cpu": self.cpu}
        self.children = [c for c in self.children if c.poll() is None]
        self.children.append(subprocess.Popen([sys.executable, __file__, "--worker", worker, json.dumps(args)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        return self.children[-1]

    @staticmethod
    def collect(p: subprocess.Popen, timeout: float = 120) -> dict:
        try:
            so, se = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate()
            return {"error": "timeout", "stderr": se[-1500:]}
        for line in reversed(so.splitlines()):
            if line.startswith("RESULT "):
                return dict(json.loads(line[7:]))
        return {"error": f"exit {p.returncode}", "stderr": se[-1500:]}

    def tenants(self, name: str, envs: list[dict]) -> None:
        """Start one matmul process per env together; record rates and shares of the solo native rate."""
        go_at = time.time() + (1.5 if self.cpu else 14)  # torch import + CUDA init + warm-up fit in it
        timing = {"secs": 0.5, "warm": 0.2} if self.cpu else {"secs": 4.0, "warm": 2.0}
        procs = [self.spawn("matmul", {"go_at": go_at, **timing}, e) for e in envs]
        rs = [self.collect(p) for p in procs]
        rates = [r.get("rate") for r in rs]
        solo = self.results["configs"].get("native", {}).get("rates", rates)[0]
        self.results["configs"][name] = {
            "rates": rates, "shares_pct": [round(100 * x / solo, 1) if (x and solo) else None for x in rates],
            "errors": [r for r in rs if "error" in r] or None}
        self.say(f"{name}: {self.results['configs'][name]}")

    def build_hook(self) -> None:
        jobs = f"-j{min(os.cpu_count() or 1, 8)}"
        r = subprocess.run(["make", "-C", str(ROOT / "hookcore"), jobs, f"BUILD={self.build}", "hooklibs"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("hookcore build failed: " + (r.stdout + r.stderr)[-2000:])

    def gpu_info(self) -> None:
        if self.cpu:
            return
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,mig.mode.current,compute_mode",
                            "--format=csv,noheader", "-i", "0"], capture_output=True, text=True)
        self.results["env"]["gpu"] = r.stdout.strip() or r.stderr.strip()

    def control_program(self) -> str:
        if self.cpu:
            return str(FAKE_CONTROL / "nvidia-cuda-mps-control")
        found = shutil.which("nvidia-cuda-mps-control")
        if not found:
            raise RuntimeError("nvidia-cuda-mps-control is not on PATH (it ships with the NVIDIA driver)")
        return found

    def run(self) -> None:
        self.gpu_info()
        base = self.base_env()
        self.tenants("native", [base])
        self.tenants("native 2 tenants", [base, base])
        try:
            self.build_hook()
            self.tenants("hook 30+70", [self.hook_env(30), self.hook_env(70)])
        except RuntimeError as e:
            self.results["configs"]["hook 30+70"] = {"error": str(e)}
        self.mps = MpsDaemon(self.tmp / "mps", self.control_program())
        self.mps.start()
        self.results["mps"] = {"pipe": str(self.mps.pipe), "started": True}
        self.tenants("mps 100 (default)", [self.mps_env()])
        self.tenants("mps 30", [self.mps_env(30)])
        self.tenants("mps 70", [self.mps_env(70)])
        self.tenants("mps 30+70", [self.mps_env(30), self.mps_env(70)])
        limit = 8 * GiB
        r = self.collect(self.spawn("memory", {"cap": 2 * limit}, self.mps_env(pinned="0=8G")))
        r["limit"] = limit
        self.results["configs"]["mps memory 8G"] = r
        self.say(f"mps memory: {r}")
        self.results["mps"]["server_list"] = self.mps.command("get_server_list")

    def finish(self) -> None:
        for c in self.children:  # MPS clients first: the daemon's quit waits for its servers' clients
            if c.poll() is None:
                c.kill()
                c.wait()
        if self.mps is not None:
            self.mps.stop()
            self.results.setdefault("mps", {}).update(
                {"stopped": self.mps.stopped, "quit_output": self.mps.stop_output, "control_log": self.mps.log_tail()})
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "mps-results.json").write_text(json.dumps(self.results, indent=2) + "\n")
        table = self.summary()
        (self.out / "mps-summary.md").write_text(table)
        print(table, flush=True)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def summary(self) -> str:
        rows = ["| configuration | rates (matmul/s) | share of solo native (%) |", "| --- | --- | --- |"]
        for name, c in self.results["configs"].items():
            if "rates" in c:
                rates = " / ".join(f"{x:.1f}" if x else "error" for x in c["rates"])
                shares = " / ".join(f"{x}" if x is not None else "-" for x in c["shares_pct"])
                rows.append(f"| {name} | {rates} | {shares} |")
            elif "allocated" in c:
                rows.append(f"| {name} | allocated {c['allocated'] / GiB:.2f} GiB of a {c['limit'] / GiB:.0f} GiB"
                            f" limit | refused: {c.get('refused')} |")
            else:
                rows.append(f"| {name} | {c.get('error')} | |")
        head = f"GPU: {self.results['env'].get('gpu', 'none (cpu self-test)')}; {self.results['env']['date']}\n\n"
        stopped = self.results.get("mps", {}).get("stopped")
        return head + "\n".join(rows) + f"\n\nMPS control daemon stopped: {stopped}\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", choices=sorted(WORKERS))
    ap.add_argument("args", nargs="?")
    ap.add_argument("--out", default=str(ROOT / "bench" / "out"))
    ap.add_argument("--build", default="/tmp/mps-bench-build")
    ap.add_argument("--cpu-selftest", action="store_true")
    a = ap.parse_args()
    if a.worker:
        WORKERS[a.worker](json.loads(a.args))
        return 0
    run = Run(Path(a.out), a.cpu_selftest, Path(a.build))
    atexit.register(run.finish)  # the daemon is stopped whatever happens below

    def on_signal(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        run.run()
    except Exception as e:  # recorded, then finish() stops the daemon and writes what there is
        run.results["error"] = repr(e)
        run.say(f"error: {e!r}")
    atexit.unregister(run.finish)
    run.finish()
    return 1 if "error" in run.results else 0


if __name__ == "__main__":
    sys.exit(main())
