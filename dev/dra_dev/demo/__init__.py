"""`dra demo`: the whole claim path on an embedded control plane, with no hardware.

What it does, in order, each step by the real part:
1. starts (or reuses) the embedded control plane (`dra cluster up`);
2. creates a Node object and runs the node daemon `dra run DRIVER` for it (the driver's fake
   backend), which publishes the node's ResourceSlice;
3. applies a DeviceClass and two ResourceClaims that share one device by consumable capacity,
   each used by a Pod, and waits for kube-scheduler to allocate them;
4. plays kubelet over the daemon's unix sockets (registration, NodePrepareResources), resolves
   the returned CDI device IDs like a container runtime and prints what each container gets;
5. starts one workload process per claim with the claim's CDI edits (`dra.testing.runtime`: a
   private mount namespace; the stub CUDA library, the real hook) and prints what it sees: its
   cuMemGetInfo total (= the claim's consumed memory) and the refusal of an allocation past it,
   also for a child started with an empty environment;
6. unprepares, deletes what it created and stops the daemon;
7. one heterogeneous claim (`run_heterogeneous`): a GPU share and an NPU share in one
   ResourceClaim on a node running both vendor drivers' daemons, allocated by kube-scheduler,
   each result prepared by its own driver, and one workload per vendor started with both CDI
   devices (one container) showing its own hook's quota; the control plane stays up, and the
   demo says so and how to stop it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from dra.driver import ClaimRef, quantity_to_int
from dra.errors import UserError
from dra_dev.cluster.binaries import DEFAULT_K8S_VERSION
from dra_dev.cluster.controlplane import ControlPlane, default_dir

# Wide enough for CDI IDs and env lines when piped (rich assumes 80 columns off a terminal).
_out = Console(width=None if os.isatty(1) else 160)


def _step(msg: str) -> None:
    _out.print(f"[bold cyan]==>[/bold cyan] {msg}", highlight=False)


def _wait(what: str, fn: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(0.3)
    raise UserError(f"the demo timed out after {timeout:.0f} s waiting for {what}.")


def _workload_lines(stdout: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)


def run_workloads(cdi: Path, claims: list[tuple[str, int, list[str]]], workload: Path) -> Table:
    """Start `workload` once per claim with the claim's CDI edits (and once more as a child with
    an empty environment); a table of what each process saw. claims: (name, consumed memory, IDs)."""
    from dra.testing.runtime import run_with_cdi

    table = Table("claim", "consumed memory", "cuMemGetInfo total", "allocation past it", "env -i child: total / past")
    for name, memory, ids in claims:
        seen = []
        for argv in ([str(workload)], ["/bin/sh", "-c", f"exec env -i {workload}"]):
            proc = run_with_cdi(cdi, ids, argv)
            got = _workload_lines(proc.stdout)
            if "quota_total_bytes" not in got:
                raise UserError(f"the workload of claim {name} failed (exit {proc.returncode}):"
                                f" {got.get('error') or proc.stderr.strip() or proc.stdout.strip()}")
            seen.append(got)
        main, child = seen
        table.add_row(name, str(memory), main["quota_total_bytes"], main.get("over_quota_alloc", "?"),
                      f"{child['quota_total_bytes']} / {child.get('over_quota_alloc', '?')}")
    return table


def create_fake_node(core: Any, node: str) -> None:
    """A Ready, untainted Node object for a node whose kubelet the demo plays."""
    core.create_node({"metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}}})
    res = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    core.patch_node_status(node, {"status": {"capacity": res, "allocatable": res, "conditions": [
        {"type": "Ready", "status": "True", "reason": "DemoNode", "message": "no kubelet: the demo plays it"}]}})
    core.patch_node(node, {"spec": {"taints": None}})


def left_running(cp: ControlPlane, keep: bool, work: Path | None) -> str:
    """What the demo leaves behind, and how to stop or remove it."""
    lines = [f"left running: the embedded control plane (etcd, kube-apiserver, kube-scheduler,"
             f" kube-controller-manager) in {cp.directory}; it serves the next `dra demo` and `make test`.",
             f"  stop it:  {sys.executable} -m dra.cli cluster down --dir {cp.directory}"]
    if keep and work is not None:
        lines.append(f"  kept (--keep): the demo's namespace, node and DeviceClass, and its files in {work}")
    return "\n".join(lines)


def run_demo(directory: Path, k8s_version: str, driver_entry: str = "hami-core-gpu", keep: bool = False,
             workload: Path | None = None, node_mode: str = "auto") -> int:
    from kubernetes import client

    from dra.fakes.stub import workload_program
    from dra.testing.cdi import apply_cdi
    from dra.testing.claims import claim_manifest, pod_manifest
    from dra.testing.kubelet import KubeletHarness
    from dra.testing.runtime import runtime_unavailable

    _step(f"control plane (Kubernetes {k8s_version}) in {directory}")
    cp = ControlPlane(directory, k8s_version)
    health = cp.up(progress=lambda m: _out.print(f"    {m}", style="dim", highlight=False))
    _out.print(f"    ready: {health.version} at {cp.server}; export KUBECONFIG={cp.kubeconfig}", highlight=False)
    from dra_dev.demo.scenario import load_scenario, run_scenario

    scenario = load_scenario(driver_entry)  # examples/<driver>/demo.yaml: several fake nodes, the examples
    if scenario is not None:
        # The full tour: the driver's examples on fake nodes, the heterogeneous claim, then one
        # claim's pods on a real kubelet + containerd node where one starts here.
        rc = run_scenario(cp, scenario, workload, keep, epilogue=False)
        rc = rc or run_heterogeneous(cp, keep=keep)
        if node_mode != "harness" and not rc:
            from dra_dev.demo.real_node import real_node_demo

            rc = real_node_demo(cp, driver_entry, _out, _step, keep=keep, required=node_mode == "real",
                                daemon_args=("--fake", scenario.fake)) or 0
        _out.print(left_running(cp, keep, None), highlight=False)
        return rc
    on_node = _on_real_node(cp, driver_entry, keep, node_mode)
    if on_node is not None:
        on_node = on_node or run_heterogeneous(cp, keep=keep)
        _out.print(left_running(cp, keep, None), highlight=False)
        return on_node

    api = cp.api_client()
    # Bodies are plain manifests (dicts), as users write them; the typed client accepts them at run time.
    core: Any = client.CoreV1Api(api)
    resource: Any = client.ResourceV1Api(api)
    run_id = uuid.uuid4().hex[:6]
    node, ns = f"demo-node-{run_id}", f"demo-{run_id}"
    work = Path(tempfile.mkdtemp(prefix="dra-demo-", dir="/tmp"))
    daemon: subprocess.Popen[bytes] | None = None
    harness: KubeletHarness | None = None
    cls: str | None = None
    try:
        _step(f"node {node} and the node daemon `dra run {driver_entry}`")
        create_fake_node(core, node)
        registrar, plugins, cdi, state = (work / d for d in ("registry", "plugins", "cdi", "state"))
        for d in (registrar, plugins, cdi, state):
            d.mkdir()
        log = (work / "daemon.log").open("wb")
        daemon = subprocess.Popen(
            [sys.executable, "-m", "dra.cli", "run", driver_entry, "--node-name", node,
             "--kubeconfig", str(cp.kubeconfig), "--registrar-dir", str(registrar),
             "--plugin-dir", str(plugins), "--cdi-dir", str(cdi), "--state-dir", str(state),
             "--hook-dir", str(work / "hook-dir"),
             "--metrics-port", "0", "--log-format", "text", "--set", "count=2"],
            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ),
        )
        harness = KubeletHarness(registrar)
        harness.watch()
        plugin = _wait("the daemon to register with the (played) kubelet",
                       lambda: harness.plugins() if daemon.poll() is None else _daemon_died(work), 60)[0]
        _out.print(f"    registered {plugin.name} at {plugin.endpoint}", highlight=False)
        def whole_pool() -> list[Any] | None:
            """The node's slices once all of its pool is there (one device per slice on 1.34)."""
            got = [s for s in resource.list_resource_slice().items if s.spec.node_name == node]
            return got if got and len(got) >= got[0].spec.pool.resource_slice_count else None

        slices = _wait("the node's ResourceSlices", whole_pool, 60)
        from dra._runtime.publish.desired import natural_key

        devices = sorted((d.name for s in slices for d in s.spec.devices or []), key=natural_key)
        _out.print(f"    published pool {node}: devices {', '.join(devices)}", highlight=False)

        _step("two claims share one device by consumable capacity; kube-scheduler allocates")
        driver_name = plugin.name
        core.create_namespace({"metadata": {"name": ns}})
        cls = f"demo-{run_id}.{driver_name}"
        resource.create_device_class({"metadata": {"name": cls}, "spec": {"selectors": [
            {"cel": {"expression": f'device.driver == "{driver_name}" && device.attributes["{driver_name}"].index == 0'}}]}})
        wants = {"training": ("70", "10Gi"), "notebook": ("30", "4Gi")}
        claims = {}
        # One at a time: a pod tried while another claim's allocation is still in flight can be
        # parked as unschedulable for minutes on 1.34 (the allocation event does not requeue it).
        for name, (cores, mem) in wants.items():
            resource.create_namespaced_resource_claim(ns, claim_manifest(name, cls, cores=cores, memory=mem))
            # Pinned to the demo node: other pools of the driver may exist.
            core.create_namespaced_pod(ns, pod_manifest(name, [name], node))
            claims[name] = _wait(f"claim {name} to be allocated", lambda n=name: (
                (c := resource.read_namespaced_resource_claim(n, ns)).status and c.status.allocation and c), 60)
        table = Table("claim", "device", "shareID", "consumed cores", "consumed memory")
        for name, c in claims.items():
            r = c.status.allocation.devices.results[0]
            table.add_row(name, f"{r.pool}/{r.device}", r.share_id or "-",
                          str((r.consumed_capacity or {}).get("cores")), str((r.consumed_capacity or {}).get("memory")))
        _out.print(table)

        _step("kubelet's NodePrepareResources over the daemon's socket; CDI resolved as a runtime would")
        refs = [ClaimRef(c.metadata.uid, ns, n) for n, c in claims.items()]
        prepared = harness.prepare(refs)
        out = Table("claim", "CDI device IDs", "container env (from CDI)", "container mounts (from CDI)")
        runs = []
        for ref in refs:
            p = prepared[ref.uid]
            if p.error:
                raise UserError(f"prepare of claim {ns}/{ref.name} failed: {p.error}")
            ids = [i for d in p.devices for i in d.cdi_device_ids]
            env, mounts = apply_cdi(cdi, ids)
            out.add_row(ref.name, "\n".join(ids), "\n".join(f"{k}={v}" for k, v in sorted(env.items())),
                        "\n".join(f"{m.container_path} ({','.join(o for o in m.options if o in ('ro', 'rw'))})"
                                  for m in mounts))
            consumed = claims[ref.name].status.allocation.devices.results[0].consumed_capacity or {}
            runs.append((ref.name, quantity_to_int(consumed.get("memory", "0")), ids))
        _out.print(out)

        _step("one workload per claim, started with the claim's CDI edits (stub CUDA, real hook)")
        why = runtime_unavailable()
        program = workload or workload_program()
        if why:
            _out.print(f"    [yellow]skipped[/yellow]: starting processes with CDI edits {why}", highlight=False)
        elif not program.is_file():
            _out.print(f"    [yellow]skipped[/yellow]: no workload program at {program} (make -C hookcore libs)",
                       highlight=False)
        else:
            _out.print(run_workloads(cdi, runs, program))

        _step("NodeUnprepareResources and clean-up")
        errors = harness.unprepare(refs)
        left = sorted(p.name for p in cdi.iterdir())
        _out.print(f"    unprepare errors: {[e for e in errors.values() if e] or 'none'}; CDI files left: {left or 'none'}",
                   highlight=False)
        _out.print("[bold green]demo complete[/bold green]: the scheduler shared one device between two claims, "
                   "the node daemon prepared each share, and each claim's process was held to its quota.")
        rc = run_heterogeneous(cp, keep=keep)
        _out.print(left_running(cp, keep, work), highlight=False)
        return rc
    finally:
        if harness is not None:
            harness.close()
        if daemon is not None and daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(15)
            except subprocess.TimeoutExpired:
                daemon.kill()
        if not keep:
            clean_up([lambda: core.delete_namespace(ns), lambda: core.delete_node(node),
                      lambda: resource.delete_device_class(cls) if cls else None], work)
        api.close()


def clean_up(deletes: list[Any], work: Path) -> None:
    """Delete the demo's objects (each best effort: one failing does not keep the others) and its files."""
    for delete in deletes:
        try:
            delete()
        except Exception:  # best-effort clean-up of demo objects
            pass
    shutil.rmtree(work, ignore_errors=True)


# One claim, several drivers: (driver entry point, fake profile, cores, memory, workload program
# in hookcore/build/workload) per request. The bundled drivers, named as in pyproject.toml.
HETEROGENEOUS = (
    ("hami-core-gpu", "h200x8", "50", "10Gi", "cuda_workload"),
    ("ascend", "910b3x8", "30", "16Gi", "acl_workload"),
)


def run_heterogeneous(cp: ControlPlane, parts: tuple[tuple[str, str, str, str, str], ...] = HETEROGENEOUS,
                      keep: bool = False) -> int:
    """The demo's last part: one ResourceClaim with a request per driver (a GPU share and an NPU
    share by default), on one node running every driver's daemon with its fake backend. The
    scheduler allocates the whole claim; each daemon prepares only its own result; one process
    per driver is started with *all* the claim's CDI devices, as one container gets them, and shows
    that its own hook holds it to its own share. Skipped (saying why) where a part is missing."""
    from kubernetes import client

    from dra._runtime import registry
    from dra.fakes.stub import workload_program
    from dra.testing.claims import pod_manifest
    from dra.testing.daemon import DaemonProcess
    from dra.testing.kubelet import KubeletHarness
    from dra.testing.runtime import run_with_cdi, runtime_unavailable

    _step("one claim, two vendors: " + " + ".join(f"{e} (cores {c}, memory {m})" for e, _, c, m, _ in parts))
    missing = [e for e, *_ in parts if e not in registry.registered(registry.DRIVERS)]
    programs = {e: workload_program().parent / w for e, _, _, _, w in parts}
    why = (f"drivers not installed: {missing}" if missing else runtime_unavailable()
           or next((f"no workload program {p} (make -C hookcore libs)" for p in programs.values() if not p.is_file()), ""))
    if why:
        _out.print(f"    [yellow]skipped[/yellow]: {why}", highlight=False)
        return 0
    api = cp.api_client()
    core: Any = client.CoreV1Api(api)
    resource: Any = client.ResourceV1Api(api)
    run_id = uuid.uuid4().hex[:6]
    node, ns = f"demo-mixed-{run_id}", f"demo-mixed-{run_id}"
    work = Path(tempfile.mkdtemp(prefix="dra-demo-mixed-", dir="/tmp"))
    daemons: dict[str, DaemonProcess] = {}
    harnesses: dict[str, KubeletHarness] = {}
    classes: list[str] = []
    try:
        core.create_node({"metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}}})
        res = {"cpu": "16", "memory": "64Gi", "pods": "110"}
        core.patch_node_status(node, {"status": {"capacity": res, "allocatable": res, "conditions": [
            {"type": "Ready", "status": "True", "reason": "DemoNode", "message": "no kubelet: the demo plays it"}]}})
        core.patch_node(node, {"spec": {"taints": None}})
        core.create_namespace({"metadata": {"name": ns}})
        for entry, fake, *_ in parts:  # one CDI dir and one hook dir for the node, as the charts set them up
            d = DaemonProcess(entry, node, cp.kubeconfig, work / entry, kubelet_dirs={"cdi": work / "cdi"},
                              args=["--fake", fake, "--set", "health=off", "--hook-dir", str(work / "hook-dir")])
            daemons[entry] = d.start()
            harnesses[entry] = KubeletHarness(d.registrar_dir)
            harnesses[entry].watch()
        requests, names = [], {}
        for i, (entry, _, cores, memory, _) in enumerate(parts):
            daemons[entry].wait_http("/readyz", timeout=60)
            names[entry] = name = _wait(f"{entry} to register", lambda e=entry: harnesses[e].plugins(), 30)[0].name
            cls = f"demo-{run_id}.{name}"
            resource.create_device_class({"metadata": {"name": cls}, "spec": {"selectors": [
                {"cel": {"expression": f'device.driver == "{name}"'}}]}})
            classes.append(cls)
            requests.append({"name": f"r{i}", "exactly": {"deviceClassName": cls,
                                                         "capacity": {"requests": {"cores": cores, "memory": memory}}}})
        resource.create_namespaced_resource_claim(ns, {"metadata": {"name": "mixed"}, "spec": {"devices": {"requests": requests}}})
        core.create_namespaced_pod(ns, pod_manifest("mixed", ["mixed"], node))
        claim = _wait("the claim to be allocated", lambda: (
            (c := resource.read_namespaced_resource_claim("mixed", ns)).status and c.status.allocation and c), 90)
        table = Table("request", "driver", "device", "consumed cores", "consumed memory")
        for r in claim.status.allocation.devices.results:
            table.add_row(r.request, r.driver, f"{r.pool}/{r.device}", str((r.consumed_capacity or {}).get("cores")),
                          str((r.consumed_capacity or {}).get("memory")))
        _out.print(table)
        ref = ClaimRef(claim.metadata.uid, ns, "mixed")
        ids: list[str] = []
        for entry, *_ in parts:  # in prepare order: the last spec mounts the hook set holding every library
            prepared = harnesses[entry].prepare([ref], driver=names[entry])[ref.uid]
            if prepared.error:
                raise UserError(f"{entry}: prepare of the mixed claim failed: {prepared.error}")
            ids += [i for dev in prepared.devices for i in dev.cdi_device_ids]
        out = Table("driver", "its workload, in the one container", "quota total", "allocation past it", "requested memory")
        for entry, _, _, memory, _ in parts:
            got = _workload_lines(run_with_cdi(work / "cdi", ids, [str(programs[entry])]).stdout)
            out.add_row(entry, programs[entry].name, got.get("quota_total_bytes", got.get("error", "?")),
                        got.get("over_quota_alloc", "?"), str(quantity_to_int(memory)))
        _out.print(out)
        for entry in harnesses:
            harnesses[entry].unprepare([ref], driver=names[entry])
        _out.print("[bold green]heterogeneous claim complete[/bold green]: one claim, allocated by kube-scheduler "
                   "across two drivers, each share held by its own hook in one container.")
        return 0
    finally:
        for h in harnesses.values():
            h.close()
        for d in daemons.values():
            d.stop()
        if not keep:
            clean_up([lambda: core.delete_namespace(ns), lambda: core.delete_node(node),
                      *[lambda c=c: resource.delete_device_class(c) for c in classes]], work)
        api.close()


def _daemon_died(work: Path) -> None:
    tail = (work / "daemon.log").read_text(errors="replace").splitlines()[-20:]
    raise UserError("the node daemon exited during the demo; its last lines:\n" + "\n".join(tail))


def _on_real_node(cp: ControlPlane, driver_entry: str, keep: bool, node_mode: str) -> int | None:
    """The demo on a real kubelet + containerd node (dra_dev.demo.real_node) where one starts; None: play kubelet."""
    if node_mode == "harness":
        return None
    from dra_dev.demo.real_node import real_node_demo

    return real_node_demo(cp, driver_entry, _out, _step, keep=keep, required=node_mode == "real")


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo(
        k8s_version: Annotated[str, typer.Option("--k8s-version")] = DEFAULT_K8S_VERSION,
        directory: Annotated[Path | None, typer.Option("--dir", help="Cluster directory")] = None,
        driver: Annotated[str, typer.Option(
            help="Driver entry point, run with its fake backend (example: the template driver alone)")] = "hami-core-gpu",
        keep: Annotated[bool, typer.Option(help="Keep the demo's objects and files")] = False,
        workload: Annotated[
            Path | None, typer.Option(help="Program started per claim (default: hookcore's cuda_workload)")
        ] = None,
        node: Annotated[str, typer.Option(
            help="auto: a real kubelet + containerd node where one starts here, else play kubelet; real: fail "
                 "without one; harness: always play kubelet")] = "auto",
        helm: Annotated[bool, typer.Option(
            "--helm", help="Instead: the charts installed with Helm on a real node, from the image `make image` built")] = False,
    ) -> None:
        """Run the whole claim path on an embedded control plane with a fake-device driver."""
        if helm:
            from dra_dev.demo.helm import helm_demo

            raise typer.Exit(helm_demo(k8s_version, _out, _step, keep))
        if node not in ("auto", "real", "harness"):
            raise UserError(f"--node {node!r}: expected auto, real or harness")
        raise typer.Exit(run_demo(directory or default_dir(), k8s_version, driver, keep, workload, node))
