"""The watchdog's rig on the CPU: the real hami-core-gpu driver on fake H200s (stub NVML), real
claim hook dirs and checkpoint records, and real processes placed as a container runtime would
place them (a pod's cgroup, the claim's CDI mounts in a private mount namespace), listed to the
stub NVML through STUB_NVML_PROCESSES. Its fixtures (`rig`, root only: mount namespaces, cgroups;
`fake_rig`, any user: the same claims, processes made up in a `FakeProc` tree) are the watchdog
tests' (conftest.py) and tests/security's (imported as ``tests.watchdog.watchdog_rig``); the
benches import it too.
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
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from ci_gate import skip_or_fail
from driver_helpers import build_stub_libraries, isolated_env
from kube_helpers import wait_for
from prometheus_client import CollectorRegistry, generate_latest

import dra
from dra._runtime import claim_marker, procinfo
from dra._runtime.checkpoint import PREPARED, Checkpoint, ClaimRecord, DeviceRecord
from dra._runtime.enforcement import ClaimHooks
from dra._runtime.hookdir import HookDir
from dra._runtime.watchdog.loop import Watchdog
from dra._runtime.watchdog.model import Verdict, WatchdogSettings
from dra.driver import DeviceProcess, Driver, DriverContext, Enforcement, Mount, Preload, Quota
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


def c_program(d: Path, name: str, source: str, *flags: str) -> Path:
    """`source` built with gcc in `d` as `name`."""
    (d / f"{name}.c").write_text(source)
    proc = subprocess.run(["gcc", "-O1", *flags, "-o", str(d / name), str(d / f"{name}.c")],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"gcc {' '.join(flags)} failed (libc6-dev has libc.a): {proc.stderr}")
    return d / name


def static_program(d: Path) -> Path:
    """A statically linked program that waits (in `d`): what no preload can reach."""
    return c_program(d, "sleeper", "#include <unistd.h>\nint main(void) { for (;;) pause(); }\n", "-static")


def zombie_program(d: Path) -> Path:
    """A static program whose thread-group leader exits while a second thread waits on: the leader
    is a zombie (no mounts, no memory map at /proc/<pid>), the process runs on."""
    return c_program(d, "zombie", """#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>
static void *wait_forever(void *arg) { for (;;) pause(); return arg; }
int main(void) {
    pthread_t t;
    if (pthread_create(&t, 0, wait_forever, 0) != 0) return 1;
    syscall(SYS_exit, 0); /* this thread only */
    return 0;
}
""", "-static", "-pthread")


def mapper_program(d: Path) -> Path:
    """A (dynamic) program that maps the file argv[1] argv[2] times, each range apart (offset 0 every
    time: no two merge), then waits: a maps file as long as a tenant likes."""
    return c_program(d, "mapper", """#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc != 3) return 2;
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) return 3;
    for (long i = 0, n = atol(argv[2]); i < n; i++)
        if (mmap(0, 4096, PROT_READ, MAP_PRIVATE, fd, 0) == MAP_FAILED) return 4;
    for (;;) pause();
}
""")


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


class ListingDriver(Driver):
    """A driver double for the watchdog alone: no devices, prepares nothing, lists `procs`."""

    name = "dev.example.com"
    cdi_kind = "k8s.dev.example.com/dev"

    def __init__(self, procs: Sequence[DeviceProcess] = ()) -> None:
        self.procs = list(procs)

    def devices(self):  # type: ignore[no-untyped-def]
        return []

    def prepare(self, claim, devices):  # type: ignore[no-untyped-def]
        return []

    def unprepare(self, claim, prepared):  # type: ignore[no-untyped-def]
        return None

    def processes(self) -> Sequence[DeviceProcess]:
        return self.procs


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
              env: dict[str, str] | None = None, mounts: tuple[Mount, ...] = (),
              ready: Callable[[int], bool] | None = None) -> int:
        """`argv` in the claim's mounts (a private mount namespace) plus `mounts` (after the
        claim's, as a pod's own volumes) and its pod's cgroup; the PID, once `ready(pid)` (default:
        the program waits in an interruptible sleep)."""
        scratch = tempfile.mkdtemp(prefix="wd-", dir=self.root)
        all_mounts = (claim.mounts if claim else ()) + mounts
        lines = mount_script(all_mounts, scratch) if all_mounts else ["set -eu"]
        pod = pod_uid or (claim.pod_uid if claim else None)
        if pod:
            container = uuidlib.uuid4().hex + uuidlib.uuid4().hex  # 64 hex digits, as containerd's IDs
            cg = self.cgroup / "kubepods" / "besteffort" / f"pod{pod}" / container
            cg.mkdir(parents=True)
            lines.append(f"echo $$ > {shlex.quote(str(cg / 'cgroup.procs'))}")
        extra = " ".join(shlex.quote(f"{k}={v}") for k, v in (env or {}).items())
        lines.append(f"exec env -i PATH=/usr/bin:/bin {extra} {' '.join(shlex.quote(a) for a in argv)}")
        cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(lines)] if all_mounts else \
            ["sh", "-c", "\n".join(lines)]
        child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.children.append(child)
        # Wait until the exec happened (the comm is no longer sh's) and the program sleeps: the
        # dynamic loader has mapped its preload by then (a process on a GPU is long past that).
        name = Path(argv[0]).name[:15]

        def started() -> bool:
            try:
                if Path(f"/proc/{child.pid}/comm").read_text().strip() == name and (ready or sleeping)(child.pid):
                    return True
            except OSError:
                pass
            if child.poll() is not None:
                raise AssertionError(f"{argv} exited early: {child.stderr.read().decode() if child.stderr else ''}")
            return False

        wait_for(started, 10, 0.01, what=f"{argv} to start")
        return child.pid

    def start_hooked(self, claim: Claim) -> int:
        """The hook's stub CUDA workload in the claim (its first CUDA call made): held by maps, and
        registered in the claim's ledger (what a daemon without maps sees)."""
        import hookcore

        assert self.driver.fake is not None
        env = {"LD_LIBRARY_PATH": str(hookcore.stub_dir()), **self.driver.fake.container_env([claim.gpu_uuid])}
        workload = hookcore.stub_dir().parent / "workload" / "cuda_workload"
        pid = self.start(claim, [str(workload), "--hold", "300"], env=env)
        ledger = self.state / "hooks" / claim.uid / "ledger"

        def registered() -> bool:
            assert self.alive(pid), "the workload exited before the hook registered it"
            return any(p.state == "live" for p in hookcore.read_ledger(ledger).processes)

        wait_for(registered, 20, 0.05, what="the hook to register the workload in the claim's ledger")
        return pid

    def on_gpu(self, pid: int, device: str, memory: int, utilization: int | None = None) -> None:
        """The stub NVML lists `pid` on `device` from now on."""
        _, index = self.gpu(device)
        self.lines[pid] = f"{index} {pid} {memory}" + (f" {utilization}" if utilization is not None else "")
        self.procs_file.write_text("".join(line + "\n" for line in self.lines.values()))

    def off_gpu(self, pid: int) -> None:
        """The stub NVML no longer lists `pid` (it left the device)."""
        self.lines.pop(pid, None)
        self.procs_file.write_text("".join(line + "\n" for line in self.lines.values()))

    def alive(self, pid: int) -> bool:
        child = next(c for c in self.children if c.pid == pid)
        return child.poll() is None

    def wait_gone(self, pid: int) -> int:
        """The exit status of child `pid` (waits up to 10 s): a killed one has -9."""
        return next(c for c in self.children if c.pid == pid).wait(timeout=10)

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


class FakeProc:
    """A /proc tree on disk for the watchdog's readers (``WatchdogSettings.proc``): the daemon's own
    mountinfo (this process's, so the hooks root is found as on the host) and status (`caps`:
    CapEff), and processes written line by line, as hostile as a test likes."""

    def __init__(self, root: Path, caps: int = 0) -> None:
        self.root = root
        (root / "self").mkdir(parents=True)
        (root / "self" / "mountinfo").write_bytes(Path("/proc/self/mountinfo").read_bytes())
        (root / "self" / "status").write_text(f"Name:\tdaemon\nCapEff:\t{caps:016x}\n")

    def process(self, pid: int, start: int = 1000, state: str = "S", ns_tgid: int | None = None,
                cgroup: str = "0::/\n", mountinfo: str | bytes | None = "", maps: bytes | None = b"") -> Path:
        """/proc/<pid> with these files; None: that file unreadable (a directory in its place)."""
        d = self.root / str(pid)
        d.mkdir()
        (d / "stat").write_text(f"{pid} (x) {state} " + " ".join(["0"] * 18) + f" {start} " + " ".join(["0"] * 30))
        (d / "status").write_text(f"Name:\tx\nNStgid:\t{pid}\t{ns_tgid or pid}\n")
        (d / "cgroup").write_text(cgroup)
        for name, content in (("mountinfo", mountinfo), ("maps", maps)):
            if content is None:
                (d / name).mkdir()
            else:
                (d / name).write_bytes(content.encode() if isinstance(content, str) else content)
        return d

    @staticmethod
    def claim_mount(hooks_root: Path, uid: str, file: str = "ledger", mount_id: int = 900) -> str:
        """The mountinfo line of a claim's hook file mounted into a container."""
        hooks = procinfo.hooks_fs(Path("/proc"), hooks_root)
        assert hooks is not None
        return (f"{mount_id} 800 {hooks.dev} {hooks.path}/{uid}/{file} /run/hookcore/vgpu/{file} "
                "rw,nosuid,nodev,relatime - ext4 /dev/vda rw\n")


def pod_cgroup(pod_uid: str) -> str:
    return f"0::/kubepods/besteffort/pod{pod_uid}/{'c' * 64}\n"


OTHER_MAPS = b"7f0000000000-7f0000001000 r-xp 00000000 08:01 4242   /usr/lib/libc.so.6\n"  # no hook mapped


@dataclasses.dataclass
class PreparedClaim:
    uid: str
    name: str
    device: str
    pod_uid: str
    marked: bool = False  # no hook: its containers carry the claim's marker (claim_marker)


class PreparedRig:
    """For a driver whose processes come from its stub library: claims prepared by the driver itself
    (its quotas, its hook library, the daemon's checkpoint record) and processes made up in a
    `FakeProc` tree (a claim's mounts, a pod's cgroup, the hook `library` mapped or not). No root."""

    def __init__(self, driver: Any, root: Path, *, device_type: str, config: dict[str, str], library: str) -> None:
        self.driver = driver
        self.device_type, self.config, self.library = device_type, config, library
        self.state = root / "state"
        self.checkpoint = Checkpoint(self.state)
        self.hook_dir = HookDir(root / "hookdir")
        self.hooks = ClaimHooks(self.state, self.hook_dir, Preload.FILE)
        self.proc = FakeProc(root / "proc", caps=1 << procinfo.CAP_SYS_PTRACE)
        self.events = Events()
        self.registry = CollectorRegistry()
        self.hset: Any = None

    def claim(self, device: str, memory: int | None, cores: int = 30, config: Any = None,
              recorded: dict[str, str] | None = None) -> PreparedClaim:
        """A claim prepared as the daemon prepares it: its hook dir (config and ledger), or, where
        the driver gives no enforcement (its devices hold their shares), its marker; `recorded`:
        the record's copy of the claim's config (default: the rig's). `memory` None: the device is
        allocated whole (not shared: a MIG device), its allocation consumes no capacity."""
        uid = str(uuidlib.uuid4())
        ref = dra.ClaimRef(uid, "team-a", f"claim-{uid[:6]}")
        capacity = {"memory": memory, "cores": cores} if memory is not None else {}
        alloc = dra.AllocatedDevice(self.device_type, "node-a", device, "s1", capacity, config=config)
        prepared = self.driver.prepare(ref, [alloc])
        enforcement = self.driver.enforcement(ref, prepared)
        hooks_json = None
        if enforcement is None:
            claim_marker.mark(self.hooks, uid, self.driver.name)
        else:
            self.hset = self.hook_dir.install(enforcement.library)
            plan = self.hooks.plan(enforcement)
            self.hooks.create(uid, plan)
            hooks_json = {**plan.to_json(), "set": str(self.hset.path)}
        self.checkpoint.put(ClaimRecord(uid, ref.namespace, ref.name, PREPARED, self.checkpoint.boot_id, devices=(
            DeviceRecord(self.driver.name, self.device_type, "node-a", device, "s1", capacity,
                         state=prepared[0].state, config=self.config if recorded is None else recorded),),
            enforcement=hooks_json, updated_at=time.time()))
        return PreparedClaim(uid, ref.name, device, str(uuidlib.uuid4()), marked=enforcement is None)

    def hook_maps(self) -> bytes:
        """The maps line of the claims' hook library mapped executable (by device and inode)."""
        st = os.stat(self.hset.path / self.library)
        dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
        return f"7f0000000000-7f0000001000 r-xp 00000000 {dev} {st.st_ino}   /usr/lib/{self.library}\n".encode()

    def process(self, pid: int, claim: PreparedClaim | None, held: bool = True) -> None:
        """`pid` in /proc: in `claim`'s pod with its mounts (and its hook mapped, if `held`), or a
        host process in no claim."""
        if claim is None:
            self.proc.process(pid)
            return
        if claim.marked:  # no hook to map: its marker is all its containers carry of the daemon's
            self.proc.process(pid, cgroup=pod_cgroup(claim.pod_uid),
                              mountinfo=FakeProc.claim_mount(self.state / "hooks", claim.uid, claim_marker.MARKER_FILE))
            return
        self.proc.process(pid, cgroup=pod_cgroup(claim.pod_uid),
                          mountinfo=FakeProc.claim_mount(self.state / "hooks", claim.uid),
                          maps=self.hook_maps() if held else OTHER_MAPS)

    def watchdog(self, **settings: Any) -> Watchdog:
        return Watchdog(self.driver, self.checkpoint.records, self.state / "hooks", self.events, self.registry,
                        WatchdogSettings(proc=self.proc.root, **settings))

    def metric(self, line_start: str) -> float:
        for line in generate_latest(self.registry).decode().splitlines():
            if line.startswith(line_start):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"no series {line_start}")


@pytest.fixture(scope="session")
def static_sleeper(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return static_program(tmp_path_factory.mktemp("static"))


@pytest.fixture(scope="session")
def stub_nvml() -> Path:
    return build_stub_libraries() / "libnvidia-ml.so.1"


@pytest.fixture
def rig(stub_nvml: Path) -> Iterator[Rig]:
    why = _unavailable()
    skip_or_fail(why and f"the watchdog rig needs root: {why}")
    with isolated_env(STUB_ENV):
        with tempfile.TemporaryDirectory(prefix="dra-wd-", dir="/tmp") as work:
            r = Rig(Path(work), stub_nvml)
            try:
                yield r
            finally:
                r.close()


@pytest.fixture
def fake_rig(stub_nvml: Path) -> Iterator[Rig]:
    """The rig's driver, claims and checkpoint for processes that exist only in a `FakeProc` tree
    (``rig.watchdog(proc=...)``): no root needed."""
    with isolated_env(STUB_ENV):
        with tempfile.TemporaryDirectory(prefix="dra-wdf-", dir="/tmp") as work:
            r = Rig(Path(work), stub_nvml)
            try:
                yield r
            finally:
                r.close()
