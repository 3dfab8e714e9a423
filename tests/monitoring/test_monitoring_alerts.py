"""The charts' alerts and dashboard against a real Prometheus scraping real daemons.

`dra run hami-core-gpu --fake h200x8` (stub NVML: processes from STUB_NVML_PROCESSES, XIDs from
HOOKCORE_STUB_NVML_EVENTS) on a fake node of the embedded control plane, kubelet played by the
harness, two claims allocated by kube-scheduler and prepared, a process of one claim started with
its CDI edits under the real hook; `dra webhook run` beside it. Prometheus (built from its Go
module) scrapes both every second and evaluates the rules exactly as the charts render them
(`helm template`), with every `for:` at 1 s and the counter windows at 5 s.

Each alert is shown firing on a condition the test creates and resolving once it is undone,
read from Prometheus's /api/v1/alerts (and /api/v1/rules); how long each took is printed at the
end (not asserted: a wall-clock figure). Every dashboard panel's queries return series, and the
per-device panels are drawn to a PNG from the same queries.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from ci_gate import gate
from kube_helpers import create_node, unique, wait_for
from kubernetes import client
from kubernetes.client.rest import ApiException
from prometheus_client.parser import text_string_to_metric_families

from dra import ClaimRef
from dra.testing.claims import claim_manifest, pod_manifest
from dra.testing.daemon import DaemonProcess, free_port
from dra.testing.kubelet import KubeletHarness
from dra.testing.runtime import run_with_cdi, runtime_unavailable, start_with_cdi
from dra_dev.cluster.certs import new_ca, new_serving_cert, write_pair
from dra_dev.cluster.controlplane import ControlPlane
from dra_dev.monitoring.picture import per_device_picture
from dra_dev.monitoring.prometheus import Prometheus
from dra_dev.monitoring.rules import as_promql, dashboard, fast_rule_values, panel_queries, render_chart, write_rule_file

WHY = runtime_unavailable()
_gate = gate(WHY and f"the claim's process runs with its CDI edits: {WHY}")
pytestmark = [pytest.mark.cluster, pytest.mark.monitoring]

DRIVER = "hami-core-gpu.project-hami.io"
RELEASE, NAMESPACE = "mon", "dra-monitoring"
GPU_JOB, WEBHOOK_JOB = f"{RELEASE}-hami-core-gpu", f"{RELEASE}-dra-webhook"
WORKLOAD = Path(__file__).resolve().parents[1] / "hami_core_gpu" / "stub_workload.py"
MiB, GiB = 1 << 20, 1 << 30
TIMINGS: dict[str, tuple[float, float]] = {}
"""Alert -> (seconds from the condition to firing, seconds from undoing it to resolved)."""


@dataclass
class Claim:
    name: str
    uid: str
    device: str
    index: int
    cdi_ids: list[str]


@dataclass
class Webhook:
    """`dra webhook run` as its own process (not registered with the API server: reviews are posted
    to it directly, so no other test's pods go through it)."""

    directory: Path
    kubeconfig: Path
    port: int = field(default_factory=free_port)
    health_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        ca, ca_key = new_ca("dra-monitoring-test-ca")
        cert, key = new_serving_cert(ca, ca_key, "dra-webhook", ["localhost"], ["127.0.0.1"])
        self.ca = self.directory / "ca.crt"
        write_pair(self.ca, self.directory / "ca.key", ca, ca_key)
        write_pair(self.directory / "tls.crt", self.directory / "tls.key", cert, key)

    def start(self) -> None:
        argv = [sys.executable, "-m", "dra.cli", "webhook", "run", "--cert", str(self.directory / "tls.crt"),
                "--key", str(self.directory / "tls.key"), "--host", "127.0.0.1", "--port", str(self.port),
                "--health-port", str(self.health_port), "--kubeconfig", str(self.kubeconfig), "--log-format", "text"]
        with (self.directory / "webhook.log").open("ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_for(lambda: self.get("/readyz") == 200 or None, 60, 0.1, "the webhook ready")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()

    def get(self, path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}{path}", timeout=5) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return int(e.code)
        except OSError:
            return 0

    def post(self, path: str, body: bytes) -> int:
        ctx = ssl.create_default_context(cafile=str(self.ca))
        req = urllib.request.Request(f"https://127.0.0.1:{self.port}{path}", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return int(e.code)


@dataclass
class Stack:
    cluster: ControlPlane
    api: client.ApiClient
    node: str
    namespace: str
    work: Path
    daemon: DaemonProcess
    harness: KubeletHarness
    webhook: Webhook
    prom: Prometheus
    procs_file: Path
    events_file: Path
    devices: dict[str, dict[str, Any]]
    lines: dict[str, str] = field(default_factory=dict)
    claims: dict[str, Claim] = field(default_factory=dict)
    holder_pid: int = 0
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def nvml(self, key: str, line: str | None) -> None:
        """The stub NVML lists (or, None, no longer lists) the process `key` as `line`."""
        if line is None:
            self.lines.pop(key, None)
        else:
            self.lines[key] = line
        tmp = self.procs_file.with_suffix(".tmp")
        tmp.write_text("".join(f"{v}\n" for v in self.lines.values()))
        tmp.replace(self.procs_file)

    def inject(self, line: str) -> None:
        """A health event for the stub NVML (``xid <uuid> <code> [<action>]``, ``reset <uuid>``)."""
        with self.events_file.open("a") as f:
            f.write(line + "\n")

    def free_devices(self) -> list[str]:
        """The node's GPUs no claim of the test holds."""
        held = {c.device for c in self.claims.values()}
        return sorted(d for d in self.devices if d not in held)

    def attribute(self, device: str, name: str) -> Any:
        value = self.devices[device]["attributes"][name]
        return next(iter(value.values()))


def _ensure_device_class(api: client.ApiClient) -> bool:
    try:
        client.ResourceV1Api(api).create_device_class({"metadata": {"name": DRIVER}, "spec": {"selectors": [
            {"cel": {"expression": f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'hami-gpu'"}}]}})
        return True
    except ApiException as e:
        if e.status != 409:
            raise
        return False


def _slice_devices(api: client.ApiClient, node: str) -> dict[str, dict[str, Any]]:
    data = client.ResourceV1Api(api).list_resource_slice(field_selector=f"spec.nodeName={node}", _preload_content=False).data
    return {d["name"]: d for s in json.loads(data)["items"] if s["spec"]["driver"] == DRIVER for d in s["spec"]["devices"]}


def gpu_daemon(cluster: ControlPlane, node: str, work: Path, env: Mapping[str, str], *extra: str) -> DaemonProcess:
    return DaemonProcess("hami-core-gpu", node, cluster.kubeconfig, work, env=dict(env), args=[
        "--fake", "h200x8", "--set", "healthProbeInterval=0.2", "--hook-dir", str(work / "hook-dir"),
        "--watchdog", "report", "--watchdog-interval", "0.5", "--watchdog-share-window", "2", *extra])


@pytest.fixture(scope="module")
def stack(cluster: ControlPlane, api_client: client.ApiClient, prometheus_bin: Path, helm_bin: Path,
          stub_nvml: Path) -> Iterator[Stack]:
    node, ns = unique("mon"), unique("mon")
    create_node(api_client, node)
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": ns}})
    made_class = _ensure_device_class(api_client)
    work = Path(tempfile.mkdtemp(prefix="dra-mon-", dir="/tmp"))
    procs_file, events_file = work / "nvml-processes", work / "nvml-events"
    procs_file.write_text("")
    events_file.write_text("")
    daemon = gpu_daemon(cluster, node, work / "gpu",
                        {"STUB_NVML_PROCESSES": str(procs_file), "HOOKCORE_STUB_NVML_EVENTS": str(events_file)})
    (work / "webhook").mkdir()
    webhook = Webhook(work / "webhook", cluster.kubeconfig)
    gpu_rules = write_rule_file(render_chart(helm_bin, "hami-core-gpu", release=RELEASE, namespace=NAMESPACE,
                                             values=fast_rule_values("hami-core-gpu")), work / "gpu.rules.yaml")
    webhook_rules = write_rule_file(render_chart(helm_bin, "dra-webhook", release=RELEASE, namespace=NAMESPACE, values={
        **fast_rule_values("dra-webhook"), "monitoring.prometheusRule.refusedThreshold": 0,
        "webhook.acceptUnauthenticatedCallers": True}), work / "webhook.rules.yaml")
    (work / "prom").mkdir()
    prom = Prometheus(prometheus_bin, work / "prom", [GPU_JOB, WEBHOOK_JOB], [gpu_rules, webhook_rules])
    harness = KubeletHarness(daemon.registrar_dir)
    s = Stack(cluster, api_client, node, ns, work, daemon, harness, webhook, prom, procs_file, events_file, {})
    try:
        daemon.start()
        harness.watch()
        webhook.start()
        daemon.wait_http("/readyz", timeout=60)
        s.devices = wait_for(lambda: _slice_devices(api_client, node) or None, 30, what="the node's GPUs published")
        prom.targets(GPU_JOB, [(f"127.0.0.1:{daemon.metrics_port}", {"node": node})])
        prom.targets(WEBHOOK_JOB, [(f"127.0.0.1:{webhook.health_port}", {"pod": "webhook-0"})])
        prom.start()
        wait_for(lambda: [[t["health"] for t in prom.targets_up(job)] for job in (GPU_JOB, WEBHOOK_JOB)] == [["up"], ["up"]]
                 or None, 30, what="both targets scraped")
        assert all(r["health"] == "ok" for r in prom.rules()), prom.rules()
        yield s
    finally:
        for child in s.children:
            if child.poll() is None:
                child.kill()
            child.wait()
        prom.stop()
        webhook.stop()
        harness.close()
        daemon.stop()
        core.delete_namespace(ns)
        core.delete_node(node)
        if made_class:
            client.ResourceV1Api(api_client).delete_device_class(DRIVER)
        shutil.rmtree(work, ignore_errors=True)
        if TIMINGS:
            print("\nalert timings (s): condition -> firing, undone -> resolved")
            for name, (fire, resolve) in TIMINGS.items():
                print(f"  {name:24} {fire:5.1f} {resolve:5.1f}")


def firing(prom: Prometheus, name: str, **labels: str) -> dict[str, Any] | None:
    """The firing alert `name` whose labels include `labels`, else None."""
    for a in prom.alerts():
        if a["labels"].get("alertname") == name and a["state"] == "firing" and labels.items() <= a["labels"].items():
            return a
    return None


def active(prom: Prometheus, name: str, **labels: str) -> bool:
    return any(a["labels"].get("alertname") == name and labels.items() <= a["labels"].items() for a in prom.alerts())


def fire_and_resolve(prom: Prometheus, name: str, labels: Mapping[str, str], create: Callable[[], None],
                     undo: Callable[[], None], timeout: float = 45) -> dict[str, Any]:
    """`create` the condition, wait for `name` firing; `undo` it, wait until no such alert is pending
    or firing and the rule is inactive (when it was the only one). Returns the firing alert."""
    assert not active(prom, name, **labels), f"{name} {labels} is active before its condition"
    t0 = time.monotonic()
    create()
    alert = wait_for(lambda: firing(prom, name, **labels), timeout, 0.2, f"{name} {dict(labels)} firing")
    t1 = time.monotonic()
    undo()
    wait_for(lambda: not active(prom, name, **labels), timeout, 0.2, f"{name} {dict(labels)} resolved")
    TIMINGS[name] = (t1 - t0, time.monotonic() - t1)
    rule = next(r for r in prom.rules() if r["name"] == name)
    assert rule["health"] == "ok", rule
    if not any(a["labels"].get("alertname") == name for a in prom.alerts()):
        assert rule["state"] == "inactive", rule
    return alert


# ---- the claims: two shares, one with a process holding memory under the hook -------------------


@pytest.fixture(scope="module")
def claims(stack: Stack) -> dict[str, Claim]:
    resource, core = client.ResourceV1Api(stack.api), client.CoreV1Api(stack.api)
    for name, memory, cores in (("train", "3000Mi", "30"), ("infer", "40Gi", "50")):
        resource.create_namespaced_resource_claim(stack.namespace, claim_manifest(name, DRIVER, memory=memory, cores=cores))
        core.create_namespaced_pod(stack.namespace, pod_manifest(name, [name], node=stack.node))
    for name in ("train", "infer"):
        obj = wait_for(lambda n=name: (c := resource.read_namespaced_resource_claim(n, stack.namespace)).status
                       and c.status.allocation and c, 90, what=f"claim {name} allocated")
        prepared = stack.harness.prepare([ClaimRef(obj.metadata.uid, stack.namespace, name)], driver=DRIVER)[obj.metadata.uid]
        assert prepared.error == "", prepared.error
        device = obj.status.allocation.devices.results[0].device
        ids = list(dict.fromkeys(i for d in prepared.devices for i in d.cdi_device_ids))
        stack.claims[name] = Claim(name, obj.metadata.uid, device, int(stack.attribute(device, "index")), ids)
    train = stack.claims["train"]
    # Compute once under the limiter (its counters appear), then a process holding 1 GiB.
    ran = run_with_cdi(stack.daemon.cdi_dir, train.cdi_ids, [sys.executable, str(WORKLOAD), "--launch", "1.0"])
    assert "LAUNCHED" in ran.stdout, ran.stdout + ran.stderr
    scratch = Path(tempfile.mkdtemp(prefix="rt-", dir=stack.work))
    holder = start_with_cdi(stack.daemon.cdi_dir, train.cdi_ids, [sys.executable, str(WORKLOAD), "--hold", "900", str(GiB)],
                            scratch)
    stack.children.append(holder)

    stack.holder_pid = holder.pid  # unshare and sh exec: the PID is the workload's

    def holding() -> bool:
        _, text = stack.daemon.get("/metrics")
        return sample(text, "dra_claim_memory_used_bytes", claim=train.name) >= GiB

    wait_for(holding, 30, 0.2, "the holder's 1 GiB in the claim's ledger")
    stack.nvml("holder", f"{train.index} {holder.pid} {1100 * MiB} 20")
    return stack.claims


def sample(exposition: str, name: str, **labels: str) -> float:
    """The value of the first sample `name` with `labels` in a /metrics text (0 when none)."""
    for family in text_string_to_metric_families(exposition):
        for s in family.samples:
            if s.name == name and labels.items() <= s.labels.items():
                return float(s.value)
    return 0.0


# ---- the alerts ------------------------------------------------------------------------------------


def test_process_unheld_fires_for_a_process_in_no_claim_and_resolves_when_it_leaves(
        stack: Stack, claims: dict[str, Claim]) -> None:
    sleeper = subprocess.Popen(["sleep", "600"])
    stack.children.append(sleeper)
    gpu = stack.free_devices()[0]
    alert = fire_and_resolve(
        stack.prom, "DraProcessUnheld", {"device": gpu, "node": stack.node},
        lambda: stack.nvml("unheld", f"{stack.attribute(gpu, 'index')} {sleeper.pid} {GiB}"),
        lambda: stack.nvml("unheld", None))
    assert alert["labels"]["severity"] == "warning" and "docs/monitoring.md#draprocessunheld" in alert["annotations"]["runbook"]
    assert alert["annotations"]["summary"].startswith(f"1 process(es) on device {gpu}")


def test_memory_over_quota_fires_and_resolves_when_the_claim_is_back_within(stack: Stack, claims: dict[str, Claim]) -> None:
    train = claims["train"]
    pid = stack.holder_pid
    alert = fire_and_resolve(
        stack.prom, "DraMemoryOverQuota", {"claim": train.name, "namespace": stack.namespace, "device": train.device},
        lambda: stack.nvml("holder", f"{train.index} {pid} {4000 * MiB} 20"),  # 3000Mi quota + 64Mi tolerance
        lambda: stack.nvml("holder", f"{train.index} {pid} {1100 * MiB} 20"))
    assert "beyond its memory quota" in alert["annotations"]["summary"]


def test_compute_over_share_fires_and_resolves_when_the_claim_is_back_within(stack: Stack, claims: dict[str, Claim]) -> None:
    train = claims["train"]
    pid = stack.holder_pid
    fire_and_resolve(
        stack.prom, "DraComputeOverShare", {"claim": train.name, "device": train.device},
        lambda: stack.nvml("holder", f"{train.index} {pid} {1100 * MiB} 90"),  # share 30 + 10 tolerance
        lambda: stack.nvml("holder", f"{train.index} {pid} {1100 * MiB} 10"))


def test_an_xid_fires_unhealthy_and_tainted_until_the_gpu_is_reset(stack: Stack, claims: dict[str, Claim]) -> None:
    gpu = stack.free_devices()[-1]
    uuid = stack.attribute(gpu, "uuid")
    labels = {"device": gpu, "node": stack.node}
    t0 = time.monotonic()
    stack.inject(f"xid {uuid} 48 1")  # double-bit ECC; NVML says: reset the GPU
    unhealthy = wait_for(lambda: firing(stack.prom, "DraDeviceUnhealthy", **labels), 45, 0.2, "DraDeviceUnhealthy firing")
    tainted = wait_for(lambda: firing(stack.prom, "DraDeviceTainted", **labels, key=f"{DRIVER}/xid", value="48"), 45, 0.2,
                       "DraDeviceTainted (xid=48) firing")
    t1 = time.monotonic()
    assert unhealthy["labels"]["severity"] == "critical"
    assert tainted["annotations"]["summary"].endswith(f"tainted {DRIVER}/xid=48:NoSchedule")
    stack.inject(f"reset {uuid}")
    wait_for(lambda: not active(stack.prom, "DraDeviceUnhealthy", **labels)
             and not active(stack.prom, "DraDeviceTainted", **labels), 45, 0.2, "both resolved after the reset")
    TIMINGS["DraDeviceUnhealthy+Tainted"] = (t1 - t0, time.monotonic() - t1)


def test_an_oversized_ledger_fires_and_resolves_after_the_window(stack: Stack, claims: dict[str, Claim]) -> None:
    ledger = stack.daemon.state_dir / "hooks" / claims["infer"].uid / "ledger"

    def grow() -> None:
        with ledger.open("ab") as f:
            f.write(b"\0" * 8192)  # what a tenant's process could write past its end

    fire_and_resolve(stack.prom, "DraLedgerOversized", {"node": stack.node}, grow, lambda: None)


def test_webhook_refusing_and_failing_fire_and_resolve_after_the_window(stack: Stack) -> None:
    pod = {"metadata": {"generateName": "train-"}, "spec": {"containers": [
        {"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}}}]}}
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE",
        "namespace": "team-a", "object": pod}}
    refused = fire_and_resolve(  # a HAMi pod that reached /validate unconverted: refused
        stack.prom, "DraWebhookRefusing", {"endpoint": "validate"},
        lambda: stack.webhook.post("/validate", json.dumps(review).encode()), lambda: None)
    assert refused["labels"]["severity"] == "info"
    fire_and_resolve(  # a review it cannot read: an error, the API server applies the failure policy
        stack.prom, "DraWebhookFailing", {"job": WEBHOOK_JOB},
        lambda: stack.webhook.post("/mutate", b'{"kind": "AdmissionReview"}'), lambda: None)


def test_a_killed_webhook_fires_down_until_it_is_back(stack: Stack) -> None:
    fire_and_resolve(stack.prom, "DraWebhookDown", {"job": WEBHOOK_JOB}, stack.webhook.kill, stack.webhook.start)


def test_a_daemon_not_registered_then_killed_fires_each_alert_until_fixed(stack: Stack) -> None:
    """A second node's daemon: unregistered until its kubelet (the harness) registers it, then
    killed (SIGKILL) until it is started again."""
    node = unique("mon2")
    create_node(stack.api, node)
    daemon = gpu_daemon(stack.cluster, node, stack.work / "gpu2", {}, "--set", "health=off")
    harness = KubeletHarness(daemon.registrar_dir)
    targets = [(f"127.0.0.1:{stack.daemon.metrics_port}", {"node": stack.node}),
               (f"127.0.0.1:{daemon.metrics_port}", {"node": node})]
    try:
        daemon.start()
        daemon.wait_http("/healthz", timeout=60)  # alive, serving; no kubelet has registered it
        alert = fire_and_resolve(stack.prom, "DraDaemonNotRegistered", {"node": node},
                                 lambda: stack.prom.targets(GPU_JOB, targets), harness.watch)
        assert alert["labels"]["severity"] == "critical"
        daemon.wait_http("/readyz", timeout=30)

        def restart() -> None:
            daemon.start()
            daemon.wait_http("/readyz", timeout=60)

        fire_and_resolve(stack.prom, "DraDaemonDown", {"node": node}, lambda: daemon.stop(signal.SIGKILL), restart)
    finally:
        stack.prom.targets(GPU_JOB, [(f"127.0.0.1:{stack.daemon.metrics_port}", {"node": stack.node})])
        harness.close()
        daemon.stop()
        client.CoreV1Api(stack.api).delete_node(node)


# ---- the dashboard ---------------------------------------------------------------------------------


def test_every_dashboard_query_returns_series_and_the_per_device_panels_draw(
        stack: Stack, claims: dict[str, Claim], helm_bin: Path, tmp_path: Path) -> None:
    board = dashboard(render_chart(helm_bin, "hami-core-gpu", release=RELEASE, namespace=NAMESPACE))
    variables = {"driver": DRIVER, "node": stack.node, "datasource": "prometheus"}
    for q in panel_queries(board):
        wait_for(lambda q=q: stack.prom.query(as_promql(q.expr, variables)) or None, 30, 0.5,
                 f"series for panel {q.panel!r} query {q.ref}: {q.expr}")
    out = Path(os.environ.get("DRA_MONITORING_PICTURE") or tmp_path / "per-device.png")
    memory, compute = per_device_picture(stack.prom, board, variables, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    train, infer = claims["train"], claims["infer"]
    assert memory.series["capacity"][train.device] == 143771 * MiB
    allocated = {train.device: 0.0, infer.device: 0.0}
    allocated[train.device] += 3000 * MiB
    allocated[infer.device] += 40 * GiB
    assert {d: memory.series["allocated"][d] for d in allocated} == allocated
    assert memory.series["used"][train.device] >= GiB  # the holder's gigabyte, from the ledger
    assert compute.series["allocated"][train.device] == (80 if train.device == infer.device else 30)
