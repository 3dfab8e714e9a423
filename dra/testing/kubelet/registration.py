"""Discovery and registration as kubelet's plugin manager does them: scan the registration dir,
``GetInfo``, validate, choose the DRA service, ``NotifyRegistrationStatus``; one channel per
registered instance."""

from __future__ import annotations

import dataclasses
import os
import socket
import stat
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

from dra._runtime.kubelet._proto import pluginregistration_v1_pb2, pluginregistration_v1_pb2_grpc
from dra._runtime.wait import until
from dra.testing.kubelet.results import RegisteredPlugin, RegistrationFailure

KUBELET_DRA_SERVICES: tuple[str, ...] = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
"""What a 1.34+ kubelet knows, in the order of its own list (the plugin's order decides)."""

DIAL_TIMEOUT_S = 10.0
GET_INFO_TIMEOUT_S = 1.0
NOTIFY_TIMEOUT_S = 5.0


@dataclasses.dataclass
class Instance:
    plugin: RegisteredPlugin
    ident: tuple[int, int, int]  # (st_dev, st_ino, st_ctime_ns) of the registration socket
    channel: grpc.Channel
    state: grpc.ChannelConnectivity | None = None

    def on_state(self, state: grpc.ChannelConnectivity) -> None:
        self.state = state


def service_name(version: str) -> str:
    return version if "." in version else f"{version}.DRAPlugin"


class Registrar:
    """Registers the DRA plugins whose registration sockets appear in `registrar_dir`, as kubelet does."""

    def __init__(
        self,
        registrar_dir: Path | str,
        *,
        services: Sequence[str] = KUBELET_DRA_SERVICES,
        force_service: str | None = None,
        dial_timeout: float = DIAL_TIMEOUT_S,
        retry_delay: float = 0.5,
    ) -> None:
        self.registrar_dir = Path(registrar_dir)
        self.dial_timeout = dial_timeout
        self.retry_delay = retry_delay
        self._retry_at: dict[str, tuple[tuple[int, int, int], float]] = {}  # failed socket -> (ident, when)
        self.services = tuple(services)
        self.force_service = service_name(force_service) if force_service else None
        self.failures: list[RegistrationFailure] = []
        self._instances: dict[str, Instance] = {}  # registration socket path -> instance
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

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
            inst = Instance(plugin, ident, grpc.insecure_channel(f"unix:{plugin.endpoint}"))
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

    def close(self) -> None:
        """Stop watching and close every instance's channel."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=5)
            self._watcher = None
        with self._lock:
            for path in list(self._instances):
                self._deregister(path)
