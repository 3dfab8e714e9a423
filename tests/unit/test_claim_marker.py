"""A claim no hook holds gets the daemon's marker (`claim_marker`): made before its CDI spec,
mounted read-only, kept at a re-prepare, gone at unprepare and with a failed prepare."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from dra._runtime import claim_marker
from dra._runtime.cdi import CDISpecs
from dra._runtime.checkpoint import Checkpoint
from dra._runtime.enforcement import ClaimHooks
from dra._runtime.hookdir import HookDir
from dra._runtime.prepare import ClaimPreparer
from dra.driver import AllocatedDevice, ClaimRef, PreparedDevice
from dra.testing.claims import RecordedClaims, claim_dict, result
from drivers.example.driver import ExampleDriver


class Hookless(ExampleDriver):
    """The example driver without its hook (what a driver whose devices hold their shares answers)."""

    def __init__(self) -> None:
        super().__init__(count=2, enforce=False)
        self.bad_env = False

    def prepare(self, claim: ClaimRef, devices: Sequence[AllocatedDevice]) -> Sequence[PreparedDevice]:
        got = super().prepare(claim, devices)
        if self.bad_env:  # edits CDI refuses: the prepare fails after the marker was made
            return [PreparedDevice(p.device, type(p.edits)(env={"BAD=NAME": "1"}), p.state) for p in got]
        return got


@pytest.fixture
def env(tmp_path: Path) -> Iterator[tuple[ClaimPreparer, RecordedClaims, Hookless, ClaimHooks]]:
    driver, claims = Hookless(), RecordedClaims()
    hooks = ClaimHooks(tmp_path / "state", HookDir(tmp_path / "hookdir"))
    prep = ClaimPreparer(driver, claims, "node-a", Checkpoint(tmp_path / "state", boot_id="b"),
                         CDISpecs(driver.cdi_kind, tmp_path / "cdi"), hooks=hooks)
    yield prep, claims, driver, hooks
    prep.close()


def mounts(prep: ClaimPreparer, uid: str) -> list[dict[str, object]]:
    spec = prep.cdi.read_claim(uid)
    assert spec is not None
    return [m for d in spec["devices"] for m in d["containerEdits"].get("mounts", [])] + list(
        spec.get("containerEdits", {}).get("mounts", []))


def test_a_hookless_claim_is_marked_read_only_and_unmarked_at_unprepare(env) -> None:  # type: ignore[no-untyped-def]
    prep, claims, driver, hooks = env
    c = claims.add(claim_dict("c", results=[result("gpu-0")]))
    ref = ClaimRef(c.uid, c.namespace, c.name)
    assert prep.prepare_claims([ref])[c.uid].error == ""
    marker = hooks.claim_dir(c.uid) / claim_marker.MARKER_FILE
    st = os.lstat(marker)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644
    assert marker.read_text() == claim_marker.marker_text(c.uid, driver.name)
    assert sorted(p.name for p in hooks.claim_dir(c.uid).iterdir()) == [claim_marker.MARKER_FILE]  # nothing else
    ours = [m for m in mounts(prep, c.uid) if m["hostPath"] == str(marker)]
    assert ours == [{"hostPath": str(marker), "containerPath": f"/run/dra-claims/{driver.name}/{c.uid}",
                     "options": ["ro", "nosuid", "nodev", "bind"]}], mounts(prep, c.uid)
    # kubelet asks again (a restart): the same file, not a new one (a running container holds it)
    assert prep.prepare_claims([ref])[c.uid].error == ""
    assert os.lstat(marker).st_ino == st.st_ino
    assert prep.unprepare_claims([ref]) == {c.uid: ""}
    assert not hooks.claim_dir(c.uid).exists()


def test_a_replaced_marker_is_made_again_at_prepare(env) -> None:  # type: ignore[no-untyped-def]
    """Hostile (or a crash): a dir whose marker says something else, or a symlink in its place, is replaced."""
    prep, claims, driver, hooks = env
    c = claims.add(claim_dict("c", results=[result("gpu-1")]))
    hooks.claim_dir(c.uid).mkdir(parents=True)
    (hooks.claim_dir(c.uid) / claim_marker.MARKER_FILE).symlink_to("/etc/passwd")
    assert prep.prepare_claims([ClaimRef(c.uid, c.namespace, c.name)])[c.uid].error == ""
    marker = hooks.claim_dir(c.uid) / claim_marker.MARKER_FILE
    assert not marker.is_symlink() and marker.read_text() == claim_marker.marker_text(c.uid, driver.name)


def test_a_failed_prepare_leaves_no_marker(env) -> None:  # type: ignore[no-untyped-def]
    prep, claims, driver, hooks = env
    driver.bad_env = True
    c = claims.add(claim_dict("c", results=[result("gpu-0")]))
    assert "CDI" in prep.prepare_claims([ClaimRef(c.uid, c.namespace, c.name)])[c.uid].error
    assert not hooks.claim_dir(c.uid).exists() and hooks.temp_dirs() == []
    assert prep.checkpoint.uids() == set()


def test_a_hooked_claim_gets_no_marker(tmp_path: Path) -> None:
    """Its hook's config and ledger mark it already."""
    driver, claims = ExampleDriver(count=2), RecordedClaims()
    hooks = ClaimHooks(tmp_path / "state", HookDir(tmp_path / "hookdir"))
    prep = ClaimPreparer(driver, claims, "node-a", Checkpoint(tmp_path / "state", boot_id="b"),
                         CDISpecs(driver.cdi_kind, tmp_path / "cdi"), hooks=hooks)
    try:
        c = claims.add(claim_dict("c", results=[result("gpu-0")]))
        assert prep.prepare_claims([ClaimRef(c.uid, c.namespace, c.name)])[c.uid].error == ""
        assert sorted(p.name for p in hooks.claim_dir(c.uid).iterdir()) == ["config", "ledger"]
        assert not [m for m in mounts(prep, c.uid) if str(m["containerPath"]).startswith("/run/dra-claims/")]
    finally:
        prep.close()
