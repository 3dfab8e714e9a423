"""The watchdog's rig on the CPU: the real hami-core-gpu driver on fake H200s (stub NVML), real
claim hook dirs and checkpoint records, and real processes placed as a container runtime would
place them (a pod's cgroup, the claim's CDI mounts in a private mount namespace), listed to the
stub NVML through STUB_NVML_PROCESSES. conftest.py makes it the tests' `rig` fixture; the
benches import it. Root only (mount namespaces, cgroups).
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import signal
import subprocess
import tempfile
import time
import uuid as uuidlib
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

import dra
from dra._runtime.checkpoint import PREPARED, Checkpoint, ClaimRecord, DeviceRecord
from dra._runtime.enforcement import ClaimHooks
from dra._runtime.hookdir import HookDir
from dra._runtime.watchdog import Verdict, Watchdog, WatchdogSettings
from dra.driver import DriverContext, Enforcement, Preload, Quota
from dra.testing.runtime import mount_script, runtime_unavailable
from drivers.hami_core_gpu.driver import HamiCoreGpuDriver

STUB_ENV = ("HOOKCORE_STUB_DEVICES", "HOOKCORE_STUB_NVML_DRIVER", "HOOKCORE_STUB_NVML_CUDA",
            "HOOKCORE_STUB_NVML_FAIL", "HOOKCORE_STUB_NVML_EVENTS", "STUB_NVML_PROCESSES")
GiB = 1 << 30
CGROUP_ROOT = Path("/sys/fs/cgroup/pids")


def _unavailable() -> str:
    why = runtime_unavailable()
    if not why and not (CGROUP_ROOT / "cgroup.procs").exists() and not Path("/sys/fs/cgroup/cgroup.procs").exists():
        why = "no writable cgroup hierarchy"
    return why


def static_program(d: Path) -> Path:
    """A statically linked program that waits (in `d`): what no preload can reach."""
    (d / "sleeper.c").write_text("#include <unistd.h>\nint main(void) { for (;;) pause(); }\n")
    proc = subprocess.run(["gcc", "-static", "-O1", "-o", str(d / "sleeper"), str(d / "sleeper.c")],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"gcc -static failed (libc6-dev has libc.a): {proc.stderr}")
    return d / "sleeper"


@dataclasses.dataclass
class Claim:
    uid: str
    namespace: str
    name: str
    device: str
    gpu_uuid: str
    pod_uid: str
    mounts: tuple[Any, ...]


def sleeping(pid: int) -> bool:
    """Whether the process is in an interruptible sleep (state S): done starting, waiting."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "S"


class Events:
    """The verdicts as the Event sink got them."""

    def __init__(self) -> None:
        self.got: list[Verdict] = []

    def emit(self, verdict: Verdict) -> None:
        self.got.append(verdict)


class Rig:
    def __init__(self, root: Path, stub: Path) -> None:
        self.root = root
        self.state = root / "state"
        self.driver = HamiCoreGpuDriver()
        self.driver.setup(DriverContext(node_name="node-a", pool_name="node-a", settings={"health": "off"},
                                        fake="h200x8"))
        self.checkpoint = Checkpoint(self.state)
        self.hook_dir = HookDir(root / "hookdir")
        self.library = dra.hook_library("vgpu")
        self.hset = self.hook_dir.install(self.library)
        self.hooks = ClaimHooks(self.state, self.hook_dir, Preload.FILE)
        self.procs_file = root / "nvml-processes"
        self.procs_file.write_text("")
        os.environ["STUB_NVML_PROCESSES"] = str(self.procs_file)
        self.lines: dict[int, str] = {}
        self.children: list[subprocess.Popen[bytes]] = []
        self.cgroup = CGROUP_ROOT / f"dra-watchdog-test-{os.getpid()}-{uuidlib.uuid4().hex[:6]}"
        self.events = Events()
        self.taint_calls = 0
        self.registry = CollectorRegistry()

    def gpu(self, name: str) -> tuple[str, int]:
        g = self.driver.by_name[name]
        return g.uuid, g.index

    def watchdog(self, **settings: Any) -> Watchdog:
        def taints() -> None:
            self.taint_calls += 1

        claims_dir = self.checkpoint.claims_dir  # as the daemon wires it
        return Watchdog(self.driver, self.checkpoint.records, self.state / "hooks", self.events, self.registry,
                        WatchdogSettings(**settings), on_taints=taints, clock=self.clock,
                        records_stamp=lambda: os.stat(claims_dir).st_mtime_ns)

    now = 1000.0

    def clock(self) -> float:
        return self.now

    def claim(self, device: str = "hami-gpu-0", memory: int = 4 * GiB, cores: int = 30,
              action: str | None = None, hook_cores: int | None = None) -> Claim:
        """A prepared claim of one share of `device`, with its hook dir, as prepare leaves it
        (`hook_cores`: what the hook enforces, when the config changes it, e.g. computeLimit: false)."""
        uid = str(uuidlib.uuid4())
        gpu_uuid, _ = self.gpu(device)
        plan = self.hooks.plan(Enforcement(self.library, [Quota(gpu_uuid, memory, hook_cores or cores)]))
        self.hooks.create(uid, plan)
        config = {"apiVersion": "hami-core-gpu.project-hami.io/v1alpha1", "kind": "GpuConfig"}
        if action:
            config["watchdogAction"] = action
        rec = ClaimRecord(uid, "team-a", f"claim-{uid[:6]}", PREPARED, self.checkpoint.boot_id, devices=(
            DeviceRecord(self.driver.name, "gpu", "node-a", device, str(uuidlib.uuid4()),
                         {"memory": memory, "cores": cores}, state={"uuid": gpu_uuid}, config=config),),
            enforcement={**plan.to_json(), "set": str(self.hset.path)}, updated_at=time.time())
        self.checkpoint.put(rec)
        edits = self.hooks.edits(uid, plan, self.hset)
        return Claim(uid, rec.namespace, rec.name, device, gpu_uuid, str(uuidlib.uuid4()), edits.mounts)

    def end(self, claim: Claim) -> None:
        self.checkpoint.delete(claim.uid)
        self.hooks.remove(claim.uid)

    def start(self, claim: Claim | None, argv: list[str], pod_uid: str | None = None,
              env: dict[str, str] | None = None) -> int:
        """`argv` in the claim's mounts (a private mount namespace) and its pod's cgroup; the PID."""
        scratch = tempfile.mkdtemp(prefix="wd-", dir=self.root)
        lines = mount_script(claim.mounts, scratch) if claim else ["set -eu"]
        pod = pod_uid or (claim.pod_uid if claim else None)
        if pod:
            container = uuidlib.uuid4().hex + uuidlib.uuid4().hex  # 64 hex digits, as containerd's IDs
            cg = self.cgroup / "kubepods" / "besteffort" / f"pod{pod}" / container
            cg.mkdir(parents=True)
            lines.append(f"echo $$ > {shlex.quote(str(cg / 'cgroup.procs'))}")
        extra = " ".join(shlex.quote(f"{k}={v}") for k, v in (env or {}).items())
        lines.append(f"exec env -i PATH=/usr/bin:/bin {extra} {' '.join(shlex.quote(a) for a in argv)}")
        cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(lines)] if claim else \
            ["sh", "-c", "\n".join(lines)]
        child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.children.append(child)
        # Wait until the exec happened (the comm is no longer sh's) and the program sleeps: the
        # dynamic loader has mapped its preload by then (a process on a GPU is long past that).
        name = Path(argv[0]).name[:15]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if Path(f"/proc/{child.pid}/comm").read_text().strip() == name and sleeping(child.pid):
                    return child.pid
            except OSError:
                pass
            if child.poll() is not None:
                raise AssertionError(f"{argv} exited early: {child.stderr.read().decode() if child.stderr else ''}")
            time.sleep(0.01)
        raise AssertionError(f"{argv} did not start in 10 s")

    def on_gpu(self, pid: int, device: str, memory: int, utilization: int | None = None) -> None:
        """The stub NVML lists `pid` on `device` from now on."""
        _, index = self.gpu(device)
        self.lines[pid] = f"{index} {pid} {memory}" + (f" {utilization}" if utilization is not None else "")
        self.procs_file.write_text("".join(line + "\n" for line in self.lines.values()))

    def alive(self, pid: int) -> bool:
        child = next(c for c in self.children if c.pid == pid)
        return child.poll() is None

    def close(self) -> None:
        for c in self.children:
            if c.poll() is None:
                c.send_signal(signal.SIGKILL)
            c.wait()
        for d in sorted(self.cgroup.rglob("*"), key=lambda p: -len(p.parts)) if self.cgroup.exists() else []:
            if d.is_dir():
                d.rmdir()
        if self.cgroup.exists():
            self.cgroup.rmdir()
        self.driver.close()
