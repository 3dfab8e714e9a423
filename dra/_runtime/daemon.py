"""`dra run DRIVER`: the node daemon, one per driver per node (a DaemonSet pod).

It wires the parts together and owns nothing else:

    driver (entry point in `dra.drivers`)
      ├── Publisher        the driver's devices -> this node's ResourceSlice pool, kept in sync
      ├── ClaimPreparer    kubelet's prepare/unprepare: claim checks, checkpoint, CDI specs
      │     └── MeteredHandler (counts and latencies)
      ├── KubeletPlugin    registration + DRA gRPC sockets that kubelet dials
      ├── Watchdog         every process on the devices checked against its claim (`dra._runtime.watchdog`)
      └── HealthServer     /healthz (sockets answer), /readyz (published and registered), /metrics

Start order: local state repaired first (orphaned CDI specs), then publishing (in the
background; an unreachable API server is retried, not fatal), then the sockets, so kubelet
never reaches a daemon that cannot prepare. SIGTERM/SIGINT stop it in the reverse order and
remove this instance's sockets; the slices stay (kubelet removes them 30 s after the last
instance of the driver is gone, and a restarted daemon adopts them). SIGHUP re-reads the
driver's devices and republishes them if they changed.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import os
import signal
import threading
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer

from dra._runtime import flags, registry
from dra._runtime import logging as dra_logging
from dra._runtime.metrics import DeviceStateCollector, HealthServer, MeteredHandler, Metrics
from dra._runtime.publish import DeviceValidationError, Publisher, PublishSettings, SyncResult, needs_fence
from dra._runtime.publish.fence import warn_if_unfenced
from dra._runtime.publish.layout import SliceLayout, parse_layout
from dra._runtime.watchdog.model import ACTIONS as WATCHDOG_ACTIONS
from dra._runtime.watchdog.model import WatchdogSettings
from dra.driver import ClaimRef, Driver, DriverContext, Preload, RecordedDevice
from dra.errors import UserError

log = logging.getLogger("dra._runtime.daemon")


def parse_settings(pairs: list[str] | None) -> dict[str, str]:
    """``--set key=value`` options as a mapping (a later key wins); UserError on a pair without '='."""
    out: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--set {pair!r}: expected key=value, e.g. --set count=4")
        out[key.strip()] = value
    return out


def _optional(value: str) -> str | None:
    return value or None  # an empty downward-API value or env var: not given


def _quantity(value: str) -> int:
    from dra._runtime.client import quantity_to_int

    return quantity_to_int(value)


@flags.settings
class DaemonSettings:
    """Everything `dra run` is told on its command line: each field is one flag (`dra._runtime.flags`)."""

    node_name: str = flags.flag(help="This node's name (downward API spec.nodeName); also its pool's name.", envvar="NODE_NAME")
    kubeconfig: Path | None = flags.flag(default=None, help="Kubeconfig file; default: in-cluster service account.",
                                         envvar="KUBECONFIG")
    plugin_dir: Path = flags.flag(default=Path("/var/lib/kubelet/plugins"),
                                  help="Root of kubelet plugin dirs (DRA socket in <dir>/<driver>/).")
    registrar_dir: Path = flags.flag(default=Path("/var/lib/kubelet/plugins_registry"),
                                     help="kubelet's plugin registration directory.")
    cdi_dir: Path = flags.flag(default=Path("/var/run/cdi"), help="Where CDI specs are written (the container runtime reads them).")
    state_dir: Path | None = flags.flag(default=None, help="Checkpoint directory; default <plugin-dir>/<driver>/state.")
    pod_uid: str | None = flags.flag(default=None, help="Pod UID for rolling updates (per-instance socket names).",
                                     envvar="POD_UID", parse=_optional)
    metrics_port: int = flags.flag(default=8080, help="Port of /healthz /readyz /metrics; 0: any free port (logged); -1: off.")
    metrics_address: str = flags.flag(default="0.0.0.0", help="Address to bind it to.")
    grpc_workers: int = flags.flag(default=64, minimum=32, help="Threads serving kubelet calls and health streams.")
    log_format: str = flags.flag(default="json", help="How to log.", choices=("json", "text"))
    log_level: str = flags.flag(default="info", help="The least severe level logged.", parse=str.lower,
                                choices=("debug", "info", "warning", "error"))
    driver_settings: Mapping[str, str] = flags.flag(
        default_factory=dict, name="--set", takes=list[str], parse=parse_settings,
        help="A driver setting key=value (repeatable; the driver's DriverContext.settings); see the driver's README.")
    fake: str | None = flags.flag(default=None, help="Use the driver's fake backend: a profile name or a file.",
                                  envvar="DRA_FAKE_DEVICES", parse=_optional)
    hook_dir: Path = flags.flag(default=Path("/var/lib/dra-hookcore"),
                                help="Where hook libraries are installed (shared by every driver on the node).")
    preload: str = flags.flag(default="file", choices=tuple(p.value for p in Preload),
                              help="Default hook preload of enforced claims: /etc/ld.so.preload (file) or LD_PRELOAD (env).")
    slice_layout: str = flags.flag(default="auto", choices=("auto", *(x.value for x in SliceLayout)),
                                   help="Devices per ResourceSlice; auto: per-device on Kubernetes 1.34"
                                   " (kubernetes#133705), packed from 1.35.")
    allow_claim_loosening: bool = flags.flag(
        default=False, help="Honour a claim's own config where it loosens enforcement (computeLimit: false, preload: env, ...);"
        " off: such claims fail, naming the field.")
    watchdog: str = flags.flag(default=WatchdogSettings.action, choices=(*WATCHDOG_ACTIONS, "off"),
                               help="Process watchdog action (drivers that list their devices' processes).")
    watchdog_interval: float = flags.flag(default=WatchdogSettings.interval, help="Seconds between the watchdog's polls.")
    watchdog_memory_tolerance: int = flags.flag(
        default=WatchdogSettings.memory_tolerance, takes=str, parse=_quantity, example="64Mi",
        given=f"{WatchdogSettings.memory_tolerance >> 20}Mi",
        help="Device memory per process a claim may hold beyond its quota (NVML's count less the hook's charge).")
    watchdog_share_window: float = flags.flag(default=WatchdogSettings.share_window,
                                              help="Seconds over which compute use is averaged.")
    watchdog_share_tolerance: float = flags.flag(default=WatchdogSettings.share_tolerance,
                                                 help="Percentage points of compute beyond the share.")

    def __post_init__(self) -> None:
        self.watchdog_settings()  # a bad combination fails here, not once the daemon runs

    def watchdog_settings(self) -> WatchdogSettings | None:
        """The watchdog's settings from the --watchdog* flags; None: off."""
        if self.watchdog == "off":
            return None
        try:
            return WatchdogSettings(self.watchdog, self.watchdog_interval, self.watchdog_memory_tolerance,
                                    self.watchdog_share_window, self.watchdog_share_tolerance)
        except ValueError as exc:
            raise UserError(f"--watchdog-*: {exc} (e.g. --watchdog-interval 1 --watchdog-share-window 10)") from exc


def recorded_devices(checkpoint: Any, driver: str) -> set[str] | None:
    """`DriverContext.recorded_devices`: None while any record cannot be read (it may name devices)."""
    records = checkpoint.records()
    if len(records) != len(checkpoint.uids()):
        return None
    return {d.device for r in records for d in r.devices if d.driver == driver}


def recorded(checkpoint: Any, driver: str) -> list[RecordedDevice] | None:
    """`DriverContext.recorded`: None while a record that exists cannot be read (it may name any
    device). A claim whose record appears or goes while this reads is not a failure: it is read or
    left out, as it would be a moment earlier or later."""
    before = checkpoint.uids()
    records = checkpoint.records()
    if (before & checkpoint.uids()) - {r.uid for r in records}:
        return None  # there both before and after, and still not readable
    return [d.recorded(ClaimRef(r.uid, r.namespace, r.name), r.phase) for r in records for d in r.devices
            if d.driver == driver]


def setup_driver(driver: Driver, ctx: DriverContext) -> None:
    """`driver.setup(ctx)`, with a failure reported as the driver's (UserError: exit 2)."""
    try:
        driver.setup(ctx)
    except Exception as exc:
        raise UserError(f"Driver {driver.name} refused its setup (settings {dict(ctx.settings)}, fake {ctx.fake!r}):"
                        f" {exc}") from exc


def api_client(kubeconfig: Path | None, pool_size: int = 8) -> Any:
    """A kubernetes ApiClient from `kubeconfig`, or from the pod's service account when None."""
    from dra._runtime import client

    return client.api_client(kubeconfig, pool_size)


class Daemon:
    """The running pieces of one `dra run`; `start()`, then `stop()` (idempotent)."""

    def __init__(self, driver: Driver, settings: DaemonSettings, claims_client: Any, publish_client: Any) -> None:
        from dra._runtime.cdi import CDISpecs
        from dra._runtime.checkpoint import Checkpoint
        from dra._runtime.claims import ApiClaimSource, node_labels_reader
        from dra._runtime.enforcement import ClaimHooks, LedgerGuard
        from dra._runtime.hookdir import HookDir
        from dra._runtime.kubelet import KubeletPlugin
        from dra._runtime.kubelet.health import HealthFeed
        from dra._runtime.kubelet.paths import KubeletPaths
        from dra._runtime.prepare import ClaimPreparer

        self.driver = driver
        self.settings = settings
        name = driver.name
        self.metrics = Metrics(name)
        self.watchdog: Any = None
        self.publisher = Publisher(
            publish_client,
            name,
            settings.node_name,
            self._devices,
            settings=PublishSettings(layout=parse_layout(settings.slice_layout)),
            on_sync=self._published,
            on_error=lambda _exc: self.metrics.error("publish"),
        )
        self.health_feed = HealthFeed()
        state_dir = settings.state_dir or settings.plugin_dir / name / "state"
        checkpoint = Checkpoint(state_dir)
        self.context = DriverContext(
            node_name=settings.node_name,
            pool_name=settings.node_name,  # the pool the Publisher writes (one pool per node)
            settings=dict(settings.driver_settings),
            fake=settings.fake,
            on_devices_changed=self.publisher.devices_changed,
            on_health=self.health_feed.push,
            on_recorded_devices=lambda: recorded_devices(checkpoint, name),
            on_recorded=lambda: recorded(checkpoint, name),
        )
        setup_driver(driver, self.context)
        self.preparer = ClaimPreparer(
            driver,
            ApiClaimSource(claims_client),
            settings.node_name,
            checkpoint,
            CDISpecs(driver.cdi_kind, settings.cdi_dir),
            # Allocations whose nodeSelector tests labels (pools selected by label) need the Node's.
            node_labels=node_labels_reader(claims_client, settings.node_name),
            hooks=ClaimHooks(state_dir, HookDir(settings.hook_dir), Preload(settings.preload)),
            allow_claim_loosening=settings.allow_claim_loosening,
            config_defaults={"watchdogAction": settings.watchdog if settings.watchdog != "off" else "report"},
        )
        oversized = self.metrics.ledger_oversized.labels(name)
        self.ledger_guard = LedgerGuard(self.preparer.hooks, lambda _uid: oversized.inc())
        from dra._runtime.ledger_metrics import LedgerCollector, device_names_by_hook_key, device_names_by_uuid

        records = self.preparer.checkpoint.records
        self.metrics.registry.register(LedgerCollector(  # per-claim quota and usage, read at scrape
            name, state_dir / "hooks", records,
            lambda: {**device_names_by_uuid(driver.devices()), **device_names_by_hook_key(records(), name)}))
        self.plugin = KubeletPlugin(
            name,
            MeteredHandler(self.preparer, self.metrics),
            self._health_source,
            KubeletPaths(registrar_dir=settings.registrar_dir, plugins_dir=settings.plugin_dir),
            pod_uid=settings.pod_uid,
            max_workers=settings.grpc_workers,
            pool_name=self.context.pool_name,
        )
        self.metrics.registry.register(DeviceStateCollector(  # registration, capacities, taints, health
            name, lambda: self.publisher.devices, self.plugin.health_snapshot, lambda: self.plugin.registered))
        watchdog = settings.watchdog_settings()
        if watchdog is not None and type(driver).processes is not Driver.processes:
            from dra._runtime.watchdog.events import ApiEvents
            from dra._runtime.watchdog.loop import Watchdog

            claims_dir = self.preparer.checkpoint.claims_dir
            self.watchdog = Watchdog(driver, self.preparer.checkpoint.records, state_dir / "hooks",
                                     ApiEvents(claims_client, name, settings.node_name), self.metrics.registry,
                                     watchdog, on_taints=self.publisher.devices_changed,
                                     records_stamp=lambda: os.stat(claims_dir).st_mtime_ns)
        self.http: HealthServer | None = None
        if settings.metrics_port >= 0:
            where = f"{settings.metrics_address}:{settings.metrics_port}"
            try:
                self.http = HealthServer(self.metrics, self.liveness, self.readiness, settings.metrics_port, settings.metrics_address)
            except OSError as exc:
                raise UserError(
                    f"Cannot serve /healthz, /readyz and /metrics on {where}: {exc.strerror or exc}."
                    " Pick another --metrics-port (0: any free port; -1: none)."
                ) from exc
        self._stopped = False
        self._fence_checked = False

    def _devices(self) -> Any:
        """The driver's devices, with the watchdog's taints added."""
        devices = self.driver.devices()
        if self.watchdog is None:
            return devices
        out = []
        for d in devices:
            extra = self.watchdog.taints(d.name)
            out.append(dataclasses.replace(d, taints=(*d.taints, *extra)) if extra else d)
        return out

    def _health_source(self) -> Any:
        """The driver's own health iterator, else the snapshots it pushes through its context."""
        return self.driver.health() or self.health_feed()

    def _published(self, result: SyncResult) -> None:
        self.metrics.published(result.devices, result.slices, result.generation)
        version = self.publisher.server_version
        if not self._fence_checked and version is not None and needs_fence(version):
            self._fence_checked = True  # once per start: the warning is for the operator, not a loop
            warn_if_unfenced(self.publisher.api.api_client, self.driver.name, version)

    def liveness(self) -> str:
        return self.plugin.check()

    def readiness(self) -> str:
        problems = []
        if not self.publisher.ready:
            problems.append("ResourceSlices not published yet")
        if not self.plugin.registered:
            error = self.plugin.registration_error
            problems.append(f"kubelet registration failed: {error}" if error else "not registered with kubelet yet")
        return "; ".join(problems)

    def start(self) -> None:
        removed = self.preparer.start()
        if removed:
            log.info("removed leftovers of earlier runs", extra={"paths": removed})
        self.install_hook_libraries()
        try:
            self.publisher.start()
        except DeviceValidationError as exc:
            raise UserError(f"Driver {self.driver.name} reported a device the API would reject: {exc}") from exc
        self.plugin.start()
        self.ledger_guard.start()
        if self.watchdog is not None:
            self.watchdog.start()
        if self.http is not None:
            self.http.start()
            log.info("serving /healthz /readyz /metrics", extra={"port": self.http.port})

    def install_hook_libraries(self) -> None:
        """Put the driver's hook libraries into the node's current hook set (see Driver.hook_libraries)."""
        from dra._runtime.hookdir import HookDirError

        try:
            libraries = list(self.driver.hook_libraries())
        except FileNotFoundError as exc:  # e.g. dra.hook_library(stem) of a library not built
            raise UserError(f"Driver {self.driver.name}: {exc}") from exc
        for library in libraries:
            try:
                hset = self.preparer.hooks.hook_dir.install(Path(library))
            except HookDirError as exc:
                raise UserError(f"Driver {self.driver.name}: cannot install its hook library: {exc}") from exc
            log.info("hook library in the current set", extra={"library": str(library), "set": hset.id})

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self.plugin.stop()  # first: kubelet must stop sending calls before the handler goes away
        self.health_feed.close()
        if self.watchdog is not None:
            self.watchdog.stop()
            self.watchdog.close()
        self.publisher.stop()
        self.preparer.close()
        self.ledger_guard.stop()
        if self.http is not None:
            self.http.stop()


def limit_malloc_arenas(arenas: int = 2) -> None:
    """Cap glibc's per-thread malloc arenas before threads start.

    gRPC workers and claim threads each get an arena under contention (up to 8 per core), and
    Python rarely returns memory to them: after a burst of concurrent prepares RSS stays high.
    Two arenas keep the daemon small at no measurable cost in latency. No-op off glibc.
    """
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(ctypes.c_int(-8), ctypes.c_int(arenas))  # M_ARENA_MAX
    except (OSError, AttributeError):
        pass


def run(driver_entry: str, settings: DaemonSettings) -> None:
    """Build the daemon, serve until SIGTERM/SIGINT, stop cleanly."""
    limit_malloc_arenas()
    driver = registry.load_driver(driver_entry)
    # The claim client's pool holds a connection per gRPC worker: a prepare call beyond the pool
    # would open (and then drop) a fresh TLS connection, a handshake's CPU on every call.
    claims = api_client(settings.kubeconfig, pool_size=settings.grpc_workers + 8)
    daemon = Daemon(driver, settings, claims, api_client(settings.kubeconfig, pool_size=4))
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            log.info("SIGHUP: re-reading devices")
            daemon.publisher.devices_changed()
            return
        log.info("stopping", extra={"signal": signal.Signals(signum).name})
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    try:
        daemon.start()
        log.info(
            "daemon running",
            extra={"driver": driver.name, "node": settings.node_name, "entry_point": driver_entry},
        )
        while not stop.wait(3600):
            pass
    finally:
        daemon.stop()
        log.info("daemon stopped", extra={"driver": driver.name})


def register(app: typer.Typer) -> None:
    """Add `dra run` to the CLI: DRIVER, then one option per field of `DaemonSettings`."""

    @app.command("run")
    @flags.options(DaemonSettings)
    def run_command(driver: Annotated[str, typer.Argument(help="Driver entry-point name (see `dra drivers`), e.g. example.")],
                    **values: Any) -> None:
        """Run the node daemon of DRIVER: publish its devices and serve kubelet until SIGTERM."""
        settings = flags.build(DaemonSettings, values)
        dra_logging.setup(settings.log_format, settings.log_level)
        # The client's connection retries log a warning each; the publisher reports outages itself.
        logging.getLogger("urllib3").setLevel(logging.ERROR)
        run(driver, settings)


if __name__ == "__main__":  # the charts of 2026-12-04 and older ran this module; say where it went
    raise SystemExit("error: 'python -m dra._runtime.daemon' is no longer an entry point; run 'dra run <driver> ...' (same flags)")
