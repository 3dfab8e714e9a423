"""ClaimPreparer logic over recorded wire-form claims (the same cases run against the real API
server in tests/integration/test_prepare_path.py)."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from lock_evidence import wait_until_blocked_under

from dra._runtime.cdi import CDISpecs
from dra._runtime.checkpoint import PREPARING, Checkpoint
from dra._runtime.claims import NodeSelector, ResourceClaim, SelectorRequirement, SelectorTerm, quantity_to_int
from dra._runtime.prepare import ClaimPreparer
from dra.driver import AllocatedDevice, ClaimRef, PreparedDevice, PrepareError
from dra.testing.claims import RecordedClaims, claim_dict, result
from drivers.example.driver import ExampleDriver


class Tracking(ExampleDriver):
    def __init__(self) -> None:
        super().__init__(count=8)
        self.calls: list[tuple[str, str]] = []
        self.refuse: set[str] = set()
        self.mu = threading.Lock()

    def prepare(self, claim: ClaimRef, devices: Sequence[AllocatedDevice]) -> Sequence[PreparedDevice]:
        with self.mu:
            self.calls.append(("prepare", claim.uid))
        if claim.name in self.refuse:
            raise PrepareError("device is busy")
        return super().prepare(claim, devices)

    def unprepare(self, claim: ClaimRef, prepared: Sequence[PreparedDevice]) -> None:
        with self.mu:
            self.calls.append(("unprepare", claim.uid))


@pytest.fixture
def env(tmp_path: Path) -> Iterator[tuple[ClaimPreparer, RecordedClaims, Tracking]]:
    driver, claims = Tracking(), RecordedClaims()
    prep = ClaimPreparer(driver, claims, "node-a", Checkpoint(tmp_path / "state", boot_id="b"),
                         CDISpecs(driver.cdi_kind, tmp_path / "cdi"))
    yield prep, claims, driver
    prep.close()


def ref_of(c: ResourceClaim) -> ClaimRef:
    return ClaimRef(c.uid, c.namespace, c.name)


def test_bad_input_each_a_clear_per_claim_error(env: tuple[ClaimPreparer, RecordedClaims, Tracking]) -> None:
    prep, claims, driver = env
    good = claims.add(claim_dict("good", results=[result("gpu-0")]))
    replaced = claims.add(claim_dict("replaced", results=[result("gpu-1")]))
    unalloc = claims.add(claim_dict("unalloc", allocated=False))
    elsewhere = claims.add(claim_dict("elsewhere", results=[result("gpu-2", pool="node-b")], node="node-b"))
    foreign = claims.add(claim_dict("foreign", results=[result("nic-0", driver="net.example.com")]))
    refs = {
        "good": ref_of(good),
        "missing": ClaimRef("11111111-2222-4333-8444-555555555555", "default", "missing"),
        "replaced": ClaimRef("99999999-2222-4333-8444-555555555555", "default", "replaced"),
        "unalloc": ref_of(unalloc),
        "elsewhere": ref_of(elsewhere),
        "foreign": ref_of(foreign),
    }
    out = prep.prepare_claims(list(refs.values()))
    assert set(out) == {r.uid for r in refs.values()}
    assert out[good.uid].error == "" and len(out[good.uid].devices) == 1
    expect = {
        "missing": ["claim default/missing", "not found"],
        "replaced": [f"has UID {replaced.uid}", "not 99999999", "deleted and created again"],
        "unalloc": ["not allocated", "status.allocation is empty"],
        "elsewhere": ["allocated for another node", "metadata.name In ['node-b']", "'node-a'"],
        "foreign": ["no devices of driver gpu.example.com", "net.example.com"],
    }
    for key, words in expect.items():
        err = out[refs[key].uid].error
        assert err, key
        assert refs[key].uid in err
        for w in words:
            assert w in err, (key, w, err)
        assert not out[refs[key].uid].devices
    assert [c for c in driver.calls if c[0] == "prepare"] == [("prepare", good.uid)]
    assert prep.checkpoint.uids() == {good.uid}
    assert prep.cdi.claim_uids() == {good.uid}


def test_prepare_twice_same_answer_without_calling_the_driver(env: tuple[ClaimPreparer, RecordedClaims,
                                                                          Tracking]) -> None:
    prep, claims, driver = env
    c = claims.add(claim_dict("c", results=[result("gpu-0", share_id="s1"), result("gpu-1", request="x")]))
    first = prep.prepare_claims([ref_of(c)])
    second = prep.prepare_claims([ref_of(c)])
    assert first == second and first[c.uid].error == ""
    assert driver.calls == [("prepare", c.uid)]
    # The spec went missing (someone cleaned the CDI dir): rewritten from the checkpoint, no driver call.
    prep.cdi.spec_path(c.uid).unlink()
    assert prep.prepare_claims([ref_of(c)]) == first
    assert prep.cdi.spec_path(c.uid).exists() and driver.calls == [("prepare", c.uid)]


def test_unprepare_removes_spec_and_unknown_uid_succeeds(env: tuple[ClaimPreparer, RecordedClaims,
                                                                    Tracking]) -> None:
    prep, claims, driver = env
    c = claims.add(claim_dict("c", results=[result("gpu-0")]))
    prep.prepare_claims([ref_of(c)])
    unknown = ClaimRef("00000000-0000-4000-8000-000000000000", "x", "y")
    assert prep.unprepare_claims([ref_of(c), unknown]) == {c.uid: "", unknown.uid: ""}
    assert not prep.cdi.spec_path(c.uid).exists()
    assert prep.checkpoint.uids() == set()
    assert driver.calls == [("prepare", c.uid), ("unprepare", c.uid)]
    assert prep.unprepare_claims([ref_of(c)]) == {c.uid: ""}  # again: idempotent
    assert driver.calls[-1] == ("unprepare", c.uid) and len(driver.calls) == 2


def test_driver_refusal_is_rolled_back(env: tuple[ClaimPreparer, RecordedClaims, Tracking]) -> None:
    prep, claims, driver = env
    driver.refuse.add("busy")
    c = claims.add(claim_dict("busy", results=[result("gpu-0")]))
    out = prep.prepare_claims([ref_of(c)])
    assert "driver gpu.example.com refused to prepare: device is busy" in out[c.uid].error
    assert driver.calls == [("prepare", c.uid), ("unprepare", c.uid)]
    assert prep.checkpoint.uids() == set() and prep.cdi.claim_uids() == set()


def test_unknown_device_is_the_drivers_error(env: tuple[ClaimPreparer, RecordedClaims, Tracking]) -> None:
    prep, claims, _ = env
    c = claims.add(claim_dict("c", results=[result("gpu-99")]))
    assert "gpu-99 is not on this node" in prep.prepare_claims([ref_of(c)])[c.uid].error


def test_leftover_preparing_record_is_finished(env: tuple[ClaimPreparer, RecordedClaims, Tracking]) -> None:
    prep, claims, driver = env
    c = claims.add(claim_dict("c", results=[result("gpu-0")]))
    first = prep.prepare_claims([ref_of(c)])
    rec = prep.checkpoint.get(c.uid)
    assert rec is not None
    import dataclasses

    prep.checkpoint.put(dataclasses.replace(rec, phase=PREPARING))  # as if killed before "prepared"
    assert prep.prepare_claims([ref_of(c)]) == first
    assert [k for k, _ in driver.calls] == ["prepare", "prepare"]


def test_reallocated_claim_undoes_old_devices(env: tuple[ClaimPreparer, RecordedClaims, Tracking]) -> None:
    prep, claims, driver = env
    obj = claim_dict("c", results=[result("gpu-0")])
    c = claims.add(obj)
    prep.prepare_claims([ref_of(c)])
    obj["status"]["allocation"]["devices"]["results"] = [result("gpu-3")]
    claims.add(obj)
    out = prep.prepare_claims([ref_of(c)])
    assert [d.device for d in out[c.uid].devices] == ["gpu-3"]
    assert [k for k, _ in driver.calls] == ["prepare", "unprepare", "prepare"]


def test_node_selector_semantics() -> None:
    def sel(*terms: SelectorTerm) -> NodeSelector:
        return NodeSelector(terms)

    name_in = SelectorTerm(match_fields=(SelectorRequirement("metadata.name", "In", ("n1",)),))
    host_in = SelectorTerm(match_expressions=(SelectorRequirement("kubernetes.io/hostname", "In", ("n1",)),))
    labels = {"kubernetes.io/hostname": "n1", "zone": "z1", "gen": "5"}
    assert sel(name_in).matches("n1", labels) and not sel(name_in).matches("n2", labels)
    assert sel(host_in).matches("n1", labels) and not sel(host_in).matches("n1", {})
    assert sel(SelectorTerm()).matches("n1", labels) is False  # an empty term matches nothing
    assert sel().matches("n1", labels) is False
    other_field = SelectorTerm(match_fields=(SelectorRequirement("metadata.uid", "In", ("n1",)),))
    assert not sel(other_field).matches("n1", labels)
    both = SelectorTerm(match_fields=name_in.match_fields,
                        match_expressions=(SelectorRequirement("zone", "In", ("z2",)),))
    assert not sel(both).matches("n1", labels)  # ANDed within a term
    assert sel(both, host_in).matches("n1", labels)  # ORed across terms
    for op, vals, want in [("NotIn", ("z2",), True), ("Exists", (), True), ("DoesNotExist", (), False),
                           ("Gt", ("4",), True), ("Lt", ("4",), False), ("Bogus", (), False)]:
        key = "gen" if op in ("Gt", "Lt") else "zone"
        assert sel(SelectorTerm(match_expressions=(SelectorRequirement(key, op, vals),))).matches("n1", labels) is want


def test_label_selector_allocation_uses_node_labels(tmp_path: Path) -> None:
    driver, claims = Tracking(), RecordedClaims()
    obj = claim_dict("c", results=[result("gpu-0")], node=None)
    obj["status"]["allocation"]["nodeSelector"] = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "rack", "operator": "In", "values": ["r7"]}]}]}
    c = claims.add(obj)
    reads: list[int] = []

    def reader() -> dict[str, str]:
        reads.append(1)
        return {"rack": "r7"}

    def broken() -> dict[str, str]:
        raise OSError("connection refused")

    for labels, want in (({"rack": "r7"}, ""), (None, "allocated for another node"), (reader, ""),
                         (broken, "labels of node node-a cannot be read: connection refused")):
        prep = ClaimPreparer(driver, claims, "node-a", Checkpoint(tmp_path / "s", boot_id="b"),
                             CDISpecs(driver.cdi_kind, tmp_path / "cdi"), node_labels=labels)
        for _ in range(2):
            err = prep.prepare_claims([ref_of(c)])[c.uid].error
            assert (want in err) if want else err == "", err
        prep.unprepare_claims([ref_of(c)])
        prep.close()
    assert reads == [1]  # read once, then cached


def test_field_selector_never_reads_labels(tmp_path: Path) -> None:
    driver, claims = Tracking(), RecordedClaims()
    c = claims.add(claim_dict("c", results=[result("gpu-0")]))

    def reader() -> dict[str, str]:
        raise AssertionError("labels read for a metadata.name selector")

    prep = ClaimPreparer(driver, claims, "node-a", Checkpoint(tmp_path / "s", boot_id="b"),
                         CDISpecs(driver.cdi_kind, tmp_path / "cdi"), node_labels=reader)
    assert prep.prepare_claims([ref_of(c)])[c.uid].error == ""
    prep.close()


def test_no_node_selector_means_any_node(env: tuple[ClaimPreparer, RecordedClaims, Tracking]) -> None:
    prep, claims, _ = env
    c = claims.add(claim_dict("c", results=[result("gpu-0")], node=None))
    assert prep.prepare_claims([ref_of(c)])[c.uid].error == ""


def test_quantities() -> None:
    assert quantity_to_int("16Gi") == 16 << 30
    assert quantity_to_int("1M") == 1_000_000
    assert quantity_to_int("100") == 100
    assert quantity_to_int("500m") == 1  # rounded up to whole base units
    # a valid quantity whose integer would take minutes to build is refused at once
    started = time.thread_time()  # this thread's CPU time: what the parse costs, whatever else the machine runs
    for huge in ("1e999999999", "1e31", "-1e999999999"):
        with pytest.raises(ValueError, match="beyond 10"):
            quantity_to_int(huge)
    assert time.thread_time() - started < 0.1
    assert quantity_to_int("1e30") == 10**30
    c = ResourceClaim.from_dict(claim_dict("c", results=[result("gpu-0", memory="512Mi", cores="25")]))
    assert c.allocation is not None
    assert c.allocation.results[0].consumed_capacity == {"memory": 512 << 20, "cores": 25}


def test_from_model_equals_from_dict() -> None:
    import json

    from kubernetes.client import ApiClient

    obj = claim_dict("c", results=[result("gpu-0", share_id="s", memory="1Gi")])
    model = ApiClient().deserialize(json.dumps(obj), "ResourceV1ResourceClaim", "application/json")
    assert ResourceClaim.from_model(model) == ResourceClaim.from_dict(obj)


def test_hundred_concurrent_claims_all_succeed(env: tuple[ClaimPreparer, RecordedClaims, Tracking]) -> None:
    prep, claims, _ = env
    refs = [ref_of(claims.add(claim_dict(f"c{i}", results=[result(f"gpu-{i % 8}", share_id=f"s-{i}",
                                                                   memory="1Gi")]))) for i in range(100)]
    lat: list[float] = []

    def one(r: ClaimRef) -> str:
        t = time.perf_counter()
        err = prep.prepare_claims([r])[r.uid].error
        lat.append(time.perf_counter() - t)
        return err

    with ThreadPoolExecutor(100) as pool:
        errors = list(pool.map(one, refs))
    assert errors == [""] * 100
    assert prep.checkpoint.uids() == {r.uid for r in refs} == prep.cdi.claim_uids()
    lat.sort()
    print(f"\n100 concurrent (recorded claims, no API): p50 {statistics.median(lat) * 1000:.1f} ms,"
          f" p99 {lat[98] * 1000:.1f} ms")
    with ThreadPoolExecutor(100) as pool:
        assert list(pool.map(lambda r: prep.unprepare_claims([r])[r.uid], refs)) == [""] * 100
    assert prep.checkpoint.uids() == set() == prep.cdi.claim_uids()


class GatedClaims(RecordedClaims):
    """Claims whose GET blocks until released, to interleave calls deterministically."""

    def __init__(self) -> None:
        super().__init__()
        self.gates: dict[str, threading.Event] = {}
        self.entered: dict[str, threading.Event] = {}

    def gate(self, name: str) -> threading.Event:
        self.entered[name] = threading.Event()
        self.gates[name] = threading.Event()
        return self.gates[name]

    def get_claim(self, namespace: str, name: str) -> ResourceClaim | None:
        if name in self.gates:
            self.entered[name].set()
            self.gates[name].wait(10)
        return super().get_claim(namespace, name)


def test_unprepare_waits_for_an_in_flight_prepare_of_the_same_claim(tmp_path: Path) -> None:
    driver, claims = Tracking(), GatedClaims()
    prep = ClaimPreparer(driver, claims, "node-a", Checkpoint(tmp_path / "s", boot_id="b"),
                         CDISpecs(driver.cdi_kind, tmp_path / "cdi"))
    c = claims.add(claim_dict("c", results=[result("gpu-0")]))
    release = claims.gate("c")
    prepared: list[str] = []
    t = threading.Thread(target=lambda: prepared.append(prep.prepare_claims([ref_of(c)])[c.uid].error))
    t.start()
    assert claims.entered["c"].wait(5)  # the prepare is inside its GET
    unprepared: list[str] = []
    u = threading.Thread(target=lambda: unprepared.append(prep.unprepare_claims([ref_of(c)])[c.uid]))
    u.start()
    wait_until_blocked_under(tmp_path)  # on the claim's lock, which the prepare holds
    assert unprepared == [], "unprepare ran while the prepare of the same claim was between GET and record"
    release.set()
    t.join(5)
    u.join(5)
    assert prepared == [""] and unprepared == [""]
    assert [k for k, _ in driver.calls] == ["prepare", "unprepare"]
    assert prep.checkpoint.uids() == set() and prep.cdi.claim_uids() == set()
    prep.close()


def test_a_slow_claim_does_not_hold_up_others(tmp_path: Path) -> None:
    driver, claims = Tracking(), GatedClaims()
    prep = ClaimPreparer(driver, claims, "node-a", Checkpoint(tmp_path / "s", boot_id="b"),
                         CDISpecs(driver.cdi_kind, tmp_path / "cdi"))
    slow = claims.add(claim_dict("slow", results=[result("gpu-0")]))
    fast = claims.add(claim_dict("fast", results=[result("gpu-1")]))
    release = claims.gate("slow")
    t = threading.Thread(target=lambda: prep.prepare_claims([ref_of(slow)]))
    t.start()
    assert claims.entered["slow"].wait(5)
    # While the slow claim is held in its gate, the fast one is prepared and unprepared (were it
    # queued behind the slow one, these would wait for the gate: the timeouts below would fail).
    pool = ThreadPoolExecutor(1)
    try:
        assert pool.submit(prep.prepare_claims, [ref_of(fast)]).result(timeout=30)[fast.uid].error == ""
        assert pool.submit(prep.unprepare_claims, [ref_of(fast)]).result(timeout=30) == {fast.uid: ""}
    finally:
        release.set()
        pool.shutdown()
    t.join(5)
    prep.close()
