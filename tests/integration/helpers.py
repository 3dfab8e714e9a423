"""Helpers for claim-path tests against the real control plane.

Each test gets its own driver name (as upstream's DRA integration tests do), node, namespace and
DeviceClass, so kube-scheduler never allocates one test's claim from another test's devices.
Slices are encoded by the framework's own publisher code (`dra._runtime.publish.desired`) from the
example driver's devices; allocation is done by kube-scheduler for a Pod using the claim.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kube_helpers import create_node, unique, wait_for
from kubernetes import client, config

from dra._runtime.cdi import CDISpecs
from dra._runtime.checkpoint import Checkpoint
from dra._runtime.claims import ApiClaimSource, ResourceClaim
from dra._runtime.prepare import ClaimPreparer
from dra._runtime.publish.desired import desired_pool, slice_object
from dra.driver import ClaimRef
from dra.testing.claims import pod_manifest
from drivers.example.driver import ExampleDriver


def example_driver(count: int = 2, memory: str = "16Gi") -> ExampleDriver:
    """The example driver under a unique driver name (and CDI kind) for one test."""
    name = f"{uuid.uuid4().hex[:8]}.gpu.example.com"
    cls = type("TestExampleDriver", (ExampleDriver,), {"name": name, "cdi_kind": f"k8s.{name}/claim"})
    driver: ExampleDriver = cls(count=count, memory=memory)
    return driver


def pooled_client(kubeconfig: Path, pool_size: int = 128) -> client.ApiClient:
    """An ApiClient whose connection pool fits many concurrent GETs (the default keeps 5*cores
    connections and opens, then drops, a new TLS connection for every request beyond that)."""
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    cfg.connection_pool_maxsize = pool_size
    return client.ApiClient(cfg)


@dataclasses.dataclass
class Env:
    api: client.ApiClient
    driver: ExampleDriver
    node: str
    namespace: str
    device_class: str

    # Typed Any: the client's models are strict types, these tests pass plain dicts (wire form).
    @property
    def resource(self) -> Any:
        return client.ResourceV1Api(self.api)

    @property
    def core(self) -> Any:
        return client.CoreV1Api(self.api)

    def preparer(self, tmp_path: Path, node: str | None = None, source_api: client.ApiClient | None = None,
                 boot_id: str = "boot-1") -> ClaimPreparer:
        return ClaimPreparer(self.driver, ApiClaimSource(source_api or self.api), node or self.node,
                             Checkpoint(tmp_path / "state", boot_id=boot_id),
                             CDISpecs(self.driver.cdi_kind, tmp_path / "cdi"))


def publish(api: client.ApiClient, driver: ExampleDriver, node: str) -> None:
    """The driver's devices as its node's ResourceSlice(s), encoded by the framework's publisher."""
    core: Any = client.CoreV1Api(api)
    resource: Any = client.ResourceV1Api(api)
    node_uid = core.read_node(node).metadata.uid
    pool = desired_pool(driver.name, node, driver.devices())
    for i in range(len(pool.slices)):
        resource.create_resource_slice(slice_object(pool, i, 1, node_uid))


def add_driver(api: client.ApiClient, driver: ExampleDriver, node: str) -> None:
    """A DeviceClass named after the driver selecting its devices, and its slice on `node`."""
    resource: Any = client.ResourceV1Api(api)
    resource.create_device_class({
        "metadata": {"name": driver.name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver.name}"'}}]},
    })
    publish(api, driver, node)


def setup_env(api: client.ApiClient, count: int = 2, memory: str = "16Gi",
              driver: ExampleDriver | None = None) -> Env:
    driver = driver or example_driver(count, memory)
    node = unique("node")
    create_node(api, node)
    ns = unique("claims")
    core: Any = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": ns}})
    add_driver(api, driver, node)
    return Env(api=api, driver=driver, node=node, namespace=ns, device_class=driver.name)


def request(name: str, device_class: str, **capacity: str) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if capacity:
        exactly["capacity"] = {"requests": capacity}
    return {"name": name, "exactly": exactly}


def create_claim(env: Env, name: str, requests: Sequence[dict[str, Any]] | None = None,
                 config: Sequence[dict[str, Any]] = ()) -> None:
    # Small default shares: kube-scheduler 1.34 does not move on to the next shareable device when
    # the first one lacks capacity (kubernetes/kubernetes#133705), so tests keep shares small.
    default = [request("gpu", env.device_class, cores="1", memory="64Mi")]
    spec: dict[str, Any] = {"devices": {"requests": list(requests or default)}}
    if config:
        spec["devices"]["config"] = list(config)
    env.resource.create_namespaced_resource_claim(env.namespace, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name}, "spec": spec})


def create_pod(env: Env, name: str, claims: Sequence[str], node_selector: dict[str, str] | None = None) -> None:
    # Pinned to the test's node unless told otherwise (other tests' nodes may offer devices too).
    pod = pod_manifest(name, claims)
    pod["spec"]["nodeSelector"] = node_selector or {"kubernetes.io/hostname": env.node}
    env.core.create_namespaced_pod(env.namespace, pod)


def wait_allocated(env: Env, name: str, timeout: float = 60.0) -> ResourceClaim:
    """Wait until kube-scheduler allocated the claim and reserved it for a pod."""
    source = ApiClaimSource(env.api)

    def ready() -> ResourceClaim | None:
        c = source.get_claim(env.namespace, name)
        return c if c is not None and c.allocation is not None and c.reserved_for else None

    try:
        return wait_for(ready, timeout, what=f"claim {env.namespace}/{name} to be allocated and reserved")
    except AssertionError as e:
        pods = env.core.list_namespaced_pod(env.namespace).items
        why = {p.metadata.name: [(c.type, c.status, c.reason, c.message) for c in p.status.conditions or []]
               for p in pods}
        raise AssertionError(f"{e}; pods: {why}") from None


def allocated_claim(env: Env, name: str, requests: Sequence[dict[str, Any]] | None = None,
                    config: Sequence[dict[str, Any]] = (), node_selector: dict[str, str] | None = None
                    ) -> ResourceClaim:
    """A claim + a pod using it, allocated by kube-scheduler."""
    create_claim(env, name, requests, config)
    create_pod(env, name, [name], node_selector)
    return wait_allocated(env, name)


def ref(c: ResourceClaim) -> ClaimRef:
    return ClaimRef(c.uid, c.namespace, c.name)
