"""A kubelet stand-in that speaks the kubelet plugin gRPC APIs over real unix sockets.

It does what kubelet's plugin manager and DRA manager do, in the same order and with the same
timeouts, so a test exercises exactly the code paths kubelet does:

1. discovery: scan the registration dir (recursively) for unix sockets, skipping names that
   start with ``.``; a new socket (or a socket file replaced by a new one) is registered, a
   removed one deregistered (`scan()` once, or `watch()` in a background thread);
2. registration: dial the socket, ``GetInfo`` with a 1 s timeout, check ``type == "DRAPlugin"``
   and a non-empty name, reject an endpoint another socket already registered, pick the first
   entry of the PLUGIN's ``supported_versions`` that this kubelet knows (``v1.DRAPlugin``,
   ``v1beta1.DRAPlugin``; or `force_service`), then ``NotifyRegistrationStatus`` with a 5 s
   timeout (``plugin_registered=False`` and the reason on any failure, which is recorded in
   `failures` and retried on the next scan);
3. calls: one insecure channel per instance to ``unix:<endpoint>`` (an empty endpoint means
   the registration socket), connected right after registration; each call goes to the most
   recently registered instance of the driver whose channel is READY, else the most recent one;
   prepare/unprepare get a 45 s timeout and are checked as kubelet checks them (an entry for a
   claim not asked for, or a missing entry, is a `KubeletCallError`).

Results are plain dataclasses. Example::

    with KubeletHarness(registrar_dir) as kubelet:
        plugin = kubelet.wait_for_plugin("gpu.example.com")
        res = kubelet.prepare([ClaimRef(uid, "default", "claim")])           # service chosen
        res = kubelet.prepare([ClaimRef(uid, "default", "claim")], version="v1beta1")
        errors = kubelet.unprepare([ClaimRef(uid, "default", "claim")])
        with kubelet.watch_health() as watch:
            devices = watch.next(timeout=5)
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc

from dra._runtime.kubelet._proto import (
    dra_health_v1_pb2,
    dra_health_v1_pb2_grpc,
    dra_health_v1alpha1_pb2,
    dra_health_v1alpha1_pb2_grpc,
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
)
from dra._runtime.kubelet.handler import ClaimOutcome, PreparedResult
from dra._runtime.wait import until
from dra.driver import ClaimRef

KUBELET_DRA_SERVICES: tuple[str, ...] = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
"""What a 1.34+ kubelet knows, in the order of its own list (the plugin's order decides)."""

DIAL_TIMEOUT_S = 10.0
GET_INFO_TIMEOUT_S = 1.0
NOTIFY_TIMEOUT_S = 5.0
CALL_TIMEOUT_S = 45.0

_HEALTH_NAMES = {0: "Unknown", 1: "Healthy", 2: "Unhealthy"}


class KubeletCallError(Exception):
    """A response kubelet would reject (missing or unexpected claim entries)."""


@dataclasses.dataclass(frozen=True)
class RegisteredPlugin:
    """One registered plugin instance."""

    name: str
    endpoint: str
    registration_socket: str
    supported_versions: tuple[str, ...]
    service: str  # the DRA service chosen at registration, e.g. "v1.DRAPlugin"
    registered_at: float  # time.monotonic()


@dataclasses.dataclass(frozen=True)
class RegistrationFailure:
    socket: str
    error: str


@dataclasses.dataclass(frozen=True)
class PreparedDevice:
    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None  # None when unset (always with v1beta1)


@dataclasses.dataclass(frozen=True)
class PreparedClaim:
    """The answer for one claim: devices, or a non-empty error."""

    devices: tuple[PreparedDevice, ...]
    error: str


@dataclasses.dataclass(frozen=True)
class DeviceHealth:
    pool_name: str
    device_name: str
    health: str  # "Healthy", "Unhealthy" or "Unknown"
    last_updated_time: int
    health_check_timeout_seconds: int
    message: str


@dataclasses.dataclass
class _Instance:
    plugin: RegisteredPlugin
    ident: tuple[int, int, int]  # (st_dev, st_ino, st_ctime_ns) of the registration socket
    channel: grpc.Channel
    state: grpc.ChannelConnectivity | None = None

    def on_state(self, state: grpc.ChannelConnectivity) -> None:
        self.state = state


def _service_name(version: str) -> str:
    return version if "." in version else f"{version}.DRAPlugin"


class HealthWatch:
    """A `NodeWatchResources` stream; `next()` returns each full device list as it arrives."""

    def __init__(self, call: Any) -> None:
        self._call = call
        self._queue: queue.Queue[list[DeviceHealth] | BaseException | None] = queue.Queue()
        self._thread = threading.Thread(target=self._read, name="harness-health", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for resp in self._call:
                self._queue.put(
                    [
                        DeviceHealth(
                            pool_name=d.device.pool_name,
                            device_name=d.device.device_name,
                            health=_HEALTH_NAMES.get(d.health, "Unknown"),
                            last_updated_time=d.last_updated_time,
                            health_check_timeout_seconds=d.health_check_timeout_seconds,
                            message=d.message,
                        )
                        for d in resp.devices
                    ]
                )
            self._queue.put(None)
        except grpc.RpcError as exc:
            self._queue.put(exc)

    def next(self, timeout: float = 10.0) -> list[DeviceHealth]:
        """The next message; raises TimeoutError, the stream's RpcError, or EOFError at its end."""
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no health message within {timeout:g} s") from None
        if item is None:
            self._queue.put(None)
            raise EOFError("health stream ended")
        if isinstance(item, BaseException):
            self._queue.put(item)
            raise item
        return item

    def close(self) -> None:
        self._call.cancel()

    def __enter__(self) -> HealthWatch:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class KubeletHarness:
    """Plays kubelet for DRA plugins whose registration sockets appear in `registrar_dir`."""

    def __init__(
        self,
        registrar_dir: Path | str,
        *,
        services: Sequence[str] = KUBELET_DRA_SERVICES,
        force_service: str | None = None,
        call_timeout: float = CALL_TIMEOUT_S,
        dial_timeout: float = DIAL_TIMEOUT_S,
        retry_delay: float = 0.5,
    ) -> None:
        self.registrar_dir = Path(registrar_dir)
        self.dial_timeout = dial_timeout
        self.retry_delay = retry_delay
        self._retry_at: dict[str, tuple[tuple[int, int, int], float]] = {}  # failed socket -> (ident, when)
        self.services = tuple(services)
        self.force_service = _service_name(force_service) if force_service else None
        self.call_timeout = call_timeout
        self.failures: list[RegistrationFailure] = []
        self._instances: dict[str, _Instance] = {}  # registration socket path -> instance
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    # -- discovery and registration --------------------------------------------------------------

    def _sockets(self) -> dict[str, tuple[int, int, int]]:
        found: dict[str, tuple[int, int, int]] = {}
        if not self.registrar_dir.is_dir():
            return found
        for root, dirs, files in os.walk(self.registrar_dir):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            for name in files:
                if name.startswith("."):
                    continue
                path = os.path.join(root, name)
                try:
                    st = os.lstat(path)
                except FileNotFoundError:
                    continue
                if stat.S_ISSOCK(st.st_mode):
                    found[path] = (st.st_dev, st.st_ino, st.st_ctime_ns)
        return found

    def scan(self) -> None:
        """One discovery pass: deregister removed/replaced sockets, register new ones."""
        with self._lock:
            found = self._sockets()
            for path, inst in list(self._instances.items()):
                if found.get(path) != inst.ident:
                    self._deregister(path)
            now = time.monotonic()
            for path, ident in sorted(found.items()):
                if path in self._instances:
                    continue
                failed = self._retry_at.get(path)
                if failed is not None and failed[0] == ident and now < failed[1]:
                    continue  # kubelet retries failed registrations later, not in a hot loop
                self._retry_at.pop(path, None)
                if not self._register(path, ident):
                    self._retry_at[path] = (ident, time.monotonic() + self.retry_delay)

    def watch(self, interval: float = 0.05) -> None:
        """Scan in a background thread until `close()` (kubelet uses inotify; polling is enough)."""
        if self._watcher is not None:
            return

        def loop() -> None:
            while not self._stop.wait(interval):
                self.scan()

        self.scan()
        self._watcher = threading.Thread(target=loop, name="harness-watch", daemon=True)
        self._watcher.start()

    def _fail(self, path: str, error: str) -> None:
        self.failures.append(RegistrationFailure(path, error))

    def _register(self, path: str, ident: tuple[int, int, int]) -> bool:
        # A socket nobody listens on (left by a killed process) refuses at once; failing fast here
        # instead of retrying until the dial timeout keeps scans quick. It is retried later.
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(self.dial_timeout)
            try:
                probe.connect(path)
            except OSError as exc:
                self._fail(path, f"dial failed: {exc.strerror or exc}")
                return False
        channel = grpc.insecure_channel(f"unix:{path}")
        try:
            try:
                grpc.channel_ready_future(channel).result(timeout=self.dial_timeout)
            except grpc.FutureTimeoutError:
                self._fail(path, "dial timed out")
                return False
            stub = pluginregistration_v1_pb2_grpc.RegistrationStub(channel)
            try:
                info = stub.GetInfo(pluginregistration_v1_pb2.InfoRequest(), timeout=GET_INFO_TIMEOUT_S)
            except grpc.RpcError as exc:
                self._fail(path, f"GetInfo failed: {exc.code()} {exc.details()}")
                return False
            error, plugin = self._validate(path, info)
            try:
                stub.NotifyRegistrationStatus(
                    pluginregistration_v1_pb2.RegistrationStatus(plugin_registered=plugin is not None, error=error),
                    timeout=NOTIFY_TIMEOUT_S,
                )
            except grpc.RpcError as exc:
                # Since 1.36 kubelet treats a failed notification as a failed registration.
                self._fail(path, f"NotifyRegistrationStatus failed: {exc.code()} {exc.details()}")
                return False
            if plugin is None:
                self._fail(path, error)
                return False
            inst = _Instance(plugin, ident, grpc.insecure_channel(f"unix:{plugin.endpoint}"))
            inst.channel.subscribe(inst.on_state, try_to_connect=True)
            self._instances[path] = inst
            return True
        finally:
            channel.close()

    def _validate(self, path: str, info: Any) -> tuple[str, RegisteredPlugin | None]:
        if info.type != "DRAPlugin":
            return f"no handler registered for plugin type: {info.type}", None
        if not info.name:
            return "plugin name is empty", None
        endpoint = info.endpoint or path
        for other in self._instances.values():
            if other.plugin.endpoint == endpoint:
                return f"endpoint {endpoint} already registered for driver {other.plugin.name}", None
        versions = tuple(info.supported_versions)
        if not versions:
            return "empty list of supported versions", None
        if self.force_service is not None:
            chosen = self.force_service if self.force_service in versions else None
        else:
            chosen = next((v for v in versions if v in self.services), None)
        if chosen is None:
            return (
                f"none of the services supported by the plugin {list(versions)} are supported by the "
                f"kubelet {list((self.force_service,) if self.force_service else self.services)}"
            ), None
        return "", RegisteredPlugin(
            name=info.name,
            endpoint=endpoint,
            registration_socket=path,
            supported_versions=versions,
            service=chosen,
            registered_at=time.monotonic(),
        )

    def _deregister(self, path: str) -> None:
        inst = self._instances.pop(path, None)
        if inst is not None:
            inst.channel.unsubscribe(inst.on_state)
            inst.channel.close()

    def plugins(self, driver: str | None = None) -> list[RegisteredPlugin]:
        """Registered instances (of `driver`), most recently registered first."""
        with self._lock:
            found = [i.plugin for i in self._instances.values() if driver is None or i.plugin.name == driver]
        return sorted(found, key=lambda p: p.registered_at, reverse=True)

    def wait_for_plugin(
        self,
        driver: str | None = None,
        *,
        timeout: float = 10.0,
        endpoint: str | None = None,
        count: int = 1,
        newer_than: float | None = None,
    ) -> RegisteredPlugin:
        """Scan until `count` instances of `driver` (any driver when None) are registered; the newest.

        `newer_than` (a `time.monotonic()` value, e.g. taken before restarting a daemon) counts only
        instances registered after it, so a stale socket of the killed instance is not mistaken
        for the restarted one.
        """

        def registered() -> RegisteredPlugin | None:
            self.scan()
            found = [
                p
                for p in self.plugins(driver)
                if (endpoint is None or p.endpoint == str(endpoint))
                and (newer_than is None or p.registered_at > newer_than)
            ]
            return found[0] if len(found) >= count else None

        def not_registered(message: str) -> TimeoutError:
            return TimeoutError(f"plugin {driver or '(any)'} not registered: {message} "
                                f"(registered: {self.plugins()}; failures: {self.failures[-3:]})")

        return until(registered, timeout=timeout, interval=0.02, what=f"{count} instance(s)",
                     error=not_registered)

    def wait_gone(self, registration_socket: str, timeout: float = 10.0) -> None:
        """Scan until the instance of `registration_socket` is deregistered."""

        def gone() -> bool:
            self.scan()
            return all(p.registration_socket != str(registration_socket) for p in self.plugins())

        until(gone, timeout=timeout, interval=0.02, what=f"{registration_socket} to deregister",
              error=lambda m: TimeoutError(f"{registration_socket} still registered: {m}"))

    # -- calls -----------------------------------------------------------------------------------

    def _pick(self, driver: str | None, endpoint: str | None) -> _Instance:
        with self._lock:
            cands = [
                i
                for i in self._instances.values()
                if (driver is None or i.plugin.name == driver)
                and (endpoint is None or i.plugin.endpoint == str(endpoint))
            ]
        if not cands:
            raise KubeletCallError(f"no registered plugin for driver {driver or '(any)'} endpoint {endpoint}")
        if driver is None and len({i.plugin.name for i in cands}) > 1:
            raise KubeletCallError("several drivers registered; pass driver=")
        cands.sort(key=lambda i: i.plugin.registered_at, reverse=True)
        ready = [i for i in cands if i.state == grpc.ChannelConnectivity.READY]
        return (ready or cands)[0]

    def _node_stub(self, inst: _Instance, version: str | None) -> tuple[Any, Any, str]:
        service = _service_name(version) if version else inst.plugin.service
        if service == "v1.DRAPlugin":
            return dra_v1_pb2_grpc.DRAPluginStub(inst.channel), dra_v1_pb2, "v1"
        if service == "v1beta1.DRAPlugin":
            return dra_v1beta1_pb2_grpc.DRAPluginStub(inst.channel), dra_v1beta1_pb2, "v1beta1"
        raise ValueError(f"unknown DRA service {service!r}")

    def prepare(
        self,
        claims: Iterable[ClaimRef],
        *,
        driver: str | None = None,
        version: str | None = None,
        endpoint: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, PreparedClaim]:
        """NodePrepareResources; `version` "v1"/"v1beta1" overrides the registered service."""
        inst = self._pick(driver, endpoint)
        stub, pb, api = self._node_stub(inst, version)
        claims = list(claims)
        request = pb.NodePrepareResourcesRequest(
            claims=[pb.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]
        )
        resp = stub.NodePrepareResources(request, timeout=timeout or self.call_timeout)
        self._check("NodePrepareResources", claims, resp.claims.keys())
        out: dict[str, PreparedClaim] = {}
        for uid, r in resp.claims.items():
            devices = tuple(
                PreparedDevice(
                    request_names=tuple(d.request_names),
                    pool_name=d.pool_name,
                    device_name=d.device_name,
                    cdi_device_ids=tuple(d.cdi_device_ids),
                    share_id=d.share_id if api == "v1" and d.HasField("share_id") else None,
                )
                for d in r.devices
            )
            out[uid] = PreparedClaim(devices=devices, error=r.error)
        return out

    def unprepare(
        self,
        claims: Iterable[ClaimRef],
        *,
        driver: str | None = None,
        version: str | None = None,
        endpoint: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, str]:
        """NodeUnprepareResources: claim UID -> error ("" on success)."""
        inst = self._pick(driver, endpoint)
        stub, pb, _ = self._node_stub(inst, version)
        claims = list(claims)
        request = pb.NodeUnprepareResourcesRequest(
            claims=[pb.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]
        )
        resp = stub.NodeUnprepareResources(request, timeout=timeout or self.call_timeout)
        self._check("NodeUnprepareResources", claims, resp.claims.keys())
        return {uid: r.error for uid, r in resp.claims.items()}

    def probe(
        self, *, driver: str | None = None, version: str | None = None, endpoint: str | None = None
    ) -> dict[str, PreparedClaim]:
        """An empty NodePrepareResources request, as liveness probes send; returns the (empty) map."""
        inst = self._pick(driver, endpoint)
        stub, pb, _ = self._node_stub(inst, version)
        resp = stub.NodePrepareResources(pb.NodePrepareResourcesRequest(), timeout=self.call_timeout)
        return {uid: PreparedClaim(devices=(), error=r.error) for uid, r in resp.claims.items()}

    @staticmethod
    def _check(method: str, claims: Sequence[ClaimRef], got: Iterable[str]) -> None:
        asked = {c.uid for c in claims}
        got = set(got)
        unexpected = got - asked
        if unexpected:
            raise KubeletCallError(f"{method} returned result for unknown claim UID(s) {sorted(unexpected)}")
        missing = asked - got
        if missing:
            raise KubeletCallError(f"{method} skipped {len(missing)} ResourceClaims: {sorted(missing)}")

    def watch_health(
        self, *, driver: str | None = None, version: str = "v1", endpoint: str | None = None
    ) -> HealthWatch:
        """Open NodeWatchResources (``v1`` or ``v1alpha1`` DRAResourceHealth) on the DRA socket."""
        inst = self._pick(driver, endpoint)
        if version == "v1":
            stub: Any = dra_health_v1_pb2_grpc.DRAResourceHealthStub(inst.channel)
            request: Any = dra_health_v1_pb2.NodeWatchResourcesRequest()
        elif version == "v1alpha1":
            stub = dra_health_v1alpha1_pb2_grpc.DRAResourceHealthStub(inst.channel)
            request = dra_health_v1alpha1_pb2.NodeWatchResourcesRequest()
        else:
            raise ValueError(f"unknown health API version {version!r}")
        return HealthWatch(stub.NodeWatchResources(request))

    # -- lifecycle -------------------------------------------------------------------------------

    def close(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=5)
            self._watcher = None
        with self._lock:
            for path in list(self._instances):
                self._deregister(path)

    def __enter__(self) -> KubeletHarness:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


# -- test doubles and helpers ------------------------------------------------------------------


@contextlib.contextmanager
def short_tmpdir(prefix: str = "dra") -> Iterator[Path]:
    """A temporary dir under /tmp with a short path, so socket paths stay under 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class RecordingHandler:
    """A `ClaimHandler` at the kubelet seam for tests of the gRPC layer: records every call.

    By default each claim gets one device (pool "pool", device ``dev-<uid>``, request "req",
    CDI ID ``example.com/claim=<uid>``, share ID ``share-<uid>``); `outcomes` overrides per UID,
    `unprepare_errors` sets unprepare answers per UID (others succeed), `delay` sleeps per call,
    `fail` makes every call raise it.
    """

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.outcomes: dict[str, ClaimOutcome] = {}
        self.unprepare_errors: dict[str, str] = {}
        self.omit: set[str] = set()  # UIDs left out of answers (a buggy handler)
        self.fail: Exception | None = None
        self.prepare_calls: list[list[ClaimRef]] = []
        self.unprepare_calls: list[list[ClaimRef]] = []
        self._lock = threading.Lock()

    @staticmethod
    def default_outcome(uid: str) -> ClaimOutcome:
        return ClaimOutcome(
            devices=(
                PreparedResult(
                    request_names=("req",),
                    pool="pool",
                    device=f"dev-{uid}",
                    cdi_device_ids=(f"example.com/claim={uid}",),
                    share_id=f"share-{uid}",
                ),
            )
        )

    def prepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, ClaimOutcome]:
        with self._lock:
            self.prepare_calls.append(list(claims))
        if self.delay:
            time.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        return {
            c.uid: self.outcomes.get(c.uid) or self.default_outcome(c.uid) for c in claims if c.uid not in self.omit
        }

    def unprepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        with self._lock:
            self.unprepare_calls.append(list(claims))
        if self.delay:
            time.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        return {c.uid: self.unprepare_errors.get(c.uid, "") for c in claims if c.uid not in self.omit}
