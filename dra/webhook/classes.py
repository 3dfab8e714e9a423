"""DeviceClasses' opaque configs: the admin's baseline a claim's config is judged against.

The validating webhook refuses a claim whose own config loosens enforcement below its class's
(`dra._runtime.loosening`), as prepare would; for that it needs each class's ``spec.config``. Read with a
GET per class, remembered for `ttl` seconds (classes change rarely; admission stays fast).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from dra._runtime import client


class ClassConfigs(Protocol):
    def opaque(self, class_name: str) -> Sequence[Mapping[str, Any]] | None:
        """The class's ``spec.config[].opaque`` entries in order; None when it cannot be read."""
        ...

    def exists(self, class_name: str) -> bool | None:
        """True when the class exists, False when the API server says it does not, None when not known."""
        ...


class NoClasses:
    """No class is known: every claim is judged against the defaults (unit tests, no API access)."""

    def opaque(self, class_name: str) -> Sequence[Mapping[str, Any]] | None:
        return None

    def exists(self, class_name: str) -> bool | None:
        return None


class DeviceClassReader:
    def __init__(self, api_client: Any, ttl: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._api: Any = client.ResourceV1Api(api_client)
        self._ttl = ttl
        self._clock = clock
        self._cache: dict[str, tuple[float, Sequence[Mapping[str, Any]] | None, bool | None]] = {}
        self._lock = threading.Lock()

    def opaque(self, class_name: str) -> Sequence[Mapping[str, Any]] | None:
        return self._read(class_name)[0]

    def exists(self, class_name: str) -> bool | None:
        return self._read(class_name)[1]

    def _read(self, class_name: str) -> tuple[Sequence[Mapping[str, Any]] | None, bool | None]:
        now = self._clock()
        with self._lock:
            hit = self._cache.get(class_name)
            if hit is not None and hit[0] > now:
                return hit[1], hit[2]
        exists: bool | None = None
        try:
            resp = self._api.read_device_class(class_name, _preload_content=False, _request_timeout=5)
            spec = json.loads(resp.data).get("spec") or {}
            got: Sequence[Mapping[str, Any]] | None = [c["opaque"] for c in spec.get("config") or [] if c.get("opaque")]
            exists = True
        except Exception as e:  # unreadable (RBAC, outage): judged against the defaults, which is stricter
            got = None
            if getattr(e, "status", None) == 404:
                exists = False
        with self._lock:
            if len(self._cache) > 1024:
                self._cache.clear()
            self._cache[class_name] = (now + self._ttl, got, exists)
        return got, exists
