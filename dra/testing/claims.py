"""Claims for tests of the claim path: wire-form builders and a `ClaimSource` over recorded claims.

`RecordedClaims` serves ResourceClaims in their wire form (as the API server sends them, or as
recorded from it), from memory or from a directory of JSON files (so child processes in
crash tests see the same claims). Integration tests use `dra._runtime.claims.ApiClaimSource` instead.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dra._runtime.claims import ResourceClaim


def claim_manifest(name: str, device_class: str, request: str = "gpu", **capacity: str) -> dict[str, Any]:
    """A ResourceClaim as users write it: one request of `device_class`, optional capacity requests."""
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if capacity:
        exactly["capacity"] = {"requests": dict(capacity)}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": request, "exactly": exactly}]}}}


def pod_manifest(name: str, claims: Sequence[str], node: str | None = None, image: str | None = None) -> dict[str, Any]:
    """A Pod whose one container uses every claim in `claims`; pinned to `node` when given.

    Without `image` the pod is never meant to run (no kubelet); with one (a real node's local
    image) it runs once, pulls nothing (`imagePullPolicy: Never`) and is not restarted."""
    container: dict[str, Any] = {"name": "main", "image": image or "registry.invalid/none:0",
                                 "resources": {"claims": [{"name": f"c{i}"} for i in range(len(claims))]}}
    spec: dict[str, Any] = {
        "resourceClaims": [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)],
        "containers": [container],
    }
    if image is not None:
        container["imagePullPolicy"] = "Never"
        spec["restartPolicy"] = "Never"
        spec["terminationGracePeriodSeconds"] = 2
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def claim_dict(
    name: str,
    namespace: str = "default",
    uid: str | None = None,
    results: Sequence[Mapping[str, Any]] = (),
    config: Sequence[Mapping[str, Any]] = (),
    node: str | None = "node-a",
    allocated: bool = True,
) -> dict[str, Any]:
    """A ResourceClaim in wire form, allocated like kube-scheduler allocates node-local devices."""
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or str(uuid.uuid4())},
        "spec": {"devices": {"requests": []}},
        "status": {},
    }
    if allocated:
        alloc: dict[str, Any] = {"devices": {"results": [dict(r) for r in results], "config": [dict(c) for c in config]}}
        if node is not None:
            alloc["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}
        obj["status"]["allocation"] = alloc
    return obj


def result(device: str, request: str = "gpu", driver: str = "gpu.example.com", pool: str = "node-a",
           share_id: str | None = None, **capacity: str) -> dict[str, Any]:
    r: dict[str, Any] = {"request": request, "driver": driver, "pool": pool, "device": device}
    if share_id:
        r["shareID"] = share_id
    if capacity:
        r["consumedCapacity"] = dict(capacity)
    return r


def opaque(driver: str, parameters: Any, source: str = "FromClaim", requests: Sequence[str] = ()) -> dict[str, Any]:
    return {"source": source, "requests": list(requests), "opaque": {"driver": driver, "parameters": parameters}}


class RecordedClaims:
    """A thread-safe `ClaimSource` over wire-form claims, optionally persisted in `directory`."""

    def __init__(self, directory: Path | None = None) -> None:
        self._claims: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.directory = directory
        self.gets = 0

    def add(self, obj: Mapping[str, Any]) -> ResourceClaim:
        meta = obj["metadata"]
        with self._lock:
            self._claims[(meta["namespace"], meta["name"])] = dict(obj)
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            (self.directory / f"{meta['namespace']}_{meta['name']}.json").write_text(json.dumps(obj))
        return ResourceClaim.from_dict(obj)

    def remove(self, namespace: str, name: str) -> None:
        with self._lock:
            self._claims.pop((namespace, name), None)
        if self.directory is not None:
            (self.directory / f"{namespace}_{name}.json").unlink(missing_ok=True)

    def get_claim(self, namespace: str, name: str) -> ResourceClaim | None:
        with self._lock:
            self.gets += 1
            obj = self._claims.get((namespace, name))
        if obj is None and self.directory is not None:
            path = self.directory / f"{namespace}_{name}.json"
            if path.exists():
                obj = json.loads(path.read_text())
        return ResourceClaim.from_dict(obj) if obj is not None else None
