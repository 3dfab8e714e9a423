#!/usr/bin/env python3
"""MPS as hami-core-gpu mounts it now, on the real nvidia-cuda-mps-control: does a client whose
pipe dir is a READ-ONLY bind mount (and that has no log dir) still get an MPS context, as root and
as uid 65534? Review 2026-12-04 #1 (no writable MPS dir in a claim's container), #11 (who may
command the control daemon) and #5 (the hook's compute limiter as a ceiling under MPS).

Run on the GPU machine from the repository root, as root (mount namespaces; setpriv for uid
65534), with python3 + torch; no network, nothing installed:

    python3 bench/mps_mounts_h200.py --out "$OUT"          # about 3 minutes
    python3 bench/mps_mounts_h200.py --out "$OUT" --sections hook-ceiling   # under 3 minutes

The whole run happens in a private mount namespace (``unshare --mount``): the control daemon's
pipe dir is bind-mounted read-only at a second path (the "container's view") and every client
gets ``CUDA_MPS_PIPE_DIRECTORY`` = that view and no ``CUDA_MPS_LOG_DIRECTORY``, as a claim's
container does. Sections:

  ro-pipe       a root control daemon (``-f``, as the driver runs it, GPU 0) with fresh 0755 pipe
                and log dirs; clients as root, then as uid 65534, each creating a CUDA context and
                holding it while `get_client_list` of every server is asked whether the client's
                PID is an MPS client (a client that cannot reach MPS silently runs without it);
                what root and uid 65534 may do through the ro view (write a file, plant a symlink,
                `get_server_list`, and at the end `quit`); the pipe and log dirs' files (owner,
                mode) and every server's PPid/uid/comm (how the daemon can know its servers).
  nonroot-ctl   the control daemon run as uid 65534 (its dirs owned by it): which clients get a
                context (root, uid 65534)?
  hook-ceiling  one matmul client at a time (bench/mps_h200.py's worker, 4 s): native, MPS 30%,
                MPS 30% + hookcore at 30 cores, MPS 100% (a tenant that raised its own
                environment) + hookcore at 30, hookcore at 30 without MPS. Shares of native.
                The hook charges a batch its device time x its context's SM fraction: the SMs
                cuCtxGetExecAffinity gives the context over the device's SM count, which the daemon
                reads from NVML (nvmlDeviceGetAttributes' multiprocessorCount, read here the same
                way and printed) and writes into the claim's config as HOOKCORE_DEVICE_SMS_0. The
                hooked runs get that config as a claim's container does: a file at
                /run/hookcore/vgpu/config (a directory of this run bind-mounted there, in this
                run's private mount namespace), so the environment's keys are ignored. Inside an
                MPS client CUDA's MULTIPROCESSOR_COUNT answers the client's own SMs (38 of 132 at
                30% on the H200, round 2), so a run without the key ("no device SM count") shows
                the double throttle it causes. Expected with the key: MPS 30% + hook 30 ~ MPS 30%
                alone, MPS 100% + hook 30 ~ hook 30 alone (30% of SM x time). Where NVML gives no
                count for the whole GPU (its reference documents the call for MIG devices) the
                daemon leaves the key out; the runs then use the count CUDA reports outside MPS,
                labelled so. For each hooked run the SM fraction the hook used (the ledger's
                limiter stats via build/hk-ledger: sm_ppm, charged / device time, time throttled)
                and the hook's debug line naming both counts and where the device's came from.

Output: OUT/mps-mounts.json and OUT/mps-mounts.md (printed last). Every control daemon is quit
(and killed if it does not go) before the script ends, also on an error.

``--cpu-selftest`` runs ro-pipe and nonroot-ctl with the fake control program of
drivers/hami_core_gpu/fake_mps and the fake's own client as the "CUDA client" (it only proves the
orchestration and that connect() works through a read-only mount); hook-ceiling is skipped.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FAKE_CONTROL = ROOT / "drivers" / "hami_core_gpu" / "fake_mps" / "nvidia-cuda-mps-control"
NOBODY = 65534
CTX_CLIENT = ("import os, sys, torch\n"
              "x = torch.ones(1 << 20, device='cuda'); torch.cuda.synchronize()\n"
              "print('CTX_OK', os.getpid(), float(x.sum()), flush=True)\n"
              "sys.stdin.readline()\n")


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def as_user(uid: int | None) -> list[str]:
    return [] if uid is None else ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]


class Control:
    """One control daemon (``-f``, a child of this script) with its own pipe and log dirs."""

    def __init__(self, root: Path, program: str, uid: int | None, cpu: bool) -> None:
        self.pipe, self.log, self.program, self.uid, self.cpu = root / "pipe", root / "log", program, uid, cpu
        for d in (root, self.pipe, self.log):
            d.mkdir(mode=0o755)
            d.chmod(0o755)
            if uid is not None and d != root:
                os.chown(d, uid, uid)
        self.proc: subprocess.Popen[bytes] | None = None

    def env(self, pipe: Path | None = None) -> dict[str, str]:
        e = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_")}
        e["CUDA_MPS_PIPE_DIRECTORY"] = str(pipe or self.pipe)
        return e

    def start(self) -> None:
        env = {**self.env(), "CUDA_MPS_LOG_DIRECTORY": str(self.log), "CUDA_VISIBLE_DEVICES": "0"}
        self.proc = subprocess.Popen([*as_user(self.uid), self.program, "-f"], env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.time() + 20
        while time.time() < deadline and self.ask("get_server_list", None)[0] != 0:
            if self.proc.poll() is not None:
                raise RuntimeError(f"control daemon exited {self.proc.returncode}: {self.log_tail()}")
            time.sleep(0.1)

    def ask(self, command: str, uid: int | None, pipe: Path | None = None) -> tuple[int, str]:
        try:
            r = subprocess.run([*as_user(uid), self.program], input=command + "\n", env=self.env(pipe),
                               capture_output=True, text=True, timeout=20)
        except subprocess.TimeoutExpired:
            return 124, "timeout"
        return r.returncode, (r.stdout + r.stderr).strip()[-600:]

    def servers(self) -> list[int]:
        rc, out = self.ask("get_server_list", None)
        return [int(w) for w in out.split() if w.isdigit()] if rc == 0 else []

    def stop(self) -> bool:
        """quit, then wait; killed (its session) if still there after 15 s. True: it went by itself."""
        if self.proc is None or self.proc.poll() is not None:
            return True
        self.ask("quit", None)
        try:
            self.proc.wait(15)
            return True
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            return False

    def log_tail(self) -> str:
        p = self.log / "control.log"
        return p.read_text(errors="replace")[-1500:] if p.exists() else ""


def listing(d: Path) -> list[str]:
    out = []
    for p in sorted(d.iterdir()) if d.is_dir() else []:
        st = p.lstat()
        out.append(f"{p.name} {stat.filemode(st.st_mode)} uid={st.st_uid}")
    return out


def proc_info(pid: int) -> dict[str, Any]:
    try:
        status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
        return {"pid": pid, "comm": status["Name"].strip(), "ppid": int(status["PPid"]),
                "uid": int(status["Uid"].split()[0])}
    except OSError as e:
        return {"pid": pid, "error": str(e)}


def client(ctl: Control, view: Path, uid: int | None, cpu: bool, timeout: float = 90) -> dict[str, Any]:
    """A client as a claim's container runs it: the ro view, no log dir. Got a context? An MPS one?"""
    env = {**ctl.env(view), "HOME": "/tmp", "CUDA_VISIBLE_DEVICES": "0"}
    if cpu:  # the fake's client: connect() through the view and ask
        r = subprocess.run([*as_user(uid), ctl.program], input="get_server_list\n", env=env, capture_output=True,
                           text=True, timeout=timeout)
        return {"uid": uid or 0, "context": r.returncode == 0, "mps_client": r.returncode == 0,
                "output": (r.stdout + r.stderr).strip()[-300:]}
    p = subprocess.Popen([*as_user(uid), sys.executable, "-c", CTX_CLIENT], env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    result: dict[str, Any] = {"uid": uid or 0, "context": False, "mps_client": False}
    assert p.stdout is not None and p.stdin is not None
    deadline, line, fd = time.time() + timeout, "", p.stdout.fileno()
    while time.time() < deadline and not re.search(r"CTX_OK \d+ .*\n", line):
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            chunk = os.read(fd, 4096).decode(errors="replace")
            if not chunk:
                break  # the client ended without a context
            line += chunk
    found = re.search(r"CTX_OK (\d+) .*\n", line)
    if found:
        result["context"] = True
        pid = int(found.group(1))
        lists = {s: ctl.ask(f"get_client_list {s}", None)[1] for s in ctl.servers()}
        result["servers"] = [proc_info(s) for s in lists]
        result["client_lists"] = lists
        result["mps_client"] = any(str(pid) in out.split() for out in lists.values())
        p.stdin.write("\n")
        p.stdin.flush()
    try:
        p.wait(30 if found else 1)  # no context by now: it waits on a server it will not get
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        result["killed"] = True
    rest = p.stderr.read() if p.stderr else ""
    result["rc"] = p.returncode
    if not result["context"]:
        result["stderr"] = rest[-800:]
    return result


def tenant_tries(ctl: Control, view: Path, uid: int | None) -> dict[str, Any]:
    """What a tenant (root or not) can do through the ro view of the pipe dir."""
    got: dict[str, Any] = {}
    probe = ("import os, sys\nd = sys.argv[1]\n"
             "for name, f in (('write', lambda: open(os.path.join(d, 'x'), 'w')),"
             " ('symlink', lambda: os.symlink('/etc/hostname', os.path.join(d, 'nvidia-cuda-mps-control.pid')))):\n"
             "    try:\n        f(); print(name, 'ALLOWED')\n"
             "    except OSError as e:\n        print(name, 'refused:', e.strerror)\n")
    r = subprocess.run([*as_user(uid), sys.executable, "-c", probe, str(view)], capture_output=True, text=True)
    got["files"] = (r.stdout + r.stderr).strip().splitlines()
    got["get_server_list"] = ctl.ask("get_server_list", uid, view)
    return got


def section_ro_pipe(tmp: Path, program: str, cpu: bool) -> dict[str, Any]:
    ctl = Control(tmp / "root-ctl", program, None, cpu)
    view = tmp / "view"
    view.mkdir(mode=0o755)
    subprocess.run(["mount", "--bind", str(ctl.pipe), str(view)], check=True)
    subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True)
    out: dict[str, Any] = {}
    try:
        ctl.start()
        out["started"] = ctl.proc is not None and ctl.proc.poll() is None
        for uid in (None, NOBODY):
            key = f"client uid {uid or 0}"
            out[key] = client(ctl, view, uid, cpu)
            say(f"ro-pipe {key}: {out[key]}")
        out["pipe dir"], out["log dir"] = listing(ctl.pipe), listing(ctl.log)
        out["tenant root"], out["tenant uid 65534"] = tenant_tries(ctl, view, None), tenant_tries(ctl, view, NOBODY)
        say(f"ro-pipe tenant tries: root {out['tenant root']} / 65534 {out['tenant uid 65534']}")
        out["quit by uid 65534 through the view"] = ctl.ask("quit", NOBODY, view)
        time.sleep(1)
        out["alive after 65534's quit"] = ctl.proc is not None and ctl.proc.poll() is None
        out["quit by root through the view"] = ctl.ask("quit", None, view)
        try:
            assert ctl.proc is not None
            ctl.proc.wait(15)
            out["exited after root's quit"] = True
        except subprocess.TimeoutExpired:
            out["exited after root's quit"] = False
        out["control.log"] = ctl.log_tail()
    finally:
        out["stopped"] = ctl.stop()
        subprocess.run(["umount", str(view)], check=False)
    return out


def section_nonroot_ctl(tmp: Path, program: str, cpu: bool) -> dict[str, Any]:
    ctl = Control(tmp / "nobody-ctl", program, NOBODY, cpu)
    out: dict[str, Any] = {}
    try:
        ctl.start()
        out["started"] = ctl.proc is not None and ctl.proc.poll() is None
        for uid in (None, NOBODY):
            key = f"client uid {uid or 0}"
            out[key] = client(ctl, ctl.pipe, uid, cpu, timeout=45)
            say(f"nonroot-ctl {key}: {out[key]}")
        out["control.log"] = ctl.log_tail()
    except RuntimeError as e:
        out["error"] = str(e)
    finally:
        out["stopped"] = ctl.stop()
    return out


def hook_books(tool: Path, ledger: Path, stderr: str) -> dict[str, Any]:
    """What the hook charged in a run: the SM fraction of its last batch (the ledger's limiter area,
    read with the core's own reader), charged / device time over the run, the time it throttled,
    and its debug lines naming what cuCtxGetExecAffinity and the device's SM count were."""
    got: dict[str, Any] = {"driver said": sorted({ln.split("hookcore: ", 1)[-1] for ln in stderr.splitlines()
                                                  if "cuCtxGetExecAffinity" in ln})}
    r = subprocess.run([str(tool), "limiter", str(ledger), "0"], capture_output=True, text=True)
    f = r.stdout.split()
    if r.returncode != 0 or len(f) < 9 or f[0] != "LIMITER":
        got["ledger"] = (r.stdout + r.stderr).strip()[-300:]  # an older hk-ledger, or no limiter
        return got
    charged, throttled, device, ppm = int(f[3]), int(f[4]), int(f[7]), int(f[8])
    got.update({"sm_fraction": ppm / 1e6, "charged_per_device_ns": round(charged / device, 4) if device else None,
                "charged_s": charged / 1e9, "device_s": device / 1e9, "throttled_s": throttled / 1e9})
    return got


HOOK_CONFIG_DIR = Path("/run/hookcore/vgpu")  # where libvgpu.so reads its claim's config (HK_CONFIG_ROOT)


def nvml_sms(index: int = 0, library: str = "libnvidia-ml.so.1") -> tuple[int | None, str]:
    """The GPU's SM count as the daemon reads it (`drivers.hami_core_gpu.nvml._sms`: the attributes'
    multiprocessorCount, which a whole GPU may refuse, else the core count over the cores per SM of its
    compute capability) and "", or None and what NVML answered. ctypes, so nothing needs installing."""
    import ctypes

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from drivers.hami_core_gpu.nvml import FP32_CORES_PER_SM

    class Attributes(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint) for n in (
            "multiprocessorCount", "sharedCopyEngineCount", "sharedDecoderCount", "sharedEncoderCount",
            "sharedJpegCount", "sharedOfaCount", "gpuInstanceSliceCount", "computeInstanceSliceCount")] + [
            ("memorySizeMB", ctypes.c_ulonglong)]

    try:
        lib = ctypes.CDLL(library)
    except OSError as e:
        return None, f"cannot load {library}: {e}"
    if (r := lib.nvmlInit_v2()) != 0:
        return None, f"nvmlInit_v2: NVML return {r}"
    try:
        handle = ctypes.c_void_p()
        if (r := lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle))) != 0:
            return None, f"nvmlDeviceGetHandleByIndex_v2({index}): NVML return {r}"
        a = Attributes()
        if (r := lib.nvmlDeviceGetAttributes_v2(handle, ctypes.byref(a))) == 0 and 1 <= a.multiprocessorCount <= 4096:
            return a.multiprocessorCount, ""
        why = f"nvmlDeviceGetAttributes_v2(index {index}): NVML return {r}"
        cores, major, minor = ctypes.c_uint(), ctypes.c_int(), ctypes.c_int()
        if (r := lib.nvmlDeviceGetNumGpuCores(handle, ctypes.byref(cores))) != 0 or (
                r := lib.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor))) != 0:
            return None, f"{why}; cores or compute capability: NVML return {r}"
        per_sm = FP32_CORES_PER_SM.get((major.value, minor.value))
        if per_sm and cores.value % per_sm == 0 and 1 <= cores.value // per_sm <= 4096:
            return cores.value // per_sm, ""
        return None, f"{why}; {cores.value} cores at compute capability {major.value}.{minor.value}"
    finally:
        lib.nvmlShutdown()


def hook_config_text(cores: int, ledger: Path, device_sms: int | None) -> str:
    """A claim's config as the daemon writes it (hookcore.config_file_text's keys; written by hand so
    the GPU machine needs no built extension): `cores` on device 0, its ledger, the device's SMs."""
    keys = {"HOOKCORE_COMPUTE_LIMIT_0": str(cores), "HOOKCORE_LEDGER": str(ledger)}
    if device_sms is not None:
        keys["HOOKCORE_DEVICE_SMS_0"] = str(device_sms)
    return "# hookcore claim configuration, written by the bench as the DRA driver writes it\n" + "".join(
        f"{k}={keys[k]}\n" for k in sorted(keys))


def cuda_sms_outside_mps(tmp: Path) -> tuple[int | None, str]:
    """The SM count CUDA reports in a process that is no MPS client (the whole GPU, on the H200)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_")}
    env.update({"CUDA_VISIBLE_DEVICES": "0", "CUDA_MPS_PIPE_DIRECTORY": str(tmp / "no-mps")})
    r = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.get_device_properties(0)"
                        ".multi_processor_count)"], env=env, capture_output=True, text=True, timeout=120)
    try:
        return int(r.stdout.split()[-1]), ""
    except (ValueError, IndexError):
        return None, (r.stdout + r.stderr)[-300:]


def section_hook_ceiling(tmp: Path, program: str) -> dict[str, Any]:
    build = tmp / "build"
    r = subprocess.run(["make", "-C", str(ROOT / "hookcore"), f"-j{min(os.cpu_count() or 1, 8)}", f"BUILD={build}",
                        "hooklibs", "tools"], capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": "hookcore build failed: " + (r.stdout + r.stderr)[-1500:]}
    ctl = Control(tmp / "hook-ctl", program, None, False)
    out: dict[str, Any] = {}
    sms, why = nvml_sms(0)
    source = "nvml"
    out["device SMs"] = {"nvml": sms, "nvml error": why or None}
    if sms is None:  # the daemon would leave the key out; the runs use CUDA's count outside MPS instead
        sms, why2 = cuda_sms_outside_mps(tmp)
        source = "cuda outside MPS (NVML gave none: the daemon would write no key)"
        out["device SMs"]["cuda outside MPS"] = sms
        if why2:
            out["device SMs"]["cuda error"] = why2
    out["device SMs"]["config"] = sms
    out["device SMs"]["source"] = source
    say(f"hook-ceiling device SMs: {out['device SMs']}")
    config_src = tmp / "hook-config"
    config_src.mkdir(mode=0o755)
    made = not HOOK_CONFIG_DIR.exists()
    HOOK_CONFIG_DIR.mkdir(parents=True, exist_ok=True)  # the mount point; removed again if made here
    subprocess.run(["mount", "--bind", str(config_src), str(HOOK_CONFIG_DIR)], check=True)  # this namespace only
    n = 0

    def run(name: str, mps: int | None, hook: int | None, device_sms: int | None = None) -> None:
        nonlocal n
        n += 1
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_MPS_", "CUDA_DEVICE_"))}
        env.update({"CUDA_VISIBLE_DEVICES": "0", "PYTHONUNBUFFERED": "1"})
        env["CUDA_MPS_PIPE_DIRECTORY"] = str(ctl.pipe if mps is not None else tmp / "no-mps")
        if mps is not None:
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(mps)
        ledger = tmp / f"c{n}.ledger"
        (config_src / "config").unlink(missing_ok=True)
        if hook is not None:  # the claim's config, a file as the daemon mounts it (authoritative)
            (config_src / "config").write_text(hook_config_text(hook, ledger, device_sms))
            env.update({"LD_PRELOAD": str(build / "libvgpu.so"), "HOOKCORE_LOG": "debug"})
        args = {"go_at": time.time() + 14, "secs": 4.0, "warm": 2.0}
        p = subprocess.run([sys.executable, str(ROOT / "bench" / "mps_h200.py"), "--worker", "matmul",
                            json.dumps(args)], env=env, capture_output=True, text=True, timeout=120)
        res = [json.loads(ln[7:]) for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
        out[name] = {"rate": res[-1]["rate"] if res else None, "stderr": None if res else p.stderr[-800:]}
        if hook is not None:
            out[name]["hook"] = hook_books(build / "hk-ledger", ledger, p.stderr)
            out[name]["hook"]["config device SMs"] = device_sms
        solo = out.get("native", {}).get("rate")
        if solo and out[name]["rate"]:
            out[name]["share_pct"] = round(100 * out[name]["rate"] / solo, 1)
        say(f"hook-ceiling {name}: {out[name]}")

    try:
        ctl.start()
        run("native", None, None)
        run("mps 30", 30, None)
        run("mps 30 + hook 30", 30, 30, sms)
        run("mps 30 + hook 30, no device SM count", 30, 30, None)
        run("mps 100 + hook 30 (tenant raised its env)", 100, 30, sms)
        run("hook 30 (no MPS)", None, 30, sms)
    finally:
        out["stopped"] = ctl.stop()
        subprocess.run(["umount", str(HOOK_CONFIG_DIR)], check=False)
        if made:
            for d in (HOOK_CONFIG_DIR, HOOK_CONFIG_DIR.parent):
                try:
                    d.rmdir()
                except OSError:
                    break
    return out


def summary(res: dict[str, Any]) -> str:
    rows = [f"MPS mounts, {res['env']['date']}; GPU: {res['env'].get('gpu', 'none (cpu self-test)')}", ""]
    for sec in ("ro-pipe", "nonroot-ctl"):
        if sec not in res:  # not among --sections
            continue
        s = res[sec]
        rows.append(f"## {sec}")
        for k in ("client uid 0", "client uid 65534"):
            c = s.get(k, {})
            rows.append(f"- {k}: context={c.get('context')} mps_client={c.get('mps_client')}"
                        f" servers={c.get('servers')}")
        for k in ("tenant root", "tenant uid 65534", "quit by uid 65534 through the view", "alive after 65534's quit",
                  "quit by root through the view", "exited after root's quit", "pipe dir", "log dir", "error"):
            if k in s:
                rows.append(f"- {k}: {s[k]}")
        rows.append("")
    h = res.get("hook-ceiling", {})
    if h:
        rows.append("## hook-ceiling (share of native matmul throughput; the hook's SM fraction)")
        dev = h.get("device SMs", {})
        if dev:
            rows.append(f"- device SMs in the claim's config (HOOKCORE_DEVICE_SMS_0): {dev.get('config')}"
                        f" from {dev.get('source')}; NVML said {dev.get('nvml')}"
                        + (f" ({dev['nvml error']})" if dev.get("nvml error") else ""))
        for k, v in h.items():
            if not isinstance(v, dict) or k == "device SMs":
                continue
            line = f"- {k}: {v.get('share_pct', v)}"
            books = v.get("hook")
            if books:
                line += (f" | config SMs={books.get('config device SMs')}"
                         f" sm_fraction={books.get('sm_fraction')} charged/device={books.get('charged_per_device_ns')}"
                         f" throttled_s={books.get('throttled_s')} | driver: {'; '.join(books.get('driver said', []))}")
            rows.append(line)
        rate = {k: v.get("share_pct") for k, v in h.items() if isinstance(v, dict) and k != "device SMs"}
        pairs = (("mps 30 + hook 30", "mps 30"), ("mps 100 + hook 30 (tenant raised its env)", "hook 30 (no MPS)"))
        for a, b in pairs:
            if rate.get(a) and rate.get(b):
                rows.append(f"- {a} / {b}: {rate[a] / rate[b]:.2f} (expected ~1 with the device's SM count in the config)")
    return "\n".join(rows) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "bench" / "out"))
    ap.add_argument("--cpu-selftest", action="store_true")
    ap.add_argument("--sections", default="ro-pipe,nonroot-ctl,hook-ceiling", help="comma-separated, of the three")
    ap.add_argument("--in-namespace", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("run as root (mount namespaces, setpriv)", file=sys.stderr)
        return 2
    if not a.in_namespace:  # everything below in a private mount namespace: the ro view goes with it
        return subprocess.call(["unshare", "--mount", "--propagation", "private", sys.executable, __file__,
                                "--in-namespace", "--out", a.out, "--sections", a.sections,
                                *(["--cpu-selftest"] if a.cpu_selftest else [])])
    program = str(FAKE_CONTROL) if a.cpu_selftest else (shutil.which("nvidia-cuda-mps-control") or "")
    if not program:
        print("nvidia-cuda-mps-control is not on PATH (it ships with the NVIDIA driver)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="mpsmounts-", dir="/tmp"))  # not $TMPDIR: uid 65534 walks to it
    tmp.chmod(0o755)  # uid 65534 walks into it
    res: dict[str, Any] = {"env": {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cpu_selftest": a.cpu_selftest}}
    if not a.cpu_selftest:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader", "-i", "0"],
                           capture_output=True, text=True)
        res["env"]["gpu"] = r.stdout.strip() or r.stderr.strip()
    sections = [("ro-pipe", lambda: section_ro_pipe(tmp, program, a.cpu_selftest)),
                ("nonroot-ctl", lambda: section_nonroot_ctl(tmp, program, a.cpu_selftest))]
    if not a.cpu_selftest:
        sections.append(("hook-ceiling", lambda: section_hook_ceiling(tmp, program)))
    sections = [(n, f) for n, f in sections if n in a.sections.split(",")]
    failed = False
    for name, fn in sections:
        try:
            res[name] = fn()
        except Exception as e:  # recorded; the next section still runs
            res[name] = {"error": repr(e)}
            failed = True
            say(f"{name} failed: {e!r}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "mps-mounts.json").write_text(json.dumps(res, indent=2) + "\n")
    text = summary(res)
    (out / "mps-mounts.md").write_text(text)
    print(text, flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
