"""Review 2026-12-04 #10: a claim's requests are merged to the strictest, through the real prepare
path (`prepare_rig`), with allowClaimLoosening off.

Per device, the strictest value of every request on it: one request whose class lifts the
compute limit no longer lifts another request's on the same GPU (probe L2); the strict mode and
the lowest full-load clock win. Claim-wide values (preload, watchdogAction) are the strongest
across requests (probe L3: the last request's action won). A claim's own config for one request
is checked against that request's class, and the merge then keeps every other request's device
at least as strict as its own class says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prepare_rig import GPU, Node, cfg, nodes, opaque, result

import dra
from drivers.hami_core_gpu.driver import HamiCoreGpuDriver

STRICT = cfg(computeMode="strict", fullLoadClockMhz=1500)
MEMORY_ONLY = cfg(computeLimit=False)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Callable[..., Node]]:
    with nodes(tmp_path) as build:
        yield build


def two(cores_a: str = "10", cores_b: str = "1", memory_b: str = "1Mi", device_b: str = "hami-gpu-0") -> list[dict[str, Any]]:
    """Request a (1Gi) and request b of one claim; both on hami-gpu-0 unless told."""
    return [result("hami-gpu-0", "a", driver=GPU, share_id="s1", cores=cores_a, memory="1Gi"),
            result(device_b, "b", driver=GPU, share_id="s2", cores=cores_b, memory=memory_b)]


def klass(parameters: dict[str, Any], request: str) -> dict[str, Any]:
    return opaque(GPU, parameters, "FromClass", [request])


def test_a_memory_only_request_does_not_lift_a_strict_requests_limit_on_the_same_gpu(node: Callable[..., Node]) -> None:
    """Probe L2: request a (strict class, 10 cores) + b (memory-only class, 1 core / 1Mi) left the GPU unlimited.
    Now the GPU keeps a's strict limit, at the 11 cores the scheduler reserved for the claim there."""
    n = node()
    error, ref = n.prepare(klass(STRICT, "a"), klass(MEMORY_ONLY, "b"), results=two())
    assert error == "", error
    got = n.hook_config(ref)
    assert (got["HOOKCORE_COMPUTE_LIMIT_0"], got["HOOKCORE_COMPUTE_MODE_0"], got["HOOKCORE_COMPUTE_REF_MHZ_0"]) \
        == ("11", "strict", "1500")


def test_a_claims_own_config_on_one_request_cannot_loosen_anothers_gpu(node: Callable[..., Node]) -> None:
    """b's own config repeats its class's computeLimit: false (allowed for b); a's plain share on the same GPU holds."""
    n = node()
    error, ref = n.prepare(klass(MEMORY_ONLY, "b"), opaque(GPU, cfg(computeLimit=False), requests=["b"]), results=two())
    assert error == "", error
    assert n.hook_config(ref)["HOOKCORE_COMPUTE_LIMIT_0"] == "11"
    # b's own strict mode with a boosted clock (its class is not strict, so the clock is b's to say) cannot
    # lift a's strict class's clock on the GPU: the lowest wins
    error, ref = n.prepare(klass(STRICT, "a"), opaque(GPU, cfg(computeMode="strict", fullLoadClockMhz=99999), requests=["b"]),
                           results=two())
    assert error == "" and n.hook_config(ref)["HOOKCORE_COMPUTE_REF_MHZ_0"] == "1500", error
    # against a strict class that leaves the clock to the daemon, b's clock cannot be compared: refused
    error, ref = n.prepare(klass(cfg(computeMode="strict"), "a"),
                           opaque(GPU, cfg(computeMode="strict", fullLoadClockMhz=99999), requests=["b"]), results=two())
    assert "no strictest fullLoadClockMhz" in error and "request 'a' on hami-gpu-0: unset" in error, error
    assert n.nothing_left(ref)


def test_an_mps_request_and_a_plain_one_are_refused(node: Callable[..., Node]) -> None:
    """MPS only when every request says it: b's class MPS would otherwise drop a's hook limit."""
    n = node()
    error, ref = n.prepare(klass(cfg(sharing="mps"), "b"), results=two())
    assert "different sharing" in error and n.nothing_left(ref), error


def test_the_claims_watchdog_action_is_the_strongest_of_its_requests(node: Callable[..., Node]) -> None:
    """Probe L3: per-device configs [('a', 'kill'), ('b', 'report')] gave the claim report."""
    n = node()
    error, ref = n.prepare(klass(cfg(watchdogAction="kill"), "a"), klass(cfg(watchdogAction="report"), "b"),
                           results=two(device_b="hami-gpu-1"))
    assert error == "", error
    record = n.prep.checkpoint.get(ref.uid)
    assert record is not None
    allocated = [dra.AllocatedDevice.of(d, dra.decode_config(HamiCoreGpuDriver, dict(d.config or {})))
                 for d in record.devices]
    assert [c.watchdog_action for c in (a.config for a in allocated)] == ["kill", "report"]  # as recorded
    assert n.driver.claim_config(allocated).watchdog_action == "kill"  # the claim's: the strongest


def test_the_claims_preload_is_the_strongest_of_its_requests(node: Callable[..., Node]) -> None:
    """b's class says env, a's says nothing (the daemon's file): the claim's containers get the file."""
    n = node()
    error, ref = n.prepare(klass(cfg(preload="env", computeLimit=False), "b"), results=two())
    assert error == "" and "LD_PRELOAD" not in n.env(ref), error


# --- the happy side: requests that agree -------------------------------------------------------

def test_two_requests_with_agreeing_configs_on_one_gpu_are_held_as_one(node: Callable[..., Node]) -> None:
    n = node()
    error, ref = n.prepare(klass(STRICT, "a"), klass(STRICT, "b"), results=two(cores_b="5", memory_b="1Gi"))
    assert error == "", error
    got = n.hook_config(ref)
    assert (got["HOOKCORE_COMPUTE_LIMIT_0"], got["HOOKCORE_COMPUTE_MODE_0"], got["HOOKCORE_COMPUTE_REF_MHZ_0"]) \
        == ("15", "strict", "1500")
    assert "HOOKCORE_COMPUTE_LIMIT_1" not in got


def test_two_memory_only_requests_leave_their_gpu_unlimited_and_others_keep_theirs(node: Callable[..., Node]) -> None:
    n = node()
    results = [*two(), result("hami-gpu-1", "c", driver=GPU, share_id="s3", cores="7", memory="1Gi")]
    error, ref = n.prepare(opaque(GPU, MEMORY_ONLY, "FromClass", ["a", "b"]), results=results)
    assert error == "", error
    got = n.hook_config(ref)
    limits = {got[f"HOOKCORE_DEVICE_UUID_{i}"]: got.get(f"HOOKCORE_COMPUTE_LIMIT_{i}") for i in range(2)}
    uuid = {d.name: str(d.attributes["uuid"]) for d in n.driver.devices()}
    assert limits == {uuid["hami-gpu-0"]: None, uuid["hami-gpu-1"]: "7"}


def test_two_requests_agreeing_on_mps_from_their_class_are_prepared(node: Callable[..., Node]) -> None:
    n = node()
    error, ref = n.prepare(opaque(GPU, cfg(sharing="mps"), "FromClass", ["a", "b"]), results=two())
    record = n.prep.checkpoint.get(ref.uid)
    assert error == "" and record is not None and all(d.state.get("mps") for d in record.devices), error
