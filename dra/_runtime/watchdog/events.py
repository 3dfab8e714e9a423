"""Verdicts as Kubernetes Events: a Warning Event on each pod of the verdict (the Node for a
process in no claim of this driver), posted from a thread of its own."""

from __future__ import annotations

import datetime
import logging
import queue
import threading
from typing import Any

from dra._runtime.watchdog.model import REASONS, ClaimView, Verdict

log = logging.getLogger("dra._runtime.watchdog")


class ApiEvents:
    """Posts each verdict as a Warning Event on its pods, from a thread of its own so that a slow
    API server never delays a poll. Pods are named from the claim's ``status.reservedFor`` (the
    daemon may read claims); a process in no claim of this driver, a host process or another
    pod's (named by UID in the message), gets its Event on the Node: reading every pod of the
    cluster to name it is a permission the daemon is not given."""

    def __init__(self, api: Any, driver: str, node: str, timeout: float = 5.0) -> None:
        self.api = api
        self.driver = driver
        self.node = node
        self.timeout = timeout
        self.posted = 0
        self._queue: queue.Queue[Verdict | None] = queue.Queue(maxsize=1000)
        self._pods: dict[str, tuple[str, str]] = {}  # pod UID -> (namespace, name)
        self._thread = threading.Thread(target=self._run, name="watchdog-events", daemon=True)
        self._thread.start()

    def emit(self, verdict: Verdict) -> None:
        try:
            self._queue.put_nowait(verdict)
        except queue.Full:
            log.error("watchdog events backlogged; verdict left out of the Events (it is logged)",
                      extra={"verdict": verdict.kind, "pid": verdict.pid})

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            v = self._queue.get()
            if v is None:
                return
            try:
                self._post(v)
            except Exception as exc:
                log.warning("watchdog event not posted", extra={"verdict": v.kind, "pid": v.pid, "error": str(exc)})

    def _post(self, v: Verdict) -> None:
        from dra._runtime import client

        targets: list[dict[str, str]] = []
        for uid in v.pod_uids:
            found = self._pod(uid, v.claim)
            if found:
                targets.append({"apiVersion": "v1", "kind": "Pod", "namespace": found[0], "name": found[1], "uid": uid})
        if not targets:
            targets.append({"apiVersion": "v1", "kind": "Node", "name": self.node, "namespace": "default"})
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        note = f"{v.message}. Action {v.action}: {v.outcome}" if v.outcome else v.message
        for obj in targets:
            body = {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{obj['name']}.watchdog-", "namespace": obj["namespace"]},
                "involvedObject": obj, "reason": REASONS[v.kind], "message": note[:1024], "type": "Warning",
                "source": {"component": self.driver, "host": self.node}, "reportingComponent": self.driver,
                "reportingInstance": self.node, "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            }
            client.post_json(self.api, "/api/v1/namespaces/{namespace}/events", {"namespace": obj["namespace"]},
                             body, self.timeout)
            self.posted += 1

    def _pod(self, uid: str, claim: ClaimView | None) -> tuple[str, str] | None:
        from dra._runtime import client

        if uid in self._pods:
            return self._pods[uid]
        if claim is not None:
            doc = client.get_json(self.api, "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}",
                                  {"namespace": claim.namespace, "name": claim.name}, self.timeout) or {}
            for ref in (doc.get("status") or {}).get("reservedFor") or ():
                if ref.get("resource") == "pods" and ref.get("uid") and ref.get("name"):
                    self._pods[str(ref["uid"])] = (claim.namespace, str(ref["name"]))
        return self._pods.get(uid)
