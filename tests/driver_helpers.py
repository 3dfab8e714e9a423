"""Helpers the tests of each vendor driver share: the stub libraries built once, the stub's
environment kept from leaking between tests, a `DriverContext` that records the driver's
callbacks, drivers set up on fake devices, a driver daemon on a fake node with kubelet played by
the harness, an example applied until kube-scheduler has allocated it, and the daemon's watchdog
tainting a device for a process in no claim."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest
from kube_helpers import create_node, unique, wait_for
from kubernetes import client

import hookcore
from dra import DriverContext, HealthEvent
from dra.testing.daemon import DaemonProcess
from dra.testing.kubelet import KubeletHarness
from dra_dev.cluster.controlplane import ControlPlane

ROOT = Path(__file__).resolve().parents[1]


def build_stub_libraries() -> Path:
    """``make -C hookcore libs`` (hook and stub libraries); the stub libraries' directory."""
    proc = subprocess.run(["make", "-C", str(ROOT / "hookcore"), "-s", "libs"], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"make -C hookcore libs failed:\n{proc.stdout}\n{proc.stderr}", pytrace=False)
    return hookcore.stub_dir()


@contextmanager
def isolated_env(names: Iterable[str]) -> Iterator[None]:
    """`names` unset inside, restored after, so a stub re-reads its devices at the next init."""
    names = tuple(names)
    saved = {k: os.environ.pop(k) for k in names if k in os.environ}
    try:
        yield
    finally:
        for k in names:
            os.environ.pop(k, None)
        os.environ.update(saved)


@dataclasses.dataclass
class Recorder:
    """What the driver calls back through its DriverContext."""

    changed: int = 0
    health: list[list[HealthEvent]] = dataclasses.field(default_factory=list)

    def context(self, settings: Mapping[str, str], fake: str | None) -> DriverContext:
        def changed() -> None:
            self.changed += 1

        return DriverContext(node_name="node-a", pool_name="node-a", settings=dict(settings), fake=fake,
                             on_devices_changed=changed, on_health=lambda ev: self.health.append(list(ev)))


class FakeDriver(Protocol):
    def setup(self, ctx: DriverContext) -> None: ...
    def close(self) -> None: ...


DriverT = TypeVar("DriverT", bound=FakeDriver)


def fake_drivers(cls: type[DriverT], default_fake: str) -> Iterator[Callable[..., DriverT]]:
    """A fixture's body: `make(fake, settings, recorder)` sets up a `cls` on fake devices (profile
    `default_fake` unless told); every driver made is closed after the test."""
    made: list[DriverT] = []

    def make(fake: str | None = default_fake, settings: Mapping[str, str] | None = None,
             recorder: Recorder | None = None) -> DriverT:
        d = cls()
        d.setup((recorder or Recorder()).context(settings or {}, fake))
        made.append(d)
        return d

    yield make
    for d in made:
        d.close()


class ExampleRig(Protocol):
    """A test namespace and a fake node on the control plane (each driver's e2e rig)."""

    namespace: str
    node: str

    def kubectl(self, *args: str) -> Any: ...
    def claims(self) -> list[dict[str, Any]]: ...
    def pods(self) -> list[dict[str, Any]]: ...


def allocate_example(rig: ExampleRig, example: Path, want_claims: int) -> dict[str, dict[str, Any]]:
    """Apply `example` unchanged; wait until `want_claims` claims are allocated and their pods bound
    to the rig's node (claims by name)."""
    rig.kubectl("apply", "-n", rig.namespace, "-f", str(example))

    def done() -> dict[str, dict[str, Any]] | None:
        claims = {c["metadata"]["name"]: c for c in rig.claims() if (c.get("status") or {}).get("allocation")}
        bound = [p for p in rig.pods() if p["spec"].get("nodeName")]
        return claims if len(claims) == want_claims and len(bound) >= want_claims and all(
            p["spec"]["nodeName"] == rig.node for p in bound) else None

    try:
        got: dict[str, dict[str, Any]] = wait_for(done, 90, what=f"{want_claims} claims of {example.name} allocated"
                                                                  " and their pods bound")
        return got
    except AssertionError:
        why = {p["metadata"]["name"]: [c.get("message") for c in p.get("status", {}).get("conditions", [])]
               for p in rig.pods()}
        raise AssertionError(f"{example.name}: not allocated; pods: {why}") from None


@contextmanager
def running_daemon(cluster: ControlPlane, driver: str, node: str, work: Path, args: Sequence[str],
                   env: Mapping[str, str] | None = None) -> Iterator[tuple[DaemonProcess, KubeletHarness]]:
    """`dra run DRIVER` for `node`, registered with a kubelet harness, ready; stopped after."""
    daemon = DaemonProcess(driver, node, cluster.kubeconfig, work, args=list(args), env=env)
    daemon.start()
    harness = KubeletHarness(daemon.registrar_dir)
    harness.watch()
    try:
        daemon.wait_http("/readyz", timeout=60)
        yield daemon, harness
    finally:
        harness.close()
        daemon.stop()


def slice_devices(api: client.ApiClient, node: str, driver: str) -> list[dict[str, Any]]:
    """The devices `driver` publishes for `node`, in wire form."""
    resource: Any = client.ResourceV1Api(api)
    slices = resource.list_resource_slice(field_selector=f"spec.nodeName={node}").items
    return [d for s in slices if s.spec.driver == driver for d in api.sanitize_for_serialization(s)["spec"]["devices"]]


def device_taints(api: client.ApiClient, node: str, driver: str, device: str) -> list[dict[str, Any]] | None:
    """The taints `driver` publishes on `device` of `node` ([] none), or None: not published (yet)."""
    found = {d["name"]: d for d in slice_devices(api, node, driver)}
    return found[device].get("taints") or [] if device in found else None


def assert_watchdog_taints_until_exit(cluster: ControlPlane, api: client.ApiClient, driver: str, domain: str,
                                      args: Sequence[str], processes_env: str, device: str, index: int | str,
                                      other: str | None = None) -> None:
    """`dra run DRIVER ARGS --watchdog taint` on a fake node, the stub's process list in the file
    named by `processes_env`: a process in no claim on `device` (the stub's device `index`, or the
    line's whole device field, e.g. ``0/1/0`` for a MIG device of the stub NVML) taints
    it (``<domain>/watchdog=unheld:NoSchedule``) in the published slice and no other device (`other`:
    by default the name with its last number's lowest bit flipped), an Event on the Node names the
    process and the device, /metrics counts one unheld verdict, and the process's exit lifts the
    taint."""
    node = unique("wd")
    create_node(api, node)
    core = client.CoreV1Api(api)
    sleeper = subprocess.Popen(["sleep", "300"])
    other = other or "-".join([*device.split("-")[:-1], str(int(device.rsplit("-", 1)[1]) ^ 1)])
    try:
        with tempfile.TemporaryDirectory(prefix="dra-wd-", dir="/tmp") as work:
            procs = Path(work) / "processes"
            procs.write_text("")
            with running_daemon(cluster, driver, node, Path(work), [*args, "--watchdog", "taint"],
                                env={processes_env: str(procs)}) as (daemon, _harness):
                wait_for(lambda: device_taints(api, node, domain, device) is not None or None, 30, what="the slice")
                assert device_taints(api, node, domain, device) == []
                procs.write_text(f"{index} {sleeper.pid} {1 << 30}\n")
                got = wait_for(lambda: device_taints(api, node, domain, device) or None, 15, 0.1, "the watchdog taint")
                assert [(t["key"], t["value"], t["effect"]) for t in got] == [(f"{domain}/watchdog", "unheld",
                                                                                 "NoSchedule")]
                assert device_taints(api, node, domain, other) == []
                event = wait_for(lambda: [e for e in core.list_namespaced_event("default").items
                                          if e.involved_object.name == node and e.reason == "ProcessUnheld"] or None,
                                 15, 0.1, "the Event on the Node")
                assert f"process {sleeper.pid}" in event[0].message and device in event[0].message, event[0].message
                _, metrics = daemon.get("/metrics")
                assert f'dra_watchdog_verdicts_total{{driver="{domain}",verdict="unheld"}} 1.0' in metrics
                sleeper.kill()
                sleeper.wait()
                wait_for(lambda: device_taints(api, node, domain, device) == [] or None, 15, 0.1, "the taint lifted")
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
        core.delete_node(node)
