"""What `dra top` reads: the API's ResourceSlices and ResourceClaims, the daemons' endpoints (from
the chart's pods or named), and each endpoint's /metrics."""

from __future__ import annotations

import dataclasses
import functools
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dra._runtime import client
from dra._runtime.top import metrics
from dra._runtime.top.model import Scrape
from dra.errors import UserError

DAEMON_SELECTOR = "app.kubernetes.io/component=kubelet-plugin,app.kubernetes.io/part-of=dra-hami"
METRICS_PORT_NAME = "metrics"
MAX_BYTES = 32 << 20  # one exposition; a daemon with thousands of claims is far below
TIMEOUT = 5.0
VIAS = ("proxy", "direct")


@dataclasses.dataclass(frozen=True)
class Endpoint:
    node: str
    url: str  # what is shown; for `proxy`, the pod's proxy path
    fetch: Callable[[], bytes]


def items(api: Any, path: str, query: list[tuple[str, str]] | None = None) -> list[dict[str, Any]]:
    """Every object of a list path, page by page."""
    out: list[dict[str, Any]] = []
    token = ""
    while True:
        q = [*(query or []), ("limit", "500"), *([("continue", token)] if token else [])]
        doc = client.get_json(api, path, {}, TIMEOUT, q) or {}
        out += doc.get("items") or []
        token = (doc.get("metadata") or {}).get("continue") or ""
        if not token:
            return out


def cluster(api: Any, node: str | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(ResourceSlices of `node` or of every node, every ResourceClaim)."""
    query = [("fieldSelector", f"spec.nodeName={node}")] if node else None
    try:
        return (items(api, "/apis/resource.k8s.io/v1/resourceslices", query),
                items(api, "/apis/resource.k8s.io/v1/resourceclaims"))
    except client.ApiException as exc:
        raise UserError(f"cannot list ResourceSlices and ResourceClaims: {exc.status} {exc.reason}; dra top needs"
                        " list on both (resource.k8s.io/v1)") from None


def named(specs: Sequence[str], node: str | None) -> list[Endpoint]:
    """`--metrics NODE=URL` (or a bare URL with --node)."""
    out = []
    for spec in specs:
        where, sep, url = spec.partition("=")
        if not sep or "://" in where:
            if node is None:
                raise UserError(f"--metrics {spec!r}: write NODE=URL (a bare URL needs --node)")
            where, url = node, spec
        if not url.startswith(("http://", "https://")):
            raise UserError(f"--metrics {spec!r}: the URL must be http:// or https://")
        out.append(Endpoint(where, url, functools.partial(_http, url)))
    return out


def discovered(api: Any, node: str | None, via: str) -> list[Endpoint]:
    """The chart's daemon pods (Running, with a port named metrics) of `node` or every node."""
    query = [("labelSelector", DAEMON_SELECTOR), *([("fieldSelector", f"spec.nodeName={node}")] if node else [])]
    try:
        pods = items(api, "/api/v1/pods", query)
    except client.ApiException as exc:
        raise UserError(f"cannot list the daemons' pods ({DAEMON_SELECTOR}): {exc.status} {exc.reason}; pass"
                        " --metrics NODE=URL instead, or --metrics-via none") from None
    out = []
    for p in pods:
        meta, spec, status = p.get("metadata") or {}, p.get("spec") or {}, p.get("status") or {}
        port = next((pt.get("containerPort") for c in spec.get("containers") or [] for pt in c.get("ports") or []
                     if pt.get("name") == METRICS_PORT_NAME), None)
        if status.get("phase") != "Running" or not port or not spec.get("nodeName"):
            continue
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        if via == "direct":
            url = f"http://{status.get('podIP')}:{port}/metrics"
            out.append(Endpoint(spec["nodeName"], url, functools.partial(_http, url)))
        else:
            path = f"/api/v1/namespaces/{ns}/pods/{name}:{port}/proxy/metrics"
            out.append(Endpoint(spec["nodeName"], f"{ns}/{name}:{port} (API proxy)", functools.partial(_proxied, api, path)))
    return out


def _http(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=TIMEOUT) as r:  # http(s) only: `named` checks it
        body: bytes = r.read(MAX_BYTES + 1)
    return body


def _proxied(api: Any, path: str) -> bytes:
    data: bytes = client.get_raw(api, path, {}, TIMEOUT).data or b""
    return data


def scrape(endpoints: Sequence[Endpoint], clock: Callable[[], float] = time.monotonic) -> list[Scrape]:
    """Every endpoint read at once; an endpoint that fails gives its error, not an exception."""
    def one(e: Endpoint) -> Scrape:
        try:
            body = e.fetch()
            if len(body) > MAX_BYTES:
                raise ValueError(f"more than {MAX_BYTES >> 20} MiB")
            samples = tuple(metrics.parse(body.decode("utf-8", "replace")))
            return Scrape(e.node, e.url, clock(), samples)
        except (OSError, ValueError, urllib.error.URLError, client.ApiException) as exc:
            reason = getattr(exc, "reason", None) or str(exc)
            return Scrape(e.node, e.url, clock(), error=str(reason)[:200])

    if not endpoints:
        return []
    with ThreadPoolExecutor(min(8, len(endpoints))) as pool:
        return list(pool.map(one, endpoints))
