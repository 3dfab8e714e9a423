"""The admission's warnings as Events on the pod's owner, so that users of Deployments and Jobs
see them: an admission warning reaches only whoever created the pod, which for a controller's
pods is the controller.

For a converted pod with warnings, `OwnerEvents.notify` queues one Warning Event per warning on
the pod's controller (its ownerReference with ``controller: true``: a ReplicaSet, Job,
StatefulSet, ...) and, for a ReplicaSet, on the Deployment that controls it (read with one GET,
accepted only when the ReplicaSet's UID is the one the pod names). A thread of its own posts
them, so the API server's latency never reaches the admission. Each (object, message) is posted
once per `ttl` and each object gets at most `per_object` Events per `ttl` (a Deployment's
hundred pods, or a tenant making pods with ever new values, make a few Events, not a flood);
the queue is bounded and what does not fit is logged, never waited for.
"""

from __future__ import annotations

import datetime
import logging
import queue
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

log = logging.getLogger(__name__)
COMPONENT = "dra-webhook"
REASON = "HAMiInputNotHonoured"
MAX_MESSAGE = 1024  # characters; the API server refuses longer Event messages
MAX_KEYS = 4096  # remembered (object, message) pairs before the memory is reset


class Notifier(Protocol):
    def notify(self, namespace: str, meta: Mapping[str, Any], warnings: Sequence[str]) -> None:
        """Tell the owners of the pod with metadata `meta` about `warnings` (never blocks)."""
        ...


def controller_of(meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ownerReference with ``controller: true`` (at most one is allowed), if any."""
    for ref in meta.get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller") is True and ref.get("kind") and ref.get("name"):
            return ref
    return None


class OwnerEvents:
    """`get(path, params)` and `post(path, params, body)` reach the API (`dra._runtime.client`'s
    get_json and post_json in the webhook); `clock` is monotonic seconds."""

    def __init__(self, get: Callable[[str, dict[str, str]], dict[str, Any] | None],
                 post: Callable[[str, dict[str, str], dict[str, Any]], Any], clock: Callable[[], float] = time.monotonic,
                 ttl: float = 3600.0, per_object: int = 16, max_queue: int = 1000, instance: str | None = None) -> None:
        self._get, self._post, self._clock = get, post, clock
        self._ttl, self._per_object = ttl, per_object
        self._instance = instance or socket.gethostname()
        self._queue: queue.Queue[tuple[str, Mapping[str, Any], tuple[str, ...]] | None] = queue.Queue(maxsize=max_queue)
        self._sent: dict[tuple[str, str], float] = {}  # (object uid, message) -> when
        self._counts: dict[str, tuple[float, int]] = {}  # object uid -> (window start, events in it)
        self.posted = 0
        self.dropped = 0
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="webhook-events", daemon=True)
        self._thread.start()

    def close(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=10)

    def notify(self, namespace: str, meta: Mapping[str, Any], warnings: Sequence[str]) -> None:
        if not warnings or controller_of(meta) is None:
            return  # a pod without a controller: its creator got the warnings itself
        try:
            self._queue.put_nowait((namespace, meta, tuple(warnings)))
        except queue.Full:
            self.dropped += 1
            log.warning("owner events backlogged; warnings left out of the Events (they were admission warnings)",
                        extra={"namespace": namespace, "warnings": len(warnings)})

    def drain(self) -> None:
        """Post everything queued, on the caller's thread (tests; `start` runs it on its own)."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                self._handle(*item)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            self._handle(*item)

    def _handle(self, namespace: str, meta: Mapping[str, Any], warnings: tuple[str, ...]) -> None:
        try:
            targets = self._targets(namespace, meta)
            pod = str(meta.get("name") or (str(meta.get("generateName") or "") + "*"))
            for obj in targets:
                for warning in warnings:
                    self._emit(namespace, obj, f"pod {pod}: {warning}")
        except Exception as exc:
            log.warning("owner event not posted", extra={"namespace": namespace, "error": str(exc)[:300]})

    def _targets(self, namespace: str, meta: Mapping[str, Any]) -> list[dict[str, str]]:
        ref = controller_of(meta)
        assert ref is not None
        own = {"apiVersion": str(ref.get("apiVersion", "")), "kind": str(ref["kind"]), "name": str(ref["name"]),
               "namespace": namespace, "uid": str(ref.get("uid", ""))}
        out = [own]
        if own["kind"] == "ReplicaSet" and own["apiVersion"] == "apps/v1":
            rs = self._get("/apis/apps/v1/namespaces/{namespace}/replicasets/{name}",
                           {"namespace": namespace, "name": own["name"]})
            rs_meta = (rs or {}).get("metadata") or {}
            deployment = controller_of(rs_meta) if rs_meta.get("uid") == own["uid"] else None
            if deployment is not None and deployment.get("kind") == "Deployment":
                out.append({"apiVersion": str(deployment.get("apiVersion", "apps/v1")), "kind": "Deployment",
                            "name": str(deployment["name"]), "namespace": namespace,
                            "uid": str(deployment.get("uid", ""))})
        return out

    def _emit(self, namespace: str, obj: dict[str, str], message: str) -> None:
        now = self._clock()
        key = (obj["uid"] or f"{obj['kind']}/{obj['name']}", message)
        if now - self._sent.get(key, -self._ttl - 1) < self._ttl:
            return
        start, count = self._counts.get(key[0], (now, 0))
        if now - start >= self._ttl:
            start, count = now, 0
        if count >= self._per_object:
            return
        if len(self._sent) > MAX_KEYS:
            self._sent.clear()
            self._counts.clear()
        self._sent[key] = now
        self._counts[key[0]] = (start, count + 1)
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{obj['name'][:200]}.hami-", "namespace": namespace},
            "involvedObject": obj, "reason": REASON, "message": message[:MAX_MESSAGE], "type": "Warning",
            "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
            "reportingInstance": self._instance[:128], "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }
        self._post("/api/v1/namespaces/{namespace}/events", {"namespace": namespace}, body)
        self.posted += 1
