"""Helpers the tests of each vendor driver share: the stub libraries built once, the stub's
environment kept from leaking between tests, a `DriverContext` that records the driver's
callbacks, drivers set up on fake devices, a driver daemon on a fake node with kubelet played by
the harness, and an example applied until kube-scheduler has allocated it."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest
from kube_helpers import wait_for
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
