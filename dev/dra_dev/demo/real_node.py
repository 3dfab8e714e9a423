"""The demo's claim path on a real node: upstream kubelet prepares the claims, containerd applies
the CDI specs, and each pod's own process reports the quota it sees.

`dra demo` runs it after the driver's scenario and the heterogeneous claim (both on fake nodes
whose kubelet the harness plays), unless ``--node harness`` or the scenario says the driver's
claims do not suit it (``realNode: false``: the pods' workload image speaks CUDA). Where a real
node cannot start here (not root, no runc, a kubelet that will not come up) it says why and
returns None; with ``--node real`` that is an error instead.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from rich.table import Table

from dra._runtime.client import quantity_to_int
from dra.errors import UserError
from dra_dev.cluster.controlplane import ControlPlane
from dra_dev.demo.console import progress, say, show, step, wait
from dra_dev.node.images import WORKLOAD_IMAGE
from dra_dev.node.node import RealNode, unavailable_reason

CLAIMS = {"training": ("70", "10Gi"), "notebook": ("30", "4Gi")}
_REPORT = re.compile(r"^(quota_total_bytes|over_quota_alloc)=(\S+)$", re.M)


def _allocation(resource: Any, ns: str, name: str) -> Any:
    claim = resource.read_namespaced_resource_claim(name, ns)
    return claim.status.allocation.devices.results[0] if claim.status and claim.status.allocation else None


def _finished(core: Any, ns: str, name: str) -> str | None:
    phase = core.read_namespaced_pod(name, ns).status.phase
    return str(phase) if phase in ("Succeeded", "Failed") else None


def _pod_story(core: Any, ns: str, name: str) -> str:
    """Where a pod that did not finish stands: phase, each container's state, its latest events."""
    try:
        pod = core.read_namespaced_pod(name, ns)
        states = []
        for c in pod.status.container_statuses or []:
            waiting, running = c.state.waiting if c.state else None, c.state.running if c.state else None
            states.append(f"{c.name} waiting ({waiting.reason}: {waiting.message or ''})" if waiting else
                          f"{c.name} running since {running.started_at}" if running else f"{c.name} {c.state}")
        events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
        told = "; ".join(f"{e.reason}: {e.message}" for e in events[-5:]) or "none"
        return f"pod {ns}/{name} is {pod.status.phase} ({', '.join(states) or 'no container started'}); events: {told}"
    except Exception as exc:  # a diagnosis must not hide the timeout it explains
        return f"pod {ns}/{name}: its status could not be read ({exc})"


def _wait_finished(core: Any, ns: str, name: str, timeout: float) -> str:
    try:
        return wait(f"pod {name} to finish", partial(_finished, core, ns, name), timeout)
    except UserError as exc:
        raise UserError(f"{exc} {_pod_story(core, ns, name)}") from None


def real_node_demo(cp: ControlPlane, driver_entry: str, keep: bool = False, required: bool = False,
                   daemon_args: Sequence[str] = ()) -> int | None:
    """Run the claims on a real node; None (after saying why) where none can start here.
    `daemon_args` go to `dra run` (e.g. ``--fake h200x8`` for a fake-backed driver)."""
    from kubernetes import client

    from dra.testing.claims import claim_manifest, pod_manifest
    from dra.testing.daemon import DaemonProcess

    reason = unavailable_reason()
    run_id = uuid.uuid4().hex[:6]
    work = Path(tempfile.mkdtemp(prefix="dra-demo-node-", dir="/tmp"))
    node = RealNode(work / "node", f"demo-real-{run_id}", cp.directory)
    if reason is None:
        step(f"a real node: kubelet {cp.k8s_version} + containerd + runc (`dra node up`), node {node.name}")
        try:
            node.up(progress=progress)
        except UserError as exc:
            reason = str(exc)
            node.down(purge=True)
    if reason is not None:
        shutil.rmtree(work, ignore_errors=True)
        if required:
            raise UserError(f"the demo cannot start a real node here: {reason}")
        say(f"[yellow]no real node here[/yellow] ({reason}): the claims ran only on nodes whose kubelet the"
            " demo plays.")
        return None

    api = cp.api_client()
    core: Any = client.CoreV1Api(api)
    resource: Any = client.ResourceV1Api(api)
    ns, cls = f"demo-{run_id}", f"demo-{run_id}.{driver_entry}"
    lay = node.layout
    daemon = DaemonProcess(driver_entry, node.name, cp.kubeconfig, work / "daemon", args=daemon_args,
                           kubelet_dirs={"registrar": lay.registry_dir, "plugins": lay.plugin_dir, "cdi": lay.cdi_dir})
    try:
        step(f"the node daemon `dra run {driver_entry}` registers with the real kubelet")
        daemon.start()
        daemon.wait_http("/readyz", timeout=60)
        slices = wait("the node's ResourceSlice", lambda: resource.list_resource_slice(
            field_selector=f"spec.nodeName={node.name}").items)
        driver = slices[0].spec.driver
        say(f"    registered {driver}; pool {node.name}: devices "
            f"{', '.join(d.name for s in slices for d in s.spec.devices or [])}")

        step(f"two claims share one device; kube-scheduler allocates, kubelet prepares, pods run {WORKLOAD_IMAGE}")
        core.create_namespace({"metadata": {"name": ns}})
        resource.create_device_class({"metadata": {"name": cls}, "spec": {"selectors": [
            {"cel": {"expression": f'device.driver == "{driver}" && device.attributes["{driver}"].index == 0'}}]}})
        results = {}
        for name, (cores, memory) in CLAIMS.items():
            resource.create_namespaced_resource_claim(ns, claim_manifest(name, cls, cores=cores, memory=memory))
            core.create_namespaced_pod(ns, pod_manifest(name, [name], node.name, image=WORKLOAD_IMAGE))
            # Read while the pod holds it: a claim no pod reserves any more is deallocated.
            results[name] = wait(f"claim {name} to be allocated", partial(_allocation, resource, ns, name))
        table = Table("pod", "device (share)", "consumed", "what its process saw (pod log)", "quota", "hook (CDI mounts)")
        for column in table.columns:
            column.overflow = "fold"
        failed = []
        for name in CLAIMS:
            # Generous: a loaded machine (CI's, two nodes beside it) starts containers slowly.
            phase = _wait_finished(core, ns, name, 180)
            r = results[name]
            consumed = r.consumed_capacity or {}
            seen = dict(_REPORT.findall(core.read_namespaced_pod_log(name, ns)))
            holds = (seen.get("quota_total_bytes") == str(quantity_to_int(consumed.get("memory", "0")))
                     and seen.get("over_quota_alloc") == "refused")
            if phase != "Succeeded" or not holds:
                failed.append(name)
            mounts = [m["destination"] for m in node.container_spec(ns, name).get("mounts", [])
                      if m["destination"].startswith(("/usr/lib/hookcore", "/etc/ld.so.preload", "/run/hookcore"))]
            table.add_row(f"{name} ({phase})", f"{r.pool}/{r.device} ({(r.share_id or '-')[:8]})",
                          f"cores {consumed.get('cores')}, memory {consumed.get('memory')}",
                          "\n".join(f"{k}={v}" for k, v in seen.items()) or "(no report)",
                          "[green]holds[/green]" if holds else "[red]not enforced[/red]", "\n".join(mounts) or "none")
        show(table)

        step("pods deleted: kubelet calls NodeUnprepareResources")
        for name in CLAIMS:
            core.delete_namespaced_pod(name, ns)
        wait("the claims' CDI specs to be removed", lambda: not any(lay.cdi_dir.iterdir()), 60)
        say("    CDI specs left: none")
        if failed:
            say(f"[bold red]demo finished on a real node, but the quota did not hold for {', '.join(failed)}[/bold red]: "
                "read the pods' logs above.")
            return 1
        say("[bold green]demo complete on a real node[/bold green]: upstream kubelet prepared both shares "
            "through the daemon, containerd applied their CDI edits, and each pod's process saw exactly its "
            "claim's memory and was refused past it.")
        return 0
    finally:
        daemon.stop()
        if keep:
            say(f"kept: namespace {ns}, the node (stop it with `dra node down --dir {node.directory} --purge`)")
        else:
            deletes: list[Callable[[], object]] = [lambda: core.delete_namespace(ns), lambda: resource.delete_device_class(cls)]
            for delete in deletes:
                with contextlib.suppress(Exception):
                    delete()
            node.down(purge=True)
            shutil.rmtree(work, ignore_errors=True)
        api.close()
