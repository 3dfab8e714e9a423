"""The admin's word wins: a claim's own opaque config cannot loosen its enforcement.

Security review 2026-12, §1 "Opting out with no code at all": at 165651d a claim's config
``computeLimit: false`` gave a 1-core claim the whole GPU's compute, ``preload: env`` let its
processes drop the hook with ``env -u LD_PRELOAD``, and a claim's ``computeMode: share``
overrode an admin's strict class. Here each is refused by prepare (the real NVIDIA driver on fake
H200s, the real hook config written) and by the webhook's validation with the same words, and
honoured where the admin said so: in a DeviceClass's config, or with ``allowClaimLoosening``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prepare_rig import CLASS, GPU, Classes, Node, cfg, claim_review, nodes, opaque

import dra
from dra._runtime import registry
from dra.webhook import vendors
from dra.webhook.review import Admission
from drivers.hami_core_gpu.driver import HamiCoreGpuDriver


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Callable[..., Node]]:
    with nodes(tmp_path) as build:
        yield build


CLAIM_LOOSENS = [
    ("computeLimit", [opaque(GPU, cfg(computeLimit=False))], "computeLimit=false is weaker than the default true"),
    ("preload", [opaque(GPU, cfg(preload="env"))], "preload=env is weaker than the default file"),
    ("computeMode", [opaque(GPU, cfg(computeMode="strict"), "FromClass"), opaque(GPU, cfg(computeMode="share"))],
     "computeMode=share is weaker than the DeviceClass's strict"),
    ("computeMode unset", [opaque(GPU, cfg(computeMode="strict"), "FromClass"), opaque(GPU, cfg(preload="file"))],
     "computeMode=unset is weaker than the DeviceClass's strict"),
    ("watchdogAction", [opaque(GPU, cfg(watchdogAction="kill"), "FromClass"), opaque(GPU, cfg(watchdogAction="report"))],
     "watchdogAction=report is weaker than the DeviceClass's kill"),
    ("fullLoadClockMhz", [opaque(GPU, cfg(computeMode="strict", fullLoadClockMhz=1500), "FromClass"),
                          opaque(GPU, cfg(computeMode="strict", fullLoadClockMhz=3000))],
     "fullLoadClockMhz=3000 is weaker than the DeviceClass's 1500"),
    ("clockElasticity", [opaque(GPU, cfg(computeMode="strict", clockElasticity=0.45), "FromClass"),
                         opaque(GPU, cfg(computeMode="strict", clockElasticity=0.0))],
     "clockElasticity=0.0 is weaker than the DeviceClass's 0.45"),
    ("clockElasticity unset", [opaque(GPU, cfg(computeMode="strict", clockElasticity=0.45), "FromClass"),
                               opaque(GPU, cfg(computeMode="strict"))],
     "clockElasticity=unset is weaker than the DeviceClass's 0.45"),
]


@pytest.mark.parametrize(("field", "config", "words"), CLAIM_LOOSENS, ids=[c[0] for c in CLAIM_LOOSENS])
def test_prepare_refuses_a_claim_config_that_loosens_enforcement(node: Callable[..., Node], field: str,
                                                                 config: list[dict[str, Any]], words: str) -> None:
    n = node()
    error, ref = n.prepare(*config)
    assert words in error and "allowClaimLoosening" in error and "daemon.allowClaimLoosening" in error, error
    assert n.prep.checkpoint.get(ref.uid) is None  # nothing prepared, nothing left
    assert not (n.root / "state" / "hooks" / ref.uid).exists()


def test_a_compute_limit_off_from_the_claim_is_refused_and_the_share_holds(node: Callable[..., Node]) -> None:
    strict = node()
    assert "computeLimit" in strict.prepare(opaque(GPU, cfg(computeLimit=False)))[0]
    error, ref = strict.prepare()  # the same claim without its opt-out: held to its 1 core
    assert error == ""
    assert strict.hook_config(ref)["HOOKCORE_COMPUTE_LIMIT_0"] == "1"


def test_the_admins_class_config_may_loosen_and_the_claim_may_repeat_it(node: Callable[..., Node]) -> None:
    n = node()
    error, ref = n.prepare(opaque(GPU, cfg(computeLimit=False, preload="env"), "FromClass"),
                           opaque(GPU, cfg(computeLimit=False, preload="env")))
    assert error == ""
    assert "HOOKCORE_COMPUTE_LIMIT_0" not in n.hook_config(ref)  # no compute limit: the admin's class says so
    assert "LD_PRELOAD" in n.env(ref)


def test_a_strict_class_holds_a_claim_without_config_and_a_claim_may_tighten(node: Callable[..., Node]) -> None:
    n = node()
    error, ref = n.prepare(opaque(GPU, cfg(computeMode="strict", fullLoadClockMhz=1500), "FromClass"))
    assert error == ""
    got = n.hook_config(ref)
    assert (got["HOOKCORE_COMPUTE_MODE_0"], got["HOOKCORE_COMPUTE_REF_MHZ_0"]) == ("strict", "1500")
    error, ref = node().prepare(opaque(GPU, cfg(computeMode="strict", fullLoadClockMhz=1500)))  # no class: stricter
    assert error == ""


def test_a_claim_may_raise_its_classs_clock_elasticity_and_lower_it_only_with_permission(
        node: Callable[..., Node]) -> None:
    """A lower elasticity charges a boosted batch less (the claim gets more than its share on a GPU whose
    clock never moves under it): below the class's only with allowClaimLoosening; above it, stricter, freely."""
    klass = opaque(GPU, cfg(computeMode="strict", clockElasticity=0.45), "FromClass")
    n = node()
    error, ref = n.prepare(klass)
    assert error == "" and n.hook_config(ref)["HOOKCORE_COMPUTE_ELASTICITY_0"] == "0.45"
    error, ref = n.prepare(klass, opaque(GPU, cfg(computeMode="strict", clockElasticity=1)))
    assert error == "" and n.hook_config(ref)["HOOKCORE_COMPUTE_ELASTICITY_0"] == "1"
    allowed = node(allow=True)
    error, ref = allowed.prepare(klass, opaque(GPU, cfg(computeMode="strict", clockElasticity=0.2)))
    assert error == "" and allowed.hook_config(ref)["HOOKCORE_COMPUTE_ELASTICITY_0"] == "0.2"


def test_with_the_admins_permission_a_claim_may_loosen(node: Callable[..., Node]) -> None:
    n = node(allow=True)
    error, ref = n.prepare(opaque(GPU, cfg(computeLimit=False, preload="env")))
    assert error == ""
    assert "HOOKCORE_COMPUTE_LIMIT_0" not in n.hook_config(ref) and "LD_PRELOAD" in n.env(ref)


# --- the webhook: the same rule, the same words, at `kubectl apply` ------------------------------

@pytest.mark.parametrize(("claim", "cls", "words"), [
    ([cfg(computeLimit=False)], [], "computeLimit=false is weaker than the default true"),
    ([cfg(preload="env")], [], "preload=env is weaker than the default file"),
    ([cfg(computeMode="share")], [cfg(computeMode="strict")], "computeMode=share is weaker than the DeviceClass's strict"),
    ([cfg(computeMode="strict", clockElasticity=0.3)], [cfg(computeMode="strict", clockElasticity=0.45)],
     "clockElasticity=0.3 is weaker than the DeviceClass's 0.45"),
])
def test_validation_refuses_the_same_claims_with_the_same_words(claim: list[dict[str, Any]], cls: list[dict[str, Any]],
                                                               words: str) -> None:
    classes = Classes({CLASS: [{"driver": GPU, "parameters": p} for p in cls]})
    admission = Admission(vendors.load(None), drivers=registry.driver_classes(), classes=classes)
    resp = admission.validate(claim_review(claim))["response"]
    assert resp["allowed"] is False
    assert words in resp["status"]["message"] and "allowClaimLoosening" in resp["status"]["message"]
    allowed = Admission(vendors.load(None), drivers=registry.driver_classes(), classes=classes,
                        allow_claim_loosening=True)
    assert allowed.validate(claim_review(claim))["response"]["allowed"] is True


def test_validation_admits_what_the_class_already_allows() -> None:
    classes = Classes({CLASS: [{"driver": GPU, "parameters": cfg(computeLimit=False)}]})
    admission = Admission(vendors.load(None), drivers=registry.driver_classes(), classes=classes)
    t0 = time.thread_time()  # CPU time: no API call, no wait (a loaded machine moves nothing here)
    assert admission.validate(claim_review([cfg(computeLimit=False)]))["response"]["allowed"] is True
    assert time.thread_time() - t0 < 1


def test_every_field_that_loosens_is_marked_in_both_drivers_configs() -> None:
    """What the rule covers is the config types' declaration (`dra.strength`), one place per field."""
    from dra._runtime.loosening import marked_fields
    from drivers.ascend.config import NpuConfig
    from drivers.cambricon_mlu.config import MluConfig
    from drivers.hami_core_gpu.config import GpuConfig

    shared = ["preload", "computeLimit", "watchdogAction"]
    assert marked_fields(NpuConfig) == shared
    assert marked_fields(MluConfig) == shared
    assert marked_fields(GpuConfig) == [*shared, "computeMode", "fullLoadClockMhz", "clockElasticity", "sharing",
                                        "priority"]


def test_an_unknown_field_of_any_length_is_named_briefly() -> None:
    """Review §3: an unknown key was echoed whole into kubelet's events."""
    with pytest.raises(dra.ConfigError) as err:
        dra.decode_config(HamiCoreGpuDriver, cfg(**{"x" * 100_000: 1}))
    assert len(str(err.value)) < 400 and "unknown field" in str(err.value)
