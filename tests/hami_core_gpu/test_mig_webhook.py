"""HAMi's MIG and MPS inputs through the webhook's mapping (dra/webhook/vendors.yaml): what the
templates ask for, and the refusals. End to end with kube-scheduler: tests/hami_core_gpu/test_mig_e2e.py."""

from __future__ import annotations

from typing import Any

import pytest

from dra.webhook import vendors
from dra.webhook.translate import plan_pod, template_spec

MAPPING = vendors.load()
GPU = "hami-core-gpu.project-hami.io"
MIG_CLASS = f"mig.{GPU}"
MPS_CLASS = f"mps.{GPU}"
MODE = "nvidia.com/vgpu-mode"


def pod(limits: dict[str, str], mode: str | None = None) -> dict[str, Any]:
    return {"metadata": {"annotations": {MODE: mode} if mode else {}},
            "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]}}


def request(p: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    plan = plan_pod(p, MAPPING)
    assert not plan.problems, plan.problems
    (cs,) = plan.shares
    spec = template_spec(cs.share)["spec"]["devices"]
    return spec, spec["requests"][0]["exactly"], plan.warnings


def test_mig_mode_asks_the_mig_class_for_a_whole_device_with_enough_memory() -> None:
    devices, exactly, warnings = request(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "30000",
                                              "nvidia.com/gpucores": "30"}, "mig"))
    assert exactly["deviceClassName"] == MIG_CLASS
    assert "capacity" not in exactly, "a MIG device is allocated whole"
    assert [s["cel"]["expression"] for s in exactly["selectors"]] == [
        f'device.capacity["{GPU}"].memory.compareTo(quantity("30000Mi")) >= 0']
    assert any("nvidia.com/gpucores does not apply in mode 'mig'" in w for w in warnings)
    assert "constraints" not in devices


def test_two_mig_devices_are_two_requests_and_need_no_uuid_constraint() -> None:
    # one request per device (count > 1 crashes kube-scheduler 1.34 on per-device slices:
    # kubernetes#133705); whole devices are distinct without a constraint
    devices, _, _ = request(pod({"nvidia.com/gpu": "2"}, "mig"))
    assert [r["exactly"]["count"] for r in devices["requests"]] == [1, 1]
    assert {r["exactly"]["deviceClassName"] for r in devices["requests"]} == {MIG_CLASS}
    assert "constraints" not in devices


def test_mps_mode_asks_the_mps_class_for_the_same_share() -> None:
    _, exactly, _ = request(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"},
                                "mps"))
    assert exactly["deviceClassName"] == MPS_CLASS
    assert exactly["capacity"] == {"requests": {"memory": "3000Mi", "cores": "30"}}


def test_hami_core_mode_is_unchanged() -> None:
    _, exactly, _ = request(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "20"},
                                "hami-core"))
    assert exactly["deviceClassName"] == GPU
    _, exactly, _ = request(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}, "hami-core"))
    assert exactly["deviceClassName"] == f"memory-only.{GPU}"  # no compute limit (test_webhook_hami_meaning.py)


def test_a_mig_profile_resource_asks_for_that_profile() -> None:
    devices, exactly, _ = request(pod({"nvidia.com/mig-1g.18gb": "2"}))
    assert exactly["deviceClassName"] == MIG_CLASS and [r["exactly"]["count"] for r in devices["requests"]] == [1, 1]
    assert [s["cel"]["expression"] for s in exactly["selectors"]] == [
        f'device.attributes["{GPU}"].profile == "1g.18gb"']
    assert "constraints" not in devices


@pytest.mark.parametrize(("limits", "mode", "problem"), [
    ({"nvidia.com/gpu": "1"}, "time-slicing", "served: 'hami-core', 'mps', 'mig'"),
    ({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}, "mig", "give nvidia.com/gpumem"),
    ({"nvidia.com/mig-1g.18gb": "1.5"}, None, "is not a whole number"),
    ({"nvidia.com/mig-1g.18gb": "x"}, None, "is not a Kubernetes quantity"),
    ({"nvidia.com/mig-": "1"}, None, "is not a resource this webhook knows"),
])
def test_bad_mig_and_mps_inputs_are_refused_naming_the_fix(limits: dict[str, str], mode: str | None,
                                                          problem: str) -> None:
    plan = plan_pod(pod(limits, mode), MAPPING)
    assert any(problem in p for p in plan.problems), plan.problems
    assert not plan.shares


def test_a_mapping_with_a_bad_other_mode_is_refused_naming_the_key() -> None:
    raw = {"vendors": [{"name": "n", "deviceClass": "c", "driver": "d.io", "resources": {"count": "x.io/gpu"},
                        "mode": {"annotation": "a", "value": "v", "others": [{"value": "mig", "whole": "yes"}]}}]}
    with pytest.raises(vendors.VendorConfigError, match=r"mode.others\[0\]"):
        vendors.parse(raw)
