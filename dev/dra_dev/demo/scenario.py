"""A driver's demo scenario: ``examples/DIR/demo.yaml``, the data behind `dra demo --driver NAME`.

Every bundled driver ships one (DIR is the driver's examples directory; the file's ``driver``
names its entry point, by default DIR). The scenario names how the daemon runs (its fake
profile and other ``dra run`` arguments), how many nodes to fake, its DeviceClass file, the
examples to apply (each optionally from a minimum Kubernetes version), the workload program
that reports each share's quota, whether the real-node part suits the driver, and optionally
the driver's chart and a request its admission fence refuses. `run_scenario` then, each step
by the real part:

1. creates the Node objects and starts one node daemon per node (``dra run NAME [--fake
   PROFILE] ARGS``), each publishing its node's ResourceSlice, each played kubelet to by a harness;
2. applies the DeviceClass (and, where the chart renders one for this Kubernetes version, its
   admission fence: `helm template --kube-version V`, then the fenced request, refused with its
   message) and the examples unchanged with kubectl, one example at a time, and waits until
   kube-scheduler has allocated their claims and bound their pods;
3. prints a table of claims, pods, nodes, devices and shares;
4. prepares every claim on its pod's node (NodePrepareResources over the daemon's socket) and
   starts one workload process per device of each claim with the claim's CDI edits (a private
   mount namespace, the stub driver, the real hook): it reports the memory it sees and whether an
   allocation past it is refused; the daemon's /metrics then shows the claim's ledger;
5. `dra top --once` over the demo's nodes (`dra_dev.demo.top`): each device, the claims on it,
   requested vs used memory and cores; with cuda_workload while every workload holds half its
   quota, its JSON document checked to list every claim;
6. unprepares, deletes what it created and stops the daemons.

The scenario is data: nothing here knows a vendor.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from rich.table import Table

from dra.driver import ClaimRef
from dra.errors import UserError
from dra_dev.checkout import ROOT
from dra_dev.cluster.controlplane import ControlPlane
from dra_dev.demo.console import say, show, step, wait
from dra_dev.demo.housekeeping import clean_up, create_fake_node, left_running, workload_report
from dra_dev.demo.top import top_once

EXAMPLES = ROOT / "examples"
CHARTS = ROOT / "helm"
FENCE_LABEL = "dra.project-hami.io/fence"  # the label of helm/dra-common/templates/_fence.tpl
HOLDING_WORKLOAD = "cuda_workload"  # the workload program with --hold S (keeps half its quota S seconds)
HOLD_SECONDS = 20


@dataclasses.dataclass(frozen=True)
class Example:
    file: Path
    min_version: tuple[int, int] | None = None


@dataclasses.dataclass(frozen=True)
class Scenario:
    driver_entry: str
    fake: str | None
    nodes: int
    device_class: Path
    examples: tuple[Example, ...]
    chart: Path | None = None
    fenced: Path | None = None
    args: tuple[str, ...] = ()  # more `dra run` arguments (e.g. --set count=2)
    workload: str | None = None  # a program of hookcore/build/workload; None: cuda_workload
    real_node: bool = True  # the real-node part runs this driver's claims (its workload image is CUDA's)

    @property
    def daemon_args(self) -> tuple[str, ...]:
        """What `dra run NAME` gets besides the node's own paths: the fake profile and `args`."""
        return (("--fake", self.fake) if self.fake else ()) + self.args

    def for_version(self, version: str) -> tuple[list[Example], list[Example]]:
        """(examples to apply, examples left out) on Kubernetes `version` (e.g. v1.34.4)."""
        m = re.match(r"v?(\d+)\.(\d+)", version)
        have = (int(m[1]), int(m[2])) if m else (0, 0)
        use = [e for e in self.examples if e.min_version is None or have >= e.min_version]
        return use, [e for e in self.examples if e not in use]


def scenario_files(root: Path = EXAMPLES) -> dict[str, Path]:
    """Each driver entry point that ships a scenario under `root`, and its file."""
    found = {}
    for path in sorted(root.glob("*/demo.yaml")):
        doc = yaml.safe_load(path.read_text())
        if isinstance(doc, dict) and "examples" in doc:  # examples/heterogeneous/demo.yaml has parts instead
            found[str(doc.get("driver", path.parent.name))] = path
    return found


def load_scenario(driver: str, root: Path = EXAMPLES) -> Scenario | None:
    """The scenario of `driver` (an entry point, or the name of its examples directory such as
    ``gpu.example.com``) among ``root/*/demo.yaml``, or None when it ships none (or the examples
    are not installed)."""
    for entry, path in scenario_files(root).items():
        if driver in (entry, path.parent.name):
            return _scenario(entry, path, yaml.safe_load(path.read_text()))
    return None


def _scenario(driver_entry: str, path: Path, doc: dict[str, Any]) -> Scenario:
    def version(v: Any) -> tuple[int, int] | None:
        if v is None:
            return None
        major, _, minor = str(v).partition(".")
        return int(major), int(minor)

    try:
        return Scenario(driver_entry, str(doc["fake"]) if doc.get("fake") else None, int(doc.get("nodes", 1)),
                        path.parent / doc["deviceClass"],
                        tuple(Example(path.parent / e["file"], version(e.get("minVersion"))) for e in doc["examples"]),
                        CHARTS / doc["chart"] if doc.get("chart") else None,
                        path.parent / doc["fenced"] if doc.get("fenced") else None,
                        tuple(str(a) for a in doc.get("args") or ()), doc.get("workload"),
                        bool(doc.get("realNode", True)))
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{path}: not a demo scenario ({exc!r}); it needs deviceClass and examples[].file") from None


def expected_pods(path: Path) -> int:
    """Pods an example makes: its Pods, plus each Deployment's replicas."""
    n = 0
    for doc in yaml.safe_load_all(path.read_text()):
        if not doc:
            continue
        if doc.get("kind") == "Pod":
            n += 1
        elif doc.get("kind") == "Deployment":
            n += int(doc.get("spec", {}).get("replicas", 1))
    return n


def fence_manifest(chart: Path, k8s_version: str) -> list[dict[str, Any]]:
    """The fence objects `chart` renders for `k8s_version` (none from 1.35), by `helm template`."""
    import os

    from dra_dev.cluster.binaries import build_helm

    helm = build_helm(progress=lambda _m: None)
    env = {**os.environ, "HELM_CACHE_HOME": "/tmp/dra-helm-cache", "HELM_CONFIG_HOME": "/tmp/dra-helm-config",
           "HELM_DATA_HOME": "/tmp/dra-helm-data"}
    proc = subprocess.run([str(helm), "template", "demo", str(chart), "--kube-version", k8s_version],
                          capture_output=True, text=True, timeout=120, env=env)
    if proc.returncode != 0:
        raise UserError(f"helm template {chart} --kube-version {k8s_version} failed: {proc.stderr.strip()}")
    return [d for d in yaml.safe_load_all(proc.stdout) if d and FENCE_LABEL in (d["metadata"].get("labels") or {})]


@dataclasses.dataclass
class FakeNode:
    name: str
    daemon: Any  # dra.testing.daemon.DaemonProcess
    harness: Any  # dra.testing.kubelet.KubeletHarness


def run_scenario(cp: ControlPlane, scenario: Scenario, workload: Path | None = None, keep: bool = False,
                 epilogue: bool = True) -> int:
    """Run the scenario; `epilogue` prints what is left running (off when more parts follow)."""
    from kubernetes import client

    from dra.fakes.stub import workload_program
    from dra.testing.daemon import DaemonProcess
    from dra.testing.kubelet import KubeletHarness
    from dra.testing.runtime import run_with_cdi, runtime_unavailable

    api = cp.api_client()
    core: Any = client.CoreV1Api(api)
    resource: Any = client.ResourceV1Api(api)
    kubectl = [str(cp.bins.path("kubectl")), "--kubeconfig", str(cp.kubeconfig)]
    run_id = uuid.uuid4().hex[:6]
    ns = f"demo-{run_id}"
    work = Path(tempfile.mkdtemp(prefix="dra-demo-", dir="/tmp"))
    nodes: list[FakeNode] = []
    created_class, cls_name = False, ""
    fence: list[dict[str, Any]] = []

    def sh(*args: str, stdin: str | None = None) -> str:
        proc = subprocess.run([*kubectl, *args], capture_output=True, text=True, timeout=60, input=stdin)
        if proc.returncode != 0:
            raise UserError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc.stdout

    def refusal(path: Path) -> str | None:
        """kubectl's error for a server-side dry-run apply of `path` into the namespace, or None."""
        proc = subprocess.run([*kubectl, "apply", "--dry-run=server", "-n", ns, "-f", str(path)],
                              capture_output=True, text=True, timeout=60)
        return proc.stderr.strip() if proc.returncode != 0 else None

    def listed(kind: str) -> list[dict[str, Any]]:
        return list(json.loads(sh("get", kind, "-n", ns, "-o", "json"))["items"])

    try:
        run = " ".join(("dra run", scenario.driver_entry, *scenario.daemon_args))
        step(f"{scenario.nodes} nodes with fake devices" + (f" ({scenario.fake})" if scenario.fake else "")
             + f", a node daemon `{run}` each")
        for i in range(scenario.nodes):
            name = f"demo-{run_id}-{i}"
            create_fake_node(core, name)
            daemon = DaemonProcess(scenario.driver_entry, name, cp.kubeconfig, work / name,
                                   # the memory-only example lifts its own compute limit: the admin allows it
                                   args=[*scenario.daemon_args, "--hook-dir", str(work / name / "hook-dir"),
                                         "--allow-claim-loosening"])
            daemon.start()
            harness = KubeletHarness(daemon.registrar_dir)
            harness.watch()
            nodes.append(FakeNode(name, daemon, harness))
        for n in nodes:
            n.daemon.wait_http("/readyz", timeout=60)
            data = resource.list_resource_slice(field_selector=f"spec.nodeName={n.name}", _preload_content=False).data
            devices = [d["name"] for s in json.loads(data)["items"] for d in s["spec"].get("devices", [])]
            say(f"    {n.name}: published {len(devices)} devices ({', '.join(devices)})")

        step("DeviceClass and examples applied with kubectl; kube-scheduler allocates")
        cls_name = yaml.safe_load(scenario.device_class.read_text())["metadata"]["name"]
        created_class = not any(c.metadata.name == cls_name for c in resource.list_device_class().items)
        sh("apply", "-f", str(scenario.device_class))
        core.create_namespace({"metadata": {"name": ns}})
        if scenario.chart is not None and (fenced := scenario.fenced) is not None:
            fence = fence_manifest(scenario.chart, cp.k8s_version)
            if fence:
                sh("apply", "-f", "-", stdin="\n---\n".join(json.dumps(o) for o in fence))
                names = ", ".join(o["metadata"]["name"] for o in fence if o["kind"] == "ValidatingAdmissionPolicy")
                say(f"    admission fence of kubernetes#133705 applied ({names}, from `helm template"
                    f" {scenario.chart.name} --kube-version {cp.k8s_version}`)")
                message = wait(f"the fence to refuse {fenced.name}", lambda: refusal(fenced), 60)
                say(f"    [yellow]refused[/yellow] {fenced.name}: {message}")
            else:
                why = refusal(fenced)
                if why:
                    raise UserError(f"{fenced.name} refused on {cp.k8s_version}, which needs no fence: {why}")
                say(f"    {fenced.name}: admitted (no fence on {cp.k8s_version}: its scheduler"
                    " has the fix of kubernetes#133705)")
        use, left_out = scenario.for_version(cp.k8s_version)
        pods_wanted = 0
        for ex in use:
            sh("apply", "-n", ns, "-f", str(ex.file))
            pods_wanted += expected_pods(ex.file)

            def settled(want: int = pods_wanted) -> list[dict[str, Any]] | None:
                pods = listed("pods")
                claims = listed("resourceclaims")
                if len(pods) < want or not all(p["spec"].get("nodeName") for p in pods):
                    return None
                return pods if all((c.get("status") or {}).get("allocation") for c in claims) else None

            try:
                wait(f"the claims of {ex.file.name} to be allocated", settled, 90)
            except UserError:
                unscheduled = {p["metadata"]["name"]: [c.get("message") for c in (p.get("status") or {}).get("conditions", [])]
                               for p in listed("pods") if not p["spec"].get("nodeName")}
                raise UserError(f"{ex.file.name}: pods not scheduled: {unscheduled}") from None
            say(f"    {ex.file.name}: allocated")
        for ex in left_out:
            need = ".".join(map(str, ex.min_version or ()))
            say(f"    [yellow]left out[/yellow] {ex.file.name}: needs Kubernetes >= {need} (this is {cp.k8s_version})")

        pods = listed("pods")
        claims = {c["metadata"]["name"]: c for c in listed("resourceclaims")}
        table = Table("claim", "pod", "node", "device", "cores", "memory")
        users: dict[str, tuple[str, str]] = {}  # claim -> (pod, node)
        for p in sorted(pods, key=lambda p: p["metadata"]["name"]):
            for rc in (p.get("status") or {}).get("resourceClaimStatuses", []) or []:
                users[rc["resourceClaimName"]] = (p["metadata"]["name"], p["spec"]["nodeName"])
            for rc in p["spec"].get("resourceClaims", []):
                if rc.get("resourceClaimName"):
                    users[rc["resourceClaimName"]] = (p["metadata"]["name"], p["spec"]["nodeName"])
        for name, c in sorted(claims.items()):
            for r in c["status"]["allocation"]["devices"]["results"]:
                cc = r.get("consumedCapacity") or {}
                pod, node = users.get(name, ("-", r["pool"]))
                table.add_row(name, pod, node, r["device"], cc.get("cores", "-"), cc.get("memory", "-"))
        show(table)

        step("NodePrepareResources on each pod's node; one workload per device of each claim, started with "
             "the claim's CDI edits (stub driver, real hook)")
        by_name = {n.name: n for n in nodes}
        why = runtime_unavailable()
        program = workload or (workload_program().parent / scenario.workload if scenario.workload
                               else workload_program())
        runs = Table("claim", "device", "consumed memory", "memory it sees", "allocation past it", "ledger peak (/metrics)")
        prepared: list[tuple[FakeNode, ClaimRef]] = []
        jobs: list[tuple[str, dict[str, Any], FakeNode, ClaimRef, int, list[str]]] = []
        for name, c in sorted(claims.items()):
            where = users.get(name, ("", c["status"]["allocation"]["devices"]["results"][0]["pool"]))[1]
            if where not in by_name:
                raise UserError(f"claim {ns}/{name} was allocated on node {where}, not on one of the demo's nodes"
                                f" ({', '.join(by_name)}): another node of this cluster publishes"
                                f" {scenario.driver_entry} devices; run the demo on a cluster of its own (--dir DIR)")
            node = by_name[where]
            ref = ClaimRef(c["metadata"]["uid"], ns, name)
            answer = node.harness.prepare([ref])[ref.uid]
            if answer.error:
                raise UserError(f"prepare of claim {ns}/{name} failed: {answer.error}")
            prepared.append((node, ref))
            ids = list(dict.fromkeys(i for d in answer.devices for i in d.cdi_device_ids))
            jobs += [(name, r, node, ref, index, ids) for index, r in enumerate(c["status"]["allocation"]["devices"]["results"])]
        runnable = not why and program.is_file()
        # cuda_workload can hold its memory (--hold): then every workload runs at once and `dra top`
        # looks while they hold; the others run one after another, and `dra top` shows their peaks.
        hold = runnable and program.name == HOLDING_WORKLOAD
        with ThreadPoolExecutor(max(1, len(jobs) if hold else 1)) as pool:
            futures = [pool.submit(run_with_cdi, node.daemon.cdi_dir, ids,
                                   [str(program), "--device", str(index), *(("--hold", str(HOLD_SECONDS)) if hold else ())],
                                   timeout=HOLD_SECONDS + 60) for _n, _r, node, _ref, index, ids in jobs] if runnable else []
            if hold:
                wait("every workload to hold its memory (the daemons' /metrics)",
                     lambda: all(_used(node.daemon, ref.uid, index) for _n, _r, node, ref, index, _i in jobs)
                     or any(f.done() for f in futures) or None, 60)
            if runnable:
                step("dra top --once: each node's devices, the claims on them, requested vs used memory and cores")
                top_once(api, cp.kubeconfig, {n.name: [f"http://127.0.0.1:{n.daemon.metrics_port}/metrics"] for n in nodes},
                         ns, work, used=hold)
            for (name, r, node, ref, index, _ids), future in zip(jobs if runnable else [], futures, strict=True):
                proc = future.result()
                got = workload_report(proc.stdout)
                if "quota_total_bytes" not in got:
                    raise UserError(f"the workload of claim {name} failed (exit {proc.returncode}):"
                                    f" {got.get('error') or proc.stderr.strip()}")
                runs.add_row(name, r["device"], (r.get("consumedCapacity") or {}).get("memory", "-"),
                             _gib(int(got["quota_total_bytes"])), got.get("over_quota_alloc", "?"),
                             _peak(node.daemon, ref.uid, index))
        if why:
            say(f"    [yellow]workloads skipped[/yellow]: starting processes with CDI edits {why}")
        elif not program.is_file():
            say(f"    [yellow]workloads skipped[/yellow]: no workload program at {program}")
        else:
            show(runs)

        step("NodeUnprepareResources and clean-up")
        errors = [e for node, ref in prepared for e in node.harness.unprepare([ref]).values() if e]
        say(f"    unprepare errors: {errors or 'none'}")
        say(f"[bold green]demo complete[/bold green]: {len(claims)} claims on {len(nodes)} node{'s' if len(nodes) != 1 else ''}, "
            "allocated by kube-scheduler, prepared by the node daemons, each workload held to its share.")
        if epilogue:
            say(left_running(cp, keep, work))
        return 0
    finally:
        for n in nodes:
            n.harness.close()
            n.daemon.stop()
        if not keep:
            clean_up([lambda: core.delete_namespace(ns), *[lambda n=n: core.delete_node(n.name) for n in nodes],
                      lambda: resource.delete_device_class(cls_name) if created_class else None,
                      lambda: sh("delete", "--ignore-not-found", "-f", "-",
                                 stdin="\n---\n".join(json.dumps(o) for o in fence)) if fence else None], work)
        api.close()


def _gib(n: int) -> str:
    """Bytes as the claims spell them: whole GiB as Gi, else MiB."""
    return f"{n >> 30}Gi" if n % (1 << 30) == 0 else f"{n / (1 << 20):g}Mi"


def _used(daemon: Any, uid: str, index: int) -> bool:
    """Whether the daemon's /metrics shows the claim's device `index` holding memory now."""
    status, body = daemon.get("/metrics")
    return status == 200 and any(
        line.startswith("dra_claim_memory_used_bytes{") and f'claim_uid="{uid}"' in line and f'index="{index}"' in line
        and float(line.rsplit(" ", 1)[1]) > 0 for line in body.splitlines())


def _peak(daemon: Any, uid: str, index: int) -> str:
    """The claim's ledger peak on device `index`, as the daemon's /metrics reports it."""
    status, body = daemon.get("/metrics")
    if status != 200:
        return "?"
    for line in body.splitlines():
        if line.startswith("dra_claim_memory_peak_bytes{") and f'claim_uid="{uid}"' in line and f'index="{index}"' in line:
            return _gib(int(float(line.rsplit(" ", 1)[1])))
    return "-"
