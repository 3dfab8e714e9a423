"""NodePrepareResources latency through the node daemon, against the real API server.

What is measured: `dra run example` runs as a child process; the kubelet harness registers it
and calls NodePrepareResources over its unix socket, one call per claim as kubelet does per
pod, with 1, 10 and 100 calls in flight at once. Claims are allocated by kube-scheduler for
pods pinned to the bench node. Each round prepares every claim, then unprepares them all
(unprepare not timed), so every timed call does the full work: GET the claim, checkpoint
twice, driver call, CDI spec write. Also reported: the daemon's RSS after the runs, its peak
RSS, and its CPU use while idle (nothing calling it; the slice watch open).

    python bench/prepare_latency.py                     # starts an embedded control plane
    python bench/prepare_latency.py --kubeconfig K      # uses a running one (dra cluster up)

Targets (issue 3): p99 <= 50 ms at 100 concurrent claims; RSS <= 80 MiB.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import client, config

from dra.driver import ClaimRef
from dra.testing.claims import claim_manifest, pod_manifest
from dra.testing.daemon import DaemonProcess
from dra.testing.kubelet import KubeletHarness

DRIVER = "gpu.example.com"
PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def control_plane(kubeconfig: str | None) -> Iterator[Path]:
    if kubeconfig:
        yield Path(kubeconfig)
        return
    from dra_dev.cluster.controlplane import running

    with tempfile.TemporaryDirectory(prefix="dra-bench-cp-") as d, running(Path(d)) as cp:
        yield cp.kubeconfig


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in KiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def cpu_seconds(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(stat[11]) + int(stat[12])) / TICKS  # utime + stime


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def make_claims(api: client.ApiClient, ns: str, device_class: str, node: str, prefix: str, n: int) -> list[ClaimRef]:
    resource: Any = client.ResourceV1Api(api)
    core: Any = client.CoreV1Api(api)
    for i in range(n):
        name = f"{prefix}{i}"
        resource.create_namespaced_resource_claim(ns, claim_manifest(name, device_class, cores="1", memory="64Mi"))
        core.create_namespaced_pod(ns, pod_manifest(name, [name], node))
    refs = []
    deadline = time.monotonic() + 300
    for i in range(n):
        while True:
            c = resource.read_namespaced_resource_claim(f"{prefix}{i}", ns)
            if c.status and c.status.allocation and c.status.reserved_for:
                refs.append(ClaimRef(c.metadata.uid, ns, c.metadata.name))
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"claim {prefix}{i} was not allocated within 300 s")
            time.sleep(0.1)
    return refs


def timed_round(kubelet: KubeletHarness, refs: list[ClaimRef]) -> list[float]:
    def one(ref: ClaimRef) -> float:
        t0 = time.perf_counter()
        answer = kubelet.prepare([ref], driver=DRIVER)[ref.uid]
        took = time.perf_counter() - t0
        if answer.error:
            raise SystemExit(f"prepare of {ref.name} failed: {answer.error}")
        return took

    with ThreadPoolExecutor(len(refs)) as pool:
        latencies = list(pool.map(one, refs))
        errors = list(pool.map(lambda r: kubelet.unprepare([r], driver=DRIVER)[r.uid], refs))
    if any(errors):
        raise SystemExit(f"unprepare failed: {[e for e in errors if e][:3]}")
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", help="a running control plane (default: start an embedded one)")
    parser.add_argument("--levels", default="1,10,100", help="concurrency levels (default 1,10,100)")
    parser.add_argument("--samples", type=int, default=300, help="timed calls per level, at least one round")
    parser.add_argument("--module", default="dra.cli", help="dra.cli (`dra run`), or a module taking its arguments")
    parser.add_argument("--daemon-args", default="", help="extra arguments for the daemon, space separated")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="how long idle CPU is measured")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]

    with control_plane(args.kubeconfig) as kubeconfig, tempfile.TemporaryDirectory(prefix="dra-b-", dir="/tmp") as wd:
        api = config.new_client_from_config(config_file=str(kubeconfig))
        from kube_helpers import create_node  # type: ignore[import-not-found]

        run = os.urandom(3).hex()
        node, ns = f"bench-{run}", f"bench-{run}"
        create_node(api, node)
        core: Any = client.CoreV1Api(api)
        resource: Any = client.ResourceV1Api(api)
        core.create_namespace({"metadata": {"name": ns}})
        resource.create_device_class(
            {"metadata": {"name": ns}, "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}
        )
        daemon = DaemonProcess(
            "example",
            node,
            kubeconfig,
            Path(wd),
            args=["--log-level", "warning", "--set", "count=4", *args.daemon_args.split()],
            module=args.module,
        ).start()
        kubelet = KubeletHarness(daemon.registrar_dir)
        try:
            kubelet.wait_for_plugin(DRIVER, timeout=60)
            daemon.wait_http("/readyz", timeout=60)
            rows = []
            # One set of claims; level n uses the first n. (All share gpu-0: kube-scheduler 1.34 does not
            # move on to the next shareable device when the first is full, so 100 x 1% fills exactly one.)
            claims = make_claims(api, ns, ns, node, "c", max(levels))
            for n in levels:
                refs = claims[:n]
                timed_round(kubelet, refs)  # warm-up: connections, imports, first-touch of files
                samples: list[float] = []
                cpu0 = cpu_seconds(daemon.pid)
                while len(samples) < max(args.samples, n):
                    samples += timed_round(kubelet, refs)
                # Daemon CPU per prepared claim (its unprepare included): the floor under latency at load.
                cpu = (cpu_seconds(daemon.pid) - cpu0) / len(samples)
                rows.append((n, len(samples), statistics.median(samples), percentile(samples, 0.99), max(samples), cpu))
            rss, peak = rss_kib(daemon.pid)
            time.sleep(2)
            c0, t0 = cpu_seconds(daemon.pid), time.monotonic()
            time.sleep(args.idle_seconds)
            idle = (cpu_seconds(daemon.pid) - c0) / (time.monotonic() - t0)
        finally:
            kubelet.close()
            daemon.stop()
            with contextlib.suppress(Exception):
                resource.delete_device_class(ns)
                core.delete_namespace(ns)
                core.delete_node(node)

    how = "dra run example" if args.module == "dra.cli" else f"python -m {args.module} example"
    how = f"{how} {args.daemon_args}".rstrip()
    print(f"\nNodePrepareResources through `{how}` + kubelet harness, real apiserver ({os.cpu_count()} CPUs)")
    print(f"{'concurrent':>10} {'calls':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'daemon CPU ms/claim':>20}")
    for n, count, p50, p99, worst, cpu in rows:
        print(f"{n:>10} {count:>6} {p50 * 1e3:>8.1f} {p99 * 1e3:>8.1f} {worst * 1e3:>8.1f} {cpu * 1e3:>20.1f}")
    print(f"daemon RSS after the runs {rss / 1024:.1f} MiB (peak {peak / 1024:.1f} MiB); idle CPU {idle * 100:.2f}% of one core")
    target = next((p99 for n, _, _, p99, _, _ in rows if n == 100), None)
    if target is not None:
        latency_ok = "met" if target <= 0.05 else "NOT met"
        print(f"targets: p99 at 100 <= 50 ms: {latency_ok}; RSS <= 80 MiB: {'met' if peak <= 80 * 1024 else 'NOT met'}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    main()
