"""The demo's `dra top` step: while the claims' workloads hold their memory, one `dra top --once`
over the demo's nodes (their daemons run here as processes: their /metrics named NODE=URL), the
table shown and the JSON document (`-o json`) checked: every claim of the demo with its device,
its requested memory and cores, and its used memory."""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dra.errors import UserError
from dra_dev.demo.console import say, show


def command_line(kubeconfig: Path, endpoints: Mapping[str, Sequence[str]]) -> str:
    """The `dra top` a user runs for the same view."""
    metrics = " ".join(f"--metrics {shlex.quote(f'{n}={u}')}" for n, urls in endpoints.items() for u in urls)
    return f"dra top --kubeconfig {shlex.quote(str(kubeconfig))} {metrics}"


def top_once(api: Any, kubeconfig: Path, endpoints: Mapping[str, Sequence[str]], namespace: str, work: Path,
             interval: float = 1.0, used: bool = True) -> dict[str, Any]:
    """Show `dra top` once for the nodes of `endpoints`; the JSON document (also written to
    work/top.json). UserError when a claim of `namespace` is missing from it or lacks its requested
    memory, or (`used`: every claim ran a workload under the hook) its used memory."""
    from dra._runtime.top import sources
    from dra._runtime.top.command import Top
    from dra._runtime.top.view import render

    given = sources.named([f"{n}={u}" for n, urls in endpoints.items() for u in urls], None)
    top = Top(api, None, lambda: given)
    top.scrape()
    time.sleep(interval)
    snap = top.snapshot()
    snap.nodes = [n for n in snap.nodes if n.name in endpoints]  # the cluster may hold other tests' nodes
    snap.pending = [c for c in snap.pending if c["namespace"] == namespace]
    say(f"    $ {command_line(kubeconfig, endpoints)}")
    show(render(snap))
    doc: dict[str, Any] = snap.json()
    (work / "top.json").write_text(json.dumps(doc, indent=2) + "\n")
    ours = [c for c in doc["claims"] if c["namespace"] == namespace]
    listed = {c["name"] for c in ours}
    want = set(_claim_names(api, namespace))
    missing = sorted(want - listed)
    blank = sorted(c["name"] for c in ours if c["requested"]["memory"] is None or (used and c["used"]["memory"] is None))
    if missing or blank:
        raise UserError(f"dra top --once -o json: claims missing {missing}, without requested or used memory {blank}")
    held = len({c["name"] for c in ours if c["used"]["memory"]})
    say(f"    dra top --once -o json: {len(listed)} claims, each with its device, requested and used memory and cores"
        f" ({held} holding memory now)")
    return doc


def _claim_names(api: Any, namespace: str) -> list[str]:
    from dra._runtime.top import sources

    return [c["metadata"]["name"] for c in sources.items(api, f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims")]
