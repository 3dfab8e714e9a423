#!/usr/bin/env python3
"""Scheduling at scale: 100 fake nodes x 8 GPUs, 2,000 pods with claims of mixed shares.

What runs: an embedded control plane (kube-apiserver, kube-scheduler, controller-manager, DRA
and consumable-capacity gates on) at the pinned or a given Kubernetes version. For each of N
Node objects, the hami-core-gpu driver is set up with ``--fake h200x8`` (discovery through
nvidia-ml-py against the stub NVML) and its devices are published by the framework's own
`Publisher.sync_once` (the code a node daemon runs). Then P ResourceClaims, each 10-50 cores
(step 10) and 1-20Gi (seeded random), and one pod per claim are created; kube-scheduler
allocates and binds them (no kubelet: a bound pod has ``spec.nodeName`` set).

Reported (results to --out as JSON and printed):
- creation rate of claims+pods; the scheduler's binding rate (pods/s, first to last bind);
- time from the first pod created until every pod that will bind is bound (bind times from a
  pod watch opened before the first pod; no bind for --settle seconds ends the run);
- checks: no device holds more than 100 cores or its memory (summed from the claims'
  allocation results); no pod stays pending while some device still has room for its request
  (both cores and memory), which is what upstream's allocator (kubernetes/kubernetes#133705)
  can violate: it does not move on to another shareable device when the first lacks capacity.

    python bench/hami_core_gpu_scale.py                                  # 100 x 8, 2000 pods, v1.34.4
    python bench/hami_core_gpu_scale.py --k8s-version v1.37.2 --out r.json
    python bench/hami_core_gpu_scale.py --nodes 10 --pods 200            # a quick look
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from kubernetes import client, watch  # noqa: E402

from dra import DriverContext, quantity_to_int  # noqa: E402
from dra._runtime.publish import Publisher, PublishSettings  # noqa: E402
from dra._runtime.publish.layout import parse_layout  # noqa: E402
from dra_dev.cluster.binaries import DEFAULT_K8S_VERSION, binary_set, build  # noqa: E402
from dra_dev.cluster.controlplane import running  # noqa: E402
from drivers.hami_core_gpu.driver import HamiCoreGpuDriver  # noqa: E402

DRIVER = "hami-core-gpu.project-hami.io"
GiB = 1 << 30


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def publish_nodes(api: client.ApiClient, count: int, profile: str,
                  layout: str = "auto") -> tuple[dict[str, dict[str, tuple[int, int]]], Any]:
    """Nodes with fake GPUs, published by the framework's publisher (the slice layout it picks from
    the server's version, or `layout`); returns node -> device -> capacity, and the last sync."""
    from kube_helpers import create_node

    capacity: dict[str, dict[str, tuple[int, int]]] = {}
    settings = PublishSettings(layout=parse_layout(layout))
    result: Any = None
    for i in range(count):
        node = f"gpu-node-{i:03d}"
        create_node(api, node)
        driver = HamiCoreGpuDriver()
        driver.setup(DriverContext(node_name=node, pool_name=node, settings={"health": "off"}, fake=profile))
        devices = driver.devices()
        publisher = Publisher(api, DRIVER, node, lambda d=devices: d, settings=settings)
        result = (publisher.sync_once(), publisher.layout)
        capacity[node] = {d.name: (100, quantity_to_int(d.capacity["memory"].value)) for d in devices}
        driver.close()
    return capacity, result


def shares(count: int, seed: int) -> list[tuple[int, int]]:
    rnd = random.Random(seed)
    return [(rnd.choice((10, 20, 30, 40, 50)), rnd.randint(1, 20)) for _ in range(count)]


def create_workload(api: client.ApiClient, ns: str, wanted: list[tuple[int, int]], workers: int) -> float:
    resource: Any = client.ResourceV1Api(api)
    core: Any = client.CoreV1Api(api)

    def one(i: int) -> None:
        cores, gib = wanted[i]
        name = f"w-{i:04d}"
        resource.create_namespaced_resource_claim(ns, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": DRIVER, "capacity": {"requests": {"cores": str(cores), "memory": f"{gib}Gi"}}}}]}}})
        core.create_namespaced_pod(ns, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                     "containers": [{"name": "main", "image": "registry.invalid/none:0",
                                     "resources": {"claims": [{"name": "gpu"}]}}]}})

    t0 = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, range(len(wanted))))
    return time.monotonic() - t0


class BindWatch:
    """Records when each pod is first seen bound (spec.nodeName set), from a watch started before
    the pods are created, so bind times are the scheduler's, not a poller's."""

    def __init__(self, api: client.ApiClient, ns: str, t_start: float) -> None:
        self.api, self.ns, self.t_start = api, ns, t_start
        self.bound: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        core: Any = client.CoreV1Api(self.api)
        version = ""
        while not self._stop.is_set():
            w = watch.Watch()
            try:
                for ev in w.stream(core.list_namespaced_pod, self.ns, resource_version=version, timeout_seconds=30,
                                   allow_watch_bookmarks=True):
                    obj = ev["object"]
                    if isinstance(obj, dict):  # BOOKMARK / ERROR events arrive undecoded
                        version = (obj.get("metadata") or {}).get("resourceVersion") or version
                        continue
                    version = obj.metadata.resource_version or version
                    if ev["type"] in ("ADDED", "MODIFIED") and obj.spec and obj.spec.node_name:
                        self.bound.setdefault(obj.metadata.name, time.monotonic() - self.t_start)
                    if self._stop.is_set():
                        break
            except client.ApiException as e:
                if e.status == 410:  # expired: start over from now (bind times already seen are kept)
                    version = ""
                elif not self._stop.is_set():
                    raise
            except Exception:
                if self._stop.is_set():
                    return  # the control plane is going away
                log("pod watch broke; reopening")
                time.sleep(0.5)

    def wait(self, total: int, settle: float) -> tuple[list[float], float]:
        """Until every pod is bound or none was bound for `settle` seconds."""
        last, count = time.monotonic(), 0
        while len(self.bound) < total and time.monotonic() - last < settle:
            time.sleep(0.5)
            if len(self.bound) != count:
                count, last = len(self.bound), time.monotonic()
        self._stop.set()
        return sorted(self.bound.values()), time.monotonic() - self.t_start


def check(api: client.ApiClient, ns: str, capacity: dict[str, dict[str, tuple[int, int]]],
          wanted: list[tuple[int, int]]) -> dict[str, Any]:
    resource: Any = client.ResourceV1Api(api)
    claims = json.loads(resource.list_namespaced_resource_claim(ns, _preload_content=False).data)["items"]
    used: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    pending: list[tuple[int, int]] = []
    for c in claims:
        alloc = (c.get("status") or {}).get("allocation")
        if not alloc:
            i = int(c["metadata"]["name"].split("-")[1])
            pending.append(wanted[i])
            continue
        for r in alloc["devices"]["results"]:
            cc = r.get("consumedCapacity") or {}
            u = used[(r["pool"], r["device"])]
            u[0] += quantity_to_int(cc.get("cores", "100"))
            u[1] += quantity_to_int(cc.get("memory", "0"))
    over = [f"{p}/{d}: {u[0]} cores, {u[1] / GiB:.1f} GiB" for (p, d), u in used.items()
            if u[0] > capacity[p][d][0] or u[1] > capacity[p][d][1]]
    free = [(cap[0] - used[(p, d)][0], cap[1] - used[(p, d)][1]) for p, devs in capacity.items() for d, cap in devs.items()]
    with_room = [w for w in pending if any(fc >= w[0] and fm >= w[1] * GiB for fc, fm in free)]
    devices_used = sum(1 for u in used.values() if u[0])
    return {
        "allocated_claims": len(claims) - len(pending), "pending_claims": len(pending),
        "devices_over_capacity": over, "pending_while_a_device_had_room": len(with_room),
        "pending_with_room_examples": with_room[:5], "devices_in_use": devices_used,
        "cores_allocated": sum(u[0] for u in used.values()), "cores_total": 100 * sum(len(d) for d in capacity.values()),
        "fully_used_devices": sum(1 for u in used.values() if u[0] == 100),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k8s-version", default=DEFAULT_K8S_VERSION)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--profile", default="h200x8")
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=16, help="parallel API writers creating claims and pods")
    parser.add_argument("--settle", type=float, default=60.0, help="seconds without a bind that end the run")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--slice-layout", default="auto", help="auto (from the server's version), per-device or packed")
    args = parser.parse_args()

    if not binary_set(args.k8s_version).complete():
        build(args.k8s_version, progress=log)
    with tempfile.TemporaryDirectory(prefix="dra-scale-", dir="/tmp") as work, running(Path(work), args.k8s_version) as cp:
        api = cp.api_client()
        api.configuration.connection_pool_maxsize = args.workers + 4
        resource: Any = client.ResourceV1Api(api)
        resource.create_device_class({"metadata": {"name": DRIVER}, "spec": {"selectors": [{"cel": {
            "expression": f"device.driver == '{DRIVER}'"}}]}})
        t = time.monotonic()
        capacity, (last_sync, layout) = publish_nodes(api, args.nodes, args.profile, args.slice_layout)
        publish_s = time.monotonic() - t
        log(f"published {args.nodes} nodes x {len(next(iter(capacity.values())))} GPUs in {publish_s:.1f} s")
        ns = "scale"
        client.CoreV1Api(api).create_namespace({"metadata": {"name": ns}})
        wanted = shares(args.pods, args.seed)
        t_start = time.monotonic()
        binds_watch = BindWatch(cp.api_client(), ns, t_start)
        create_s = create_workload(api, ns, wanted, args.workers)
        log(f"created {args.pods} claims + pods in {create_s:.1f} s")
        binds, elapsed = binds_watch.wait(args.pods, args.settle)
        checks = check(api, ns, capacity, wanted)
        span = (binds[-1] - binds[0]) if len(binds) > 1 else 0.0
        result = {
            "k8s_version": args.k8s_version, "slice_layout": str(layout), "slices_per_node": last_sync.slices,
            "nodes": args.nodes, "gpus": sum(len(d) for d in capacity.values()),
            "pods": args.pods, "seed": args.seed, "requested_cores": sum(c for c, _ in wanted),
            "requested_memory_gib": sum(m for _, m in wanted),
            "publish_seconds": round(publish_s, 2), "create_seconds": round(create_s, 2),
            "create_rate_per_s": round(args.pods / create_s, 1),
            "bound": len(binds), "first_bind_s": round(binds[0], 2) if binds else None,
            "all_bound_s": round(binds[-1], 2) if binds else None,
            "bind_rate_pods_per_s": round((len(binds) - 1) / span, 1) if span else None,
            "run_seconds": round(elapsed, 1), **checks,
        }
        print(json.dumps(result, indent=2))
        if args.out:
            args.out.write_text(json.dumps(result, indent=2) + "\n")
        ok = not checks["devices_over_capacity"] and not checks["pending_while_a_device_had_room"]
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
