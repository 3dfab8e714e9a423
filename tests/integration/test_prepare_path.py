"""The prepare path against the real API server: claims allocated by kube-scheduler from slices
the framework published for the example driver, prepared and unprepared by ClaimPreparer."""

from __future__ import annotations

import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers import (
    Env,
    add_driver,
    allocated_claim,
    create_claim,
    create_pod,
    example_driver,
    pooled_client,
    publish,
    ref,
    request,
    setup_env,
    wait_allocated,
)
from kube_helpers import create_node, unique
from kubernetes import client

from dra._runtime.claims import ApiClaimSource, node_labels_reader
from dra.driver import ClaimRef
from dra.testing.cdi import apply_cdi, validate_cdi_spec

pytestmark = pytest.mark.cluster
SCHEMA = Path(__file__).parent.parent / "data" / "cdi-schema"
API = "gpu.example.com/v1alpha1"


def _validate_specs(cdi_dir: Path) -> list[dict[str, object]]:
    docs = []
    for p in sorted(cdi_dir.glob("*.json")):
        doc = json.loads(p.read_text())
        validate_cdi_spec(doc, SCHEMA)
        docs.append(doc)
    return docs


@pytest.fixture
def env(api_client: client.ApiClient) -> Env:
    return setup_env(api_client, count=2)


def test_api_claim_source_reads_the_allocation(env: Env) -> None:
    c = allocated_claim(env, "plain", [request("gpu", env.device_class, cores="30", memory="2Gi")])
    assert c.allocation is not None
    (r,) = c.allocation.results
    assert (r.driver, r.pool, r.request) == (env.driver.name, env.node, "gpu")
    assert r.consumed_capacity == {"cores": 30, "memory": 2 << 30}
    assert r.share_id
    assert c.allocation.node_selector is not None and c.allocation.node_selector.matches(env.node, {})
    assert not c.allocation.node_selector.matches("another-node", {})
    assert c.reserved_for[0].resource == "pods" and c.reserved_for[0].name == "plain"
    assert ApiClaimSource(env.api).get_claim(env.namespace, "absent") is None
    labels = node_labels_reader(env.api, env.node)()
    assert labels["kubernetes.io/hostname"] == env.node


def test_prepare_again_unprepare_and_unknown_uid(env: Env, tmp_path: Path) -> None:
    c = allocated_claim(env, "c1", [request("gpu", env.device_class, cores="25", memory="1Gi")])
    prep = env.preparer(tmp_path)
    out = prep.prepare_claims([ref(c)])
    assert set(out) == {c.uid}
    o = out[c.uid]
    assert o.error == "", o.error
    (dev,) = o.devices
    assert dev.pool == env.node and dev.request_names == ("gpu",) and dev.share_id
    assert dev.cdi_device_ids == (f"{env.driver.cdi_kind}={c.uid}-{dev.device}-{dev.share_id}",)
    spec_path = prep.cdi.spec_path(c.uid)
    assert spec_path.exists()
    (doc,) = _validate_specs(tmp_path / "cdi")
    assert doc["kind"] == env.driver.cdi_kind
    menv, _ = apply_cdi(tmp_path / "cdi", list(dev.cdi_device_ids))
    assert menv["EXAMPLE_MEMORY_LIMIT"] == str(1 << 30) and menv["EXAMPLE_CORES_LIMIT"] == "25"

    assert prep.prepare_claims([ref(c)]) == out  # same answer
    assert env.preparer(tmp_path).prepare_claims([ref(c)]) == out  # from the checkpoint, new instance

    unknown = ClaimRef("6c1d2b36-0000-4000-8000-00000000abcd", env.namespace, "never-existed")
    assert prep.unprepare_claims([ref(c), unknown]) == {c.uid: "", unknown.uid: ""}
    assert not spec_path.exists()
    assert prep.checkpoint.uids() == set()
    # The claim may be gone at unprepare time: unprepare works from local state.
    prep.prepare_claims([ref(c)])
    env.core.delete_namespaced_pod("c1", env.namespace, grace_period_seconds=0)
    env.resource.delete_namespaced_resource_claim("c1", env.namespace)
    assert prep.unprepare_claims([ref(c)]) == {c.uid: ""}
    assert not spec_path.exists()


def test_bad_input_is_a_per_claim_error_that_says_what_is_wrong(api_client: client.ApiClient,
                                                                  tmp_path: Path) -> None:
    env = setup_env(api_client, count=2)
    good = allocated_claim(env, "good")
    # Not allocated: a claim no pod uses.
    create_claim(env, "idle")
    idle = ApiClaimSource(env.api).get_claim(env.namespace, "idle")
    assert idle is not None and idle.allocation is None
    # Allocated to another node: the same driver publishes on a second node, the pod goes there.
    other = unique("node-other")
    create_node(api_client, other)
    publish(api_client, env.driver, other)
    elsewhere = allocated_claim(env, "elsewhere", node_selector={"kubernetes.io/hostname": other})
    # Foreign driver only: a claim allocated from another driver's devices on this node.
    foreign_driver = example_driver(count=1)
    add_driver(api_client, foreign_driver, env.node)
    foreign = allocated_claim(Env(api_client, foreign_driver, env.node, env.namespace, foreign_driver.name),
                              "foreign")
    # Malformed opaque config for this driver (an unknown field).
    bad_cfg = allocated_claim(env, "badcfg", config=[{"requests": ["gpu"], "opaque": {
        "driver": env.driver.name,
        "parameters": {"apiVersion": API, "kind": "ExampleConfig", "mode": "shared", "sharing": "mps"}}}])
    # A good config applies.
    good_cfg = allocated_claim(env, "goodcfg", config=[{"opaque": {
        "driver": env.driver.name,
        "parameters": {"apiVersion": API, "kind": "ExampleConfig", "mode": "exclusive"}}}])

    refs = {
        "good": ref(good),
        "missing": ClaimRef("0d5a7c1e-0000-4000-8000-000000000001", env.namespace, "no-such-claim"),
        "uid": ClaimRef("0d5a7c1e-0000-4000-8000-000000000002", env.namespace, "good"),
        "idle": ref(idle),
        "elsewhere": ref(elsewhere),
        "foreign": ref(foreign),
        "badcfg": ref(bad_cfg),
        "goodcfg": ref(good_cfg),
    }
    prep = env.preparer(tmp_path)
    out = prep.prepare_claims(list(refs.values()))
    assert set(out) == {r.uid for r in refs.values()}
    for ok in ("good", "goodcfg"):
        assert out[refs[ok].uid].error == "" and out[refs[ok].uid].devices
    expect = {
        "missing": ["not found"],
        "uid": [f"has UID {good.uid}", "deleted and created again"],
        "idle": ["not allocated"],
        "elsewhere": ["allocated for another node", other, env.node],
        "foreign": [f"no devices of driver {env.driver.name}", foreign_driver.name],
        "badcfg": ["opaque config #0", "FromClaim", "field 'sharing'", "unknown field",
                   "fix spec.devices.config"],
    }
    # The config names request 'gpu', the claim's only request. Up to 1.36 the scheduler copies
    # that list into the allocation; from 1.37 it omits a list that covers every request
    # (kubernetes/kubernetes#139731), which the API defines as "all requests".
    bad_err = out[refs["badcfg"].uid].error
    assert "'gpu'" in bad_err or "for all requests" in bad_err, bad_err
    for key, words in expect.items():
        r = refs[key]
        err = out[r.uid].error
        assert err and not out[r.uid].devices, key
        assert f"{r.namespace}/{r.name}" in err and r.uid in err, err
        for w in words:
            assert w in err, (key, w, err)
    menv, _ = apply_cdi(tmp_path / "cdi", list(out[good_cfg.uid].devices[0].cdi_device_ids))
    assert menv["EXAMPLE_MODE"] == "exclusive"
    assert prep.checkpoint.uids() == {good.uid, good_cfg.uid} == prep.cdi.claim_uids()
    _validate_specs(tmp_path / "cdi")


def test_two_claims_sharing_one_device_prepare_to_distinct_cdi_devices(api_client: client.ApiClient,
                                                                        tmp_path: Path) -> None:
    env = setup_env(api_client, count=1)
    a = allocated_claim(env, "a", [request("gpu", env.device_class, cores="40", memory="4Gi")])
    b = allocated_claim(env, "b", [request("gpu", env.device_class, cores="50", memory="8Gi")])
    # And two shares of the same device inside one claim.
    create_claim(env, "ab", [request("x", env.device_class, cores="1", memory="1Gi"),
                             request("y", env.device_class, cores="2", memory="2Gi")])
    create_pod(env, "ab", ["ab"])
    ab = wait_allocated(env, "ab")
    prep = env.preparer(tmp_path)
    out = prep.prepare_claims([ref(a), ref(b), ref(ab)])
    assert all(o.error == "" for o in out.values()), out
    devs = [d for o in out.values() for d in o.devices]
    assert {d.device for d in devs} == {"gpu-0"}
    assert len({d.share_id for d in devs}) == 4
    ids = [i for d in devs for i in d.cdi_device_ids]
    assert len(ids) == len(set(ids)) == 4
    _validate_specs(tmp_path / "cdi")
    limits = {}
    for d in devs:
        menv, _ = apply_cdi(tmp_path / "cdi", list(d.cdi_device_ids))
        limits[(d.request_names, menv["EXAMPLE_CORES_LIMIT"])] = int(menv["EXAMPLE_MEMORY_LIMIT"])
    assert limits == {(("gpu",), "40"): 4 << 30, (("gpu",), "50"): 8 << 30,
                      (("x",), "1"): 1 << 30, (("y",), "2"): 2 << 30}


def test_hundred_concurrent_claims(api_client: client.ApiClient, cluster: object, tmp_path: Path) -> None:
    env = setup_env(api_client, count=2)
    n = 100
    for i in range(n):
        create_claim(env, f"c{i}", [request("gpu", env.device_class, cores="1", memory="64Mi")])
        create_pod(env, f"c{i}", [f"c{i}"])
    claims = [wait_allocated(env, f"c{i}", timeout=180) for i in range(n)]
    fast = api_client_for(cluster)
    prep = env.preparer(tmp_path, source_api=fast)
    prep.prepare_claims([ref(claims[0])])  # warm the connection pool and imports
    prep.unprepare_claims([ref(claims[0])])
    lat: list[float] = []

    def one(c: object) -> str:
        t = time.perf_counter()
        r = ref(c)  # type: ignore[arg-type]
        err = prep.prepare_claims([r])[r.uid].error
        lat.append(time.perf_counter() - t)
        return err

    t0 = time.perf_counter()
    with ThreadPoolExecutor(n) as pool:
        errors = list(pool.map(one, claims))
    wall = time.perf_counter() - t0
    assert errors == [""] * n
    lat.sort()
    print(f"\nprepare, {n} concurrent claims, real apiserver: p50 {statistics.median(lat) * 1e3:.1f} ms,"
          f" p99 {lat[int(0.99 * n) - 1] * 1e3:.1f} ms, max {lat[-1] * 1e3:.1f} ms, wall {wall * 1e3:.0f} ms")
    assert prep.checkpoint.uids() == {c.uid for c in claims} == prep.cdi.claim_uids()
    with ThreadPoolExecutor(n) as pool:
        assert list(pool.map(lambda c: prep.unprepare_claims([ref(c)])[c.uid], claims)) == [""] * n
    assert prep.cdi.claim_uids() == set()
    fast.close()


def api_client_for(cluster: object) -> client.ApiClient:
    return pooled_client(cluster.kubeconfig)  # type: ignore[attr-defined]
