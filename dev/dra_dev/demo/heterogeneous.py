"""The demo's last part: one ResourceClaim, several drivers (examples/heterogeneous/demo.yaml).

One node runs every part's driver with its fake backend. The claim has one request per part;
kube-scheduler allocates the whole claim, each daemon prepares only its own result, and one
process per part is started with *all* the claim's CDI devices, as one container gets them, and
shows that its own hook holds it to its own share. Skipped, saying why, where a driver, the
runtime or a workload program is missing. The parts are data: nothing here knows a vendor.
"""

from __future__ import annotations

import dataclasses
import tempfile
import uuid
from pathlib import Path
from typing import Any

import yaml
from rich.table import Table

from dra.driver import ClaimRef, quantity_to_int
from dra.errors import UserError
from dra_dev.checkout import ROOT
from dra_dev.cluster.controlplane import ControlPlane
from dra_dev.demo.console import say, show, step, wait
from dra_dev.demo.housekeeping import clean_up, create_fake_node, workload_report

PARTS_FILE = ROOT / "examples" / "heterogeneous" / "demo.yaml"


@dataclasses.dataclass(frozen=True)
class Part:
    """One request of the claim: its driver (entry point), fake profile, share and workload program."""

    driver: str
    fake: str
    cores: str
    memory: str
    workload: str


def load_parts(path: Path = PARTS_FILE) -> tuple[Part, ...]:
    """The parts of `path`; none where the examples are not installed."""
    if not path.is_file():
        return ()
    try:
        return tuple(Part(str(p["driver"]), str(p["fake"]), str(p["cores"]), str(p["memory"]), str(p["workload"]))
                     for p in yaml.safe_load(path.read_text())["parts"])
    except (KeyError, TypeError) as exc:
        raise UserError(f"{path}: not a heterogeneous demo ({exc!r}); each of parts[] needs driver, fake, cores,"
                        " memory and workload") from None


def run_heterogeneous(cp: ControlPlane, parts: tuple[Part, ...] | None = None, keep: bool = False) -> int:
    """Run the heterogeneous claim (`parts`: those of examples/heterogeneous/demo.yaml by default)."""
    from kubernetes import client

    from dra._runtime import registry
    from dra.fakes.stub import workload_program
    from dra.testing.claims import pod_manifest
    from dra.testing.daemon import DaemonProcess
    from dra.testing.kubelet import KubeletHarness
    from dra.testing.runtime import run_with_cdi, runtime_unavailable

    parts = load_parts() if parts is None else parts
    if not parts:
        say(f"    [yellow]skipped[/yellow]: the heterogeneous claim: no parts in {PARTS_FILE}")
        return 0
    step(f"one claim, {len(parts)} drivers: " + " + ".join(f"{p.driver} (cores {p.cores}, memory {p.memory})"
                                                           for p in parts))
    missing = [p.driver for p in parts if p.driver not in registry.registered(registry.DRIVERS)]
    programs = {p.driver: workload_program().parent / p.workload for p in parts}
    why = (f"drivers not installed: {missing}" if missing else runtime_unavailable()
           or next((f"no workload program {p} (make -C hookcore libs)" for p in programs.values() if not p.is_file()), ""))
    if why:
        say(f"    [yellow]skipped[/yellow]: {why}")
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
        create_fake_node(core, node)
        core.create_namespace({"metadata": {"name": ns}})
        for p in parts:  # one CDI dir and one hook dir for the node, as the charts set them up
            d = DaemonProcess(p.driver, node, cp.kubeconfig, work / p.driver, kubelet_dirs={"cdi": work / "cdi"},
                              args=["--fake", p.fake, "--set", "health=off", "--hook-dir", str(work / "hook-dir")])
            daemons[p.driver] = d.start()
            harnesses[p.driver] = KubeletHarness(d.registrar_dir)
            harnesses[p.driver].watch()
        requests, names = [], {}
        for i, p in enumerate(parts):
            daemons[p.driver].wait_http("/readyz", timeout=60)
            harness = harnesses[p.driver]
            names[p.driver] = name = wait(f"{p.driver} to register", harness.plugins, 30)[0].name
            cls = f"demo-{run_id}.{name}"
            resource.create_device_class({"metadata": {"name": cls}, "spec": {"selectors": [
                {"cel": {"expression": f'device.driver == "{name}"'}}]}})
            classes.append(cls)
            requests.append({"name": f"r{i}", "exactly": {"deviceClassName": cls,
                                                         "capacity": {"requests": {"cores": p.cores, "memory": p.memory}}}})
        resource.create_namespaced_resource_claim(ns, {"metadata": {"name": "mixed"}, "spec": {"devices": {"requests": requests}}})
        core.create_namespaced_pod(ns, pod_manifest("mixed", ["mixed"], node))
        claim = wait("the claim to be allocated", lambda: (
            (c := resource.read_namespaced_resource_claim("mixed", ns)).status and c.status.allocation and c), 90)
        table = Table("request", "driver", "device", "consumed cores", "consumed memory")
        for r in claim.status.allocation.devices.results:
            table.add_row(r.request, r.driver, f"{r.pool}/{r.device}", str((r.consumed_capacity or {}).get("cores")),
                          str((r.consumed_capacity or {}).get("memory")))
        show(table)
        ref = ClaimRef(claim.metadata.uid, ns, "mixed")
        ids: list[str] = []
        for p in parts:  # in prepare order: the last spec mounts the hook set holding every library
            prepared = harnesses[p.driver].prepare([ref], driver=names[p.driver])[ref.uid]
            if prepared.error:
                raise UserError(f"{p.driver}: prepare of the mixed claim failed: {prepared.error}")
            ids += [i for dev in prepared.devices for i in dev.cdi_device_ids]
        out = Table("driver", "its workload, in the one container", "quota total", "allocation past it", "requested memory")
        for p in parts:
            got = workload_report(run_with_cdi(work / "cdi", ids, [str(programs[p.driver])]).stdout)
            out.add_row(p.driver, programs[p.driver].name, got.get("quota_total_bytes", got.get("error", "?")),
                        got.get("over_quota_alloc", "?"), str(quantity_to_int(p.memory)))
        show(out)
        for entry, harness in harnesses.items():
            harness.unprepare([ref], driver=names[entry])
        say(f"[bold green]heterogeneous claim complete[/bold green]: one claim, allocated by kube-scheduler "
            f"across {len(parts)} drivers, each share held by its own hook (or the device's own partitioning) in one"
            " container.")
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
