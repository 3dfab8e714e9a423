"""Dynamic MIG keyed by identity (review 2026-12-04 #8; issue 25 item 5).

At 0cee347 a dynamic MIG instance was known by its placement (profile, start) only: a second claim
allocated the same placement before the first claim's unprepare ran (kubernetes#141471, e.g. a
force-delete) adopted the first claim's instance, and the first claim's late unprepare destroyed
it under the second (the review's probe G1). Now the prepared record keeps the instance's identity
(GPU instance id, MIG UUID); a claim is refused while another record names the same MIG hardware
(the error names that claim and says kubelet retries); unprepare destroys only the identity its
record names. Everything runs through the framework's real claim path (`ClaimPreparer`, the
checkpoint, the daemon's `DriverContext.recorded`) on the fake H200s' stub NVML, whose record of
creates and destroys is the evidence; a crash is a real SIGKILL at a fault point.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from driver_helpers import build_stub_libraries, isolated_env

from dra import ClaimRef, DriverContext
from dra._runtime import faults
from dra._runtime.cdi import CDISpecs
from dra._runtime.checkpoint import PREPARED, PREPARING, Checkpoint, ClaimRecord, DeviceRecord
from dra._runtime.daemon import recorded, recorded_devices
from dra._runtime.enforcement import ClaimHooks
from dra._runtime.hookdir import HookDir
from dra._runtime.prepare import ClaimPreparer
from dra.testing.claims import RecordedClaims, claim_dict, result
from drivers.hami_core_gpu import mig
from drivers.hami_core_gpu.driver import HamiCoreGpuDriver

STUB_ENV = ("HOOKCORE_STUB_DEVICES", "HOOKCORE_STUB_NVML_DRIVER", "HOOKCORE_STUB_NVML_CUDA", "HOOKCORE_STUB_NVML_FAIL",
            "HOOKCORE_STUB_NVML_EVENTS", "HOOKCORE_STUB_NVML_MIG")
NODE = "node-a"
BIG = "hami-gpu-0-mig-3g71gb-0"  # memory slices 0-3 of GPU 0
OVERLAP = "hami-gpu-0-mig-1g18gb-2"  # slice 2: inside BIG
ELSEWHERE = "hami-gpu-0-mig-3g71gb-4"  # slices 4-7


@dataclasses.dataclass
class Node:
    """One node's daemon state on `root`: built again after a 'restart', on the same directories."""

    root: Path
    driver: HamiCoreGpuDriver
    claims: RecordedClaims
    preparer: ClaimPreparer

    @property
    def checkpoint(self) -> Checkpoint:
        return self.preparer.checkpoint

    def claim(self, name: str, device: str) -> ClaimRef:
        c = self.claims.add(claim_dict(name, "tenant-" + name, results=[result(device, request="mig",
                                                                             driver=self.driver.name, pool=NODE)]))
        return ClaimRef(c.uid, c.namespace, c.name)

    def prepare(self, ref: ClaimRef) -> str:
        return self.preparer.prepare_claims([ref])[ref.uid].error

    def unprepare(self, ref: ClaimRef) -> str:
        return self.preparer.unprepare_claims([ref])[ref.uid]

    def state(self, ref: ClaimRef) -> dict[str, object]:
        rec = self.checkpoint.get(ref.uid)
        assert rec is not None and rec.phase == PREPARED
        return dict(rec.devices[0].state)


def make_node(root: Path) -> Node:
    """The daemon's wiring (`dra._runtime.daemon.Daemon`): the driver reads the node's checkpoint."""
    cp = Checkpoint(root / "state", boot_id="boot-1")
    driver = HamiCoreGpuDriver()
    driver.setup(DriverContext(NODE, NODE, {"mig": "dynamic", "health": "off"}, fake="h200x2-mig",
                               on_recorded_devices=lambda: recorded_devices(cp, driver.name),
                               on_recorded=lambda: recorded(cp, driver.name)))
    claims = RecordedClaims(root / "claims")
    for f in sorted((root / "claims").glob("*.json")) if (root / "claims").is_dir() else []:
        claims.add(json.loads(f.read_text()))
    prep = ClaimPreparer(driver, claims, NODE, cp, CDISpecs(driver.cdi_kind, root / "cdi"),
                         hooks=ClaimHooks(cp.state_dir, HookDir(root / "hook-dir")))
    prep.start()
    return Node(root, driver, claims, prep)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Callable[[], Node]]:
    """`node()` starts (or restarts) the node daemon's claim path on tmp_path; one MIG record."""
    build_stub_libraries()
    made: list[Node] = []
    with isolated_env(STUB_ENV):
        os.environ["HOOKCORE_STUB_NVML_MIG"] = str(tmp_path / "mig.state")

        def start() -> Node:
            made.append(make_node(tmp_path))
            return made[-1]

        yield start
        for n in made:
            n.driver.close()


def live(root: Path) -> dict[tuple[str, int], tuple[str, str]]:
    """The stub's live GPU instances: (GPU, GI id) -> (profile id, start), replayed from its record."""
    out: dict[tuple[str, int], tuple[str, str]] = {}
    path = root / "mig.state"
    for ln in path.read_text().splitlines() if path.exists() else []:
        f = ln.split()
        if f[0] == "gi+":
            out[(f[1], int(f[2]))] = (f[3], f[4])
        elif f[0] == "gi-":
            out.pop((f[1], int(f[2])), None)
    return out


def created(root: Path) -> int:
    path = root / "mig.state"
    return sum(ln.startswith("gi+ ") for ln in path.read_text().splitlines()) if path.exists() else 0


def out_of_band(n: Node, device: str) -> tuple[str, mig.Profile, int]:
    """(GPU UUID, profile, start) of a dynamic device, for NVML calls made past the daemon (an admin's
    `nvidia-smi mig`, a GPU reset)."""
    gpu, profile, start = n.driver.migs.dynamic[device]
    return gpu.uuid, profile, start


def test_prepare_records_the_instance_identity_and_unprepare_destroys_exactly_it(node: Callable[[], Node]) -> None:
    """Happy path: the prepared record names the instance (GI id, MIG UUID) the stub made."""
    n = node()
    a = n.claim("a", BIG)
    assert n.prepare(a) == ""
    st = n.state(a)
    gpu = str(st["parent"])
    assert live(n.root) == {(gpu, int(str(st["gi"]))): ("9", "0")}  # 3g.71gb (profile 9) at slice 0
    assert str(st["uuid"]).startswith("MIG-")
    assert n.prepare(a) == "" and created(n.root) == 1  # answered from the record
    assert n.unprepare(a) == ""
    assert live(n.root) == {} and n.checkpoint.get(a.uid) is None


def test_g1_a_second_claim_on_a_held_placement_is_refused_naming_the_first(node: Callable[[], Node]) -> None:
    """G1: claim b allocated a's placement (or one overlapping it) before a's unprepare: refused,
    naming a and the retry; nothing adopted or made; b prepares once a is unprepared, on a new
    instance."""
    n = node()
    a, b, c = n.claim("a", BIG), n.claim("b", BIG), n.claim("c", OVERLAP)
    assert n.prepare(a) == ""
    a_uuid = n.state(a)["uuid"]
    for other in (b, c):
        err = n.prepare(other)
        assert f"claim tenant-a/a ({a.uid}) holds {BIG}" in err, err
        assert "kubelet retries" in err and "unprepared" in err, err
        assert n.checkpoint.get(other.uid) is None, "a refused claim keeps no record"
    assert created(n.root) == 1 and len(live(n.root)) == 1, "b got an instance while a holds the placement"
    # a's instance gone out of band (an admin, a GPU reset): a's record still names the placement
    gpu, profile, start = out_of_band(n, BIG)
    assert mig.destroy(gpu, profile, start) == "destroyed"
    assert f"({a.uid}) holds" in n.prepare(b)
    assert n.unprepare(a) == ""  # nothing left to destroy: fine
    assert n.prepare(b) == ""
    assert n.state(b)["uuid"] != a_uuid and created(n.root) == 2


@pytest.mark.parametrize("reused", ["same GI id, new UUID", "another GI id"])
def test_g1_a_late_unprepare_never_destroys_an_instance_its_record_does_not_name(node: Callable[[], Node],
                                                                                reused: str) -> None:
    """G1's second half: a's record names (gi, uuid); the instance now at a's placement is another
    (destroyed and made again there past the daemon, e.g. by an admin: the same GI id with a new
    UUID, or another GI id): a's late unprepare succeeds and leaves it."""
    n = node()
    a = n.claim("a", BIG)
    assert n.prepare(a) == ""
    st = n.state(a)
    named = (int(str(st["gi"])), str(st["uuid"]))
    gpu, profile, start = out_of_band(n, BIG)
    assert mig.destroy(gpu, profile, start, named) == "destroyed"
    if reused == "another GI id":
        mig.create(*out_of_band(n, ELSEWHERE), {})  # takes the lowest free GI id, a's
    now = mig.create(gpu, profile, start, {})
    assert (now.gpu_instance == named[0]) == (reused == "same GI id, new UUID") and now.uuid != named[1]
    assert mig.destroy(gpu, profile, start, named) == "another"
    assert n.unprepare(a) == ""
    assert (gpu, now.gpu_instance) in live(n.root), "a's stale record destroyed the instance now at its placement"


def test_g1_an_instance_two_records_name_is_destroyed_by_neither_unprepare(node: Callable[[], Node]) -> None:
    """The review's G1 state as the old version left it (b adopted a's instance, both records name
    it): a's late unprepare must not destroy the instance b still holds; b's own unprepare does."""
    n = node()
    a, b = n.claim("a", BIG), n.claim("b", BIG)
    assert n.prepare(a) == ""
    rec = n.checkpoint.get(a.uid)
    assert rec is not None
    n.checkpoint.put(dataclasses.replace(rec, uid=b.uid, namespace=b.namespace, name=b.name))
    assert n.unprepare(a) == ""
    assert len(live(n.root)) == 1, "a's unprepare destroyed the instance b's record names"
    assert n.unprepare(b) == ""
    assert live(n.root) == {}


def _prepare_and_die(root: Path, stub_mig: str, ref: ClaimRef, point: str) -> None:
    os.environ["HOOKCORE_STUB_NVML_MIG"] = stub_mig
    faults.configure(point)
    n = make_node(root)
    n.prepare(ref)
    os._exit(3)  # not reached when the fault point fired


def crash_in_prepare(n: Node, ref: ClaimRef, point: str = "prepare.after_driver") -> None:
    """Prepare `ref` in a child daemon SIGKILLed at `point` (after create, before the record says so)."""
    proc = multiprocessing.get_context("fork").Process(
        target=_prepare_and_die, args=(n.root, os.environ["HOOKCORE_STUB_NVML_MIG"], ref, point))
    proc.start()
    proc.join(120)
    assert proc.exitcode == -signal.SIGKILL, f"the prepare was not killed at {point} (exit {proc.exitcode})"
    rec = n.checkpoint.get(ref.uid)
    assert rec is not None and rec.phase == PREPARING and not rec.devices[0].state


def test_a_retried_prepare_after_a_crash_adopts_its_own_instance(node: Callable[[], Node]) -> None:
    """Happy path of the crash between create and checkpoint: the restart keeps the instance (its
    'preparing' record names the placement) and kubelet's retry adopts it, making none twice."""
    n = node()
    a = n.claim("a", BIG)
    crash_in_prepare(n, a)
    assert created(n.root) == 1
    n = node()  # the restarted daemon: its repair keeps what a record names
    assert len(live(n.root)) == 1
    assert n.prepare(a) == ""
    assert created(n.root) == 1, "the retry made a second instance instead of adopting its own"
    ((gpu, gi),) = live(n.root)
    assert n.state(a)["gi"] == gi and n.state(a)["parent"] == gpu
    assert n.unprepare(a) == "" and live(n.root) == {}


def test_an_unfinished_prepare_of_another_claim_is_neither_adopted_nor_destroyed(node: Callable[[], Node]) -> None:
    """b crashed between create and checkpoint; c allocated the same placement is refused (b 'is
    being prepared'), so it never adopts b's instance, and c's rollback destroys nothing; b's own
    unprepare (its record names only the placement) destroys the instance it made."""
    n = node()
    b, c = n.claim("b", BIG), n.claim("c", BIG)
    crash_in_prepare(n, b)
    n = node()
    err = n.prepare(c)
    assert f"claim tenant-b/b ({b.uid}) is being prepared with {BIG}" in err, err
    assert created(n.root) == 1 and len(live(n.root)) == 1
    assert n.unprepare(b) == ""
    assert live(n.root) == {}
    assert n.prepare(c) == "" and created(n.root) == 2


def test_two_records_of_one_placement_written_before_the_driver_refuse_rather_than_share(
        node: Callable[[], Node]) -> None:
    """Two prepares of one placement at once: each writes its 'preparing' record before the driver
    looks, so the one that looks second sees the first; here the first has not created yet."""
    n = node()
    b, c = n.claim("b", BIG), n.claim("c", BIG)
    dev = DeviceRecord(driver=n.driver.name, request="mig", pool=NODE, device=BIG)
    n.checkpoint.put(ClaimRecord(uid=b.uid, namespace=b.namespace, name=b.name, phase=PREPARING,
                                 boot_id=n.checkpoint.boot_id, devices=(dev,)))
    assert f"({b.uid}) is being prepared with" in n.prepare(c)
    assert created(n.root) == 0
