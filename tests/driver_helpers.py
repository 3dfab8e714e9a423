"""Helpers the tests of each vendor driver share: the stub libraries built once, the stub's
environment kept from leaking between tests, a `DriverContext` that records the driver's
callbacks, and a driver daemon on a fake node with kubelet played by the harness."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

import hookcore
from dra import DriverContext, HealthEvent
from dra.cluster.controlplane import ControlPlane
from dra.testing.daemon import DaemonProcess
from dra.testing.kubelet import KubeletHarness

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
