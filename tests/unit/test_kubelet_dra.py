"""NodePrepareResources / NodeUnprepareResources through v1 and v1beta1 over real unix sockets."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Iterator

import grpc
import pytest

from dra._runtime.kubelet import ClaimOutcome, KubeletPaths, KubeletPlugin, PreparedResult
from dra._runtime.kubelet._proto import dra_v1_pb2, dra_v1_pb2_grpc
from dra.driver import ClaimRef
from dra.testing.kubelet import KubeletHarness, PreparedDevice, RecordingHandler, short_tmpdir

DRIVER = "gpu.example.com"
VERSIONS = ["v1", "v1beta1"]


class Env:
    def __init__(self, handler: RecordingHandler, plugin: KubeletPlugin, kubelet: KubeletHarness) -> None:
        self.handler = handler
        self.plugin = plugin
        self.kubelet = kubelet


@pytest.fixture
def env() -> Iterator[Env]:
    with short_tmpdir("kdra") as root:
        paths = KubeletPaths(registrar_dir=root / "reg", plugins_dir=root / "plugins")
        handler = RecordingHandler()
        with KubeletPlugin(DRIVER, handler, None, paths) as plugin, KubeletHarness(paths.registrar_dir) as kubelet:
            kubelet.wait_for_plugin(DRIVER)
            yield Env(handler, plugin, kubelet)


def claim(i: int) -> ClaimRef:
    return ClaimRef(uid=f"uid-{i}", namespace="ns", name=f"claim-{i}")


@pytest.mark.parametrize("version", VERSIONS)
def test_prepare_and_unprepare(env: Env, version: str) -> None:
    claims = [claim(1), claim(2)]
    res = env.kubelet.prepare(claims, version=version)
    assert env.handler.prepare_calls == [claims]  # the wire claims arrive as ClaimRefs, in order
    assert set(res) == {"uid-1", "uid-2"}
    for c in claims:
        assert res[c.uid].error == ""
        (dev,) = res[c.uid].devices
        assert dev.request_names == ("req",)
        assert dev.pool_name == "pool"
        assert dev.device_name == f"dev-{c.uid}"
        assert dev.cdi_device_ids == (f"example.com/claim={c.uid}",)
    assert env.kubelet.unprepare(claims, version=version) == {"uid-1": "", "uid-2": ""}
    assert env.handler.unprepare_calls == [claims]


def test_share_id_only_in_v1(env: Env) -> None:
    v1 = env.kubelet.prepare([claim(1)], version="v1")
    v1beta1 = env.kubelet.prepare([claim(1)], version="v1beta1")
    assert v1["uid-1"].devices[0].share_id == "share-uid-1"
    assert v1beta1["uid-1"].devices[0].share_id is None
    # no share ID from the handler: the optional field stays unset in v1
    env.handler.outcomes["uid-2"] = ClaimOutcome(devices=(PreparedResult(("r",), "pool", "d", ("v/c=d",)),))
    assert env.kubelet.prepare([claim(2)], version="v1")["uid-2"].devices[0].share_id is None
    with grpc.insecure_channel(f"unix:{env.plugin.endpoint}") as ch:
        resp = dra_v1_pb2_grpc.DRAPluginStub(ch).NodePrepareResources(
            dra_v1_pb2.NodePrepareResourcesRequest(claims=[dra_v1_pb2.Claim(uid="uid-2", namespace="ns", name="c")]),
            timeout=5,
        )
        assert not resp.claims["uid-2"].devices[0].HasField("share_id")


def test_registered_service_is_used_by_default(env: Env) -> None:
    assert env.kubelet.plugins(DRIVER)[0].service == "v1.DRAPlugin"
    assert env.kubelet.prepare([claim(1)])["uid-1"].devices[0].share_id == "share-uid-1"


@pytest.mark.parametrize("version", VERSIONS)
def test_empty_request_is_a_probe(env: Env, version: str) -> None:
    assert env.kubelet.probe(version=version) == {}
    assert env.handler.prepare_calls == []
    assert env.kubelet.unprepare([], version=version) == {}
    assert env.handler.unprepare_calls == []


@pytest.mark.parametrize("version", VERSIONS)
def test_per_claim_errors_pass_through(env: Env, version: str) -> None:
    env.handler.outcomes["uid-2"] = ClaimOutcome(error="claim ns/claim-2 not found")
    env.handler.unprepare_errors["uid-3"] = "device busy"
    res = env.kubelet.prepare([claim(1), claim(2)], version=version)
    assert res["uid-1"].error == "" and len(res["uid-1"].devices) == 1
    assert res["uid-2"] == type(res["uid-2"])(devices=(), error="claim ns/claim-2 not found")
    assert env.kubelet.unprepare([claim(1), claim(3)], version=version) == {"uid-1": "", "uid-3": "device busy"}


@pytest.mark.parametrize("version", VERSIONS)
def test_unprepare_of_unknown_uid_succeeds(env: Env, version: str) -> None:
    unknown = ClaimRef("never-prepared", "ns", "gone")
    assert env.kubelet.unprepare([unknown], version=version) == {"never-prepared": ""}


@pytest.mark.parametrize("version", VERSIONS)
def test_every_requested_claim_gets_an_entry(env: Env, version: str) -> None:
    env.handler.omit.add("uid-2")  # a buggy handler leaves a claim out: kubelet must still get it
    res = env.kubelet.prepare([claim(1), claim(2)], version=version)
    assert res["uid-1"].error == ""
    assert "no result for claim uid-2" in res["uid-2"].error
    errs = env.kubelet.unprepare([claim(1), claim(2)], version=version)
    assert errs["uid-1"] == "" and "no result for claim uid-2" in errs["uid-2"]


def test_handler_exception_becomes_per_claim_errors(env: Env) -> None:
    env.handler.fail = RuntimeError("apiserver unreachable")
    res = env.kubelet.prepare([claim(1), claim(2)])
    assert {uid: r.error for uid, r in res.items()} == {
        "uid-1": "prepare failed: apiserver unreachable",
        "uid-2": "prepare failed: apiserver unreachable",
    }
    assert env.kubelet.unprepare([claim(1)]) == {"uid-1": "unprepare failed: apiserver unreachable"}


def test_request_names_are_main_request_names(env: Env) -> None:
    env.handler.outcomes["uid-1"] = ClaimOutcome(
        devices=(PreparedResult(("gpu/small", "gpu/big", "nic"), "pool", "d0", ("v/c=d0",), None),)
    )
    assert env.kubelet.prepare([claim(1)])["uid-1"].devices == (
        PreparedDevice(("gpu", "nic"), "pool", "d0", ("v/c=d0",), None),
    )


def test_100_concurrent_prepares(env: Env) -> None:
    """Calls are served at once: each waits in the handler for 19 others (a server that served them
    one at a time would break the barrier at its timeout and fail every call)."""
    env.handler.barrier = threading.Barrier(20, timeout=30)
    with concurrent.futures.ThreadPoolExecutor(max_workers=100) as pool:
        results = list(pool.map(lambda i: env.kubelet.prepare([claim(i)]), range(100)))
    assert all(r[f"uid-{i}"].error == "" for i, r in enumerate(results)), results
    assert len(env.handler.prepare_calls) == 100 and not env.handler.barrier.broken
