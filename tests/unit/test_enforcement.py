"""Quota enforcement carried out by the framework: validation with the hook's own parser, the
claim's hook dir before its CDI spec, the mounts and preload, removal, and the orphan sweep."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import dra
import hookcore
from dra._runtime.cdi import CDISpecs
from dra._runtime.checkpoint import PREPARED, Checkpoint
from dra._runtime.enforcement import ClaimHooks, EnforcementError
from dra._runtime.hookdir import HookDir
from dra._runtime.prepare import ClaimPreparer
from dra.testing.cdi import apply_cdi
from dra.testing.claims import RecordedClaims, claim_dict, result
from drivers.example.driver import STUB_UUID, ExampleDriver

UUID0, UUID1 = STUB_UUID.format(0), STUB_UUID.format(1)
GiB = 1 << 30


class Quotas(ExampleDriver):
    """The example driver with the quotas a test chooses (None: the driver's own)."""

    def __init__(self, quotas: Sequence[dra.Quota] | None = None, preload: dra.Preload | None = None) -> None:
        super().__init__(count=2)
        self.quotas, self.preload = quotas, preload

    def enforcement(self, claim: dra.ClaimRef, prepared: Sequence[dra.PreparedDevice]) -> dra.Enforcement | None:
        own = super().enforcement(claim, prepared)
        assert own is not None
        return dra.Enforcement(own.library, self.quotas if self.quotas is not None else own.quotas, self.preload)


def rig(tmp_path: Path, driver: dra.Driver, preload: dra.Preload = dra.Preload.FILE) -> tuple[ClaimPreparer, RecordedClaims]:
    claims = RecordedClaims()
    cp = Checkpoint(tmp_path / "state", boot_id="b")
    hooks = ClaimHooks(cp.state_dir, HookDir(tmp_path / "hook-dir"), preload)
    return ClaimPreparer(driver, claims, "node-a", cp, CDISpecs(driver.cdi_kind, tmp_path / "cdi"), hooks=hooks), claims


def add(claims: RecordedClaims, name: str, *results: dict[str, Any]) -> dra.ClaimRef:
    c = claims.add(claim_dict(name, results=list(results)))
    return dra.ClaimRef(c.uid, c.namespace, c.name)


def parse_file(path: Path) -> hookcore.Config:
    """The claim's config file as the library reads it."""
    return hookcore.parse_config(file_text=path.read_text(), file_path="/run/hookcore/vgpu/config")


def test_a_share_becomes_a_validated_config_and_ledger_mounted_with_the_hook_set(tmp_path: Path) -> None:
    prep, claims = rig(tmp_path, ExampleDriver(count=2))
    ref = add(claims, "a", result("gpu-1", share_id="s1", memory="3Gi", cores="30"))
    (out,) = prep.prepare_claims([ref]).values()
    assert out.error == ""
    hook = tmp_path / "state" / "hooks" / ref.uid
    parsed = parse_file(hook / "config")
    (q,) = parsed.configured()
    assert (q.memory, q.cores, q.uuid) == (3 * GiB, 30, UUID1)
    assert parsed.ledger_path == "/run/hookcore/vgpu/ledger"
    with hookcore.Ledger(hook / "ledger") as ledger:
        assert ledger.device(0).memory_limit == 3 * GiB
    env, mounts = apply_cdi(tmp_path / "cdi", list(out.devices[0].cdi_device_ids))
    targets = {m.container_path: m for m in mounts}
    hset = HookDir(tmp_path / "hook-dir").current()
    assert hset is not None
    assert targets["/usr/lib/hookcore"].host_path == str(hset.path) and "ro" in targets["/usr/lib/hookcore"].options
    assert targets["/etc/ld.so.preload"].host_path == str(hset.path / "ld.so.preload")
    # Two files, not the dir: the config read-only, the ledger the one writable thing.
    assert "/run/hookcore/vgpu" not in targets
    assert targets["/run/hookcore/vgpu/config"].host_path == str(hook / "config")
    assert "ro" in targets["/run/hookcore/vgpu/config"].options
    assert targets["/run/hookcore/vgpu/ledger"].host_path == str(hook / "ledger")
    assert "rw" in targets["/run/hookcore/vgpu/ledger"].options
    assert "LD_PRELOAD" not in env
    assert not [k for k in env if k.startswith("HOOKCORE_") and k != "HOOKCORE_STUB_DEVICES"], "limits come from the file"
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and UUID1 in env["HOOKCORE_STUB_DEVICES"]
    rec = prep.checkpoint.get(ref.uid)
    assert rec is not None and rec.phase == PREPARED and rec.enforcement is not None
    assert rec.enforcement["set"] == str(hset.path) and rec.enforcement["stem"] == "vgpu"


def test_two_shares_of_one_device_in_a_claim_add_up_to_one_quota(tmp_path: Path) -> None:
    prep, claims = rig(tmp_path, ExampleDriver(count=2))
    ref = add(claims, "a", result("gpu-0", request="x", share_id="s1", memory="1Gi", cores="10"),
              result("gpu-0", request="y", share_id="s2", memory="2Gi", cores="20"),
              result("gpu-1", request="z", share_id="s3", memory="1Gi", cores="5"))
    (out,) = prep.prepare_claims([ref]).values()
    assert out.error == ""
    parsed = parse_file(tmp_path / "state" / "hooks" / ref.uid / "config")
    assert [(d.uuid, d.memory, d.cores) for d in parsed.configured()] == [(UUID0, 3 * GiB, 30),
                                                                                   (UUID1, 1 * GiB, 5)]


def test_env_preload_sets_LD_PRELOAD_to_the_sets_libraries_instead_of_mounting_the_preload_file(tmp_path: Path) -> None:
    prep, claims = rig(tmp_path, Quotas(preload=dra.Preload.ENV))
    ref = add(claims, "a", result("gpu-0", share_id="s1", memory="1Gi"))
    (out,) = prep.prepare_claims([ref]).values()
    env, mounts = apply_cdi(tmp_path / "cdi", list(out.devices[0].cdi_device_ids))
    assert env["LD_PRELOAD"] == "/usr/lib/hookcore/libvgpu.so"
    assert "/etc/ld.so.preload" not in {m.container_path for m in mounts}


def test_the_daemon_default_preload_applies_when_the_driver_does_not_say(tmp_path: Path) -> None:
    prep, claims = rig(tmp_path, ExampleDriver(count=1), preload=dra.Preload.ENV)
    ref = add(claims, "a", result("gpu-0", share_id="s1", memory="1Gi"))
    (out,) = prep.prepare_claims([ref]).values()
    env, _ = apply_cdi(tmp_path / "cdi", list(out.devices[0].cdi_device_ids))
    assert env["LD_PRELOAD"].endswith("libvgpu.so")


@pytest.mark.parametrize(("quotas", "words"), [
    ([dra.Quota(UUID0, cores=0)], "cores must be a percentage in 1..100, not 0"),
    ([dra.Quota(UUID0, cores=101)], "cores must be a percentage in 1..100, not 101"),
    ([dra.Quota(UUID0, memory=0)], "memory must be a positive number of bytes"),
    ([], "lists no device quota"),
    ([dra.Quota(UUID0, memory=GiB), dra.Quota(UUID0.lower(), memory=GiB)], "same device as"),  # the hook's parser
    ([dra.Quota("not a uuid!", memory=GiB)], "hook library rejects"),
    ([dra.Quota(UUID0, memory=GiB, strict=True)], "a strict cap needs cores below 100, not 100"),
    ([dra.Quota(UUID0, cores=30, full_load_mhz=1500)], "full_load_mhz=1500 needs a strict cap"),
    ([dra.Quota(UUID0, cores=30, strict=True, full_load_mhz=100000)], "hook library rejects"),  # the hook's parser
    ([dra.Quota(UUID0, cores=30, clock_elasticity=0.45)], "clock_elasticity=0.45 needs a strict cap and a number"
                                                          " from 0 to 1 with at most 3 decimals (0.45); leave it None"),
    ([dra.Quota(UUID0, cores=30, strict=True, clock_elasticity=1.5)], "clock_elasticity=1.5 needs a strict cap"),
    ([dra.Quota(UUID0, cores=30, strict=True, clock_elasticity=-0.001)], "clock_elasticity=-0.001 needs a strict"),
    ([dra.Quota(UUID0, cores=30, strict=True, clock_elasticity=0.4567)], "clock_elasticity=0.4567 needs a strict"),
    ([dra.Quota(UUID0, cores=30, strict=True, clock_elasticity=float("nan"))], "clock_elasticity=nan needs a strict"),
    ([dra.Quota(UUID0, cores=30, device_sms=0)], "device_sms must be the device's SM count, 1..4096, not 0"),
    ([dra.Quota(UUID0, cores=30, device_sms=4097)], "device_sms must be the device's SM count, 1..4096, not 4097"),
])
def test_a_share_the_hook_would_reject_is_a_per_claim_error_that_leaves_nothing(
        tmp_path: Path, quotas: list[dra.Quota], words: str) -> None:
    prep, claims = rig(tmp_path, Quotas(quotas))
    ref = add(claims, "a", result("gpu-0", share_id="s1", memory="1Gi"))
    ok = add(claims, "b", result("gpu-0", share_id="s2", memory="1Gi"))
    prep.driver.quotas = quotas  # type: ignore[attr-defined]
    (out,) = prep.prepare_claims([ref]).values()
    assert words in out.error and "cannot be enforced" in out.error and ref.uid in out.error
    assert prep.checkpoint.get(ref.uid) is None
    assert not prep.cdi.spec_path(ref.uid).exists()
    assert not (tmp_path / "state" / "hooks" / ref.uid).exists()
    prep.driver.quotas = None  # type: ignore[attr-defined]
    assert prep.prepare_claims([ok])[ok.uid].error == ""  # other claims are not affected


def test_a_missing_hook_library_is_a_clear_per_claim_error(tmp_path: Path) -> None:
    driver = ExampleDriver(count=1)
    driver.library = tmp_path / "libvgpu.so"
    prep, claims = rig(tmp_path, driver)
    ref = add(claims, "a", result("gpu-0", share_id="s1", memory="1Gi"))
    (out,) = prep.prepare_claims([ref]).values()
    assert "does not exist" in out.error and "make -C hookcore" in out.error
    assert prep.checkpoint.get(ref.uid) is None


def test_the_hook_dir_exists_with_config_and_ledger_before_the_cdi_spec_is_written(tmp_path: Path) -> None:
    prep, claims = rig(tmp_path, ExampleDriver(count=1))
    ref = add(claims, "a", result("gpu-0", share_id="s1", memory="1Gi"))
    seen: list[set[str]] = []
    write = prep.cdi.write_claim

    def spy(uid: str, *a: Any, **kw: Any) -> list[str]:
        seen.append({p.name for p in (tmp_path / "state" / "hooks" / uid).iterdir()})
        return write(uid, *a, **kw)

    prep.cdi.write_claim = spy  # type: ignore[method-assign]
    assert prep.prepare_claims([ref])[ref.uid].error == ""
    assert seen == [{"config", "ledger"}]


def test_unprepare_removes_the_hook_dir_and_start_sweeps_orphans_and_unmounted_sets(tmp_path: Path) -> None:
    prep, claims = rig(tmp_path, ExampleDriver(count=1))
    ref = add(claims, "a", result("gpu-0", share_id="s1", memory="1Gi"))
    assert prep.prepare_claims([ref])[ref.uid].error == ""
    hooks = tmp_path / "state" / "hooks"
    assert prep.unprepare_claims([ref]) == {ref.uid: ""}
    assert not (hooks / ref.uid).exists()
    # A hook dir whose record is gone, and one an interrupted create left, go at start.
    (hooks / "orphan-uid").mkdir()
    (hooks / "orphan-uid" / "ledger").write_bytes(b"x")
    (hooks / ".half-uid.abcd1234.tmp").mkdir()
    hd = prep.hooks.hook_dir
    old = hd.current()
    v2 = tmp_path / "v2" / "libvgpu.so"
    v2.parent.mkdir()
    v2.write_bytes(dra.hook_library("vgpu").read_bytes() + b"\0")  # a newer build of the library
    hd.install(v2)
    removed = prep.start()
    assert str(hooks / "orphan-uid") in removed and str(hooks / ".half-uid.abcd1234.tmp") in removed
    assert old is not None and not old.path.exists(), "a set no CDI spec mounts is collected"
    assert list(hooks.iterdir()) == []


def test_a_record_whose_hook_set_was_collected_is_prepared_again(tmp_path: Path) -> None:
    prep, claims = rig(tmp_path, ExampleDriver(count=1))
    ref = add(claims, "a", result("gpu-0", share_id="s1", memory="1Gi"))
    first = prep.prepare_claims([ref])[ref.uid]
    rec = prep.checkpoint.get(ref.uid)
    assert rec is not None and rec.enforcement is not None
    import shutil

    prep.cdi.remove_claim(ref.uid)
    shutil.rmtree(rec.enforcement["set"])  # someone cleaned both
    (prep.hooks.hook_dir.current_link).unlink()
    again = prep.prepare_claims([ref])[ref.uid]
    assert again.error == "" and again.devices == first.devices
    rec2 = prep.checkpoint.get(ref.uid)
    assert rec2 is not None and rec2.enforcement is not None and Path(rec2.enforcement["set"]).is_dir()


def test_claim_hooks_plan_refuses_a_library_named_otherwise(tmp_path: Path) -> None:
    other = tmp_path / "vgpu.so"
    other.write_bytes(b"\x7fELF")
    with pytest.raises(EnforcementError, match=r"lib<stem>\.so"):
        ClaimHooks(tmp_path, HookDir(tmp_path / "hd")).plan(dra.Enforcement(other, [dra.Quota(UUID0)]))


def test_the_device_sm_count_reaches_the_hook_config_and_reads_back(tmp_path: Path) -> None:
    """Quota.device_sms -> HOOKCORE_DEVICE_SMS_<i> in the claim's config -> the hook's own parser; a
    quota without it writes no key (the hook then asks the compute API, as before)."""
    prep, claims = rig(tmp_path, Quotas([dra.Quota(UUID0, memory=GiB, cores=30, device_sms=132),
                                         dra.Quota(UUID1, memory=GiB, cores=50)]))
    ref = add(claims, "a", result("gpu-0", request="x", share_id="s1", memory="1Gi"),
              result("gpu-1", request="y", share_id="s2", memory="1Gi"))
    (out,) = prep.prepare_claims([ref]).values()
    assert out.error == ""
    text = (tmp_path / "state" / "hooks" / ref.uid / "config").read_text()
    assert "HOOKCORE_DEVICE_SMS_0=132\n" in text and "HOOKCORE_DEVICE_SMS_1" not in text
    parsed = parse_file(tmp_path / "state" / "hooks" / ref.uid / "config")
    assert [(d.uuid, d.cores, d.device_sms) for d in parsed.configured()] == [(UUID0, 30, 132), (UUID1, 50, None)]


def test_a_strict_cap_reaches_the_hook_config_with_its_full_load_clock(tmp_path: Path) -> None:
    prep, claims = rig(tmp_path, Quotas([dra.Quota(UUID0, memory=GiB, cores=30, strict=True, full_load_mhz=1500),
                                         dra.Quota(UUID1, memory=GiB, cores=50, strict=True)]))
    ref = add(claims, "a", result("gpu-0", request="x", share_id="s1", memory="1Gi"),
              result("gpu-1", request="y", share_id="s2", memory="1Gi"))
    (out,) = prep.prepare_claims([ref]).values()
    assert out.error == ""
    parsed = parse_file(tmp_path / "state" / "hooks" / ref.uid / "config")
    assert [(d.uuid, d.cores, d.strict, d.full_load_mhz) for d in parsed.configured()] == [
        (UUID0, 30, True, 1500), (UUID1, 50, True, None)]
    assert [d.clock_elasticity for d in parsed.configured()] == [None, None]  # unset: the hook's prior, 1


def test_a_strict_cap_reaches_the_hook_config_with_its_clock_elasticity(tmp_path: Path) -> None:
    prep, claims = rig(tmp_path, Quotas([dra.Quota(UUID0, memory=GiB, cores=30, strict=True, clock_elasticity=0.45),
                                         dra.Quota(UUID1, memory=GiB, cores=50, strict=True, clock_elasticity=0.0)]))
    ref = add(claims, "a", result("gpu-0", request="x", share_id="s1", memory="1Gi"),
              result("gpu-1", request="y", share_id="s2", memory="1Gi"))
    (out,) = prep.prepare_claims([ref]).values()
    assert out.error == ""
    text = (tmp_path / "state" / "hooks" / ref.uid / "config").read_text()
    assert "HOOKCORE_COMPUTE_ELASTICITY_0=0.45\n" in text and "HOOKCORE_COMPUTE_ELASTICITY_1=0\n" in text
    parsed = parse_file(tmp_path / "state" / "hooks" / ref.uid / "config")
    assert [(d.uuid, d.clock_elasticity) for d in parsed.configured()] == [(UUID0, 0.45), (UUID1, 0.0)]


def test_a_prepared_claim_s_config_is_parsed_by_the_c_parser_once(tmp_path: Path) -> None:
    """One C parse per claim: the file the library reads is parsed once, checked against the quotas
    and the ledger made from that parse. A claim of a shape already seen reuses its plan (no parse);
    a re-prepare from the checkpoint parses nothing."""
    prep, claims = rig(tmp_path, ExampleDriver(count=2))
    shapes = [("a", "1Gi", "30"), ("b", "2Gi", "40"), ("c", "1Gi", "30")]   # c: a's shape
    refs = {name: add(claims, name, result("gpu-0", share_id=f"s-{name}", memory=mem, cores=cores))
            for name, mem, cores in shapes}
    parses = {}
    for name, ref in refs.items():
        before = hookcore.parse_count()
        (out,) = prep.prepare_claims([ref]).values()
        assert out.error == ""
        parses[name] = hookcore.parse_count() - before
        assert (tmp_path / "state" / "hooks" / ref.uid / "ledger").is_file()
    assert parses == {"a": 1, "b": 1, "c": 0}
    before = hookcore.parse_count()
    assert prep.prepare_claims([refs["a"]])[refs["a"].uid].error == ""
    assert hookcore.parse_count() == before
    with hookcore.Ledger(tmp_path / "state" / "hooks" / refs["b"].uid / "ledger") as ledger:  # made from the one parse
        assert (ledger.device(0).memory_limit, ledger.device(0).sm_limit) == (2 * GiB, 40)
