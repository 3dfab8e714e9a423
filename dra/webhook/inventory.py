"""What the cluster's ResourceSlices publish, kept current by a list + watch.

The webhook asks two things per admission: the largest memory a driver's devices have (to
reject a request no device can ever hold) and the distinct memory sizes (to turn a memory
percentage into bytes). Both come from this in-memory copy, never from an API call on the
admission path. `ready` is false until the first list has arrived.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

from dra._runtime import client
from dra._runtime.client import iter_resp_lines
from dra._runtime.publish.timing import Backoff
from dra.webhook.translate import bounded_quantity

log = logging.getLogger(__name__)

# slice name -> (driver, per device: capacity name -> value in base units)
_Slice = tuple[str, tuple[Mapping[str, int], ...]]


def _parse_slice(obj: Mapping[str, Any]) -> _Slice:
    spec = obj.get("spec") or {}
    driver = str(spec.get("driver", ""))
    devices = []
    for dev in spec.get("devices") or []:
        caps: dict[str, int] = {}
        for name, cap in (dev.get("capacity") or {}).items():
            try:
                caps[name] = int(bounded_quantity((cap or {}).get("value", "0")))
            except (ValueError, TypeError):
                continue
        devices.append(caps)
    return driver, tuple(devices)


class SliceInventory:
    """An eventually consistent copy of every ResourceSlice's device capacities."""

    def __init__(self, api_client: Any, watch_timeout: int = 290) -> None:
        self._api: Any = client.ResourceV1Api(api_client)
        self._watch_timeout = watch_timeout
        self._slices: dict[str, _Slice] = {}
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._response: Any = None

    # --- reading ----------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self._ready.wait(timeout)

    def memory_sizes(self, driver: str, capacity: str) -> tuple[int, ...] | None:
        qualified = f"{driver}/{capacity}"
        sizes: set[int] = set()
        with self._lock:
            slices = list(self._slices.values())
        for slice_driver, devices in slices:
            if slice_driver != driver:
                continue
            for caps in devices:
                value = caps.get(capacity, caps.get(qualified))
                if value:
                    sizes.add(value)
        return tuple(sorted(sizes, reverse=True)) or None

    def device_counts(self) -> dict[str, int]:
        """Devices known per driver: what /metrics shows, so a test (or an operator) can see
        when a published slice has reached the webhook."""
        counts: dict[str, int] = {}
        with self._lock:
            for driver, devices in self._slices.values():
                counts[driver] = counts.get(driver, 0) + len(devices)
        return counts

    # --- the watcher ------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="webhook-slice-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        resp = self._response
        if resp is not None:
            try:
                resp.shutdown()  # unblocks the watcher's read (urllib3 >= 2.3)
            except Exception:  # pragma: no cover - a stream already gone
                pass
        if self._thread is not None:
            self._thread.join(timeout=2)

    def _list(self) -> str:
        resp = self._api.list_resource_slice(_preload_content=False, _request_timeout=30)
        body = json.loads(resp.data)
        fresh = {item["metadata"]["name"]: _parse_slice(item) for item in body.get("items") or []}
        with self._lock:
            self._slices = fresh
        self._ready.set()
        return str(body.get("metadata", {}).get("resourceVersion", ""))

    def _run(self) -> None:
        backoff = Backoff(initial=0.5, maximum=10.0)
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    version = self._list()
                    log.info("resource slices listed", extra={"slices": len(self._slices)})
                self._response = self._api.list_resource_slice(
                    watch=True, allow_watch_bookmarks=True, resource_version=version,
                    timeout_seconds=self._watch_timeout, _preload_content=False,
                    _request_timeout=(10, self._watch_timeout + 30))
                for line in iter_resp_lines(self._response):
                    if not line:
                        continue
                    event = json.loads(line)
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            version = ""  # too old: list again
                            break
                        raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
                    version = str(obj.get("metadata", {}).get("resourceVersion") or version)
                    name = obj.get("metadata", {}).get("name")
                    if kind == "BOOKMARK" or not name:
                        continue
                    with self._lock:
                        if kind == "DELETED":
                            self._slices.pop(name, None)
                        else:
                            self._slices[name] = _parse_slice(obj)
                backoff.reset()
            except Exception as exc:
                if self._stop.is_set():
                    return
                if getattr(exc, "status", None) == 410:
                    version = ""
                delay = backoff.next_delay()
                log.warning("resource slice watch interrupted; retrying", extra={"error": str(exc)[:200], "delay_s": round(delay, 1)})
                self._stop.wait(delay)
            finally:
                self._response = None


class StaticInventory:
    """A fixed inventory: driver -> memory sizes in bytes (tests, and `--no-api` runs)."""

    def __init__(self, sizes: Mapping[str, tuple[int, ...]] | None = None) -> None:
        self._sizes = dict(sizes or {})
        self.ready = True

    def memory_sizes(self, driver: str, capacity: str) -> tuple[int, ...] | None:
        got = self._sizes.get(driver)
        return tuple(sorted(set(got), reverse=True)) if got else None
