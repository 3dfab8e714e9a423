"""`dra.capacity`: what every quota-enforcing driver does with a claim's share."""

from __future__ import annotations

import dataclasses

import pytest

import dra
from dra import AllocatedDevice, PrepareError

GiB = 1 << 30


def dev(name: str, request: str = "r", config: dra.ShareConfig | None = None, **capacity: int) -> AllocatedDevice:
    return AllocatedDevice(request=request, pool="node-1", device=name, share_id=request,
                           consumed_capacity=capacity, config=config)


def test_published_capacity_is_whole_mib_with_1mi_steps() -> None:
    cap = dra.share_capacity(4 * GiB + 123)
    assert cap["memory"].value == "4096Mi" and cap["memory"].policy is not None
    assert (cap["memory"].policy.min, cap["memory"].policy.step, cap["memory"].policy.max) == ("1Mi", "1Mi", "4096Mi")
    assert cap["cores"].value == "100"


def test_shares_of_one_device_are_summed_in_allocation_order_and_capped() -> None:
    shares = dra.device_shares([dev("gpu-1", "a", memory=GiB, cores=70), dev("gpu-0", "b", memory=2 * GiB, cores=10),
                                dev("gpu-1", "c", memory=GiB, cores=60)], lambda name: 8 * GiB)
    assert shares == [dra.DeviceShare("gpu-1", 2 * GiB, 100), dra.DeviceShare("gpu-0", 2 * GiB, 10)]


def test_a_result_without_capacity_holds_the_whole_device() -> None:
    usable = {"gpu-0": 8 * GiB, "gpu-1": 4 * GiB}
    assert dra.device_shares([dev("gpu-1")], usable.__getitem__) == [dra.DeviceShare("gpu-1", 4 * GiB, 100)]


def test_more_memory_than_the_device_has_refuses_the_claim_naming_it() -> None:
    with pytest.raises(PrepareError, match="device gpu-0: the claim holds 6442450944 bytes, more than the GPU's 4294967296"):
        dra.device_shares([dev("gpu-0", "a", memory=3 * GiB), dev("gpu-0", "b", memory=3 * GiB)], lambda n: 4 * GiB, "GPU")


@dataclasses.dataclass(frozen=True)
class Config(dra.ShareConfig):
    """A driver's config type, as the vendor drivers declare theirs."""


def test_one_config_per_claim_the_strictest_of_its_requests() -> None:
    """Review 2026-12-04 #10: merged configs take the strictest, never the last or the loosest."""
    assert dra.claim_share_config(Config, [dev("gpu-0")]) == Config()
    env, off = Config(preload="env"), Config(compute_limit=False, preload="env")
    got = dra.claim_share_config(Config, [dev("gpu-0", "a", env), dev("gpu-1", "b", off)])
    assert got == Config(preload="env", compute_limit=True) and type(got) is Config
    # a request without config holds the defaults: unset preload (the daemon's) is stronger than env
    assert dra.claim_share_config(Config, [dev("gpu-0", "a", env), dev("gpu-2", "c")]).preload is None
    # two preload modes: the strongest, file
    assert dra.claim_share_config(Config, [dev("gpu-0", "a", env), dev("gpu-1", "b", Config(preload="file"))]) \
        == Config(preload="file")
    # the watchdog action: report < unset < taint < kill
    actions = [Config(watchdog_action=a) for a in ("report", "kill", "taint")]
    got = dra.claim_share_config(Config, [dev(f"gpu-{i}", f"r{i}", c) for i, c in enumerate(actions)])
    assert got.watchdog_action == "kill"
    assert dra.claim_share_config(Config, [dev("gpu-0", "a", actions[0]), dev("gpu-0", "b")]).watchdog_action is None


def test_each_device_is_held_by_the_strictest_of_the_requests_on_it() -> None:
    """Review 2026-12-04 #10: a request whose config lifts the compute limit lifts it only on a
    device where every request lifts it; claim-wide fields are the claim's on every device."""
    off = Config(compute_limit=False, preload="env")
    got = dra.device_share_configs(Config, [dev("gpu-0", "a", Config()), dev("gpu-0", "b", off),
                                            dev("gpu-1", "c", off), dev("gpu-1", "d", off)])
    assert list(got) == ["gpu-0", "gpu-1"]
    assert got["gpu-0"] == Config(compute_limit=True, preload=None)
    assert got["gpu-1"] == Config(compute_limit=False, preload=None)  # preload is the claim's: a holds it
    assert dra.device_share_configs(Config, []) == {}


@dataclasses.dataclass(frozen=True)
class Unmarked(dra.ShareConfig):
    """A driver field that says nothing about strength: the requests must agree on it."""

    colour: str | None = None


def test_fields_without_an_order_must_agree() -> None:
    with pytest.raises(PrepareError, match=r"no strictest colour \(request 'a' on gpu-0: red; request 'b' on gpu-1: blue\)"):
        dra.claim_share_config(Unmarked, [dev("gpu-0", "a", Unmarked(colour="red")), dev("gpu-1", "b", Unmarked(colour="blue"))])
    assert dra.claim_share_config(Unmarked, [dev("gpu-0", "a", Unmarked(colour="red"))] * 2).colour == "red"


def test_decoding_a_share_config_checks_the_preload_mode() -> None:
    with pytest.raises(ValueError, match="preload must be one of"):
        Config(preload="ld").validate()  # type: ignore[arg-type]
