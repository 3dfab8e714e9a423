"""`KubeletPlugin`: the registration and DRA gRPC servers of one driver instance."""

from __future__ import annotations

import concurrent.futures
import logging
import os
import secrets
import socket
import stat
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

import grpc

from dra._runtime.kubelet._proto import (
    dra_health_v1_pb2,
    dra_health_v1_pb2_grpc,
    dra_health_v1alpha1_pb2,
    dra_health_v1alpha1_pb2_grpc,
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2_grpc,
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
)
from dra._runtime.kubelet.handler import ClaimHandler, ClaimOutcome
from dra._runtime.kubelet.health import HealthMonitor, HealthServicer, HealthSource, check_resend_interval
from dra._runtime.kubelet.lock import SerializeLock
from dra._runtime.kubelet.node import NodeV1beta1Servicer, NodeV1Servicer
from dra._runtime.kubelet.paths import KubeletPaths, PluginPaths
from dra._runtime.kubelet.registration import RegistrationServicer, supported_versions
from dra.driver import ClaimRef, HealthEvent
from dra.errors import UserError

log = logging.getLogger(__name__)

DEFAULT_MAX_WORKERS = 64


class KubeletPlugin:
    """The kubelet-facing side of one driver instance: registration + DRA gRPC servers.

    Contract (used by ``dra run``, see ``dra/_runtime/daemon.py``)::

        plugin = KubeletPlugin("gpu.example.com", handler, driver.health, KubeletPaths(...),
                               pod_uid=os.environ.get("POD_UID"))
        plugin.start()                  # raises UserError on bad paths / sockets in use
        plugin.registered               # for /readyz: kubelet accepted the registration
        plugin.check()                  # for /healthz: "" or what is wrong with our sockets
        ...
        plugin.stop()                   # on SIGTERM/SIGINT; removes this instance's sockets

    Arguments:
      driver_name: the DRA driver name (ResourceSlice ``spec.driver``); ``PluginInfo.name``.
      handler: the version-free `ClaimHandler` both DRA API versions call (thread-safe; called
        concurrently from up to `max_workers` gRPC threads).
      health_source: a callable like ``Driver.health``; called once in `start()`. When it (or
        the argument) is None the health services are neither served nor advertised.
      paths: directory roots (kubelet's defaults when None); see `dra._runtime.kubelet.paths`.
      pod_uid: set it (downward API ``metadata.uid``) for rolling updates: sockets are then named
        ``<driver>-<podUID>-reg.sock`` and ``dra-<podUID>.sock`` (hashed when too long, see
        `dra._runtime.kubelet.paths`) so an old and a new instance
        serve side by side (kubelet >= 1.33). Without it the names are ``<driver>-reg.sock`` and
        ``dra.sock``.
      max_workers: gRPC worker threads of the DRA server (>= 32; each open health stream holds one).
      health_resend_interval: seconds between resends of an unchanged health list; must stay
        below the device health timeout (kubelet's default 30 s, or `health_device_timeout_s`).
      health_device_timeout_s: ``health_check_timeout_seconds`` sent per device (0: kubelet's default).
      health_clock: source of ``last_updated_time`` (Unix seconds); injectable for tests.
      pool_name: the pool the devices' health is reported in (the daemon's node name, which is
        also its ResourceSlice pool); default: this host's name.
      serialize: wrap every handler call in `lock` (the cross-process flock). Leave False when the
        handler takes the lock itself (it is not reentrant).

    `start()` order: check both socket paths against the 107-byte limit (UserError naming the path,
    its length and the fix), create the plugin dir, start the driver's health monitor, serve the
    DRA socket (v1, v1beta1 and, with health, v1alpha1 + v1 DRAResourceHealth), and only then
    create the registration socket, so the endpoint kubelet learns from GetInfo already accepts
    connections. A stale file at one of OUR socket paths is replaced (a warning is logged when
    something still answers on it); sockets of other instances are never touched.

    GetInfo answers type ``DRAPlugin``, the driver name, the absolute DRA socket path and
    ``["v1.DRAPlugin", "v1beta1.DRAPlugin"]`` plus, with health, ``"v1alpha1.DRAResourceHealth",
    "v1.DRAResourceHealth"``. NotifyRegistrationStatus is recorded (`registered`,
    `registration_error`, `wait_registered`) and always answered successfully.

    `stop(grace)` removes the registration socket first (kubelet then deregisters this instance
    and uses another one if any), then stops the DRA server after letting in-flight calls finish
    for up to `grace` seconds, and removes the DRA socket: each only when the file at the path is
    still the one this instance created. `stop()` is idempotent; SIGTERM handling is the caller's.
    """

    def __init__(
        self,
        driver_name: str,
        handler: ClaimHandler,
        health_source: HealthSource | None = None,
        paths: KubeletPaths | None = None,
        pod_uid: str | None = None,
        *,
        max_workers: int = DEFAULT_MAX_WORKERS,
        health_resend_interval: float = 10.0,
        health_device_timeout_s: int = 0,
        health_clock: Callable[[], float] = time.time,
        serialize: bool = False,
        pool_name: str | None = None,
    ) -> None:
        if not driver_name or "/" in driver_name or driver_name.startswith("."):
            raise UserError(f"Invalid DRA driver name {driver_name!r}: it must be a DNS subdomain.")
        if pod_uid and ("/" in pod_uid or pod_uid.startswith(".")):
            raise UserError(f"Invalid pod UID {pod_uid!r}: pass the pod's metadata.uid (downward API).")
        self.driver_name = driver_name
        self.pod_uid = pod_uid or None
        self.paths: PluginPaths = (paths or KubeletPaths()).resolve(driver_name, self.pod_uid)
        self.lock = SerializeLock(self.paths.lock_file)
        self._handler: ClaimHandler = _SerializedHandler(handler, self.lock) if serialize else handler
        check_resend_interval(health_resend_interval, health_device_timeout_s)
        if max_workers < 1:
            raise ValueError("max_workers must be positive")
        self._health_source = health_source
        self._pool_name = pool_name
        self._max_workers = max_workers
        self._health_resend_interval = health_resend_interval
        self._health_device_timeout_s = health_device_timeout_s
        self._health_clock = health_clock
        self._monitor: HealthMonitor | None = None
        self._registration: RegistrationServicer | None = None
        self._dra_server: grpc.Server | None = None
        self._reg_server: grpc.Server | None = None
        self._owned: dict[Path, tuple[int, int, int]] = {}  # socket path -> identity of the file we made
        self._state_lock = threading.Lock()
        self._started = False

    # -- public state ----------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """The absolute DRA socket path announced to kubelet."""
        return str(self.paths.dra_socket)

    @property
    def health_enabled(self) -> bool:
        return self._monitor is not None

    def health_snapshot(self) -> list[HealthEvent] | None:
        """The devices' health as last streamed to kubelet; None without health or before the first."""
        return self._monitor.current()[1] if self._monitor is not None else None

    @property
    def supported_versions(self) -> list[str]:
        return supported_versions(self.health_enabled)

    @property
    def running(self) -> bool:
        return self._started

    @property
    def registered(self) -> bool:
        """True while kubelet's last NotifyRegistrationStatus said registered (and not stopped)."""
        return self._registration is not None and self._registration.registered

    @property
    def registration_error(self) -> str:
        return self._registration.error if self._registration is not None else ""

    def wait_registered(self, timeout: float | None = None) -> bool:
        """Block until kubelet reports the registration; False on timeout or when not started."""
        return self._registration is not None and self._registration.wait_registered(timeout)

    def check(self, timeout: float = 2.0) -> str:
        """Liveness self-check as kubelet would see us: "" when healthy, else what is wrong.

        Dials the registration socket (GetInfo) and the DRA socket (an empty v1
        NodePrepareResources, a probe the handler never sees), each through its public path.
        """
        if not self._started:
            return "kubelet plugin not started"
        try:
            with grpc.insecure_channel(f"unix:{self.paths.registration_socket}") as ch:
                info = pluginregistration_v1_pb2_grpc.RegistrationStub(ch).GetInfo(
                    pluginregistration_v1_pb2.InfoRequest(), timeout=timeout
                )
            if info.name != self.driver_name or info.endpoint != self.endpoint:
                return f"registration socket {self.paths.registration_socket} answers for another plugin"
        except grpc.RpcError as exc:
            return f"registration socket {self.paths.registration_socket}: {exc.code().name} {exc.details()}"
        try:
            with grpc.insecure_channel(f"unix:{self.endpoint}") as ch:
                dra_v1_pb2_grpc.DRAPluginStub(ch).NodePrepareResources(
                    dra_v1_pb2.NodePrepareResourcesRequest(), timeout=timeout
                )
        except grpc.RpcError as exc:
            return f"DRA socket {self.endpoint}: {exc.code().name} {exc.details()}"
        return ""

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        with self._state_lock:
            if self._started:
                raise RuntimeError("KubeletPlugin already started")
            self.paths.check_socket_lengths()
            self._mkdir(self.paths.plugin_dir)
            self._mkdir(self.paths.registrar_dir)
            try:
                self._start_health()
                self._start_dra()
                self._start_registration()
            except BaseException:
                self._stop_locked(grace=0)
                raise
            self._started = True
        log.info(
            "kubelet plugin serving",
            extra={
                "driver": self.driver_name,
                "dra_socket": self.endpoint,
                "registration_socket": str(self.paths.registration_socket),
                "versions": self.supported_versions,
            },
        )

    def stop(self, grace: float = 5.0) -> None:
        with self._state_lock:
            self._stop_locked(grace)
            self._started = False

    def __enter__(self) -> KubeletPlugin:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- internals -------------------------------------------------------------------------------

    @staticmethod
    def _mkdir(path: Path) -> None:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"Cannot create directory {path}: {exc.strerror}.") from exc

    def _start_health(self) -> None:
        if self._health_source is None:
            return
        it = self._health_source()
        if it is None:
            return
        self._monitor = HealthMonitor(self._health_source)
        self._monitor.start(it)

    def _start_dra(self) -> None:
        server = grpc.server(
            concurrent.futures.ThreadPoolExecutor(max_workers=self._max_workers, thread_name_prefix="dra-grpc")
        )
        dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(NodeV1Servicer(self._handler), server)
        dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(NodeV1beta1Servicer(self._handler), server)
        if self._monitor is not None:
            for pb, grpc_mod in (
                (dra_health_v1alpha1_pb2, dra_health_v1alpha1_pb2_grpc),
                (dra_health_v1_pb2, dra_health_v1_pb2_grpc),
            ):
                servicer = HealthServicer(
                    self._monitor,
                    pb,
                    pool_name=self._pool_name or os.uname().nodename,
                    resend_interval=self._health_resend_interval,
                    device_timeout_s=self._health_device_timeout_s,
                    clock=self._health_clock,
                )
                grpc_mod.add_DRAResourceHealthServicer_to_server(servicer, server)
        self._dra_server = server
        self._listen(server, self.paths.dra_socket)
        server.start()

    def _start_registration(self) -> None:
        self._registration = RegistrationServicer(self.driver_name, self.endpoint, self.supported_versions)
        server = grpc.server(
            concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="dra-registration")
        )
        pluginregistration_v1_pb2_grpc.add_RegistrationServicer_to_server(self._registration, server)
        self._reg_server = server
        self._listen(server, self.paths.registration_socket)
        server.start()

    def _listen(self, server: grpc.Server, path: Path) -> None:
        """Listen on a hidden temporary name, then rename it onto `path`.

        gRPC unlinks the path it bound when the server stops, whatever file is there by then;
        binding a private name and renaming it keeps gRPC away from the public name (we remove
        that ourselves, only while it is still our socket). The rename also replaces a stale
        socket of our own name atomically. Kubelet ignores names starting with a dot.
        """
        self._check_stale(path)
        tmp = path.parent / f".{secrets.token_hex(3)}"
        while tmp.exists():
            tmp = path.parent / f".{secrets.token_hex(3)}"
        try:
            port = server.add_insecure_port(f"unix:{tmp}")
        except RuntimeError as exc:
            raise UserError(f"Cannot listen on unix socket {path} (via {tmp.name}): {exc}.") from exc
        if not port:
            raise UserError(f"Cannot listen on unix socket {path} (via {tmp.name}).")
        os.rename(tmp, path)
        self._owned[path] = _identity(path)

    def _check_stale(self, path: Path) -> None:
        """Vet a leftover file at one of our own socket paths (e.g. from a SIGKILLed instance)."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            raise UserError(f"{path} is a directory; it must be free for this plugin's socket.")
        if stat.S_ISSOCK(st.st_mode) and _answers(path):
            log.warning(
                "replacing a socket another process still serves; run each instance with its own "
                "pod UID (rolling updates) so they never share socket names",
                extra={"socket": str(path)},
            )
        else:
            log.info("replacing stale socket", extra={"socket": str(path)})

    def _remove_own(self, path: Path) -> None:
        ident = self._owned.pop(path, None)
        if ident is None:
            return
        try:
            current = _identity(path)
        except FileNotFoundError:
            return
        if current == ident:
            path.unlink(missing_ok=True)
        else:
            log.warning("socket path reused by someone else; left in place", extra={"socket": str(path)})

    def _stop_locked(self, grace: float) -> None:
        if self._reg_server is not None:
            self._reg_server.stop(0).wait()
            self._reg_server = None
        self._remove_own(self.paths.registration_socket)
        if self._registration is not None:
            self._registration.mark_unregistered()
        if self._monitor is not None:
            self._monitor.stop()
        if self._dra_server is not None:
            self._dra_server.stop(grace).wait()
            self._dra_server = None
        self._remove_own(self.paths.dra_socket)
        if self._started:
            log.info("kubelet plugin stopped", extra={"driver": self.driver_name})


def _identity(path: Path) -> tuple[int, int, int]:
    """(device, inode, ctime ns): inode numbers alone are reused quickly after an unlink."""
    st = os.lstat(path)
    return st.st_dev, st.st_ino, st.st_ctime_ns


def _answers(path: Path) -> bool:
    """True when something accepts connections on the unix socket at `path`."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        try:
            s.connect(str(path))
        except OSError:
            return False
        return True


class _SerializedHandler:
    """A ClaimHandler whose every call holds the cross-process lock."""

    def __init__(self, inner: ClaimHandler, lock: SerializeLock) -> None:
        self._inner = inner
        self._lock = lock

    def prepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, ClaimOutcome]:
        with self._lock.acquire():
            return self._inner.prepare_claims(claims)

    def unprepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        with self._lock.acquire():
            return self._inner.unprepare_claims(claims)
