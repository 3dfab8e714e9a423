"""ResourceClaimTemplates, created idempotently: one per request shape and namespace.

The name is a hash of the spec, so "exists" means "is this shape", unless someone else took the
name: a template without this webhook's label, or with it but another spec than the one the
webhook writes (compared as the API server stores it, defaults included), is refused rather than
used. Templates are small and bounded by the
number of distinct shapes, and are never deleted here: a pod may reference one at any time.
Recently confirmed templates are remembered for `ttl` seconds to spare an API call per pod.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from dra._runtime import client
from dra._runtime.client import ApiException


class TemplateError(Exception):
    """A template could not be made; the message says why and what to do."""


class TemplateStore:
    def __init__(self, api_client: Any, ttl: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._api: Any = client.ResourceV1Api(api_client)
        self._ttl = ttl
        self._clock = clock
        self._known: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()
        self.calls = 0  # API requests made (for tests)

    def ensure(self, body: Mapping[str, Any]) -> None:
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        now = self._clock()
        with self._lock:
            if self._known.get((ns, name), -1.0) > now:
                return
        try:
            self.calls += 1
            self._api.create_namespaced_resource_claim_template(ns, body, _request_timeout=10)
        except ApiException as e:
            if e.status != 409:
                raise TemplateError(
                    f"cannot create ResourceClaimTemplate {ns}/{name}: HTTP {e.status} {e.reason}: "
                    f"{_message(e)}; the webhook's service account needs create/get on resourceclaimtemplates") from None
            self.calls += 1
            try:
                current = self._api.read_namespaced_resource_claim_template(name, ns, _preload_content=False, _request_timeout=10)
            except ApiException as e2:
                raise TemplateError(f"ResourceClaimTemplate {ns}/{name} exists but cannot be read: HTTP {e2.status}") from None
            stored = json.loads(current.data)
            ours = body["metadata"].get("labels") or {}
            theirs = (stored.get("metadata") or {}).get("labels") or {}
            if any(theirs.get(k) != v for k, v in ours.items()):
                raise TemplateError(
                    f"ResourceClaimTemplate {ns}/{name} exists but was not made by this webhook (labels {theirs}); "
                    f"delete or rename it") from None
            # The label can be copied by anyone who may create templates in the namespace: adopt
            # only the spec we would write, as the API server stores it (a dry-run gives its defaults).
            if stored.get("spec") != self._as_stored(ns, body):
                raise TemplateError(
                    f"ResourceClaimTemplate {ns}/{name} exists with this webhook's name and label but another spec"
                    f" (not what the webhook writes for this request shape): someone else made it; it is not used."
                    f" Delete it (kubectl -n {ns} delete resourceclaimtemplate {name}) and create the pod again") from None
        with self._lock:
            self._known[(ns, name)] = now + self._ttl


    def _as_stored(self, ns: str, body: Mapping[str, Any]) -> Any:
        """`body`'s spec with the API server's defaults, from a dry-run create under a generated name."""
        meta = {k: v for k, v in body["metadata"].items() if k != "name"}
        probe = {**body, "metadata": {**meta, "generateName": "dra-webhook-probe-"}}
        self.calls += 1
        try:
            resp = self._api.create_namespaced_resource_claim_template(ns, probe, dry_run="All", _preload_content=False,
                                                                       _request_timeout=10)
        except ApiException as e:
            raise TemplateError(f"cannot check the spec of ResourceClaimTemplate {ns}/{body['metadata']['name']}:"
                                f" HTTP {e.status} {e.reason}: {_message(e)}") from None
        return json.loads(resp.data).get("spec")


def _message(e: ApiException) -> str:
    try:
        return str(json.loads(e.body or "").get("message", ""))[:500]
    except (TypeError, ValueError):
        return str(e.body)[:500]
