"""ResourceQuotas on HAMi's resources, which conversion bypasses: the warning (dra.webhook.quota);
tests/integration/test_webhook.py has it against a real namespace's quota."""

from __future__ import annotations

from typing import Any

import pytest

from dra.webhook import quota, vendors
from dra.webhook.inventory import StaticInventory
from dra.webhook.review import MAX_WARNING, Admission
from dra.webhook.translate import plan_pod

MAPPING = vendors.load()
GPU = "hami-core-gpu.project-hami.io"
COUNTS = [v.resources.count for v in MAPPING.vendors]
SIZES = StaticInventory({GPU: (80 << 30,)})


def plan(limits: dict[str, str]) -> Any:
    return plan_pod({"spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]}}, MAPPING, SIZES)


CASES = [
    # HAMi's website using-resourcequota page: limits on the count and memory
    ({"requests.nvidia.com/gpu": "2", "limits.nvidia.com/gpumem": "3000"},
     ["ResourceQuota q: limits.nvidia.com/gpumem no longer counts this pod (converted to claims); DRA's quota counts"
      " devices, not memory or cores",
      "ResourceQuota q: requests.nvidia.com/gpu no longer counts this pod (converted to claims); DRA's quota counts"
      " devices per class: memory-only.hami-core-gpu.project-hami.io.deviceclass.resource.k8s.io/devices"]),
    # the namespace has DRA's own quota for the class the claim names: the count is covered
    ({"requests.nvidia.com/gpu": "2", f"memory-only.{GPU}.deviceclass.resource.k8s.io/devices": "2"}, []),
    ({"requests.cpu": "8", "count/pods": "10"}, []),  # nothing of HAMi's
]


@pytest.mark.parametrize(("hard", "want"), CASES, ids=[str(i) for i in range(len(CASES))])
def test_a_quota_on_a_stripped_resource_is_named_with_the_dra_way(hard: dict[str, str], want: list[str]) -> None:
    got = quota.warnings(plan({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}), [("q", hard)], COUNTS)
    assert [w.split(" (examples/")[0] for w in got] == want
    assert all(len(w) <= MAX_WARNING for w in got)


def test_no_quotas_or_unreadable_ones_say_nothing_and_many_keys_are_counted() -> None:
    p = plan({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"})
    assert quota.warnings(p, None, COUNTS) == [] and quota.warnings(p, [], COUNTS) == []
    many = [(f"q{i}" * 40, {"limits.nvidia.com/gpumem": "1"}) for i in range(20)]  # hostile names: long, many
    got = quota.warnings(p, many, COUNTS)
    assert len(got) == quota.MAX_NAMED + 1 and got[-1] == "12 more quota keys no longer count this pod"
    assert all(len(w) <= MAX_WARNING for w in got)


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_reader_lists_once_per_ttl_and_survives_an_unreadable_namespace() -> None:
    calls: list[str] = []

    def get(path: str, params: dict[str, str]) -> dict[str, Any]:
        calls.append(params["namespace"])
        if params["namespace"] == "forbidden":
            raise RuntimeError("403")
        return {"items": [{"metadata": {"name": "q"}, "spec": {"hard": {"requests.nvidia.com/gpu": 4}}}]}

    clock = Clock()
    reader = quota.QuotaReader(get, ttl=30, clock=clock)
    assert reader.hard("a") == [("q", {"requests.nvidia.com/gpu": "4"})]
    assert reader.hard("a") and calls == ["a"]
    clock.now = 31
    reader.hard("a")
    assert reader.hard("forbidden") is None and calls == ["a", "a", "forbidden"]


class Quotas:
    def hard(self, namespace: str) -> list[tuple[str, dict[str, str]]]:
        return [("gpu-quota", {"requests.nvidia.com/gpu": "1"})]


def test_mutate_adds_the_quota_warning_to_a_converted_pod() -> None:
    adm = Admission(MAPPING, SIZES, None, {}, quotas=Quotas())
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "resources": {"limits": {
        "nvidia.com/gpu": "1"}}}]}}
    answer = adm.mutate({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"kind": "Pod"}, "operation": "CREATE", "namespace": "ns", "object": pod}})
    assert answer["response"]["warnings"] == [
        "ResourceQuota gpu-quota: requests.nvidia.com/gpu no longer counts this pod (converted to claims); DRA's quota"
        f" counts devices per class: {GPU}.deviceclass.resource.k8s.io/devices"]
