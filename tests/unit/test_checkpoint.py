"""The checkpoint: atomic per-claim records, checksum, boot ID, corruption handling, locking."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from lock_evidence import wait_until_blocked_under

from dra._runtime.cdi import CDISpecs
from dra._runtime.checkpoint import (
    API_VERSION,
    PREPARED,
    PREPARING,
    Checkpoint,
    CheckpointError,
    ClaimRecord,
    DeviceRecord,
    atomic_write,
)
from dra._runtime.prepare import ClaimPreparer
from dra.driver import AllocatedDevice, ClaimRef, ContainerEdits, Mount, PreparedDevice
from dra.testing.claims import RecordedClaims, claim_dict, result
from drivers.example.driver import ExampleDriver

UID = "0b5c9a4e-1111-4222-8333-944455556666"


def record(uid: str = UID, phase: str = PREPARED, boot: str = "boot-1") -> ClaimRecord:
    dev = DeviceRecord(driver="gpu.example.com", request="gpu", pool="node-a", device="gpu-0", share_id="s-1",
                       consumed_capacity={"memory": 1 << 30, "cores": 30}, cdi_name=f"{uid}-gpu-0-s-1",
                       cdi_ids=(f"k8s.gpu.example.com/claim={uid}-gpu-0-s-1",),
                       edits=ContainerEdits(env={"A": "1"}, mounts=(Mount("/h", "/c"),)),
                       state={"memory": 1 << 30, "nested": {"k": [1, 2]}})
    return ClaimRecord(uid=uid, namespace="ns", name="claim", phase=phase, boot_id=boot,  # type: ignore[arg-type]
                       devices=(dev,), claim_edits=ContainerEdits(env={"CLAIM": "x"}),
                       created_at=100.0, updated_at=101.0)


def test_roundtrip_and_file_format(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path, boot_id="boot-1")
    assert cp.get(UID) is None
    cp.put(record())
    assert cp.get(UID) == record()
    path = cp.path(UID)
    doc = json.loads(path.read_text())
    assert doc["apiVersion"] == API_VERSION and doc["kind"] == "ClaimCheckpoint"
    assert doc["checksum"].startswith("sha256:")
    claim = doc["claim"]
    assert {"uid", "namespace", "name", "phase", "bootID", "devices", "createdAt", "updatedAt"} <= set(claim)
    dev = claim["devices"][0]
    assert dev["state"] == {"memory": 1 << 30, "nested": {"k": [1, 2]}}
    assert dev["cdiDeviceIDs"] == [f"k8s.gpu.example.com/claim={UID}-gpu-0-s-1"]
    assert (dev["driver"], dev["pool"], dev["device"], dev["shareID"]) == ("gpu.example.com", "node-a", "gpu-0", "s-1")
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp files left
    assert cp.uids() == {UID}
    assert cp.delete(UID) and not cp.delete(UID)
    assert cp.get(UID) is None and cp.uids() == set()


def test_phase_moves_from_preparing_to_prepared(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path, boot_id="b")
    cp.put(record(phase=PREPARING))
    got = cp.get(UID)
    assert got is not None and got.phase == PREPARING
    cp.put(record(phase=PREPARED))
    got = cp.get(UID)
    assert got is not None and got.phase == PREPARED


def test_boot_id_comes_from_the_kernel_file(tmp_path: Path) -> None:
    f = tmp_path / "boot_id"
    f.write_text("1234-abcd\n")
    assert Checkpoint(tmp_path / "s", boot_id_path=f).boot_id == "1234-abcd"
    real = Checkpoint(tmp_path / "t").boot_id
    assert real == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert Checkpoint(tmp_path / "u", boot_id_path=tmp_path / "missing").boot_id == "unknown"


@pytest.mark.parametrize("damage", ["checksum", "garbage", "truncated", "empty", "wrong-uid", "missing-field"])
def test_corrupt_record_is_moved_aside_loudly_never_a_crash(tmp_path: Path, damage: str,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    cp = Checkpoint(tmp_path, boot_id="b")
    cp.put(record())
    path = cp.path(UID)
    raw = path.read_bytes()
    doc = json.loads(raw)
    if damage == "checksum":
        doc["claim"]["phase"] = PREPARING  # a flipped field: the checksum no longer matches
        path.write_text(json.dumps(doc))
    elif damage == "garbage":
        path.write_bytes(b"\x00\xff not json")
    elif damage == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "wrong-uid":
        other = "ffffffff-1111-4222-8333-944455556666"
        cp.put(record(uid=other))
        path.write_bytes(cp.path(other).read_bytes())
        cp.delete(other)
    elif damage == "missing-field":
        del doc["claim"]["bootID"]
        from dra._runtime.checkpoint import checksum

        doc["checksum"] = checksum(doc["claim"])
        path.write_text(json.dumps(doc))
    with caplog.at_level(logging.ERROR, logger="dra._runtime.checkpoint"):
        assert cp.get(UID) is None
    assert not path.exists()
    aside = list(tmp_path.glob(f"claims/{UID}.json.corrupt-*"))
    assert len(aside) == 1
    assert any("CORRUPT CHECKPOINT" in r.getMessage() for r in caplog.records)
    assert cp.uids() == set()  # the moved-aside file is not a record
    assert cp.records() == []


def test_newer_version_is_kept_and_reported(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path, boot_id="b")
    cp.put(record())
    path = cp.path(UID)
    doc = json.loads(path.read_text())
    doc["apiVersion"] = "checkpoint.dra.k8s.io/v2"
    path.write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match="newer release"):
        cp.get(UID)
    assert path.exists()
    assert cp.records() == []  # skipped, not destroyed
    assert cp.uids() == {UID}


def test_atomic_write_leaves_old_content_when_interrupted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "f.json"
    atomic_write(target, b"old")

    class Boom(Exception):
        pass

    def failing(*_: object) -> None:
        raise Boom

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(Boom):
        atomic_write(target, b"new")
    monkeypatch.undo()
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_temp_leftovers_are_found_with_their_claim(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path, boot_id="b")
    leftover = cp.claims_dir / f".{UID}.json.abc_12x.tmp"
    leftover.write_text("partial")
    (cp.claims_dir / ".junk.tmp").write_text("not ours")
    assert cp.uids() == set()
    assert cp.temp_files() == [(leftover, UID)]


def test_start_removes_temp_files_unless_a_writer_holds_the_claim(tmp_path: Path) -> None:
    driver = Counting()
    prep = _preparer(tmp_path, "b", driver, RecordedClaims())
    leftover = prep.checkpoint.claims_dir / f".{UID}.json.abc_12x.tmp"
    leftover.write_text("partial")
    prep.cdi.ensure_dir()
    cdi_tmp = prep.cdi.spec_dir / f".k8s.gpu.example.com-claim_{UID}.json.q1w2e3r4.tmp"
    cdi_tmp.write_text("partial")
    other = prep.cdi.spec_dir / f".k8s.other.example.com-claim_{UID}.json.q1w2e3r4.tmp"
    other.write_text("another driver's write in progress")
    started = threading.Event()
    release = threading.Event()

    def writer() -> None:  # another instance writing this claim right now
        with prep.checkpoint.lock(UID):
            started.set()
            release.wait(10)

    t = threading.Thread(target=writer)
    t.start()
    assert started.wait(5)
    result: list[list[str]] = []
    s = threading.Thread(target=lambda: result.append(prep.start()))
    s.start()
    wait_until_blocked_under(tmp_path)  # start() waits for the claim's lock
    assert leftover.exists() and cdi_tmp.exists(), "removed while the claim's writer held its lock"
    release.set()
    t.join(5)
    s.join(5)
    assert sorted(result[0]) == sorted([str(leftover), str(cdi_tmp)])
    assert other.exists()
    prep.close()


def test_uid_must_be_a_plain_name(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path, boot_id="b")
    for bad in ("../etc", "a/b", "", ".hidden"):
        with pytest.raises(ValueError):
            cp.path(bad)


def _hold_lock(state: str, uid: str, ready: object, release: object) -> None:
    cp = Checkpoint(Path(state), boot_id="b")
    with cp.lock(uid):
        ready.set()  # type: ignore[attr-defined]
        release.wait(10)  # type: ignore[attr-defined]


def test_lock_excludes_other_processes_and_threads_per_claim(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path, boot_id="b")
    ctx = multiprocessing.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_hold_lock, args=(str(tmp_path), UID, ready, release))
    child.start()
    try:
        assert ready.wait(10)
        got = threading.Event()

        def take() -> None:
            with cp.lock(UID):
                got.set()

        t = threading.Thread(target=take)
        t.start()
        wait_until_blocked_under(tmp_path)
        assert not got.is_set(), "a second holder got the claim's lock"
        other = "aaaaaaaa-1111-4222-8333-944455556666"
        with cp.lock(other):  # another claim is not blocked
            pass
        release.set()
        t.join(10)
        assert got.is_set()
    finally:
        release.set()
        child.join(10)
    assert list(cp.locks_dir.iterdir()) == []  # no record, so no lock file left behind


def test_lock_survives_unlink_race_between_threads(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path, boot_id="b")
    inside = 0
    worst = 0
    mu = threading.Lock()

    def worker() -> None:
        nonlocal inside, worst
        for _ in range(50):
            with cp.lock(UID):
                with mu:
                    inside += 1
                    worst = max(worst, inside)
                time.sleep(0.0005)
                with mu:
                    inside -= 1

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert worst == 1


# --- through the preparer -------------------------------------------------------------------


class Counting(ExampleDriver):
    def __init__(self) -> None:
        super().__init__(count=2)
        self.prepares = 0
        self.unprepared: list[list[PreparedDevice]] = []

    def prepare(self, claim: ClaimRef, devices: Sequence[AllocatedDevice]) -> Sequence[PreparedDevice]:
        self.prepares += 1
        return super().prepare(claim, devices)

    def unprepare(self, claim: ClaimRef, prepared: Sequence[PreparedDevice]) -> None:
        self.unprepared.append(list(prepared))


def _preparer(tmp_path: Path, boot: str, driver: Counting, claims: RecordedClaims) -> ClaimPreparer:
    return ClaimPreparer(driver, claims, "node-a", Checkpoint(tmp_path / "state", boot_id=boot),
                         CDISpecs(driver.cdi_kind, tmp_path / "cdi"))


def test_reboot_prepares_again_and_same_boot_answers_from_checkpoint(tmp_path: Path) -> None:
    driver, claims = Counting(), RecordedClaims()
    obj = claims.add(claim_dict("c", results=[result("gpu-0", share_id="s1", memory="1Gi")]))
    ref = ClaimRef(obj.uid, obj.namespace, obj.name)
    first = _preparer(tmp_path, "boot-1", driver, claims).prepare_claims([ref])[ref.uid]
    assert first.error == "" and driver.prepares == 1
    again = _preparer(tmp_path, "boot-1", driver, claims).prepare_claims([ref])[ref.uid]
    assert again == first and driver.prepares == 1
    # After a reboot /var/run/cdi (tmpfs) is empty and the driver's setup is gone.
    (tmp_path / "cdi" / f"k8s.gpu.example.com-claim_{ref.uid}.json").unlink()
    rebooted = _preparer(tmp_path, "boot-2", driver, claims)
    assert rebooted.prepare_claims([ref])[ref.uid] == first
    assert driver.prepares == 2
    rec = rebooted.checkpoint.get(ref.uid)
    assert rec is not None and rec.boot_id == "boot-2" and rec.phase == PREPARED
    assert rebooted.cdi.spec_path(ref.uid).exists()


def test_corrupt_record_at_prepare_and_unprepare(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    driver, claims = Counting(), RecordedClaims()
    obj = claims.add(claim_dict("c", results=[result("gpu-1")]))
    ref = ClaimRef(obj.uid, obj.namespace, obj.name)
    prep = _preparer(tmp_path, "b", driver, claims)
    first = prep.prepare_claims([ref])[ref.uid]
    prep.checkpoint.path(ref.uid).write_text("{broken")
    assert prep.prepare_claims([ref])[ref.uid] == first  # prepared again, not refused
    assert driver.prepares == 2
    prep.checkpoint.path(ref.uid).write_text("{broken")
    assert prep.unprepare_claims([ref]) == {ref.uid: ""}
    assert not prep.cdi.spec_path(ref.uid).exists()
    assert len(list(prep.checkpoint.claims_dir.glob("*.corrupt-*"))) == 2
    assert any("CORRUPT CHECKPOINT" in r.getMessage() for r in caplog.records)


def test_unprepare_gets_what_prepare_returned(tmp_path: Path) -> None:
    driver, claims = Counting(), RecordedClaims()
    obj = claims.add(claim_dict("c", results=[result("gpu-0", share_id="s9", memory="2Gi", cores="30")]))
    ref = ClaimRef(obj.uid, obj.namespace, obj.name)
    prep = _preparer(tmp_path, "b", driver, claims)
    prep.prepare_claims([ref])
    claims.remove(ref.namespace, ref.name)  # the claim may be gone by unprepare time
    assert prep.unprepare_claims([ref]) == {ref.uid: ""}
    (got,) = driver.unprepared[0]
    assert got.device.share_id == "s9" and got.device.consumed_capacity == {"memory": 2 << 30, "cores": 30}
    assert got.state == {"memory": 2 << 30}
    assert got.edits.env["EXAMPLE_MEMORY_LIMIT"] == str(2 << 30)
    assert prep.checkpoint.get(ref.uid) is None
    assert list(prep.checkpoint.locks_dir.iterdir()) == []
    assert os.listdir(prep.cdi.spec_dir) == []
