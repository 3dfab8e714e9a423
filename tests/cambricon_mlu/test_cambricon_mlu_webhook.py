"""HAMi's Cambricon MLU pods through the admission webhook's shipped mapping (dra/webhook/vendors.yaml):
`cambricon.com/vmlu`, `cambricon.com/mlu.smlu.vmemory` (256 MiB units) and `cambricon.com/mlu.smlu.vcore`
become one exact request per MLU on the MLU driver's class, HAMi's MLU annotations CEL selectors on
the driver's attributes; the vendor's own device plugin's names are left alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dra.webhook import translate, vendors
from dra.webhook.inventory import StaticInventory
from dra.webhook.translate import plan_pod, template_spec

MAPPING = vendors.load()
MLU = "cambricon-mlu.project-hami.io"
A = f'device.attributes["{MLU}"]'
T = f"{A}.productName.upperAscii()"
Gi = 1 << 30
SIZES = StaticInventory({MLU: (48 * Gi,)})
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hami-compat" / "mlu-pod.yaml"


def pod(limits: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    ctr = {"name": "main", "image": "neuware", "resources": {"limits": limits}}
    return {"metadata": {"annotations": annotations or {}}, "spec": {"containers": [ctr]}}


def one_share(p: dict[str, Any]) -> translate.Share:
    plan = plan_pod(p, MAPPING, SIZES)
    assert not plan.problems, plan.problems
    (cs,) = plan.shares
    return cs.share


def test_the_example_pod_becomes_one_exact_request_of_256mib_units_and_percent() -> None:
    s = one_share(yaml.safe_load(EXAMPLE.read_text()))
    assert template_spec(s) == {"spec": {"devices": {"requests": [{"name": "mlu", "exactly": {
        "deviceClassName": MLU, "allocationMode": "ExactCount", "count": 1,
        "capacity": {"requests": {"memory": "5Gi", "cores": "10"}}}}]}}}


def test_without_vmemory_and_vcore_the_driver_gives_the_whole_mlu_as_hami_does() -> None:
    """HAMi: no vcore is 100, no vmemory all of it; here the driver's request policy's defaults."""
    spec = template_spec(one_share(pod({"cambricon.com/vmlu": "1"})))
    assert "capacity" not in spec["spec"]["devices"]["requests"][0]["exactly"]


def test_two_mlus_are_two_distinct_requests() -> None:
    devices = template_spec(one_share(pod({"cambricon.com/vmlu": "2", "cambricon.com/mlu.smlu.vmemory": "8"})))["spec"][
        "devices"]
    assert [r["name"] for r in devices["requests"]] == ["mlu-0", "mlu-1"]
    assert {r["exactly"]["capacity"]["requests"]["memory"] for r in devices["requests"]} == {"2Gi"}
    assert devices["constraints"] == [{"requests": ["mlu-0", "mlu-1"], "distinctAttribute": f"{MLU}/uuid"}]


@pytest.mark.parametrize(("annotations", "cel"), [
    ({"cambricon.com/use-mlutype": "mlu370"}, [f'{T}.contains("MLU370")']),
    ({"cambricon.com/nouse-mlutype": "MLU590,MLU370-X4"}, [f'!({T}.contains("MLU590") || {T}.contains("MLU370-X4"))']),
    ({"cambricon.com/use-gpuuuid": "MLU-a"}, [f'{A}.uuid in ["MLU-a"]']),
    ({"cambricon.com/nouse-gpuuuid": "MLU-a,MLU-b"}, [f'!({A}.uuid in ["MLU-a", "MLU-b"])']),
])
def test_hamis_mlu_annotations_become_selectors(annotations: dict[str, str], cel: list[str]) -> None:
    assert list(one_share(pod({"cambricon.com/vmlu": "1"}, annotations)).selectors) == cel


def test_the_mapping_owns_hamis_mlu_names_and_leaves_the_vendors_plugin_alone() -> None:
    v = MAPPING.vendor_of("cambricon.com/mlu.smlu.vcore")
    assert v and v.device_class == MLU and v.driver == MLU and v.memory_unit == 256 << 20
    assert MAPPING.owns("cambricon.com/vmlu") and MAPPING.owns("cambricon.com/mlu.smlu.vmemory")
    for theirs in ("cambricon.com/mlu", "cambricon.com/mlu.share", "cambricon.com/mlu.mim-2m.8gb"):
        assert not MAPPING.owns(theirs), theirs
    plan = plan_pod(pod({"cambricon.com/mlu": "1"}), MAPPING, SIZES)
    assert not plan.shares and not plan.problems


def test_the_vendor_plugins_per_model_names_are_refused_naming_hamis_defaults() -> None:
    """HAMi's own MLU example asks `cambricon.com/mlu370.smlu.*` (the vendor plugin's
    --enable-device-type names): converting its `vmlu` alone would give a whole MLU and leave the
    rest to no one; it is refused, naming the names that convert."""
    plan = plan_pod(pod({"cambricon.com/vmlu": "1", "cambricon.com/mlu370.smlu.vmemory": "20",
                         "cambricon.com/mlu370.smlu.vcore": "10"}), MAPPING, SIZES)
    assert not plan.shares and any("did you mean cambricon.com/mlu.smlu.vmemory" in p for p in plan.problems), plan.problems


def test_more_memory_than_an_mlu_has_is_a_problem() -> None:
    plan = plan_pod(pod({"cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vmemory": "200"}), MAPPING, SIZES)
    assert not plan.shares and any("cambricon.com/mlu.smlu.vmemory" in p for p in plan.problems), plan.problems
