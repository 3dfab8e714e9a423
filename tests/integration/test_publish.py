"""ResourceSlice publishing against the real API server.

Each test uses its own Node, so tests never see each other's slices. The outage test points the
publisher at a loopback TCP proxy it owns and cuts it, since the shared apiserver must stay up.
"""

from __future__ import annotations

import copy
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from kube_helpers import create_node, unique, wait_for
from kubernetes import client

from dra._runtime.publish import Publisher, PublishSettings, SliceLayout
from dra.driver import Capacity, Device, RequestPolicy, Taint, Version
from drivers.example.driver import ExampleDriver

pytestmark = pytest.mark.cluster

DRIVER = "gpu.example.com"
# The sync loop's rules do not depend on how devices are cut into slices: these tests fix the
# packed layout; test_k134_publish.py covers the layout chosen from the server's version.
FAST = PublishSettings(backoff_initial=0.1, backoff_max=1.0, request_timeout=3.0, layout=SliceLayout.PACKED)


@pytest.fixture
def node(api_client: client.ApiClient) -> Iterator[str]:
    name = unique("pub")
    create_node(api_client, name)
    yield name
    client.CoreV1Api(api_client).delete_node(name)


@pytest.fixture
def publishers() -> Iterator[list[Publisher]]:
    started: list[Publisher] = []
    yield started
    for p in started:
        p.stop()


def start(
    started: list[Publisher],
    api: client.ApiClient,
    node: str,
    devices: Callable[[], Sequence[Device]],
    settings: PublishSettings = FAST,
) -> Publisher:
    publisher = Publisher(api, DRIVER, node, devices, settings=settings)
    publisher.start()
    started.append(publisher)
    assert publisher.wait_ready(15), "the publisher never published"
    return publisher


def _core(api: client.ApiClient) -> Any:
    return client.CoreV1Api(api)


def slices(api: client.ApiClient, node: str) -> list[dict[str, Any]]:
    resp: Any = client.ResourceV1Api(api).list_resource_slice(
        field_selector=f"spec.nodeName={node},spec.driver={DRIVER}", _preload_content=False
    )
    import json

    items: list[dict[str, Any]] = json.loads(resp.data)["items"]
    return sorted(items, key=lambda s: s["metadata"]["name"])


def device_names(items: list[dict[str, Any]]) -> list[str]:
    return sorted((d["name"] for s in items for d in s["spec"].get("devices") or ()), key=lambda n: (len(n), n))


def test_example_devices_are_published_once_with_every_field_the_scheduler_needs(
    api_client: client.ApiClient, node: str, publishers: list[Publisher]
) -> None:
    publisher = start(publishers, api_client, node, ExampleDriver(count=2).devices)
    (s,) = slices(api_client, node)
    node_uid = _core(api_client).read_node(node).metadata.uid
    assert s["metadata"]["name"].startswith(f"{node}-{DRIVER}-")
    assert s["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}]
    assert s["spec"]["nodeName"] == node
    assert s["spec"]["pool"] == {"name": node, "generation": 1, "resourceSliceCount": 1}
    gpu0 = s["spec"]["devices"][0]
    # The fields that need DRAConsumableCapacity survived the round trip through the server.
    assert gpu0["allowMultipleAllocations"] is True
    assert gpu0["capacity"]["memory"] == {
        "value": "16Gi",
        "requestPolicy": {"default": "16Gi", "validRange": {"min": "1Mi", "max": "16Gi", "step": "1Mi"}},
    }
    assert gpu0["attributes"]["driverVersion"] == {"version": "1.0.0"}
    assert gpu0["attributes"]["index"] == {"int": 0}
    assert publisher.counts["create"] == 1

    # Nothing changed: several more comparisons, and not a single write.
    version = s["metadata"]["resourceVersion"]
    lists, compared = publisher.counts["list"], publisher.comparisons
    for _ in range(3):
        publisher.devices_changed()
        assert publisher.resync_and_wait(10), "no comparison completed"
    assert publisher.comparisons >= compared + 3 and publisher.counts["list"] >= lists + 3
    assert (publisher.counts["create"], publisher.counts["update"], publisher.counts["delete"]) == (1, 0, 0)
    assert slices(api_client, node)[0]["metadata"]["resourceVersion"] == version


def test_slice_deleted_by_someone_else_is_back_within_5s(api_client: client.ApiClient, node: str, publishers: list[Publisher]) -> None:
    start(publishers, api_client, node, ExampleDriver(count=2).devices)
    resource: Any = client.ResourceV1Api(api_client)
    for wipe in range(2):
        (old,) = slices(api_client, node)
        if wipe == 0:
            resource.delete_resource_slice(old["metadata"]["name"])
        else:  # what kubelet does at its start
            resource.delete_collection_resource_slice(field_selector=f"spec.nodeName={node}")
        (new,) = wait_for(lambda: slices(api_client, node), timeout=5, interval=0.05, what="the slice to come back")
        assert new["metadata"]["uid"] != old["metadata"]["uid"]
        assert device_names([new]) == ["gpu-0", "gpu-1"]
        assert new["spec"]["pool"]["generation"] == old["spec"]["pool"]["generation"] + 1


def test_device_change_bumps_generation_and_removes_old_slices(
    api_client: client.ApiClient, node: str, publishers: list[Publisher]
) -> None:
    count = [300]

    def devices() -> list[Device]:
        return [Device(name=f"d-{i}", attributes={"index": i}) for i in range(count[0])]

    publisher = start(publishers, api_client, node, devices)
    items = slices(api_client, node)
    assert sorted(len(s["spec"]["devices"]) for s in items) == [44, 128, 128]
    assert {s["spec"]["pool"]["generation"] for s in items} == {1}
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in items} == {3}
    assert device_names(items) == [f"d-{i}" for i in range(300)]

    count[0] = 100
    publisher.devices_changed()

    def shrunk() -> list[dict[str, Any]] | None:
        now = slices(api_client, node)
        return now if len(now) == 1 else None

    (s,) = wait_for(shrunk, timeout=10, what="the pool to shrink to one slice")
    assert s["spec"]["pool"] == {"name": node, "generation": 2, "resourceSliceCount": 1}
    assert device_names([s]) == [f"d-{i}" for i in range(100)]
    assert s["metadata"]["name"] in {old["metadata"]["name"] for old in items}  # updated in place, others deleted


def test_taints_halve_the_slice_size_and_survive_the_round_trip(
    api_client: client.ApiClient, node: str, publishers: list[Publisher]
) -> None:
    devs = [Device(name=f"d-{i}") for i in range(70)]
    devs[3] = Device(name="d-3", taints=(Taint("example.com/unhealthy", "xid", "NoSchedule"),))
    publisher = start(publishers, api_client, node, lambda: devs)
    items = slices(api_client, node)
    assert sorted(len(s["spec"]["devices"]) for s in items) == [6, 64]
    tainted = next(d for s in items for d in s["spec"]["devices"] if d["name"] == "d-3")
    assert tainted["taints"][0]["key"] == "example.com/unhealthy"
    writes = publisher.counts["create"] + publisher.counts["update"]
    # The server stamped timeAdded on the taint: that must not count as a change.
    assert publisher.resync_and_wait(10), "no comparison completed"
    assert publisher.counts["create"] + publisher.counts["update"] == writes


def test_stale_generation_left_by_a_previous_daemon_is_deleted(
    api_client: client.ApiClient, node: str, publishers: list[Publisher]
) -> None:
    uid = _core(api_client).read_node(node).metadata.uid
    owner = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid, "controller": True}]
    resource: Any = client.ResourceV1Api(api_client)
    for generation, devices in ((3, ["old-0"]), (3, ["old-1"])):
        resource.create_resource_slice(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"generateName": f"{node}-{DRIVER}-", "ownerReferences": owner},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": node,
                    "pool": {"name": node, "generation": generation, "resourceSliceCount": 2},
                    "devices": [{"name": n} for n in devices],
                },
            }
        )
    start(publishers, api_client, node, ExampleDriver(count=1).devices)
    (s,) = wait_for(lambda: (lambda x: x if len(x) == 1 else None)(slices(api_client, node)), timeout=5, what="one slice")
    assert s["spec"]["pool"] == {"name": node, "generation": 4, "resourceSliceCount": 1}
    assert device_names([s]) == ["gpu-0"]


class TCPProxy:
    """A loopback TCP forwarder that can be cut (listener closed, live connections reset) and restored."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.port = 0
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self.restore()

    def restore(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, []
        if listener is not None:
            try:
                listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept(); close() alone does not
            except OSError:
                pass
            listener.close()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                down, _ = listener.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(self.upstream)
            except OSError:
                down.close()
                continue
            with self._lock:
                if self._listener is not listener:  # cut while connecting
                    down.close()
                    up.close()
                    return
                self._conns += [down, up]
            for a, b in ((down, up), (up, down)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def test_an_api_outage_past_the_backoff_ceiling_converges_after(
    api_client: client.ApiClient, node: str, publishers: list[Publisher]
) -> None:
    """The API unreachable while kubelet wipes the slice and the devices change, until the
    publisher has retried at its backoff ceiling (FAST: 0.1, 0.2, 0.4, 0.8 s, then 1 s from the
    fifth failure: seven failures are two retries at the ceiling); once the API is back, the pool
    converges and settles."""
    host, port = api_client.configuration.host.removeprefix("https://").rsplit(":", 1)
    proxy = TCPProxy((host, int(port)))
    cfg = copy.copy(api_client.configuration)
    cfg.host = f"https://127.0.0.1:{proxy.port}"
    via_proxy = client.ApiClient(cfg)
    count = [2]
    devices = lambda: ExampleDriver(count=count[0]).devices()  # noqa: E731
    publisher = start(publishers, via_proxy, node, devices)
    (before,) = slices(api_client, node)

    proxy.cut()
    # While the daemon cannot reach the API: kubelet wipes its slice and the devices change.
    client.ResourceV1Api(api_client).delete_resource_slice(before["metadata"]["name"])
    count[0] = 3
    publisher.devices_changed()
    # it keeps retrying: the sync worker's backoff counts its failures since the last success
    wait_for(lambda: publisher.backoff.failures >= 7, timeout=30, interval=0.1,
             what="seven failed syncs, the last two at the backoff ceiling")
    assert slices(api_client, node) == []
    proxy.restore()

    (after,) = wait_for(
        lambda: [s for s in slices(api_client, node) if len(s["spec"]["devices"]) == 3],
        timeout=8,
        interval=0.1,
        what="the pool to converge after the outage",
    )
    assert after["spec"]["pool"]["generation"] == 2
    assert device_names([after]) == ["gpu-0", "gpu-1", "gpu-2"]
    # Converged means settled: no further writes.
    writes = publisher.counts["create"] + publisher.counts["update"] + publisher.counts["delete"]
    assert publisher.resync_and_wait(10), "no comparison completed"
    assert publisher.counts["create"] + publisher.counts["update"] + publisher.counts["delete"] == writes
    proxy.cut()


def test_devices_with_consumable_capacity_and_valid_values_are_stored_as_sent(
    api_client: client.ApiClient, node: str, publishers: list[Publisher]
) -> None:
    dev = Device(
        name="npu-0",
        attributes={"model": "x", "healthy": True, "fw": Version("2.1.0-rc.1")},
        capacity={
            "slots": Capacity("8", RequestPolicy(default="2", valid_values=("1", "2", "4", "8"))),
            "memory": Capacity("1024Mi", RequestPolicy(default="1Gi", min="512Mi", step="512Mi")),
        },
        allow_multiple_allocations=True,
    )
    publisher = start(publishers, api_client, node, lambda: [dev])
    (s,) = slices(api_client, node)
    stored = s["spec"]["devices"][0]
    assert stored["capacity"]["slots"]["requestPolicy"] == {"default": "2", "validValues": ["1", "2", "4", "8"]}
    assert stored["attributes"]["healthy"] == {"bool": True}
    # The server may store 1024Mi as 1Gi; that is not a change.
    assert publisher.resync_and_wait(10), "no comparison completed"
    assert (publisher.counts["create"], publisher.counts["update"]) == (1, 0)


def test_missing_node_is_reported_and_publishing_starts_once_it_exists(
    api_client: client.ApiClient, publishers: list[Publisher], caplog: pytest.LogCaptureFixture
) -> None:
    name = unique("late")
    publisher = Publisher(api_client, DRIVER, name, ExampleDriver(count=1).devices, settings=FAST)
    publisher.start()
    publishers.append(publisher)
    wait_for(lambda: "does not exist" in caplog.text, timeout=10, what="a log naming the missing Node")
    assert f"Node {name!r} does not exist" in caplog.text
    assert not publisher.ready
    create_node(api_client, name)
    try:
        assert publisher.wait_ready(10)
        assert len(slices(api_client, name)) == 1
    finally:
        client.CoreV1Api(api_client).delete_node(name)


def orphan_slice(api: client.ApiClient, node: str, owner_uid: str) -> str:
    """A ResourceSlice of another driver on `node`, owned by the Node of `owner_uid`; its name."""
    made: Any = client.ResourceV1Api(api).create_resource_slice({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"generateName": f"{node}-witness-",
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": owner_uid}]},
        "spec": {"driver": "witness.example.com", "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": []},
    })
    name: str = made.metadata.name
    return name


def slice_exists(api: client.ApiClient, name: str) -> bool:
    try:
        client.ResourceV1Api(api).read_resource_slice(name)
    except client.ApiException as e:
        if e.status == 404:
            return False
        raise
    return True


def test_recreated_node_gets_slices_owned_by_its_new_uid(api_client: client.ApiClient, node: str, publishers: list[Publisher]) -> None:
    publisher = start(publishers, api_client, node, ExampleDriver(count=1).devices)
    core = _core(api_client)
    old_uid = core.read_node(node).metadata.uid
    core.delete_node(node)
    # The garbage collector removes the slice with its owner; the daemon's node is back under the same name.
    wait_for(lambda: not slices(api_client, node), timeout=30, what="the garbage collector to delete the slice")
    create_node(api_client, node)
    new_uid = core.read_node(node).metadata.uid

    def owned_by_new() -> list[dict[str, Any]] | None:
        now = slices(api_client, node)
        return now if len(now) == 1 and now[0]["metadata"]["ownerReferences"][0]["uid"] == new_uid else None

    (kept,) = wait_for(owned_by_new, timeout=15, what="a slice owned by the re-created Node")
    # And it stays: the garbage collector (which acts on its own time) does not take it again,
    # and the publisher, asked once more, finds it and writes nothing. Its time is a witness: a
    # slice of another driver owned by the old Node, made after ours, which the collector deletes
    # once it has seen the slices up to it.
    writes = publisher.counts["create"] + publisher.counts["update"]
    witness = orphan_slice(api_client, node, old_uid)
    wait_for(lambda: not slice_exists(api_client, witness), timeout=30,
             what="the garbage collector to delete a slice owned by the old Node")
    assert publisher.resync_and_wait(10), "no comparison completed"
    (now,) = owned_by_new() or [None]
    assert now is not None and now["metadata"]["uid"] == kept["metadata"]["uid"]
    assert publisher.counts["create"] + publisher.counts["update"] == writes


def test_slice_edited_by_someone_else_is_restored(api_client: client.ApiClient, node: str, publishers: list[Publisher]) -> None:
    publisher = start(publishers, api_client, node, ExampleDriver(count=2).devices)
    (s,) = slices(api_client, node)
    resource: Any = client.ResourceV1Api(api_client)
    edited = dict(s)
    edited["spec"] = {**s["spec"], "devices": s["spec"]["devices"][:1]}  # someone drops gpu-1
    resource.replace_resource_slice(s["metadata"]["name"], edited)

    def restored() -> dict[str, Any] | None:
        (now,) = slices(api_client, node)
        return now if device_names([now]) == ["gpu-0", "gpu-1"] else None

    fixed = wait_for(restored, timeout=5, interval=0.05, what="the publisher to restore the edited slice")
    assert fixed["metadata"]["name"] == s["metadata"]["name"]  # updated in place
    assert fixed["spec"]["pool"]["generation"] == s["spec"]["pool"]["generation"] + 1
    assert publisher.counts["update"] == 1
