"""What a claim's own opaque config may choose for itself, through the real prepare path and the
webhook's /validate (`prepare_rig`).

- Review 2026-12-04 #5: ``sharing: mps`` from a claim's own config is a loosening (MPS's SM cap
  is an environment variable the tenant sets, and its server is shared): refused unless it comes
  from a DeviceClass or the admin allows claim loosening.
- Review 2026-12-04 #9: ``watchdogAction: taint`` acts on a device other tenants share: a
  claim's own config may never choose it (``dra.strength``'s ``admin_only``); a DeviceClass or
  the daemon's flag may. ``kill`` acts on the claim's own processes only: a claim may choose it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prepare_rig import GPU, Node, cfg, claim_review, nodes, opaque, validate

MPS_WORDS = "sharing=mps is weaker than the default unset"
TAINT_WORDS = "watchdogAction=taint acts on what other tenants share"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Callable[..., Node]]:
    with nodes(tmp_path) as build:
        yield build


def is_mps(n: Node, error: str, uid: str) -> bool:
    record = n.prep.checkpoint.get(uid)
    assert error == "" and record is not None, error
    return all(d.state.get("mps") for d in record.devices)


# --- #5: sharing: mps ---------------------------------------------------------------------------

def test_prepare_refuses_a_claims_own_mps_on_a_plain_class(node: Callable[..., Node]) -> None:
    """Review 2026-12-04 #5 (probe L1): the claim's own sharing: mps dropped its compute limit."""
    n = node()
    error, ref = n.prepare(opaque(GPU, cfg(sharing="mps")))
    assert MPS_WORDS in error and "allowClaimLoosening" in error and "request 'gpu'" in error, error
    assert n.nothing_left(ref)
    error, ref = n.prepare()  # the same claim without it: held to its 1 core by the hook
    assert error == "" and n.hook_config(ref)["HOOKCORE_COMPUTE_LIMIT_0"] == "1"


def test_the_webhook_refuses_a_claims_own_mps_with_the_same_words() -> None:
    """Review 2026-12-04 #5 (probe WH1: /validate allowed {sharing: mps})."""
    resp = validate(claim_review([cfg(sharing="mps")]))
    assert resp["allowed"] is False and MPS_WORDS in resp["status"]["message"], resp
    assert validate(claim_review([cfg(sharing="mps")]), allow=True)["allowed"] is True
    assert validate(claim_review([cfg(sharing="mps")]), classes={"hami-core-gpu.project-hami.io": [cfg(sharing="mps")]}
                    )["allowed"] is True


def test_mps_from_the_class_is_prepared_and_the_claim_may_repeat_it(node: Callable[..., Node]) -> None:
    """The happy side of #5: the admin's class config says mps."""
    n = node()
    error, ref = n.prepare(opaque(GPU, cfg(sharing="mps"), "FromClass"))
    assert is_mps(n, error, ref.uid)
    error, ref = n.prepare(opaque(GPU, cfg(sharing="mps"), "FromClass"), opaque(GPU, cfg(sharing="mps")))
    assert is_mps(n, error, ref.uid)


def test_with_the_admins_permission_a_claims_own_mps_is_prepared(node: Callable[..., Node]) -> None:
    n = node(allow=True)
    error, ref = n.prepare(opaque(GPU, cfg(sharing="mps")))
    assert is_mps(n, error, ref.uid)


def test_a_claim_may_leave_an_mps_class_for_the_hooks_limit(node: Callable[..., Node]) -> None:
    """Unset is stronger than mps: a claim opting out of its class's MPS is held by the hook."""
    n = node()
    error, ref = n.prepare(opaque(GPU, cfg(sharing="mps"), "FromClass"), opaque(GPU, cfg()))
    assert error == "" and not is_mps(n, error, ref.uid)
    assert n.hook_config(ref)["HOOKCORE_COMPUTE_LIMIT_0"] == "1"


# --- #9: watchdogAction: taint ------------------------------------------------------------------

@pytest.mark.parametrize("daemon", ["report", "kill"])
def test_prepare_refuses_a_claims_own_taint(node: Callable[..., Node], daemon: str) -> None:
    """Review 2026-12-04 #9 (probe W7): a 1-core claim chose taint and kept a shared GPU off limits."""
    n = node(config_defaults={"watchdogAction": daemon})
    error, ref = n.prepare(opaque(GPU, cfg(watchdogAction="taint")))
    words = TAINT_WORDS if daemon == "report" else "watchdogAction=taint is weaker than the default kill"
    assert words in error and "allowClaimLoosening" in error, error
    assert n.nothing_left(ref)


def test_prepare_refuses_a_claims_own_taint_over_a_class_that_said_otherwise(node: Callable[..., Node]) -> None:
    """The class's word is the baseline, even where the daemon's flag is taint."""
    n = node(config_defaults={"watchdogAction": "taint"})
    error, ref = n.prepare(opaque(GPU, cfg(watchdogAction="report"), "FromClass"), opaque(GPU, cfg(watchdogAction="taint")))
    assert TAINT_WORDS in error and "(the DeviceClass's: report)" in error, error
    assert n.nothing_left(ref)
    error, _ = n.prepare(opaque(GPU, cfg(watchdogAction="report"), "FromClass"), opaque(GPU, cfg()))
    assert error == ""  # unset: the claim chose nothing, the daemon's taint applies to it as to every claim


def test_the_webhook_refuses_a_claims_own_taint() -> None:
    """Review 2026-12-04 #9 (probe WH1)."""
    resp = validate(claim_review([cfg(watchdogAction="taint")]))
    assert resp["allowed"] is False and TAINT_WORDS in resp["status"]["message"], resp
    assert validate(claim_review([cfg(watchdogAction="taint")]), allow=True)["allowed"] is True
    assert validate(claim_review([cfg(watchdogAction="taint")]),
                    classes={"hami-core-gpu.project-hami.io": [cfg(watchdogAction="taint")]})["allowed"] is True
    assert validate(claim_review([cfg(watchdogAction="kill")]))["allowed"] is True


@pytest.mark.parametrize(("config", "defaults"), [
    ([opaque(GPU, cfg(watchdogAction="taint"), "FromClass")], "report"),  # the admin's class
    ([opaque(GPU, cfg(watchdogAction="taint"), "FromClass"), opaque(GPU, cfg(watchdogAction="taint"))], "report"),
    ([opaque(GPU, cfg(watchdogAction="taint"))], "taint"),  # the daemon's flag: the claim repeats it
    ([opaque(GPU, cfg(watchdogAction="kill"))], "report"),  # kill acts on the claim's own processes
    ([opaque(GPU, cfg(watchdogAction="kill"), "FromClass"), opaque(GPU, cfg(watchdogAction="kill"))], "taint"),
], ids=["class", "class-repeated", "daemon", "own-kill", "class-kill"])
def test_taint_from_the_class_or_the_daemon_and_kill_from_anyone_are_prepared(
        node: Callable[..., Node], config: list[dict[str, object]], defaults: str) -> None:
    n = node(config_defaults={"watchdogAction": defaults})
    error, ref = n.prepare(*config)
    assert error == "", error
    record = n.prep.checkpoint.get(ref.uid)
    assert record is not None and record.devices[0].config is not None
    assert record.devices[0].config["watchdogAction"] == config[-1]["opaque"]["parameters"]["watchdogAction"]


def test_with_the_admins_permission_a_claims_own_taint_is_prepared(node: Callable[..., Node]) -> None:
    n = node(allow=True)
    assert n.prepare(opaque(GPU, cfg(watchdogAction="taint")))[0] == ""
