"""Opaque config: strict decoding into the driver's dataclass, precedence, and clear errors."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import pytest

from dra._runtime.cdi import CDISpecs
from dra._runtime.checkpoint import Checkpoint
from dra._runtime.prepare import ClaimPreparer
from dra.config import ConfigError, decode_config, encode_config
from dra.driver import AllocatedDevice, ClaimRef, PreparedDevice
from dra.testing.claims import RecordedClaims, claim_dict, opaque, result
from drivers.example.driver import ExampleConfig, ExampleDriver

API = "gpu.example.com/v1alpha1"


def cfg(**fields: object) -> dict[str, object]:
    return {"apiVersion": API, "kind": "ExampleConfig", **fields}


@dataclasses.dataclass(frozen=True)
class Limits:
    memory_mib: int
    burst: bool = False


@dataclasses.dataclass(frozen=True)
class RichConfig:
    name: str
    limits: Limits
    ratio: float = 1.0
    policy: Literal["spread", "pack"] = "spread"
    tags: tuple[str, ...] = ()
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    note: str | None = None
    renamed: int = dataclasses.field(default=0, metadata={"json": "x-renamed"})

    def validate(self) -> None:
        if self.limits.memory_mib <= 0:
            raise ValueError("limits.memoryMib must be positive")


class RichDriver(ExampleDriver):
    name = "rich.example.com"
    config_type = RichConfig  # type: ignore[assignment]
    config_api_version = "rich.example.com/v1"


def rich(**fields: object) -> dict[str, object]:
    return {"apiVersion": "rich.example.com/v1", "kind": "RichConfig", **fields}


# --- decode_config ------------------------------------------------------------------------------


def test_decodes_camel_case_fields_into_the_dataclass() -> None:
    assert decode_config(ExampleDriver(), cfg(mode="exclusive", logLevel="debug")) == ExampleConfig("exclusive", "debug")
    assert decode_config(ExampleDriver(), cfg()) == ExampleConfig()


def test_nested_and_container_types() -> None:
    got = decode_config(RichDriver(), rich(name="a", limits={"memoryMib": 512, "burst": True}, ratio=2,
                                           policy="pack", tags=["x", "y"], env={"A": "1"}, note=None,
                                           **{"x-renamed": 7}))
    assert got == RichConfig(name="a", limits=Limits(512, True), ratio=2.0, policy="pack", tags=("x", "y"),
                             env={"A": "1"}, note=None, renamed=7)
    assert isinstance(got.tags, tuple)


@pytest.mark.parametrize(("params", "field", "words"), [
    (cfg(mode="shared", color="red"), "color", "unknown field"),
    (cfg(log_level="debug"), "log_level", "did you mean 'logLevel'"),
    (cfg(mode=3), "mode", "expected string, got integer 3"),
    (cfg(mode="turbo"), "", "mode must be 'shared' or 'exclusive'"),  # the config's validate()
    ({"kind": "ExampleConfig", "mode": "shared"}, "apiVersion", f"must be {API!r}, got None"),
    ({"apiVersion": "gpu.example.com/v2", "kind": "ExampleConfig"}, "apiVersion", "got 'gpu.example.com/v2'"),
    ({"apiVersion": API, "kind": "GpuConfig"}, "kind", "must be 'ExampleConfig', got 'GpuConfig'"),
    (["not", "an", "object"], "", "must be a JSON object, got array"),
])
def test_example_config_errors(params: object, field: str, words: str) -> None:
    with pytest.raises(ConfigError) as e:
        decode_config(ExampleDriver(), params)
    assert e.value.path == field
    assert words in str(e.value)


@pytest.mark.parametrize(("params", "field", "words"), [
    (rich(limits={"memoryMib": 1}), "name", "required field is missing"),
    (rich(name="a", limits={"memoryMib": "1Gi"}), "limits.memoryMib", "expected integer, got string"),
    (rich(name="a", limits={"memoryMib": True}), "limits.memoryMib", "expected integer, got boolean"),
    (rich(name="a", limits={"memoryMib": 1, "burst": "yes"}), "limits.burst", "expected boolean"),
    (rich(name="a", limits={"memoryMib": 1, "extra": 1}), "limits.extra", "unknown field"),
    (rich(name="a", limits=[]), "limits", "expected object, got array"),
    (rich(name="a", limits={"memoryMib": 1}, tags=["x", 2]), "tags[1]", "expected string, got integer"),
    (rich(name="a", limits={"memoryMib": 1}, env={"A": 1}), "env.A", "expected string"),
    (rich(name="a", limits={"memoryMib": 1}, policy="random"), "policy", "must be one of ['spread', 'pack']"),
    (rich(name="a", limits={"memoryMib": 1}, note=5), "note", "expected string, got integer"),
    (rich(name="a", limits={"memoryMib": 1}, ratio="1.5"), "ratio", "expected number, got string"),
    (rich(name="a", limits={"memoryMib": 0}), "", "limits.memoryMib must be positive"),
])
def test_rich_config_errors(params: object, field: str, words: str) -> None:
    with pytest.raises(ConfigError) as e:
        decode_config(RichDriver(), params)
    assert e.value.path == field, str(e.value)
    assert words in str(e.value)


def test_the_driver_class_gives_the_same_verdict_as_an_instance_without_being_instantiated() -> None:
    """The webhook has no driver instance: the class alone must validate (review bug 3)."""
    for params in (cfg(mode="turbo"), rich(name="a", limits={"memoryMib": 0})):
        driver_cls = ExampleDriver if params["kind"] == "ExampleConfig" else RichDriver
        with pytest.raises(ConfigError) as by_class:
            decode_config(driver_cls, params)
        with pytest.raises(ConfigError) as by_instance:
            decode_config(driver_cls(), params)
        assert "invalid" in str(by_class.value)
        assert str(by_class.value) == str(by_instance.value)
    assert decode_config(ExampleDriver, cfg(mode="exclusive")) == ExampleConfig("exclusive")


def test_encode_config_round_trips() -> None:
    config = RichConfig(name="a", limits=Limits(512, True), ratio=2.0, policy="pack", tags=("x",), env={"A": "1"},
                        renamed=3)
    params = encode_config(RichDriver, config)
    assert params["apiVersion"] == "rich.example.com/v1" and params["x-renamed"] == 3
    assert decode_config(RichDriver, params) == config


def test_old_import_path_still_works() -> None:
    import dra
    from dra._runtime import prepare

    assert prepare.decode_config is dra.decode_config is decode_config
    assert prepare.ConfigError is dra.ConfigError


def test_driver_without_config_type_rejects_any_config() -> None:
    class Bare(ExampleDriver):
        config_type = None  # type: ignore[assignment]

    with pytest.raises(ConfigError, match="takes no opaque config"):
        decode_config(Bare(), cfg())


# --- through the preparer: precedence, matching, per-claim errors -----------------------------


class Recording(ExampleDriver):
    def __init__(self) -> None:
        super().__init__(count=4)
        self.seen: list[AllocatedDevice] = []

    def prepare(self, claim: ClaimRef, devices: Sequence[AllocatedDevice]) -> Sequence[PreparedDevice]:
        self.seen.extend(devices)
        return super().prepare(claim, devices)


@pytest.fixture
def setup(tmp_path: Path) -> tuple[ClaimPreparer, RecordedClaims, Recording]:
    driver = Recording()
    claims = RecordedClaims()
    prep = ClaimPreparer(driver, claims, "node-a", Checkpoint(tmp_path / "state", boot_id="boot-1"),
                         CDISpecs(driver.cdi_kind, tmp_path / "cdi"))
    return prep, claims, driver


def _prepare(prep: ClaimPreparer, claims: RecordedClaims, obj: dict[str, object]) -> str:
    meta = obj["metadata"]
    assert isinstance(meta, dict)
    claims.add(obj)
    ref = ClaimRef(meta["uid"], meta["namespace"], meta["name"])
    return prep.prepare_claims([ref])[ref.uid].error


def test_class_config_first_claim_config_wins_and_requests_match(setup: tuple[ClaimPreparer, RecordedClaims,
                                                                              Recording]) -> None:
    prep, claims, driver = setup
    obj = claim_dict("c1", results=[
        result("gpu-0", request="a"),
        result("gpu-1", request="b"),
        result("gpu-2", request="c/small"),  # a subrequest of "c" (firstAvailable)
        result("gpu-3", request="d"),
    ], config=[
        # Listed claim-first on purpose: class config must still come first.
        opaque("gpu.example.com", cfg(mode="exclusive", logLevel="claim-all"), "FromClaim"),
        opaque("gpu.example.com", cfg(mode="shared", logLevel="class-all"), "FromClass"),
        opaque("gpu.example.com", cfg(logLevel="claim-b"), "FromClaim", requests=["b"]),
        opaque("gpu.example.com", cfg(logLevel="claim-c"), "FromClaim", requests=["c"]),
        opaque("gpu.example.com", cfg(logLevel="claim-d-sub"), "FromClaim", requests=["d/other"]),
        opaque("other.example.com", {"whatever": True}, "FromClaim"),  # another driver's: ignored
    ])
    assert _prepare(prep, claims, obj) == ""
    got = {d.request: d.config for d in driver.seen}
    assert got["a"] == ExampleConfig("exclusive", "claim-all")
    assert got["b"] == ExampleConfig("shared", "claim-b")  # replaces, not merges
    assert got["c/small"] == ExampleConfig("shared", "claim-c")
    assert got["d"] == ExampleConfig("exclusive", "claim-all")  # "d/other" does not name "d"


def test_no_config_gives_none(setup: tuple[ClaimPreparer, RecordedClaims, Recording]) -> None:
    prep, claims, driver = setup
    assert _prepare(prep, claims, claim_dict("c2", results=[result("gpu-0")])) == ""
    assert driver.seen[0].config is None


def test_malformed_claim_config_is_a_per_claim_error_naming_claim_request_field_and_fix(
        setup: tuple[ClaimPreparer, RecordedClaims, Recording]) -> None:
    prep, claims, driver = setup
    good = claim_dict("good", results=[result("gpu-0")])
    bad = claim_dict("bad", namespace="team", results=[result("gpu-1", request="train")], config=[
        opaque("gpu.example.com", cfg(mode="shared", colour="blue"), "FromClaim", requests=["train"])])
    claims.add(good)
    claims.add(bad)
    refs = [ClaimRef(o["metadata"]["uid"], o["metadata"]["namespace"], o["metadata"]["name"]) for o in (good, bad)]
    out = prep.prepare_claims(refs)
    assert out[refs[0].uid].error == "" and out[refs[0].uid].devices
    err = out[refs[1].uid].error
    for words in ("claim team/bad", refs[1].uid, "'train'", "FromClaim", "field 'colour'", "unknown field",
                  "fix spec.devices.config of the ResourceClaim"):
        assert words in err, (words, err)
    assert not out[refs[1].uid].devices
    assert [d.device for d in driver.seen] == ["gpu-0"]  # the driver never saw the bad claim
    assert prep.checkpoint.get(refs[1].uid) is None


def test_malformed_class_config_says_fix_the_device_class(setup: tuple[ClaimPreparer, RecordedClaims,
                                                                       Recording]) -> None:
    prep, claims, _ = setup
    bad = claim_dict("bad-class", results=[result("gpu-0")], config=[
        opaque("gpu.example.com", cfg(mode="turbo"), "FromClass")])
    err = _prepare(prep, claims, bad)
    assert "FromClass" in err and "fix the DeviceClass's spec.config" in err
    assert "mode must be 'shared' or 'exclusive'" in err
