"""Keep this node's ResourceSlices equal to the driver's devices.

Concurrency model: two daemon threads. The *sync worker* owns all writes: it lists the node's
slices for this driver, compares them with the desired pool and makes only the writes needed;
it runs at start, when woken, after a failure (with backoff) and every `resync_period` as a
safety net. The *watcher* streams slice events and wakes the worker for anything it did not
cause itself: kubelet deleting the node's slices at its restart, someone editing or deleting a
slice. Nothing else touches the API, so there is no locking beyond the wake event.

Pool rules (the same as the upstream resourceslice controller, so the scheduler sees the pool
the way it expects): all slices of a pool carry one `generation`; the highest generation wins
and older slices are deleted; any change writes every slice with generation + 1 and
`resourceSliceCount` = number of slices. When the stored slices already equal the desired ones
no request other than the LIST is made.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any

import urllib3

from dra._runtime.client import ApiClient, ApiException, ResourceV1Api, get_raw, iter_resp_lines
from dra._runtime.publish.desired import (
    DesiredPool,
    DeviceValidationError,
    comparable_devices,
    comparable_slice,
    desired_pool,
    slice_object,
)
from dra._runtime.publish.layout import SliceLayout, layout_for, parse_server_version
from dra._runtime.publish.timing import Backoff, Clock, SystemClock
from dra.driver import Device

log = logging.getLogger("dra._runtime.publish")

# Field-dropping gates: when the server stores less than we sent, one of these is likely off.
_GATES = "DRAConsumableCapacity (allowMultipleAllocations, requestPolicy), DRADeviceTaints (taints)"


@dataclasses.dataclass
class PublishSettings:
    """Tuning of the sync loop; the defaults suit a node daemon."""

    backoff_initial: float = 0.2
    """Seconds before the first retry after a failed sync (conflict, outage)."""

    backoff_max: float = 5.0
    """Ceiling of the retry delay, so that the pool converges within seconds of an outage ending."""

    resync_period: float = 300.0
    """Seconds between safety-net syncs when nothing woke the worker (one LIST, no writes)."""

    coalesce: float = 0.05
    """Seconds to wait after a wake-up so a burst of events (kubelet wiping slices) gives one sync."""

    request_timeout: float = 10.0
    """Seconds per API request before it counts as failed."""

    watch_timeout: int = 290
    """Server-side timeout of one watch request, in seconds; the watcher then resumes."""

    layout: SliceLayout | None = None
    """How devices are cut into slices; None: from the API server's version (`dra._runtime.publish.layout`),
    read again after every outage, so an upgraded control plane gets its layout."""


@dataclasses.dataclass(frozen=True)
class SyncResult:
    """What one sync did."""

    generation: int
    slices: int
    devices: int
    created: int = 0
    updated: int = 0
    deleted: int = 0

    @property
    def writes(self) -> int:
        return self.created + self.updated + self.deleted


class NodeNotFound(Exception):
    """The Node named as this daemon's node does not exist (yet)."""


class _WatchError(Exception):
    """An ERROR event in the watch stream (410 Gone: our resourceVersion is too old)."""

    def __init__(self, code: int | None, message: str) -> None:
        super().__init__(f"watch error {code}: {message}")
        self.code = code


class _Conflict(Exception):
    """The stored state moved under us; list again and retry."""


class Publisher:
    """Publishes one driver's devices as this node's pool and keeps them published.

    `devices` is called at `start()` and after each `devices_changed()`. `api_client` must not
    be shared with code that changes its configuration. `on_sync` is called from the worker
    thread after every successful sync (metrics, readiness), `on_error` after every failed one.
    """

    def __init__(
        self,
        api_client: ApiClient,
        driver_name: str,
        node_name: str,
        devices: Callable[[], Sequence[Device]],
        *,
        settings: PublishSettings | None = None,
        clock: Clock | None = None,
        backoff: Backoff | None = None,
        on_sync: Callable[[SyncResult], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.api = ResourceV1Api(api_client)
        self.driver_name = driver_name
        self.node_name = node_name
        self.settings = settings or PublishSettings()
        self.clock: Clock = clock or SystemClock()
        self.backoff = backoff or Backoff(initial=self.settings.backoff_initial, maximum=self.settings.backoff_max)
        self._devices = devices
        self._on_sync = on_sync
        self._on_error = on_error
        self._selector = f"spec.driver={driver_name},spec.nodeName={node_name}"
        self._desired: DesiredPool | None = None
        self._device_list: tuple[Device, ...] = ()  # the last device list that passed validation
        self._devices_dirty = True
        self._layout: SliceLayout | None = self.settings.layout
        self._version_dirty = True  # read the API server's version before the next sync
        self.server_version: tuple[int, int] | None = None
        """(major, minor) of the API server, as last read (None with a fixed layout)."""
        self._node_uid: str | None = None
        self._generation = 0  # highest pool generation seen or written: never goes back, even after a wipe
        self._known_versions: set[str] = set()  # resourceVersions this publisher has seen or written
        self._accepted: dict[Any, Any] = {}  # desired device list -> what the server stored (dropped fields)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._published = threading.Event()
        self._compared = threading.Condition()
        self._attempts = 0  # comparisons started, numbered in order (one worker runs them)
        self._last_compared = 0  # the number of the last one that completed
        self.comparisons = 0
        """Comparisons with the API server completed (with their writes), for tests and debugging."""
        self._threads: list[threading.Thread] = []
        self._watch_response: Any = None  # the open watch stream, closed by stop()
        self.last_result: SyncResult | None = None
        self.counts: collections.Counter[str] = collections.Counter()
        """API requests made, by verb: list, get, create, update, delete, watch (for tests and debugging)."""

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Validate the devices now (raising DeviceValidationError) and start the threads."""
        self._device_list = tuple(self._devices())
        self._desired = desired_pool(self.driver_name, self.node_name, self._device_list, self._layout or SliceLayout.PACKED)
        self._devices_dirty = False
        self._stop.clear()
        self._wake.set()
        for target, name in ((self._work, "dra-publish-sync"), (self._watch, "dra-publish-watch")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop both threads; the slices stay (kubelet removes them 30 s after the plugin is gone)."""
        self._stop.set()
        self._wake.set()
        _interrupt(self._watch_response)
        for thread in self._threads:
            thread.join(timeout)
        self._threads.clear()

    def devices_changed(self) -> None:
        """Ask the driver for its devices again and republish if they differ."""
        self._devices_dirty = True
        self._wake.set()

    def resync(self) -> None:
        """Compare with the API server now."""
        self._wake.set()

    @property
    def ready(self) -> bool:
        """True once the pool has been published (and stays true: a later outage is not unreadiness)."""
        return self._published.is_set()

    @property
    def devices(self) -> tuple[Device, ...]:
        """The driver's devices as last read and validated for publishing (the metrics show them)."""
        return self._device_list

    @property
    def layout(self) -> SliceLayout | None:
        """The slice layout of the last sync (None before the first)."""
        return self._desired.layout if self._desired is not None and self.last_result is not None else None

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self._published.wait(timeout)

    def resync_and_wait(self, timeout: float) -> bool:
        """Compare now and wait until a comparison that started after this call has completed:
        what the publisher would do about the current state, it has done (False on timeout)."""
        with self._compared:
            target = self._attempts + 1
        self.resync()
        with self._compared:
            return self._compared.wait_for(lambda: self._last_compared >= target, timeout)

    # ---- the sync worker -------------------------------------------------------------------

    def _work(self) -> None:
        delay: float | None = None
        while not self._stop.is_set():
            if self.clock.wait(self._wake, delay) and not self._stop.is_set():
                self.clock.wait(self._stop, self.settings.coalesce)
            if self._stop.is_set():
                return
            self._wake.clear()
            try:
                self.sync_once()
            except DeviceValidationError as exc:
                self._failed(exc)
                log.error("devices not published: %s", exc, extra={"driver": self.driver_name})
                delay = self.settings.resync_period
            except (_Conflict, NodeNotFound, ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
                self._failed(exc)
                if not isinstance(exc, _Conflict | NodeNotFound):
                    self._version_dirty = True  # an outage may be an upgrade: read the version again
                delay = self.backoff.next_delay()
                status = getattr(exc, "status", None)
                if isinstance(exc, _Conflict) or status == 409:
                    log.info("slices changed during sync; retrying in %.1fs", delay, extra={"node": self.node_name})
                else:
                    log.warning(
                        "publishing slices failed (%s); retrying in %.1fs",
                        _short(exc),
                        delay,
                        extra={"node": self.node_name, "driver": self.driver_name},
                    )
            except Exception as exc:
                self._failed(exc)
                delay = self.backoff.next_delay()
                log.exception("unexpected error publishing slices; retrying in %.1fs", delay)
            else:
                self.backoff.reset()
                delay = self.settings.resync_period

    def _failed(self, exc: BaseException) -> None:
        if self._on_error is not None:
            self._on_error(exc)

    def sync_once(self) -> SyncResult:
        """One comparison and the writes it needs. Raises on API errors; callers retry."""
        with self._compared:
            self._attempts += 1
            attempt = self._attempts
        if self._devices_dirty:
            # Cleared before the read, so a devices_changed() during it is not lost; set again
            # when the driver fails, so the next sync (after backoff) reads the devices again.
            self._devices_dirty = False
            try:
                devices = tuple(self._devices())
                new = desired_pool(self.driver_name, self.node_name, devices, self._layout or SliceLayout.PACKED,
                                   separate_counters=self._separate_counters())
            except DeviceValidationError:
                if self._desired is None:
                    raise
                log.exception("new device list rejected; keeping the published one")
            except BaseException:
                self._devices_dirty = True
                raise
            else:
                self._desired, self._device_list = new, devices
        assert self._desired is not None, "start() computes the first desired pool"
        layout = self._resolve_layout()
        separate = self._separate_counters()
        if self._desired.layout is not layout or (self._desired.counters and self._desired.separate_counters != separate):
            self._desired = desired_pool(self.driver_name, self.node_name, self._device_list, layout,
                                         separate_counters=separate)
        desired = self._desired

        if self._node_uid is None:
            self._node_uid = self._fetch_node_uid()
        listing = self._call("list", self.api.list_resource_slice, field_selector=self._selector)
        items: list[dict[str, Any]] = listing.get("items") or []
        self._known_versions = {s["metadata"]["resourceVersion"] for s in items}

        ours = [s for s in items if s["spec"].get("pool", {}).get("name") == desired.pool_name]
        foreign = [s for s in items if s not in ours]  # another pool name for this node: not ours to keep
        generation = max((s["spec"]["pool"]["generation"] for s in ours), default=0)
        current = [s for s in ours if s["spec"]["pool"]["generation"] == generation]
        obsolete = [s for s in ours if s["spec"]["pool"]["generation"] < generation]
        wanted = [(self._accepted.get(key, key), comparable_slice((), desired.shared_counters(i))[1])
                  for i, key in enumerate(comparable_devices(d) for d in desired.slices)]

        result = SyncResult(generation=generation, slices=len(desired.slices), devices=desired.device_count)
        deleted = 0
        for stale in obsolete + foreign:
            deleted += self._delete(stale)
        if self._up_to_date(current, wanted, len(desired.slices)):
            result = dataclasses.replace(result, deleted=deleted)
        else:
            # Writes are rare: look the Node up again, in case it was deleted and created anew (the
            # garbage collector would delete slices owned by the old UID as fast as we wrote them).
            uid = self._fetch_node_uid()
            if uid != self._node_uid:
                log.info("Node was re-created; slices now owned by the new one", extra={"node": self.node_name})
                self._node_uid = uid
            result = self._rewrite(desired, current, wanted, max(generation, self._generation) + 1, deleted)
        self._generation = max(self._generation, result.generation)
        self.last_result = result
        self._published.set()
        with self._compared:
            self._last_compared = attempt
            self.comparisons += 1
            self._compared.notify_all()
        if result.writes:
            log.info(
                "published %d devices in %d slices, pool generation %d",
                result.devices,
                result.slices,
                result.generation,
                extra={"node": self.node_name, "driver": self.driver_name, "writes": result.writes},
            )
        if self._on_sync is not None:
            self._on_sync(result)
        return result

    def _separate_counters(self) -> bool:
        """Whether counter sets go in slices of their own: from 1.35 a slice holds devices or
        counter sets, not both; on 1.34 a device's set must be in its slice."""
        return self.server_version is not None and self.server_version >= (1, 35)

    def _resolve_layout(self) -> SliceLayout:
        """The fixed layout, or the one for the API server's version (read when marked dirty; also
        with a fixed layout when the pool has counter sets, whose place depends on the version)."""
        fixed = self.settings.layout
        if fixed is not None and not (self._desired is not None and self._desired.counters):
            return fixed
        if self._layout is None or self.server_version is None or self._version_dirty:
            self._version_dirty = False
            try:
                info = self._call("version", self._read_version)
                version = parse_server_version(info)
            except BaseException:
                self._version_dirty = True
                raise
            layout = fixed or layout_for(version)
            if layout is not self._layout and fixed is None:
                log.info(
                    "Kubernetes %d.%d: publishing %s slices%s",
                    *version,
                    layout.value,
                    " (kube-scheduler < 1.35 shares only a slice's first device: kubernetes#133705)"
                    if layout is SliceLayout.PER_DEVICE
                    else "",
                    extra={"node": self.node_name, "driver": self.driver_name},
                )
            self._layout, self.server_version = layout, version
        return self._layout

    def _read_version(self, _preload_content: bool, _request_timeout: float) -> Any:
        return get_raw(self.api.api_client, "/version", {}, _request_timeout)

    def _fetch_node_uid(self) -> str:
        try:
            node = self._call("get", self._read_node, self.node_name)
        except ApiException as exc:
            if exc.status == 404:
                raise NodeNotFound(
                    f"Node {self.node_name!r} does not exist; slices are owned by their Node, so none are"
                    " published until it does (check --node-name / NODE_NAME)"
                ) from None
            raise
        uid: str = node["metadata"]["uid"]
        return uid

    def _up_to_date(self, current: list[dict[str, Any]], wanted: list[Any], count: int) -> bool:
        if len(current) != count:
            return False
        for s in current:
            if s["spec"]["pool"].get("resourceSliceCount") != count or not self._owned(s):
                return False
        have = collections.Counter(comparable_slice(s["spec"].get("devices") or (), s["spec"].get("sharedCounters") or ())
                                   for s in current)
        return have == collections.Counter(wanted)

    def _owned(self, s: dict[str, Any]) -> bool:
        refs = s["metadata"].get("ownerReferences") or []
        return any(r.get("kind") == "Node" and r.get("uid") == self._node_uid for r in refs)

    def _rewrite(self, desired: DesiredPool, current: list[dict[str, Any]], wanted: list[Any], generation: int, deleted: int) -> SyncResult:
        """Write every slice at `generation`: update matched ones, delete the rest, create the missing."""
        # Match existing slices to desired ones: identical content first, then the same device names,
        # then whatever is left one to one, so a changed device is one update, not delete + create.
        unmatched = list(current)
        assignment: dict[int, dict[str, Any]] = {}
        names = [frozenset(d["name"] for d in devices) for devices in desired.slices]

        def devices_of(s: dict[str, Any]) -> Sequence[dict[str, Any]]:
            devices: Sequence[dict[str, Any]] = s["spec"].get("devices") or ()
            return devices

        def same_content(i: int, s: dict[str, Any]) -> bool:
            return bool(comparable_slice(devices_of(s), s["spec"].get("sharedCounters") or ()) == wanted[i])

        def same_names(i: int, s: dict[str, Any]) -> bool:
            return frozenset(d["name"] for d in devices_of(s)) == names[i]

        for pred in (same_content, same_names):
            for i in range(len(desired.slices)):
                if i in assignment:
                    continue
                for s in unmatched:
                    if pred(i, s):
                        assignment[i] = s
                        unmatched.remove(s)
                        break
        for i in range(len(desired.slices)):
            if i not in assignment and unmatched:
                assignment[i] = unmatched.pop(0)

        assert self._node_uid is not None
        for s in unmatched:
            deleted += self._delete(s)
        updated = created = 0
        for i in range(len(desired.slices)):
            existing = assignment.get(i)
            body = slice_object(desired, i, generation, self._node_uid, existing["metadata"]["name"] if existing else None)
            if existing is not None:
                body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
                stored = self._call("update", self.api.replace_resource_slice, existing["metadata"]["name"], body)
                updated += 1
            else:
                stored = self._call("create", self.api.create_resource_slice, body)
                created += 1
            self._known_versions.add(stored["metadata"]["resourceVersion"])
            self._check_stored(desired.slices[i], stored)
        return SyncResult(generation, len(desired.slices), desired.device_count, created, updated, deleted)

    def _check_stored(self, sent: Sequence[dict[str, Any]], stored: dict[str, Any]) -> None:
        """Detect fields the server dropped (a feature gate is off) and stop fighting over them."""
        want, got = comparable_devices(sent), comparable_devices(stored["spec"].get("devices") or ())
        if want != got and self._accepted.get(want) != got:
            self._accepted[want] = got
            log.error(
                "the API server dropped device fields of slice %s; is a feature gate off? (%s)",
                stored["metadata"]["name"],
                _GATES,
                extra={"node": self.node_name, "driver": self.driver_name},
            )

    def _delete(self, s: dict[str, Any]) -> int:
        meta = s["metadata"]
        body = {"preconditions": {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]}}
        try:
            self._call("delete", self.api.delete_resource_slice, meta["name"], body=body)
        except ApiException as exc:
            if exc.status == 404:
                return 0  # already gone: that is what we wanted
            if exc.status == 409:
                raise _Conflict(meta["name"]) from exc
            raise
        return 1

    def _call(self, verb: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.counts[verb] += 1
        response = fn(*args, _preload_content=False, _request_timeout=self.settings.request_timeout, **kwargs)
        data: dict[str, Any] = json.loads(response.data or b"{}")
        return data

    def _read_node(self, name: str, _preload_content: bool, _request_timeout: float) -> Any:
        """GET the Node through the client's generic call: `CoreV1Api` alone costs ~20 MiB of RSS."""
        return get_raw(self.api.api_client, "/api/v1/nodes/{name}", {"name": name}, _request_timeout)

    # ---- the watcher -----------------------------------------------------------------------

    def _watch(self) -> None:
        """Wake the worker on slice events it did not cause; reconnect with backoff."""
        backoff = Backoff(initial=self.settings.backoff_initial, maximum=self.settings.backoff_max)
        version = ""
        reconnected = False
        while not self._stop.is_set():
            try:
                self.counts["watch"] += 1
                response: Any = self.api.list_resource_slice(
                    field_selector=self._selector,
                    watch=True,
                    allow_watch_bookmarks=True,
                    resource_version=version or None,
                    timeout_seconds=self.settings.watch_timeout,
                    _preload_content=False,
                    _request_timeout=(self.settings.request_timeout, self.settings.watch_timeout + 30),
                )
                self._watch_response = response
                if self._stop.is_set():  # stop() ran before the stream was published to it
                    return
                if reconnected:
                    self._version_dirty = True  # the server may have been upgraded meanwhile
                    self.resync()  # events may have been missed while disconnected
                    reconnected = False
                for line in iter_resp_lines(response):
                    if not line:
                        continue
                    backoff.reset()
                    event = json.loads(line)
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        raise _WatchError(obj.get("code"), obj.get("message", ""))
                    version = obj.get("metadata", {}).get("resourceVersion", version)
                    if kind == "BOOKMARK":
                        continue
                    if kind == "DELETED" or version not in self._known_versions:
                        log.debug("slice %s %s; resyncing", obj.get("metadata", {}).get("name"), kind.lower())
                        self.resync()
            except Exception as exc:
                if self._stop.is_set():
                    return
                if getattr(exc, "status", None) == 410 or getattr(exc, "code", None) == 410:
                    version = ""  # our resourceVersion is too old: start from now, after a full comparison
                delay = backoff.next_delay()
                log.debug("slice watch interrupted (%s); reconnecting in %.1fs", _short(exc), delay)
                reconnected = True
                self.clock.wait(self._stop, delay)
            finally:
                self._watch_response = None


def _interrupt(response: Any) -> None:
    """Unblock a thread reading a streaming response: shut its socket down (close() would wait for the reader)."""
    if response is None:
        return
    conn = getattr(response, "connection", None) or getattr(response, "_connection", None)
    sock = getattr(conn, "sock", None)
    if sock is None:
        return
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the plain-socket method: no TLS close_notify dance
    except OSError:
        pass  # already closed


def _short(exc: BaseException) -> str:
    if isinstance(exc, NodeNotFound):
        return str(exc)
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}"
    text = str(exc)
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__
