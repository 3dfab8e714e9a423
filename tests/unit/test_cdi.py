"""CDI specs: naming, minimum version, atomic write, removal, orphan sweep; every spec validated
against the CDI JSON schema (tests/data/cdi-schema, v1.1.0) plus the loader's extra rules."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dra._runtime.cdi import CDISpecs, device_name, minimum_version
from dra._runtime.checkpoint import Checkpoint
from dra._runtime.prepare import ClaimPreparer
from dra.driver import AllocatedDevice, ClaimRef, ContainerEdits, DeviceNode, Mount, PreparedDevice
from dra.errors import UserError
from dra.testing.cdi import CDIResolutionError, apply_cdi, validate_cdi_spec
from dra.testing.claims import RecordedClaims, claim_dict, result
from drivers.example.driver import ExampleDriver

SCHEMA = Path(__file__).parent.parent / "data" / "cdi-schema"
KIND = "k8s.gpu.example.com/claim"


def written(specs: CDISpecs) -> list[dict[str, Any]]:
    """Every spec file in the directory, each validated."""
    out = []
    for p in sorted(specs.spec_dir.glob("*.json")):
        doc = json.loads(p.read_text())
        validate_cdi_spec(doc, SCHEMA)
        out.append(doc)
    return out


def test_schema_validator_rejects_bad_specs() -> None:
    good = {"cdiVersion": "0.3.0", "kind": KIND, "devices": [{"name": "a", "containerEdits": {"env": ["A=1"]}}]}
    validate_cdi_spec(good, SCHEMA)
    bad: list[dict[str, Any]] = [
        {"kind": KIND, "devices": good["devices"]},  # no cdiVersion (schema)
        {**good, "devices": [{"name": "a"}]},  # no containerEdits (schema)
        {**good, "devices": [{"name": "a", "containerEdits": {"mounts": [{"hostPath": "/x"}]}}]},  # schema
        {**good, "cdiVersion": "9.9.9"},
        {**good, "kind": "noclass"},
        {**good, "devices": [{"name": "-a", "containerEdits": {"env": ["A=1"]}}]},
        {**good, "devices": [{"name": "1a", "containerEdits": {"env": ["A=1"]}}]},  # digit needs 0.5.0
        {**good, "devices": [{"name": "a", "containerEdits": {}}]},
        {**good, "extra": 1},
    ]
    for spec in bad:
        with pytest.raises(Exception):  # noqa: B017 - jsonschema.ValidationError or ValueError
            validate_cdi_spec(spec, SCHEMA)


@pytest.mark.parametrize(("kind", "name", "edits", "want"), [
    ("v.com/claim", "gpu-0", {"env": ["A=1"]}, "0.3.0"),
    ("v.com/claim", "0abc-gpu-0", {"env": ["A=1"]}, "0.5.0"),  # claim UIDs often start with a digit
    ("v.com/claim", "gpu-0", {"deviceNodes": [{"path": "/dev/x", "hostPath": "/dev/y"}]}, "0.5.0"),
    ("v.com/claim", "gpu-0", {"deviceNodes": [{"path": "/dev/x"}]}, "0.3.0"),
    ("v.com/claim", "gpu-0", {"mounts": [{"hostPath": "/a", "containerPath": "/b", "type": "bind"}]}, "0.4.0"),
    ("v.com/cl.aim", "gpu-0", {"env": ["A=1"]}, "0.6.0"),
    ("v.com/claim", "gpu-0", {"additionalGids": [5]}, "0.7.0"),
    ("v.com/claim", "gpu-0", {"netDevices": [{"hostInterfaceName": "eth1", "name": "net0"}]}, "1.1.0"),
])
def test_minimum_version(kind: str, name: str, edits: dict[str, Any], want: str) -> None:
    spec = {"kind": kind, "devices": [{"name": name, "containerEdits": edits}]}
    assert minimum_version(spec) == want
    validate_cdi_spec({"cdiVersion": want, **spec}, SCHEMA)


def test_write_read_remove(tmp_path: Path) -> None:
    specs = CDISpecs(KIND, tmp_path / "cdi")
    uid = "a1b2c3d4-0000-4000-8000-000000000001"
    ids = specs.write_claim(uid, [(device_name(uid, "gpu-0"), ContainerEdits(env={"X": "1"})),
                                  (device_name(uid, "gpu-1-s2"), ContainerEdits(env={"Y": "2"}))],
                            ContainerEdits(mounts=(Mount("/usr/lib/libhook.so", "/usr/lib/libhook.so"),)))
    assert ids == [f"{KIND}={uid}-gpu-0", f"{KIND}={uid}-gpu-1-s2"]
    path = tmp_path / "cdi" / f"k8s.gpu.example.com-claim_{uid}.json"
    assert path.exists() and path.stat().st_mode & 0o777 == 0o644
    (doc,) = written(specs)
    assert doc["cdiVersion"] == "0.3.0"  # the UID starts with a letter and no newer field is used
    assert doc["containerEdits"]["mounts"][0]["containerPath"] == "/usr/lib/libhook.so"
    assert [d["name"] for d in doc["devices"]] == [f"{uid}-gpu-0", f"{uid}-gpu-1-s2"]
    assert specs.read_claim(uid) == doc
    assert [p.name for p in (tmp_path / "cdi").iterdir()] == [path.name]
    assert specs.remove_claim(uid) is True
    assert specs.remove_claim(uid) is False
    assert not path.exists()


def test_device_without_edits_still_gets_one(tmp_path: Path) -> None:
    specs = CDISpecs(KIND, tmp_path)
    specs.write_claim("9f-uid", [(device_name("9f-uid", "gpu-0"), ContainerEdits())])
    (doc,) = written(specs)
    assert doc["devices"][0]["containerEdits"]["env"] == ["DRA_DEVICE_9F_UID_GPU_0=9f-uid-gpu-0"]
    assert doc["cdiVersion"] == "0.5.0"


def test_bad_kind_is_a_user_error() -> None:
    for kind in ("noslash", "a/b/c", "-v.com/claim", "v.com/", "v.com/" + "x" * 64):
        with pytest.raises(UserError, match="cdi_kind"):
            CDISpecs(kind)


def test_duplicate_or_invalid_names_are_refused(tmp_path: Path) -> None:
    specs = CDISpecs(KIND, tmp_path)
    with pytest.raises(ValueError, match="duplicate"):
        specs.build_spec([("a", ContainerEdits(env={"A": "1"})), ("a", ContainerEdits(env={"A": "1"}))])
    with pytest.raises(ValueError):
        specs.build_spec([])
    with pytest.raises(ValueError, match="environment variable name"):
        specs.build_spec([("a", ContainerEdits(env={"BAD NAME": "1"}))])
    assert device_name("u", "pool/x:y") == "u-pool-x-y"


def test_sweep_removes_only_our_orphans(tmp_path: Path) -> None:
    cdi = tmp_path / "cdi"
    specs = CDISpecs(KIND, cdi)
    keep, orphan = "k-1", "o-2"
    for uid in (keep, orphan):
        specs.write_claim(uid, [(device_name(uid, "gpu-0"), ContainerEdits(env={"A": "1"}))])
        doc = specs.read_claim(uid)
        assert doc is not None
        validate_cdi_spec(doc, SCHEMA)
    foreign = cdi / "k8s.other.example.com-claim_o-2.json"
    foreign.write_text("{}")
    static = cdi / "k8s.gpu.example.com-claim.json"  # a static spec of the same vendor/class
    static.write_text("{}")
    ours_tmp = cdi / ".k8s.gpu.example.com-claim_x.json.123.tmp"
    ours_tmp.write_text("partial")
    theirs_tmp = cdi / ".k8s.other.example.com-claim_x.json.456.tmp"
    theirs_tmp.write_text("partial")
    removed = specs.sweep_orphans({keep})
    assert [p.name for p in removed] == [specs.spec_path(orphan).name]
    assert specs.temp_files() == [(ours_tmp, "x")]  # the preparer removes these under the claim's lock
    assert specs.spec_path(keep).exists() and foreign.exists() and static.exists() and theirs_tmp.exists() and ours_tmp.exists()
    assert specs.claim_uids() == {keep}
    assert CDISpecs(KIND, tmp_path / "absent").sweep_orphans(set()) == []


def test_apply_cdi_resolves_like_a_runtime(tmp_path: Path) -> None:
    specs = CDISpecs(KIND, tmp_path)
    ids = specs.write_claim("c-1", [("c-1-a", ContainerEdits(env={"A": "1", "SHARED": "a"})),
                                    ("c-1-b", ContainerEdits(env={"B": "2", "SHARED": "b"},
                                                             mounts=(Mount("/h/b", "/c/b"),)))],
                            ContainerEdits(env={"CLAIM": "c-1"}, mounts=(Mount("/h/lib", "/c/lib"),)))
    written(specs)
    env, mounts = apply_cdi(tmp_path, ids)
    assert env == {"CLAIM": "c-1", "A": "1", "B": "2", "SHARED": "b"}
    assert [m.container_path for m in mounts] == ["/c/lib", "/c/b"]  # spec-level edits once
    env, mounts = apply_cdi(tmp_path, ids[:1])
    assert env == {"CLAIM": "c-1", "A": "1", "SHARED": "a"} and len(mounts) == 1
    with pytest.raises(CDIResolutionError, match="unresolvable"):
        apply_cdi(tmp_path, [f"{KIND}=nope"])


_env_name = st.from_regex(r"[A-Z_][A-Z0-9_]{0,12}", fullmatch=True)
_path = st.from_regex(r"/[a-z0-9/._-]{1,20}", fullmatch=True)
_edits = st.builds(
    ContainerEdits,
    env=st.dictionaries(_env_name, st.text(max_size=20), max_size=4),
    mounts=st.lists(st.builds(Mount, _path, _path, st.tuples(st.sampled_from(["ro", "rw", "bind"]))),
                    max_size=2).map(tuple),
    device_nodes=st.lists(st.builds(DeviceNode, _path, st.none() | _path, st.none() | st.sampled_from(["rw", "rwm"])),
                          max_size=2).map(tuple),
)


@settings(max_examples=60, deadline=None)
@given(devices=st.lists(st.tuples(st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True), _edits),
                        min_size=1, max_size=4, unique_by=lambda t: t[0]),
       claim=_edits)
def test_every_built_spec_validates(devices: list[tuple[str, ContainerEdits]], claim: ContainerEdits) -> None:
    spec = CDISpecs(KIND).build_spec(devices, claim)
    validate_cdi_spec(spec, SCHEMA)
    assert spec["cdiVersion"] == minimum_version(spec)


# --- through the preparer -------------------------------------------------------------------


class HookDriver(ExampleDriver):
    """Adds claim-wide edits (a hook library), as a quota-enforcing driver does."""

    def claim_edits(self, claim: ClaimRef, prepared: Sequence[PreparedDevice]) -> ContainerEdits:
        return ContainerEdits(env={"HOOK_CLAIM": claim.uid},
                              mounts=(Mount("/opt/hook/libhook.so", "/usr/lib/libhook.so"),))


def test_shares_of_one_device_get_distinct_cdi_devices(tmp_path: Path) -> None:
    driver = HookDriver(count=1)
    claims = RecordedClaims()
    prep = ClaimPreparer(driver, claims, "node-a", Checkpoint(tmp_path / "s", boot_id="b"),
                         CDISpecs(driver.cdi_kind, tmp_path / "cdi"))
    share_a, share_b, share_c = (str(uuid.uuid4()) for _ in range(3))
    # Two requests of one claim on the same device, plus a second claim on it.
    one = claims.add(claim_dict("one", results=[
        result("gpu-0", request="a", share_id=share_a, memory="1Gi", cores="10"),
        result("gpu-0", request="b", share_id=share_b, memory="2Gi", cores="20")]))
    two = claims.add(claim_dict("two", results=[result("gpu-0", request="a", share_id=share_c, memory="3Gi")]))
    refs = [ClaimRef(c.uid, c.namespace, c.name) for c in (one, two)]
    out = prep.prepare_claims(refs)
    ids = [cid for o in out.values() for d in o.devices for cid in d.cdi_device_ids]
    assert all(o.error == "" for o in out.values())
    assert len(ids) == 3 and len(set(ids)) == 3
    d0, d1 = out[one.uid].devices
    assert (d0.share_id, d1.share_id) == (share_a, share_b)
    assert d0.cdi_device_ids == (f"{KIND}={one.uid}-gpu-0-{share_a}",)
    assert (d0.request_names, d1.request_names) == (("a",), ("b",))
    docs = written(prep.cdi)
    assert len(docs) == 2
    env, mounts = apply_cdi(tmp_path / "cdi", list(d0.cdi_device_ids))
    assert env["EXAMPLE_MEMORY_LIMIT"] == str(1 << 30) and env["EXAMPLE_CORES_LIMIT"] == "10"
    assert env["HOOK_CLAIM"] == one.uid and mounts[0].container_path == "/usr/lib/libhook.so"
    env, _ = apply_cdi(tmp_path / "cdi", list(d1.cdi_device_ids))
    assert env["EXAMPLE_MEMORY_LIMIT"] == str(2 << 30)
    for doc in docs:
        assert any(e.startswith("HOOK_CLAIM=") for e in doc["containerEdits"]["env"])


def test_extra_cdi_devices_of_the_driver_follow_the_frameworks_own_id_and_come_back_at_unprepare(tmp_path: Path) -> None:
    """A driver composing with a vendor toolkit's spec returns extra qualified IDs per device."""
    class Composing(ExampleDriver):
        undone: list[tuple[str, ...]] = []

        def prepare(self, claim: ClaimRef, devices: Sequence[AllocatedDevice]) -> Sequence[PreparedDevice]:
            return [dataclasses.replace(p, cdi_devices=(f"vendor.com/gpu={p.device.device}",))
                    for p in super().prepare(claim, devices)]

        def unprepare(self, claim: ClaimRef, prepared: Sequence[PreparedDevice]) -> None:
            self.undone.extend(p.cdi_devices for p in prepared)

    ref = ClaimRef("uid-extra", "ns", "c")
    claims = RecordedClaims()
    claims.add(claim_dict("c", "ns", ref.uid, [result("gpu-0")]))
    driver = Composing()
    prep = ClaimPreparer(driver, claims, "node-a", Checkpoint(tmp_path / "st", boot_id="b"),
                         CDISpecs(driver.cdi_kind, tmp_path / "cdi"))
    (out,) = prep.prepare_claims([ref]).values()
    assert out.error == ""
    assert out.devices[0].cdi_device_ids[1:] == ("vendor.com/gpu=gpu-0",)
    assert prep.unprepare_claims([ref]) == {ref.uid: ""}
    assert driver.undone == [("vendor.com/gpu=gpu-0",)]


def test_a_malformed_extra_cdi_id_is_refused_as_the_drivers_bug(tmp_path: Path) -> None:
    class Bad(ExampleDriver):
        def prepare(self, claim: ClaimRef, devices: Sequence[AllocatedDevice]) -> Sequence[PreparedDevice]:
            return [dataclasses.replace(p, cdi_devices=("gpu0",)) for p in super().prepare(claim, devices)]

    ref = ClaimRef("uid-bad", "ns", "c")
    claims = RecordedClaims()
    claims.add(claim_dict("c", "ns", ref.uid, [result("gpu-0")]))
    cp = Checkpoint(tmp_path / "st", boot_id="b")
    prep = ClaimPreparer(Bad(), claims, "node-a", cp, CDISpecs(Bad.cdi_kind, tmp_path / "cdi"))
    (out,) = prep.prepare_claims([ref]).values()
    assert "not a fully qualified CDI device ID" in out.error and "bug in the driver" in out.error
    assert cp.get(ref.uid) is None
