"""MPS: claims that ask for it (``GpuConfig`` ``sharing: mps``) run as clients of one MPS server
per GPU, which this daemon keeps running.

Why one control daemon per GPU, not per claim: MPS exists to run several processes' kernels on
one GPU at once. Clients of one server share the GPU's SMs concurrently, each held to its
``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``; clients of two servers on one GPU are time-sliced like
two ordinary processes, so per-claim daemons would give the claims of one GPU nothing MPS
promises. The price: the claims of a GPU share a server, and a fatal fault in one client ends
every client of that server (NVIDIA documents this; MIG is the answer for tenants that must
not share a fault domain).

Per GPU, under ``mpsRoot`` (``/run/hami-core-gpu/mps``): ``<uuid>/pipe`` and ``<uuid>/log`` (the
daemon's ``CUDA_MPS_PIPE_DIRECTORY`` and ``CUDA_MPS_LOG_DIRECTORY``, mounted into the claim's
containers at ``/run/nvidia-mps`` and ``/var/log/nvidia-mps``), and ``<uuid>/claims/<claim uid>``,
one empty directory per prepared MPS claim: the record that survives a restart of this daemon.
A GPU with claims there gets its control daemon (``nvidia-cuda-mps-control -f``, a child of
this daemon, with ``CUDA_VISIBLE_DEVICES`` = the GPU) started at start or first prepare, and
stopped (``quit``) when its last claim is unprepared. A watcher asks every running daemon for its
servers (``get_server_list``) every few seconds: one that does not answer is restarted, and its
GPU is reported unhealthy to kubelet until it answers again. A control daemon left by an earlier
run of this daemon (killed with -9) answers on its pipe and is adopted, not replaced: running
clients keep their server.

A claim's containers get ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` = its ``cores`` and
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` = its ``memory``, both per client process (MPS has no
per-container limit). They are the client's environment: a tenant that changes them gets other
limits (MPS is for cooperating tenants; MIG isolates the others), and one that can reach the pipe
can send the control daemon commands (``quit``): the watcher then restarts it, clearing whatever
the tenant left where the socket goes. hookcore stays loaded for what MPS does not do: the claim's memory quota
over all its processes together, and the totals NVML and ``cudaMemGetInfo`` report (the quota);
the hook's compute limiter is off under MPS (the SM percentage is the compute limit).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import dra
from dra import ContainerEdits, Mount, PrepareError

log = logging.getLogger(__name__)

CONTAINER_PIPE = "/run/nvidia-mps"
CONTAINER_LOG = "/var/log/nvidia-mps"
RW = ("rw", "nosuid", "nodev", "bind")
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes with the NUL


@dataclasses.dataclass
class _Gpu:
    uuid: str
    process: subprocess.Popen[bytes] | None = None
    healthy: bool = True
    restarts: int = 0


class MpsDaemons:
    """The MPS control daemons of this node's GPUs (one per GPU with MPS claims)."""

    def __init__(self, root: Path, program: str, on_change: Callable[[], None], interval: float = 5.0) -> None:
        self.root = root
        self.program = program
        self.on_change = on_change
        self.interval = interval
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
        return sorted(p.name for p in d.iterdir()) if d.is_dir() else []

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

    def add_claim(self, uuid: str, claim: str) -> None:
        """Record the claim on the GPU and make sure its control daemon runs (prepare)."""
        with self._lock:
            (self.root / uuid / "claims" / claim).mkdir(parents=True, exist_ok=True)
            self._ensure(uuid)
            if not self._answers(uuid, 10.0):
                raise RuntimeError(f"the MPS control daemon of GPU {uuid} does not answer on {self.pipe(uuid)};"
                                   f" see {self.logs(uuid)}/control.log")

    def admit(self, claim: str, uuids: Sequence[str], names: Sequence[str]) -> None:
        """Make `claim` a client of its GPU's server at prepare; refused (PrepareError) unless the
        claim is on one GPU (a process talks to one MPS server) or when the server cannot be had."""
        if len(uuids) != 1:
            raise PrepareError(f"sharing: mps needs the claim on one GPU (a process talks to one MPS server); it"
                               f" has {len(uuids)}: {list(names)}; ask for one device")
        try:
            self.add_claim(uuids[0], claim)
        except (OSError, RuntimeError) as exc:
            raise PrepareError(f"device {names[0]}: MPS: {exc}") from exc

    def claim_edits(self, uuid: str, cores: int, memory: int) -> ContainerEdits:
        """An MPS claim's edits: its server's pipe and log dirs, the SM and pinned-memory limits."""
        return ContainerEdits(env=container_env(cores, memory), mounts=container_mounts(self, uuid))

    def remove_claim(self, uuid: str, claim: str) -> None:
        """Forget the claim; quit the GPU's control daemon after its last claim (unprepare)."""
        with self._lock:
            try:
                (self.root / uuid / "claims" / claim).rmdir()
            except FileNotFoundError:
                return  # not an MPS claim of this GPU (or already forgotten)
            if not self.claims(uuid):
                self._quit(uuid)

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
        if self.ask(uuid, "get_server_list") is not None:
            log.info("MPS control daemon of an earlier run adopted", extra={"gpu": uuid})
            return
        self._spawn(g)

    def _spawn(self, g: _Gpu) -> None:
        socket_path = self.pipe(g.uuid) / "control"
        if len(str(socket_path)) > MAX_SOCKET_PATH:
            raise RuntimeError(f"the MPS control socket {socket_path} is longer than a unix socket path may be"
                               f" ({MAX_SOCKET_PATH} chars): set a shorter --set mpsRoot (now {self.root})")
        for d in (self.pipe(g.uuid), self.logs(g.uuid)):
            d.mkdir(parents=True, exist_ok=True)
        # Claims' containers can write the pipe dir: whatever sits where the socket goes (a dead
        # daemon's socket, or a tenant's file or directory) would keep a new daemon from listening.
        if socket_path.is_dir() and not socket_path.is_symlink():
            shutil.rmtree(socket_path, ignore_errors=True)
        elif socket_path.exists() or socket_path.is_symlink():
            socket_path.unlink(missing_ok=True)
        env = {**os.environ, **self.env(g.uuid), "CUDA_VISIBLE_DEVICES": g.uuid}
        try:
            g.process = subprocess.Popen([self.program, "-f"], env=env, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            raise RuntimeError(f"cannot start the MPS control daemon {self.program!r} for GPU {g.uuid}: {exc}; set"
                               " --set mpsControl=<path of nvidia-cuda-mps-control>") from exc
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
            return dra.until(lambda: self._stop.is_set() or self.ask(uuid, "get_server_list") is not None,
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
                if not exited and self.ask(g.uuid, "get_server_list") is not None:
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
    return (Mount(str(daemons.pipe(uuid)), CONTAINER_PIPE, RW), Mount(str(daemons.logs(uuid)), CONTAINER_LOG, RW))


def container_env(cores: int, memory: int) -> dict[str, str]:
    """The client limits of a claim's processes: SM percentage and pinned memory (CUDA device 0)."""
    return {
        "CUDA_MPS_PIPE_DIRECTORY": CONTAINER_PIPE,
        "CUDA_MPS_LOG_DIRECTORY": CONTAINER_LOG,
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(cores),
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={memory >> 20}M",
    }


def for_node(root: Path, given_root: bool, program: str | None, fake: tuple[Path, Path] | None,
             on_change: Callable[[], None]) -> MpsDaemons:
    """The node's MPS daemons: under `root` and `program` (None: nvidia-cuda-mps-control), or on a
    fake node (`fake` = its MPS root and fake control program) the fake's, unless ``mpsRoot`` was
    `given_root` by the admin."""
    if fake is not None:
        root = root if given_root else fake[0]
        program = program or str(fake[1])
    return MpsDaemons(root, program or "nvidia-cuda-mps-control", on_change)
