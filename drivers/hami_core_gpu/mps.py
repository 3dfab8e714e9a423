"""MPS: claims that ask for it (``GpuConfig`` ``sharing: mps``) run as clients of one MPS server
per GPU, which this daemon keeps running.

Why one control daemon per GPU, not per claim: MPS exists to run several processes' kernels on
one GPU at once. Clients of one server share the GPU's SMs concurrently, each held to its
``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``; clients of two servers on one GPU are time-sliced like
two ordinary processes, so per-claim daemons would give the claims of one GPU nothing MPS
promises. The price: the claims of a GPU share a server, and a fatal fault in one client ends
every client of that server (NVIDIA documents this; MIG is the answer for tenants that must
not share a fault domain). So a GPU's server serves the claims of one namespace only
(``mpsSharing=namespace``, the default): a claim of another namespace is refused at prepare
(kubelet retries it) until the GPU's MPS claims have ended; ``mpsSharing=any`` is the admin
accepting servers shared across namespaces (review 2026-12-04 #11).

Per GPU, under ``mpsRoot`` (``/run/hami-core-gpu/mps``): ``<uuid>/pipe`` and ``<uuid>/log`` (the
control daemon's ``CUDA_MPS_PIPE_DIRECTORY`` and ``CUDA_MPS_LOG_DIRECTORY``; its output goes to
``log/control.log``), and ``<uuid>/claims/<claim uid>``, one file per prepared MPS claim holding
the claim's namespace: the record that survives a restart of this daemon. A GPU with claims there
gets its control daemon (``nvidia-cuda-mps-control -f``, a child of this daemon, as root, with
``CUDA_VISIBLE_DEVICES`` = the GPU) started at start or first prepare, and stopped (``quit``) when
its last claim is unprepared. A watcher asks every running daemon for its servers
(``get_server_list``) every few seconds: one that does not answer is restarted, and its GPU is
reported unhealthy to kubelet until it answers again. A control daemon left by an earlier run of
this daemon (killed with -9) answers on its pipe and is adopted, not replaced: running clients
keep their server. `MpsDaemons.server_pids` names the control daemons and their servers (children
of the control daemon, as the client's uid) for the watchdog: they are GPU processes of no claim.

Nothing a claim's container can write is opened by the root control daemon (review 2026-12-04
#1): the containers get the pipe dir only, mounted **read-only** at ``/run/nvidia-mps`` (MPS
clients only connect() to its socket and open existing files: proven with the real control
daemon on an H200, as root and uid 65534, ``bench/mps_mounts_h200.py``), and no log dir. Before
every start of a control daemon its pipe dir is emptied and its log dir made anew, neither
following a symlink, so nothing left there survives. The pipe dir keeps its inode (the read-only
bind mounts of running containers hold it and see the new daemon's socket), except once, the
first start after an upgrade from a version that mounted it read-write: then it is made anew, and
containers of that version keep only a deleted directory. Why the control daemon stays root:
one run as another uid serves only that uid's clients (a root client gets CUDA error 805 on the
H200), and containers run as any uid.

A claim's containers get ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` = its ``cores`` and
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` = its ``memory``, both per client process (MPS has no
per-container limit). They are the client's environment, so the hook's compute limiter stays on
as a ceiling (the claim's ``cores`` in its read-only config, review 2026-12-04 #5), and it limits
SM x time: each batch of kernels costs its device time x the share of the GPU's SMs its context
may use: the SMs the driver gives the context (``cuCtxGetExecAffinity``, not the environment) over
the GPU's SM count that this daemon read from NVML at discovery and wrote into the claim's config
(``HOOKCORE_DEVICE_SMS_<i>``; CUDA inside an MPS client answers its provisioned count for the
device's too, 38 of the H200's 132 at 30%, so without the daemon's count the fraction is 1 and the
client is held twice: 11.5% of native). An honest client
at the claim's percentage is charged that share of its time and is not limited twice (before this
the two stacked: on the H200 30% SMs under the hook's 30 cores gave 11.7% of native matmul
throughput, MPS alone 39.2%); a client that raises its own percentage gets more SMs and is charged
for them, so it still gets at most ``cores``% of SM x time (raised to 100% under the hook's 30:
35.5%, as the hook alone, 35.6%; measured before this change, which charges a client on every SM
as before). Where the driver rounds a percentage up to
whole SMs (30% of the H200's 132 is 39.6) an honest client loses about 1% of its share to the
ceiling (the hook-ceiling section of bench/mps_mounts_h200.py records what the H200 reports); copies
and memsets are charged in full (copy engines are not partitioned). hookcore also keeps the claim's
memory quota over all its processes together and the totals NVML and ``cudaMemGetInfo`` report.
What remains (documented, not closed): root in a container can still send the control daemon
``quit``, ``shutdown_server`` or ``terminate_client`` (connect() needs no write access, and MPS
obeys root; uid != 0 gets "Not enough privilege"): the watcher restarts it, and with
``mpsSharing=namespace`` only the tenant's own claims lose their server meanwhile. MPS serves one
uid at a time per server: a client of another uid waits until the running server's clients end
(H200, review #11), which `mpsSharing=namespace` keeps inside one namespace. The pipe dir's
``log`` FIFO (0777) stays writable on a read-only mount: a tenant can add lines to
``control.log``, which nothing here parses.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import stat
import subprocess
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import dra
from dra import ContainerEdits, Mount, PrepareError

log = logging.getLogger(__name__)

CONTAINER_PIPE = "/run/nvidia-mps"
RO = ("ro", "nosuid", "nodev", "noexec", "bind")
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes with the NUL
SHARING = ("namespace", "any")
LAYOUT = "pipe-read-only"
"""Stamp in ``<uuid>``: its pipe dir was made by a version that mounts it read-only."""
PID_FILE = "nvidia-cuda-mps-control.pid"  # in the pipe dir, written by the control daemon
UNKNOWN = ""  # the namespace of a claim record of an earlier version (an empty directory)


class SharingRefused(Exception):
    """A claim of another namespace than the GPU's MPS claims, under ``mpsSharing=namespace``."""


@dataclasses.dataclass
class _Gpu:
    uuid: str
    process: subprocess.Popen[bytes] | None = None
    healthy: bool = True
    restarts: int = 0
    pid: int | None = None  # the control daemon's (spawned or adopted)
    servers: frozenset[int] = frozenset()  # its servers at the last get_server_list


class MpsDaemons:
    """The MPS control daemons of this node's GPUs (one per GPU with MPS claims)."""

    def __init__(self, root: Path, program: str, on_change: Callable[[], None], interval: float = 5.0,
                 sharing: str = "namespace") -> None:
        if sharing not in SHARING:
            raise ValueError(f"mpsSharing must be one of {list(SHARING)}, not {sharing!r}")
        self.root = root
        self.program = program
        self.on_change = on_change
        self.interval = interval
        self.sharing = sharing
        self._gpus: dict[str, _Gpu] = {}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- paths ---------------------------------------------------------------------------------
    def pipe(self, uuid: str) -> Path:
        return self.root / uuid / "pipe"

    def logs(self, uuid: str) -> Path:
        return self.root / uuid / "log"

    def claims(self, uuid: str) -> list[str]:
        d = self.root / uuid / "claims"
        return sorted(p.name for p in d.iterdir() if not p.name.startswith(".")) if d.is_dir() else []

    def namespaces(self, uuid: str) -> dict[str, str]:
        """The GPU's MPS claims and their namespaces (UNKNOWN for a record of an earlier version)."""
        out = {}
        for claim in self.claims(uuid):
            path = self.root / uuid / "claims" / claim
            try:
                out[claim] = path.read_text().strip() if path.is_file() else UNKNOWN
            except OSError:
                out[claim] = UNKNOWN
        return out

    def env(self, uuid: str) -> dict[str, str]:
        return {"CUDA_MPS_PIPE_DIRECTORY": str(self.pipe(uuid)), "CUDA_MPS_LOG_DIRECTORY": str(self.logs(uuid))}

    # --- life cycle ----------------------------------------------------------------------------
    def start(self, gpus: Sequence[str]) -> None:
        """At daemon start: a control daemon for every GPU that has MPS claims; then the watcher."""
        for uuid in gpus:
            with self._lock:
                if self.claims(uuid):
                    self._ensure(uuid)
                elif (self.root / uuid).exists():
                    self._quit(uuid)  # its last claim went while the daemon was down
        self._thread = threading.Thread(target=self._watch, name="mps-watch", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop watching; the control daemons keep serving running claims (the next start adopts them)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def stop_all(self) -> None:
        """Quit every control daemon (tests; a node being drained)."""
        with self._lock:
            for uuid in list(self._gpus):
                self._quit(uuid)

    def add_claim(self, uuid: str, claim: str, namespace: str) -> None:
        """Record the claim on the GPU and make sure its control daemon runs (prepare); SharingRefused
        when the GPU's server serves another namespace and ``mpsSharing`` is ``namespace``."""
        with self._lock:
            self._check_sharing(uuid, claim, namespace)
            self._record(uuid, claim, namespace)
            self._ensure(uuid)
            if not self._answers(uuid, 10.0):
                raise RuntimeError(f"the MPS control daemon of GPU {uuid} does not answer on {self.pipe(uuid)};"
                                   f" see {self.logs(uuid)}/control.log")

    def admit(self, claim: dra.ClaimRef, uuids: Sequence[str], names: Sequence[str]) -> None:
        """Make `claim` a client of its GPU's server at prepare; refused (PrepareError) unless the
        claim is on one GPU (a process talks to one MPS server), when the server serves another
        namespace (``mpsSharing``), or when the server cannot be had."""
        if len(uuids) != 1:
            raise PrepareError(f"sharing: mps needs the claim on one GPU (a process talks to one MPS server); it"
                               f" has {len(uuids)}: {list(names)}; ask for one device")
        try:
            self.add_claim(uuids[0], claim.uid, claim.namespace)
        except (OSError, RuntimeError, SharingRefused) as exc:
            raise PrepareError(f"device {names[0]}: MPS: {exc}") from exc

    def claim_edits(self, uuid: str, cores: int, memory: int) -> ContainerEdits:
        """An MPS claim's edits: its server's pipe dir (read-only), the SM and pinned-memory limits."""
        return ContainerEdits(env=container_env(cores, memory), mounts=container_mounts(self, uuid))

    def remove_claim(self, uuid: str, claim: str) -> None:
        """Forget the claim; quit the GPU's control daemon after its last claim (unprepare)."""
        with self._lock:
            path = self.root / uuid / "claims" / claim
            try:
                if path.is_dir() and not path.is_symlink():
                    path.rmdir()  # a record of an earlier version
                else:
                    path.unlink()
            except FileNotFoundError:
                return  # not an MPS claim of this GPU (or already forgotten)
            if not self.claims(uuid):
                self._quit(uuid)

    def server_pids(self) -> frozenset[int]:
        """The control daemons' PIDs, their servers' (``get_server_list`` of the last watcher round or
        prepare) and their children now (a server started since: MPS starts one when a client
        connects); for the watchdog, to which they are GPU processes of no claim. Never waits on a
        restart in progress (no lock: a snapshot of the GPUs is enough)."""
        pids: set[int] = set()
        for g in list(self._gpus.values()):
            pids |= g.servers
            if g.pid is not None:
                pids.add(g.pid)
                pids |= _children(g.pid)
        return frozenset(pids)

    def _check_sharing(self, uuid: str, claim: str, namespace: str) -> None:
        if self.sharing == "any":
            return
        others = {ns for c, ns in self.namespaces(uuid).items() if c != claim and ns != namespace}
        if others:
            shown = ", ".join("an unknown namespace (a claim prepared by an earlier version)" if ns == UNKNOWN
                              else repr(ns) for ns in sorted(others))
            raise SharingRefused(f"the GPU's MPS server serves claims of namespace {shown}, and this claim is in"
                                 f" {namespace!r}: with mpsSharing=namespace a GPU's MPS server serves one namespace"
                                 " (its clients share one fault domain and one uid at a time); kubelet retries and"
                                 " this claim is prepared once those claims end; --set mpsSharing=any lets"
                                 " namespaces share an MPS server")

    def _record(self, uuid: str, claim: str, namespace: str) -> None:
        d = self.root / uuid / "claims"
        d.mkdir(parents=True, exist_ok=True)
        path = d / claim
        if path.is_dir() and not path.is_symlink():
            path.rmdir()  # an earlier version's record of this claim: now with its namespace
        tmp = d / f".{claim}.tmp"
        tmp.write_text(namespace + "\n")
        os.replace(tmp, path)

    def healthy(self, uuid: str) -> bool | None:
        """False while the GPU's control daemon is being restarted; None when it has none."""
        with self._lock:
            g = self._gpus.get(uuid)
            return None if g is None else g.healthy

    def status(self) -> dict[str, _Gpu]:
        with self._lock:
            return dict(self._gpus)

    # --- the control program -------------------------------------------------------------------
    def ask(self, uuid: str, command: str) -> str | None:
        """One command to the GPU's control daemon; its answer, or None when none answers."""
        try:
            r = subprocess.run([self.program], input=command + "\n", capture_output=True, text=True, timeout=10,
                               env={**os.environ, **self.env(uuid)})
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("MPS control program failed", extra={"gpu": uuid, "command": command, "error": str(exc)})
            return None
        return r.stdout if r.returncode == 0 else None

    def _ensure(self, uuid: str) -> None:
        g = self._gpus.setdefault(uuid, _Gpu(uuid))
        if g.process is not None and g.process.poll() is None:
            return
        if self._list_servers(g):
            g.pid = _adopted_pid(self.pipe(uuid))
            log.info("MPS control daemon of an earlier run adopted", extra={"gpu": uuid, "pid": g.pid})
            return
        self._spawn(g)

    def _list_servers(self, g: _Gpu) -> bool:
        """Ask for the servers (recorded for `server_pids`); whether the control daemon answered."""
        out = self.ask(g.uuid, "get_server_list")
        if out is None:
            return False
        g.servers = frozenset(int(w) for w in out.split() if w.isdigit())
        return True

    def fresh_dirs(self, uuid: str) -> None:
        """Before a control daemon starts: its pipe dir emptied (its inode kept, see the module's
        doc; made anew once after an upgrade) and its log dir made anew, the old ``control.log``
        kept beside it as ``control.log.prev``; nothing is followed through a symlink."""
        base = self.root / uuid
        base.mkdir(parents=True, exist_ok=True)
        pipe, logs, stamp = self.pipe(uuid), self.logs(uuid), base / LAYOUT
        if _is_dir(pipe) and stamp.is_file() and not stamp.is_symlink():
            for entry in list(pipe.iterdir()):
                _remove(entry)
        else:
            _remove(pipe)
            pipe.mkdir()
        old = logs / "control.log"
        if old.is_file() and not old.is_symlink():
            os.replace(old, base / "control.log.prev")
        _remove(logs)
        logs.mkdir()
        for d in (pipe, logs):
            d.chmod(0o755)
        stamp.touch()

    def _spawn(self, g: _Gpu) -> None:
        socket_path = self.pipe(g.uuid) / "control"
        if len(str(socket_path)) > MAX_SOCKET_PATH:
            raise RuntimeError(f"the MPS control socket {socket_path} is longer than a unix socket path may be"
                               f" ({MAX_SOCKET_PATH} chars): set a shorter --set mpsRoot (now {self.root})")
        self.fresh_dirs(g.uuid)
        env = {**os.environ, **self.env(g.uuid), "CUDA_VISIBLE_DEVICES": g.uuid}
        out = os.open(self.logs(g.uuid) / "control.log",
                      os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
        try:
            g.process = subprocess.Popen([self.program, "-f"], env=env, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=out, start_new_session=True)
        except OSError as exc:
            raise RuntimeError(f"cannot start the MPS control daemon {self.program!r} for GPU {g.uuid}: {exc}; set"
                               " --set mpsControl=<path of nvidia-cuda-mps-control>") from exc
        finally:
            os.close(out)
        g.pid, g.servers = g.process.pid, frozenset()
        log.info("MPS control daemon started", extra={"gpu": g.uuid, "pid": g.process.pid})

    def _quit(self, uuid: str) -> None:
        g = self._gpus.pop(uuid, None)
        self.ask(uuid, "quit")
        if g is not None and g.process is not None:
            try:
                g.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                g.process.kill()
                g.process.wait()
        shutil.rmtree(self.root / uuid, ignore_errors=True)
        log.info("MPS control daemon stopped (no MPS claim left)", extra={"gpu": uuid})

    def _answers(self, uuid: str, within: float) -> bool:
        """Whether the GPU's control daemon answers within `within` seconds (a new one needs a moment)."""
        try:
            g = self._gpus.get(uuid) or _Gpu(uuid)
            return dra.until(lambda: self._stop.is_set() or self._list_servers(g),
                             timeout=within, interval=0.1, what="the MPS control daemon") and not self._stop.is_set()
        except dra.WaitTimeout:
            return False

    # --- the watcher ---------------------------------------------------------------------------
    def check(self) -> None:
        """One round: a control daemon that does not answer is reported unhealthy, restarted, and
        reported healthy once the new one answers (each change reaches `on_change` at once)."""
        with self._lock:
            gpus = list(self._gpus.values())
        for g in gpus:
            with self._lock:
                if self._gpus.get(g.uuid) is not g:
                    continue  # quit meanwhile
                exited = g.process is not None and g.process.poll() is not None
                if not exited and self._list_servers(g):
                    if not g.healthy:
                        g.healthy = True
                        self.on_change()
                    continue
                log.error("MPS control daemon not answering: restarting it", extra={"gpu": g.uuid})
                if g.healthy:
                    g.healthy = False
                    self.on_change()
                if g.process is not None and g.process.poll() is None:
                    g.process.kill()
                    g.process.wait()
                g.restarts += 1
                self._spawn(g)
                if self._answers(g.uuid, 10.0):
                    g.healthy = True
                    self.on_change()

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.check()
            except Exception:  # the watcher must not die; the next round tries again
                log.exception("MPS watcher round failed")


def container_mounts(daemons: MpsDaemons, uuid: str) -> tuple[Mount, ...]:
    """The pipe dir, read-only: the one MPS mount (no log dir; module doc)."""
    return (Mount(str(daemons.pipe(uuid)), CONTAINER_PIPE, RO),)


def container_env(cores: int, memory: int) -> dict[str, str]:
    """The client limits of a claim's processes: SM percentage and pinned memory (CUDA device 0)."""
    return {
        "CUDA_MPS_PIPE_DIRECTORY": CONTAINER_PIPE,
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(cores),
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={memory >> 20}M",
    }


def for_node(root: Path, given_root: bool, program: str | None, fake: tuple[Path, Path] | None,
             on_change: Callable[[], None], sharing: str = "namespace") -> MpsDaemons:
    """The node's MPS daemons: under `root` and `program` (None: nvidia-cuda-mps-control), or on a
    fake node (`fake` = its MPS root and fake control program) the fake's, unless ``mpsRoot`` was
    `given_root` by the admin."""
    if fake is not None:
        root = root if given_root else fake[0]
        program = program or str(fake[1])
    return MpsDaemons(root, program or "nvidia-cuda-mps-control", on_change, sharing=sharing)


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _remove(path: Path) -> None:
    """Remove whatever is at `path`, never following a symlink (rmtree's fd-based walk does not)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(path)
    else:
        path.unlink()


def _adopted_pid(pipe: Path) -> int | None:
    """An adopted control daemon's PID: its pid file, if that PID runs an MPS control program (its
    command line names ``nvidia-cuda-mps-control``: the real one's argv[0], the fake's script)."""
    try:
        with open(pipe / PID_FILE, "rb") as f:
            pid = int(f.read(32).strip())
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read(8192).split(b"\0")[:3]
    except (OSError, ValueError):
        return None
    return pid if any(os.path.basename(a) == PID_FILE.removesuffix(".pid").encode() for a in argv) else None


def _children(pid: int) -> set[int]:
    """The children of every thread of `pid` now (MPS servers are the control daemon's children)."""
    out: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks[:256]:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.update(int(w) for w in f.read(65536).split() if w.isdigit())
        except OSError:
            continue
    return out
