"""HAMi's DCU pods through the admission webhook's shipped mapping (dra/webhook/vendors.yaml):
`hygon.com/dcunum|dcumem|dcucores` become one exact request per DCU on the Hygon DCU driver's
class, HAMi's DCU annotations become CEL selectors on the driver's attributes. What those
selectors select is proven against kube-scheduler in test_hygon_dcu_daemon.py."""

from __future__ import annotations

from typing import Any

import pytest

from dra.webhook import translate, vendors
from dra.webhook.inventory import StaticInventory
from dra.webhook.translate import plan_pod, template_spec

pytestmark = pytest.mark.scheduler

MAPPING = vendors.load()
DCU = "hygon-dcu.project-hami.io"
A = f'device.attributes["{DCU}"]'
T = f'("DCU-" + {A}.productName).upperAscii()'
Gi = 1 << 30
SIZES = StaticInventory({DCU: (64 * Gi,)})


def pod(limits: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    ctr = {"name": "main", "image": "dtk", "resources": {"limits": limits}}
    return {"metadata": {"annotations": annotations or {}}, "spec": {"containers": [ctr]}}


def one_share(p: dict[str, Any]) -> translate.Share:
    plan = plan_pod(p, MAPPING, SIZES)
    assert not plan.problems, plan.problems
    (cs,) = plan.shares
    return cs.share


def test_hamis_dcu_pod_becomes_one_exact_request_in_mib_and_percent() -> None:
    s = one_share(pod({"hygon.com/dcunum": "1", "hygon.com/dcumem": "16384", "hygon.com/dcucores": "30"}))
    assert template_spec(s) == {"spec": {"devices": {"requests": [{"name": "dcu", "exactly": {
        "deviceClassName": DCU, "allocationMode": "ExactCount", "count": 1,
        "capacity": {"requests": {"memory": "16Gi", "cores": "30"}}}}]}}}


def test_two_dcus_are_two_distinct_requests() -> None:
    devices = template_spec(one_share(pod({"hygon.com/dcunum": "2", "hygon.com/dcumem": "2000"})))["spec"]["devices"]
    assert [r["name"] for r in devices["requests"]] == ["dcu-0", "dcu-1"]
    assert {r["exactly"]["capacity"]["requests"]["memory"] for r in devices["requests"]} == {"2000Mi"}
    assert devices["constraints"] == [{"requests": ["dcu-0", "dcu-1"], "distinctAttribute": f"{DCU}/uuid"}]


@pytest.mark.parametrize(("annotations", "cel"), [
    ({"hygon.com/use-dcutype": "k100"}, [f'{T}.contains("K100")']),
    ({"hygon.com/nouse-dcutype": "Z100,K100_AI"}, [f'!({T}.contains("Z100") || {T}.contains("K100_AI"))']),
    ({"hygon.com/use-gpuuuid": "DCU-00000000000000ab"}, [f'{A}.uuid in ["DCU-00000000000000ab"]']),
    ({"hygon.com/nouse-gpuuuid": "DCU-a,DCU-b"}, [f'!({A}.uuid in ["DCU-a", "DCU-b"])']),
])
def test_hamis_dcu_annotations_become_selectors(annotations: dict[str, str], cel: list[str]) -> None:
    """HAMi matches the type annotation by substring of "DCU-<product>", case-insensitively."""
    assert list(one_share(pod({"hygon.com/dcunum": "1"}, annotations)).selectors) == cel


def test_the_mapping_owns_hamis_dcu_names_and_leaves_the_vendors_plugin_alone() -> None:
    v = MAPPING.vendor_of("hygon.com/dcucores")
    assert v and v.device_class == DCU and v.driver == DCU and v.memory_unit == 1 << 20
    assert MAPPING.owns("hygon.com/dcumem") and not MAPPING.owns("hygon.com/dcu")
    assert not MAPPING.owns("hygon.com/dcu-share-4c-16g")  # the vendor's pre-split vDCUs
    plan = plan_pod(pod({"hygon.com/dcu": "1"}), MAPPING, SIZES)
    assert not plan.shares and not plan.problems


def test_more_memory_than_a_dcu_has_is_a_problem() -> None:
    plan = plan_pod(pod({"hygon.com/dcunum": "1", "hygon.com/dcumem": "70000"}), MAPPING, SIZES)
    assert not plan.shares and any("hygon.com/dcumem" in p for p in plan.problems), plan.problems
