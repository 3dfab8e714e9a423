"""Nothing the container can write decides its quota, and nothing it writes fills the node's disk
(security review 2026-12, finding 2 (the claim dir mounted read-write), finding 7 (disk) and §5
(a re-prepare replaced a live claim's ledger)).

A claim's CDI edits now mount two files of its hook dir, not the dir: ``config`` read-only (a
mount point: it cannot be edited, removed or replaced from the container) and ``ledger``
read-write (the hook charges it); the daemon's `LedgerGuard` cuts a ledger grown past its size
back. The hostile processes run with the claim's CDI edits applied in a private mount namespace
as a runtime applies them (`dra.testing.runtime`), as root, without CAP_SYS_ADMIN (runc's
default set lacks it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ci_gate import skip_or_fail

import dra
from dra._runtime.cdi import CDISpecs
from dra._runtime.checkpoint import Checkpoint
from dra._runtime.enforcement import ClaimHooks, LedgerGuard
from dra._runtime.hookdir import HookDir
from dra._runtime.prepare import ClaimPreparer
from dra.testing.cdi import apply_cdi, validate_cdi_spec
from dra.testing.claims import RecordedClaims, claim_dict, result
from dra.testing.runtime import run_with_cdi, runtime_unavailable
from drivers.example.driver import ExampleDriver

SCHEMA = Path(__file__).parent.parent / "data" / "cdi-schema"
HOOK = "/run/hookcore/vgpu"


class Rig:
    def __init__(self, root: Path) -> None:
        self.root, self.claims = root, RecordedClaims()
        self.driver = ExampleDriver(count=2)
        cp = Checkpoint(root / "state", boot_id="b")
        self.hooks = ClaimHooks(cp.state_dir, HookDir(root / "hook-dir"))
        self.prep = ClaimPreparer(self.driver, self.claims, "node-a", cp, CDISpecs(self.driver.cdi_kind, root / "cdi"),
                                  hooks=self.hooks)

    def prepare(self, name: str = "a", uid: str | None = None) -> tuple[dra.ClaimRef, list[str]]:
        c = self.claims.add(claim_dict(name, uid=uid, results=[result("gpu-0", share_id="s1", memory="1Gi",
                                                                     cores="30")]))
        ref = dra.ClaimRef(c.uid, c.namespace, c.name)
        out = self.prep.prepare_claims([ref])[ref.uid]
        assert out.error == ""
        return ref, [i for d in out.devices for i in d.cdi_device_ids]

    def claim_dir(self, ref: dra.ClaimRef) -> Path:
        return self.root / "state" / "hooks" / ref.uid


def test_the_cdi_spec_mounts_the_config_read_only_and_the_ledger_alone_and_validates(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    ref, ids = rig.prepare()
    (spec,) = (rig.root / "cdi").glob("*.json")
    validate_cdi_spec(json.loads(spec.read_text()), SCHEMA)
    _, mounts = apply_cdi(rig.root / "cdi", ids)
    under = {m.container_path: m for m in mounts if m.container_path.startswith("/run/hookcore")}
    assert sorted(under) == [f"{HOOK}/config", f"{HOOK}/ledger"]  # not the dir: nothing else can be created
    assert "ro" in under[f"{HOOK}/config"].options and "rw" not in under[f"{HOOK}/config"].options
    assert under[f"{HOOK}/ledger"].host_path == str(rig.claim_dir(ref) / "ledger")
    assert all(os.path.isfile(m.host_path) for m in under.values())


HOSTILE = f"""
cat {HOOK}/config >/dev/null || echo "cannot read config"
echo 'HOOKCORE_MEMORY_LIMIT_0=999999999999' 2>/dev/null >> {HOOK}/config && echo "appended config"
true 2>/dev/null > {HOOK}/config && echo "truncated config"
rm -f {HOOK}/config 2>/dev/null; [ -e {HOOK}/config ] || echo "removed config"
mv {HOOK}/config {HOOK}/config.old 2>/dev/null && echo "renamed config"
echo x 2>/dev/null > {HOOK}/config.new && mv -f {HOOK}/config.new {HOOK}/config 2>/dev/null && echo "replaced config"
umount {HOOK}/config 2>/dev/null && echo "unmounted config"
rm -f {HOOK}/ledger 2>/dev/null; [ -e {HOOK}/ledger ] || echo "removed ledger"
echo spill 2>/dev/null > {HOOK}/spill
head -c 33554432 /dev/zero >> {HOOK}/ledger && echo "grew ledger"
echo done
"""


def test_root_in_the_container_cannot_touch_the_config_and_writes_nothing_else_to_the_node(tmp_path: Path) -> None:
    skip_or_fail(runtime_unavailable())
    rig = Rig(tmp_path)
    ref, ids = rig.prepare()
    host = rig.claim_dir(ref)
    config_before = (host / "config").read_bytes()
    size = LedgerGuard(rig.hooks).ledger_bytes()
    proc = run_with_cdi(rig.root / "cdi", ids, ["sh", "-c", HOSTILE], drop_capabilities=["sys_admin"])
    out = proc.stdout.split()
    assert proc.returncode == 0 and out[-1] == "done", proc.stderr
    for forbidden in ("appended", "truncated", "removed", "renamed", "replaced", "unmounted", "cannot"):
        assert forbidden not in proc.stdout, proc.stdout
    assert "grew ledger" in proc.stdout  # the one writable thing: a bind mount of a file can be appended to
    assert (host / "config").read_bytes() == config_before
    assert sorted(p.name for p in host.iterdir()) == ["config", "ledger"]  # "spill" stayed in the container
    assert (host / "ledger").stat().st_size == size + (32 << 20)
    oversized: list[str] = []
    guard = LedgerGuard(rig.hooks, oversized.append)
    assert guard.check() == [ref.uid] and oversized == [ref.uid]
    st = (host / "ledger").stat()
    assert st.st_size == size and st.st_blocks * 512 <= size + (64 << 10)
    assert guard.check() == []  # cut once, then nothing to do
    import hookcore

    with hookcore.Ledger(host / "ledger") as ledger:  # what the hook maps is intact
        assert ledger.device(0).memory_limit == 1 << 30


def test_a_re_prepare_of_a_running_claim_keeps_its_hook_dir_and_ledger(tmp_path: Path) -> None:
    """Review §5: the claim's CDI spec lost and its hook set collected, kubelet prepares again."""
    rig = Rig(tmp_path)
    ref, _ = rig.prepare()
    host = rig.claim_dir(ref)
    before = {n: (host / n).stat().st_ino for n in ("config", "ledger")}
    record = rig.prep.checkpoint.get(ref.uid)
    assert record is not None and record.enforcement is not None
    (rig.root / "cdi").joinpath(next(p.name for p in (rig.root / "cdi").glob("*.json"))).unlink()
    os.rename(record.enforcement["set"], record.enforcement["set"] + ".collected")  # the set is gone
    again, ids = rig.prepare(uid=ref.uid)  # the same claim: prepared again
    assert again == ref
    assert {n: (host / n).stat().st_ino for n in ("config", "ledger")} == before
    assert apply_cdi(rig.root / "cdi", ids)  # and its spec is back
