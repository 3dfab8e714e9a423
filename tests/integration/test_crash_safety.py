"""Crash safety of the claim path: SIGKILL at every step of prepare and unprepare, restart, repeat
kubelet's call; no leaked CDI spec, claim hook dir (ledger, config), driver resource or temp
file, no lost claim. The example driver enforces quotas, so every step of the hook path (install
of the library into the hook dir, the claim's hook dir) is among the steps killed.

Level: a ClaimPreparer in a forked child process (the daemon, `dra run`, did not exist when this
was written), reading claims allocated by kube-scheduler from the real API server. The child is
armed through `dra._runtime.faults` exactly as ``DRA_FAULT_POINT`` arms a daemon. The driver is the
example driver plus a "ledger" of files that stands for hardware state (a reservation per
prepared device), so a lost claim (prepared by the driver, forgotten by the framework) shows.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import random
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from helpers import Env, create_claim, create_pod, pooled_client, request, setup_env, wait_allocated
from kubernetes import client

from dra._runtime import faults
from dra._runtime.cdi import CDISpecs
from dra._runtime.checkpoint import PREPARED, Checkpoint
from dra._runtime.claims import ApiClaimSource
from dra._runtime.prepare import ClaimPreparer
from dra.driver import AllocatedDevice, ClaimRef, PreparedDevice
from dra.testing.cdi import apply_cdi, validate_cdi_spec
from drivers.example.driver import ExampleDriver

pytestmark = pytest.mark.cluster
SCHEMA = Path(__file__).parent.parent / "data" / "cdi-schema"
BOOT = "boot-1"


class LedgerDriver(ExampleDriver):
    """Example driver whose prepare reserves each device share in a ledger directory."""

    def __init__(self, name: str, ledger: Path) -> None:
        super().__init__(count=2)
        self.name = name  # type: ignore[misc]
        self.cdi_kind = f"k8s.{name}/claim"  # type: ignore[misc]
        self.ledger = ledger

    def _entry(self, claim: ClaimRef, dev: AllocatedDevice) -> Path:
        return self.ledger / f"{claim.uid}_{dev.key.name}"

    def prepare(self, claim: ClaimRef, devices: Sequence[AllocatedDevice]) -> Sequence[PreparedDevice]:
        for d in devices:
            self._entry(claim, d).write_text(claim.uid)
        return super().prepare(claim, devices)

    def unprepare(self, claim: ClaimRef, prepared: Sequence[PreparedDevice]) -> None:
        for p in prepared:
            self._entry(claim, p.device).unlink(missing_ok=True)


@dataclasses.dataclass
class Rig:
    kubeconfig: Path
    env: Env
    refs: list[ClaimRef]
    root: Path

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def cdi(self) -> Path:
        return self.root / "cdi"

    @property
    def ledger(self) -> Path:
        return self.root / "ledger"

    def fresh(self) -> None:
        for d in (self.state, self.cdi, self.ledger):
            if d.exists():
                for p in sorted(d.rglob("*"), reverse=True):
                    p.unlink() if not p.is_dir() else p.rmdir()
        self.ledger.mkdir(parents=True, exist_ok=True)


def _child(rig: Rig, op: str, refs: list[ClaimRef], spec: str | None, out: Path) -> None:
    faults.configure(spec)
    driver = LedgerDriver(rig.env.driver.name, rig.ledger)
    prep = ClaimPreparer(driver, ApiClaimSource(pooled_client(rig.kubeconfig)), rig.env.node,
                         Checkpoint(rig.state, boot_id=BOOT), CDISpecs(driver.cdi_kind, rig.cdi))
    prep.start()  # what the daemon does at start
    result: Any
    if op == "prepare":
        result = {uid: {"error": o.error, "devices": [dataclasses.asdict(d) for d in o.devices]}
                  for uid, o in prep.prepare_claims(refs).items()}
    else:
        result = prep.unprepare_claims(refs)
    out.write_text(json.dumps(result))
    os._exit(0)


def run(rig: Rig, op: str, refs: list[ClaimRef], spec: str | None = None) -> Any:
    """One kubelet call served by a fresh process; None when the process was killed."""
    out = rig.root / "result.json"
    out.unlink(missing_ok=True)
    proc = multiprocessing.get_context("fork").Process(target=_child, args=(rig, op, refs, spec, out))
    proc.start()
    proc.join(60)
    if proc.exitcode == -signal.SIGKILL:
        assert spec is not None, "killed without a fault armed"
        return None
    assert proc.exitcode == 0, f"child exited {proc.exitcode}"
    return json.loads(out.read_text())


def check_prepared(rig: Rig, refs: Sequence[ClaimRef], answer: Any) -> None:
    cp = Checkpoint(rig.state, boot_id=BOOT)
    specs = CDISpecs(f"k8s.{rig.env.driver.name}/claim", rig.cdi)
    for r in refs:
        res = answer[r.uid]
        assert res["error"] == "", res
        rec = cp.get(r.uid)
        assert rec is not None and rec.phase == PREPARED and rec.boot_id == BOOT
        doc = specs.read_claim(r.uid)
        assert doc is not None, f"no CDI spec for prepared claim {r.uid}"
        validate_cdi_spec(doc, SCHEMA)
        ids = [i for d in res["devices"] for i in d["cdi_device_ids"]]
        assert ids == [i for d in rec.devices for i in d.cdi_ids]
        _, mounts = apply_cdi(rig.cdi, ids)  # every answered ID resolves
        # The claim's quota is enforced: hook dir with config and ledger, mounted with the hook set.
        hooks = rig.state / "hooks" / r.uid
        assert (hooks / "config").is_file() and (hooks / "ledger").is_file(), f"hook dir incomplete: {hooks}"
        assert rec.enforcement is not None and Path(rec.enforcement["set"]).is_dir()
        by_target = {m.container_path: m.host_path for m in mounts}
        assert by_target["/run/hookcore/vgpu/config"] == str(hooks / "config")  # two files, not the dir
        assert by_target["/run/hookcore/vgpu/ledger"] == str(hooks / "ledger")
        assert by_target["/usr/lib/hookcore"] == rec.enforcement["set"]
        assert by_target["/etc/ld.so.preload"] == rec.enforcement["set"] + "/ld.so.preload"
        for d in rec.devices:
            key = f"{d.device}-{d.share_id}" if d.share_id else d.device
            assert (rig.ledger / f"{r.uid}_{key}").exists(), "driver resource missing for a prepared device"


def check_clean(rig: Rig, refs: Sequence[ClaimRef]) -> None:
    cp = Checkpoint(rig.state, boot_id=BOOT)
    uids = {r.uid for r in refs}
    assert not uids & cp.uids(), "checkpoint record left after unprepare"
    leaked = [p.name for p in rig.cdi.glob("*") if any(u in p.name for u in uids)] if rig.cdi.exists() else []
    assert leaked == [], f"CDI file leaked: {leaked}"
    assert not [p for p in rig.ledger.iterdir() if p.name.split("_")[0] in uids], "driver resource leaked"
    assert not [p for p in cp.locks_dir.iterdir() if p.stem in uids], "lock file leaked"
    hooks = rig.state / "hooks"
    assert not [p.name for p in hooks.iterdir() if any(u in p.name for u in uids)] if hooks.exists() else True, \
        "claim hook dir (ledger, config) leaked"


def no_temp_files(rig: Rig) -> None:
    temps = [p for d in (rig.state / "claims", rig.cdi, rig.state / "hooks") if d.exists() for p in d.glob(".*.tmp")]
    hook_dir = rig.state / "hook-dir"
    temps += [p for p in (*hook_dir.glob("libs/.tmp-*"), *hook_dir.glob("sets/.tmp-*"), *hook_dir.glob(".current.*"))]
    assert temps == [], temps


@pytest.fixture(scope="module")
def allocated(api_client: client.ApiClient, cluster: Any) -> tuple[Path, Env, list[ClaimRef]]:
    """Three claims allocated by kube-scheduler: two share gpu-0, one holds two shares of it."""
    env = setup_env(api_client, count=2)
    create_claim(env, "a", [request("gpu", env.device_class, cores="10", memory="1Gi")])
    create_claim(env, "b", [request("gpu", env.device_class, cores="20", memory="2Gi")])
    create_claim(env, "ab", [request("x", env.device_class, cores="5", memory="1Gi"),
                             request("y", env.device_class, cores="5", memory="1Gi")])
    for name in ("a", "b", "ab"):
        create_pod(env, name, [name])
    claims = [wait_allocated(env, n) for n in ("a", "b", "ab")]
    return cluster.kubeconfig, env, [ClaimRef(c.uid, c.namespace, c.name) for c in claims]


@pytest.fixture
def rig(allocated: tuple[Path, Env, list[ClaimRef]], tmp_path: Path) -> Rig:
    kubeconfig, env, refs = allocated
    r = Rig(kubeconfig, env, refs, tmp_path)
    r.fresh()
    return r


@pytest.mark.parametrize("point", faults.POINTS)
def test_kill_at_each_step_then_repeat_the_call(rig: Rig, point: str) -> None:
    fired = 0
    # 1. Prepare killed, kubelet repeats prepare, later unprepares.
    if run(rig, "prepare", rig.refs, point) is None:
        fired += 1
    answer = run(rig, "prepare", rig.refs)
    check_prepared(rig, rig.refs, answer)
    assert run(rig, "prepare", rig.refs) == answer  # and again: the same answer
    no_temp_files(rig)
    # 2. Unprepare killed, kubelet repeats unprepare.
    if run(rig, "unprepare", rig.refs, point) is None:
        fired += 1
    assert run(rig, "unprepare", rig.refs) == {r.uid: "" for r in rig.refs}
    check_clean(rig, rig.refs)
    # 3. Prepare killed, then the pod is deleted: kubelet unprepares instead of retrying.
    if run(rig, "prepare", rig.refs, point) is None:
        fired += 1
    assert run(rig, "unprepare", rig.refs) == {r.uid: "" for r in rig.refs}
    check_clean(rig, rig.refs)
    no_temp_files(rig)
    assert fired >= 1 + (point.startswith("prepare.") or point.startswith("atomic.")), \
        f"fault point {point} never fired: is it still placed?"


@pytest.mark.slow
def test_randomized_kills(rig: Rig) -> None:
    """At least 200 SIGKILLs at random steps of random kubelet call sequences."""
    rng = random.Random(int(os.environ.get("DRA_CRASH_SEED", "20261129")))
    kills = calls = 0
    prepared: set[str] = set()
    while kills < 200:
        calls += 1
        subset = rng.sample(rig.refs, rng.randint(1, len(rig.refs)))
        op = rng.choice(["prepare", "unprepare"])
        spec = rng.choice([f"*@{rng.randint(1, 14)}", f"random:0.08:{rng.random()}", None])
        # Kubelet repeats the call until it succeeds; each repeat may be killed again.
        while True:
            result = run(rig, op, subset, spec)
            if result is not None:
                break
            kills += 1
            spec = rng.choice([f"*@{rng.randint(1, 10)}", None, None])
            if op == "prepare" and rng.random() < 0.3:
                op = "unprepare"  # the pod was deleted meanwhile
        if op == "prepare":
            check_prepared(rig, subset, result)
            prepared |= {r.uid for r in subset}
        else:
            assert result == {r.uid: "" for r in subset}
            check_clean(rig, subset)
            prepared -= {r.uid for r in subset}
        for r in rig.refs:  # claims outside this call keep their state
            if r.uid in prepared:
                rec = Checkpoint(rig.state, boot_id=BOOT).get(r.uid)
                assert rec is not None and rec.phase == PREPARED
        no_temp_files(rig)
    assert run(rig, "unprepare", rig.refs) == {r.uid: "" for r in rig.refs}
    check_clean(rig, rig.refs)
    assert sorted(os.listdir(rig.cdi)) == [] and sorted(os.listdir(rig.ledger)) == []
    print(f"\n{kills} kills over {calls} kubelet calls")
