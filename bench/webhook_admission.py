"""What the admission webhook adds to pod creation, measured side by side in one run.

`dra webhook up` serves the embedded control plane. The same HAMi-style pod (one GPU, 3000 MiB,
30% cores) is created in two namespaces, alternately: one served by the webhook (the API
server calls /mutate and /validate over HTTPS; the pod is stored referencing a
ResourceClaimTemplate, and Kubernetes then makes its claim) and one labelled
``hami.io/webhook=ignore`` (no webhook call). Reported: the create latency in both and the
ratio, with 1 and 10 creates in flight, and the webhook process's CPU per admitted pod and RSS.

    python bench/webhook_admission.py [--kubeconfig K] [--pods 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import client, config
from prepare_latency import control_plane, cpu_seconds, percentile  # bench/, beside this file

from dra_dev import webhook_local as install

LIMITS = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def webhook_metrics(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        lines = resp.read().decode().splitlines()
    return {ln.split(" ")[0]: float(ln.split(" ")[1]) for ln in lines if ln.startswith("dra_webhook_")}


def pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "main", "image": "busybox", "resources": {"limits": dict(LIMITS)}}]}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kubeconfig")
    ap.add_argument("--pods", type=int, default=200, help="pods per namespace and concurrency level")
    args = ap.parse_args()
    with control_plane(args.kubeconfig) as kubeconfig, tempfile.TemporaryDirectory(prefix="dra-bench-wh-") as wd:
        state = install.up(kubeconfig, Path(wd))
        api = config.new_client_from_config(config_file=str(kubeconfig))
        cfg = api.configuration
        cfg.connection_pool_maxsize = 32
        core: Any = client.CoreV1Api(api)
        suffix = str(int(time.time()))
        served, plain = f"bench-served-{suffix}", f"bench-optout-{suffix}"
        core.create_namespace({"metadata": {"name": served}})
        core.create_namespace({"metadata": {"name": plain, "labels": {"hami.io/webhook": "ignore"}}})
        core.create_namespaced_pod(served, pod("warmup"))  # first pod makes the template
        print(f"webhook pid {state.pid}; {args.pods} pods per namespace and level; Kubernetes control plane on loopback")
        print(f"{'in flight':>9} {'namespace':>10} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
        try:
            for inflight in (1, 10):
                times: dict[str, list[float]] = {served: [], plain: []}
                cpu0 = cpu_seconds(state.pid)
                m0 = webhook_metrics(state.health_port)

                def create(job: tuple[str, int], level: int = inflight) -> tuple[str, float]:
                    ns, i = job
                    t0 = time.perf_counter()
                    core.create_namespaced_pod(ns, pod(f"p{level}-{i}"))
                    return ns, (time.perf_counter() - t0) * 1000

                jobs = [(ns, i) for i in range(args.pods) for ns in (served, plain)]
                with ThreadPoolExecutor(inflight) as pool:
                    for ns, ms in pool.map(create, jobs):
                        times[ns].append(ms)
                cpu_ms = (cpu_seconds(state.pid) - cpu0) * 1000 / args.pods
                m1 = webhook_metrics(state.health_port)
                d = {k: m1[k] - m0.get(k, 0.0) for k in m1}
                calls = sum(v for k, v in d.items() if k.startswith("dra_webhook_admission_duration_seconds_count"))
                served_ms = sum(v for k, v in d.items() if k.startswith("dra_webhook_admission_duration_seconds_sum"))
                for ns, label in ((served, "served"), (plain, "opted out")):
                    t = times[ns]
                    print(f"{inflight:>9} {label:>10} {percentile(t, 0.5):8.1f} {percentile(t, 0.99):8.1f} {statistics.mean(t):8.1f}")
                ratio = statistics.median(times[served]) / statistics.median(times[plain])
                print(f"{inflight:>9} {'ratio':>10} {ratio:8.2f}x p50; webhook CPU {cpu_ms:.1f} ms per served pod; "
                      f"{calls:.0f} admissions answered in {1000 * served_ms / max(calls, 1):.1f} ms each on average "
                      f"over {d['dra_webhook_connections_total']:.0f} new TLS connections")
            print(f"webhook RSS {rss_mib(state.pid):.1f} MiB")
        finally:
            for ns in (served, plain):
                core.delete_namespace(ns)
            install.down(kubeconfig, Path(wd))


if __name__ == "__main__":
    main()
