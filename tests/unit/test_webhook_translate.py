"""The webhook's mapping, table-driven: quantities and units, annotations -> CEL, templates, patches.

What the CEL selectors *select* is proven against kube-scheduler in
tests/integration/test_webhook.py; here the tables pin what is written.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from dra.webhook import translate, vendors
from dra.webhook.inventory import StaticInventory
from dra.webhook.translate import plan_pod, pod_patch, template_object, template_spec

pytestmark = pytest.mark.scheduler  # `make test-versions` runs it on every minor

MAPPING = vendors.load()
GPU = "hami-core-gpu.project-hami.io"
NPU = "ascend.project-hami.io"
Mi, Gi = 1 << 20, 1 << 30
SIZES = StaticInventory({GPU: (80 * Gi, 40 * Gi), NPU: (64 * Gi,)})


def pod(limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None,
        annotations: dict[str, str] | None = None, init: bool = False) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if limits is not None:
        res["limits"] = limits
    if requests is not None:
        res["requests"] = requests
    ctr = {"name": "main", "image": "busybox", "resources": res}
    spec: dict[str, Any] = {"initContainers": [ctr]} if init else {"containers": [ctr]}
    if init:
        spec["containers"] = [{"name": "app", "image": "busybox"}]
    return {"metadata": {"annotations": annotations or {}}, "spec": spec}


def one_share(p: dict[str, Any], inventory: Any = SIZES) -> translate.Share:
    plan = plan_pod(p, MAPPING, inventory)
    assert not plan.problems, plan.problems
    (cs,) = plan.shares
    return cs.share


# --- quantities and units ----------------------------------------------------------------------

QUANTITIES = [
    # limits, expected (count, memory bytes, percent, cores)
    ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}, (1, 3000 * Mi, None, 30)),
    ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3k", "nvidia.com/gpucores": "30"}, (1, 3000 * Mi, None, 30)),
    ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}, (1, 3000 * Mi, None, 1)),  # memory-only: see below
    ({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "3500"}, (2, 3500 * Mi, None, 1)),
    ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2.5k"}, (1, 2500 * Mi, None, 1)),
    ({"nvidia.com/gpu": "1"}, (1, None, None, None)),
    ({"nvidia.com/gpumem": "1024"}, (1, 1024 * Mi, None, 1)),  # count defaults to 1, as in HAMi
    ({"nvidia.com/gpucores": "50"}, (1, None, None, 50)),
    ({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}, (1, None, 50, 1)),
    ({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"}, (1, None, None, None)),  # = whole device
    ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "100", "nvidia.com/gpumem-percentage": "50"},
     (1, 100 * Mi, None, 1)),  # memory wins over the percentage, as in HAMi
    ({"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "28672", "huawei.com/Ascend910B3-core": "40"},
     (1, 28 * Gi, None, 40)),
]


@pytest.mark.parametrize(("limits", "want"), QUANTITIES, ids=[json.dumps(q[0]) for q in QUANTITIES])
def test_quantities_become_count_bytes_and_percent(limits: dict[str, Any], want: tuple[Any, ...]) -> None:
    annotations = {"huawei.com/vnpu-mode": "hami-core"} if any(k.startswith("huawei") for k in limits) else {}
    s = one_share(pod(limits, annotations=annotations))
    assert (s.count, s.memory, s.memory_percent, s.cores) == want


def test_requests_are_read_when_limits_are_absent_and_limits_win_over_requests() -> None:
    s = one_share(pod(requests={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000"}))
    assert s.memory == 2000 * Mi
    s = one_share(pod(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"},
                      requests={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000"}))
    assert s.memory == 3000 * Mi


PROBLEMS = [
    ({"nvidia.com/gpu": "1.5"}, "nvidia.com/gpu=1.5 is not a whole number"),
    ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "lots"}, "nvidia.com/gpumem='lots' is not a Kubernetes quantity"),
    ({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "150"}, "nvidia.com/gpucores=150 is more than a device has (100"),
    ({"nvidia.com/gpu": "0", "nvidia.com/gpumem": "1000"}, "nvidia.com/gpu=0 asks for no device, but nvidia.com/gpumem"),
    ({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "150"}, "must be 1-100"),
    ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "100000"},
     "nvidia.com/gpumem=100000 (100000Mi) is more than any published hami-core-gpu.project-hami.io device has "
     "(largest: 80Gi = 81920 MiB)"),
    ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3Gi"},  # 3Gi MiB is absurd
     "(nvidia.com/gpumem counts MiB: 3Gi is not a size, write e.g. 3072 for 3 GiB)"),
    ({"nvidia.com/gpu": "1", "nvidia.com/gpucore": "30"}, "nvidia.com/gpucore is not a resource this webhook knows "
                                                         "(did you mean nvidia.com/gpucores"),
    ({"huawei.com/Ascend999": "1"}, "huawei.com/Ascend999 is not a resource this webhook knows"),
]


@pytest.mark.parametrize(("limits", "message"), PROBLEMS, ids=[json.dumps(p[0]) for p in PROBLEMS])
def test_impossible_requests_name_the_container_the_resource_and_the_fix(limits: dict[str, Any], message: str) -> None:
    plan = plan_pod(pod(limits), MAPPING, SIZES)
    assert not plan.shares
    assert any(message in p and p.startswith("container 'main': ") for p in plan.problems), plan.problems
    assert plan.touches_pod  # validate refuses it; mutate leaves it as it came


def test_percentage_needs_published_sizes() -> None:
    plan = plan_pod(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}), MAPPING, StaticInventory())
    assert plan.problems and "no hami-core-gpu.project-hami.io device is published yet" in plan.problems[0]


def test_without_published_devices_memory_is_not_judged() -> None:
    s = one_share(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "100000"}), StaticInventory())
    assert s.memory == 100000 * Mi


def test_zero_cores_is_hamis_no_limit() -> None:
    # cores 0 alone: the whole device (HAMi: all memory, so the card is exclusive anyway)
    plan = plan_pod(pod({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "0"}), MAPPING, SIZES)
    assert plan.shares[0].share.cores is None and plan.shares[0].share.device_class is None and not plan.warnings
    # with memory: a memory-only share, as memory without cores (tests/unit/test_webhook_hami_meaning.py)
    s = one_share(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "0"}))
    assert (s.device_class, s.cores) == (f"memory-only.{GPU}", 1)


def test_priority_becomes_the_claims_config() -> None:
    p = pod({"nvidia.com/gpu": "1", "nvidia.com/priority": "1", "cpu": "2"})
    plan = plan_pod(p, MAPPING, SIZES)
    assert not plan.warnings and not plan.problems
    ops = pod_patch(p, plan, {plan.shares[0].share: "t"})
    assert ops[0]["value"]["limits"] == {"cpu": "2"}
    assert template_spec(plan.shares[0].share)["spec"]["devices"]["config"] == [{"requests": ["gpu"], "opaque": {
        "driver": GPU, "parameters": {"apiVersion": f"{GPU}/v1alpha1", "kind": "GpuConfig", "priority": "normal"}}}]


def test_annotations_nothing_honours_draw_a_warning_naming_the_dra_way() -> None:
    plan = plan_pod(pod({"nvidia.com/gpu": "1"}, annotations={"hami.io/gpu-scheduler-policy": "spread"}), MAPPING, SIZES)
    assert plan.shares and "hami.io/gpu-scheduler-policy='spread' is not honoured under DRA" in plan.warnings[0]
    assert "matchAttribute" in plan.warnings[0]
    # binpack is what kube-scheduler's allocator does within a node (the first device with room)
    plan = plan_pod(pod({"nvidia.com/gpu": "1"}, annotations={"hami.io/gpu-scheduler-policy": "binpack"}), MAPPING, SIZES)
    assert plan.shares and not plan.warnings


def test_a_pod_without_vendor_resources_is_not_touched() -> None:
    plan = plan_pod(pod({"cpu": "1", "example.com/foo": "1"}), MAPPING, SIZES)
    assert not plan.touches_pod and not plan.shares and not plan.problems


def test_count_zero_alone_removes_the_resource_and_asks_for_nothing() -> None:
    plan = plan_pod(pod({"nvidia.com/gpu": "0", "cpu": "1"}), MAPPING, SIZES)
    assert plan.touches_pod and not plan.shares and not plan.problems


# --- annotations -> CEL ------------------------------------------------------------------------

A = 'device.attributes["hami-core-gpu.project-hami.io"]'
T = f'("NVIDIA-" + {A}.productName).upperAscii()'
ANNOTATIONS = [
    ({"nvidia.com/use-gpuuuid": "GPU-a"}, [f'{A}.uuid in ["GPU-a"]']),
    ({"nvidia.com/use-gpuuuid": "GPU-a, GPU-b"}, [f'{A}.uuid in ["GPU-a", "GPU-b"]']),
    ({"nvidia.com/nouse-gpuuuid": "GPU-a,GPU-b"}, [f'!({A}.uuid in ["GPU-a", "GPU-b"])']),
    ({"nvidia.com/use-gpuuuid": "GPU-a,GPU-b", "nvidia.com/nouse-gpuuuid": "GPU-b"},  # both apply (HAMi #1965)
     [f'{A}.uuid in ["GPU-a", "GPU-b"]', f'!({A}.uuid in ["GPU-b"])']),
    ({"nvidia.com/use-gputype": "a100"}, [f'{T}.contains("A100")']),
    ({"nvidia.com/use-gputype": "A100,H200"}, [f'{T}.contains("A100") || {T}.contains("H200")']),
    ({"nvidia.com/nouse-gputype": "V100"}, [f'!({T}.contains("V100"))']),
    ({"nvidia.com/use-gputype": "NVIDIA-NVIDIA A100"}, [f'{T}.contains("NVIDIA-NVIDIA A100")']),
    ({"nvidia.com/use-gpuuuid": 'GPU-"x\\'}, [f'{A}.uuid in ["GPU-\\"x\\\\"]']),  # escaped, not injected
    ({"nvidia.com/vgpu-mode": "hami-core"}, []),
    ({"other.io/annotation": "x"}, []),
]


@pytest.mark.parametrize(("annotations", "cel"), ANNOTATIONS, ids=[json.dumps(a[0]) for a in ANNOTATIONS])
def test_annotations_become_cel_selectors(annotations: dict[str, str], cel: list[str]) -> None:
    s = one_share(pod({"nvidia.com/gpu": "1"}, annotations=annotations))
    assert list(s.selectors) == cel
    spec = template_spec(s)
    written = [x["cel"]["expression"] for x in spec["spec"]["devices"]["requests"][0]["exactly"].get("selectors", [])]
    assert written == cel


ANNOTATION_PROBLEMS = [
    ({"nvidia.com/vgpu-mode": "time-slicing"}, "served: 'hami-core', 'mps', 'mig'"),
]


@pytest.mark.parametrize(("annotations", "message"), ANNOTATION_PROBLEMS, ids=[json.dumps(a[0]) for a in ANNOTATION_PROBLEMS])
def test_bad_annotations_are_problems(annotations: dict[str, str], message: str) -> None:
    plan = plan_pod(pod({"nvidia.com/gpu": "2"}, annotations=annotations), MAPPING, SIZES)
    assert any(message in p for p in plan.problems), plan.problems


LENIENT = [  # what HAMi makes of them, with a warning saying so
    ({"nvidia.com/use-gputype": "A100,"}, [f'{T}.contains("A100")'], "has an empty entry (a stray comma), skipped"),
    ({"nvidia.com/nouse-gpuuuid": ""}, [], "annotation nvidia.com/nouse-gpuuuid is empty, which asks for nothing"),
    ({"nvidia.com/use-gputype": " , "}, [], "annotation nvidia.com/use-gputype is empty"),
    ({"nvidia.com/numa-bind": "yes"}, [], "is not true or false, so (as in HAMi) devices may span NUMA nodes"),
]


@pytest.mark.parametrize(("annotations", "cel", "warning"), LENIENT, ids=[json.dumps(a[0]) for a in LENIENT])
def test_lenient_annotations_mean_what_hami_makes_of_them(annotations: dict[str, str], cel: list[str],
                                                          warning: str) -> None:
    plan = plan_pod(pod({"nvidia.com/gpu": "2"}, annotations=annotations), MAPPING, SIZES)
    assert not plan.problems and list(plan.shares[0].share.selectors) == cel
    assert not plan.shares[0].share.same_numa
    assert any(warning in w for w in plan.warnings), plan.warnings


def test_zero_memory_or_percentage_is_hamis_not_given() -> None:
    for limits in ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "0"}, {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "0"}):
        plan = plan_pod(pod(limits), MAPPING, SIZES)
        s = plan.shares[0].share
        assert (s.memory, s.memory_percent, s.cores) == (None, None, None), "the whole device, as HAMi reads 0"
        assert "=0 means no memory limit (as in HAMi)" in plan.warnings[0]


def test_numa_bind_keeps_several_devices_on_one_numa_node() -> None:
    s = one_share(pod({"nvidia.com/gpu": "2"}, annotations={"nvidia.com/numa-bind": "true"}))
    assert {"requests": ["gpu-0", "gpu-1"], "matchAttribute": f"{GPU}/numaNode"} in template_spec(s)["spec"]["devices"]["constraints"]
    s = one_share(pod({"nvidia.com/gpu": "1"}, annotations={"nvidia.com/numa-bind": "true"}))
    assert "constraints" not in template_spec(s)["spec"]["devices"]


def test_ascend_model_uuid_annotations_and_the_soft_split_mode() -> None:
    limits = {"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "28672", "huawei.com/Ascend910B3-core": "40"}
    s = one_share(pod(limits, annotations={"huawei.com/vnpu-mode": "hami-core",
                                           "hami.io/use-Ascend910B3-uuid": "npu-1,npu-2"}))
    d = 'device.attributes["ascend.project-hami.io"]'
    assert s.selectors == (f'{d}.productName == "Ascend910B3"', f'{d}.uuid in ["npu-1", "npu-2"]')
    exactly = template_spec(s)["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly["deviceClassName"] == NPU and exactly["capacity"]["requests"] == {"memory": "28Gi", "cores": "40"}
    # -core without the annotation: HAMi's soft split too (tests/unit/test_webhook_hami_meaning.py has the rest)
    assert one_share(pod(limits)).memory == 28 * Gi
    assert one_share(pod({"huawei.com/Ascend910B3": "2"})).count == 2  # whole NPUs need no mode


# --- templates ---------------------------------------------------------------------------------


def test_classic_hami_pod_becomes_one_exact_request() -> None:
    s = one_share(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}))
    assert template_spec(s) == {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": GPU, "allocationMode": "ExactCount", "count": 1,
        "capacity": {"requests": {"memory": "3000Mi", "cores": "30"}}}}]}}}


def test_several_devices_are_one_request_each_and_distinct() -> None:
    """Never `count` > 1 (kube-scheduler 1.34 panics on it: kubernetes#133705), and distinct
    across requests (within one request 1.34-1.36 miss duplicates: kubernetes#140438)."""
    s = one_share(pod({"nvidia.com/gpu": "4", "nvidia.com/gpumem": "1000"}))
    devices = template_spec(s)["spec"]["devices"]
    names = ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert [r["name"] for r in devices["requests"]] == names
    assert {r["exactly"]["count"] for r in devices["requests"]} == {1}
    assert {r["exactly"]["capacity"]["requests"]["memory"] for r in devices["requests"]} == {"1000Mi"}
    assert devices["constraints"] == [{"requests": names, "distinctAttribute": f"{GPU}/uuid"}]


def test_more_devices_than_a_claim_has_requests_is_a_problem_not_a_huge_claim() -> None:
    assert len(template_spec(one_share(pod({"nvidia.com/gpu": "32"})))["spec"]["devices"]["requests"]) == 32
    plan = plan_pod(pod({"nvidia.com/gpu": "33"}), MAPPING, SIZES)
    assert not plan.shares and "nvidia.com/gpu=33 asks for 33 devices; a claim holds at most 32" in plan.problems[0]
    plan = plan_pod(pod({"nvidia.com/gpu": "1000000000000"}), MAPPING, SIZES)
    assert not plan.shares and plan.problems, "a hostile count must not become a trillion requests"


def test_memory_percentage_is_one_alternative_per_published_size() -> None:
    s = one_share(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "25", "nvidia.com/gpucores": "10"}))
    (req,) = template_spec(s, SIZES)["spec"]["devices"]["requests"]
    cap = f'device.capacity["{GPU}"].memory'
    assert req["firstAvailable"] == [
        {"name": "size-0", "deviceClassName": GPU, "allocationMode": "ExactCount", "count": 1,
         "selectors": [{"cel": {"expression": f'{cap}.compareTo(quantity("80Gi")) == 0'}}],
         "capacity": {"requests": {"memory": "20Gi", "cores": "10"}}},
        {"name": "size-1", "deviceClassName": GPU, "allocationMode": "ExactCount", "count": 1,
         "selectors": [{"cel": {"expression": f'{cap}.compareTo(quantity("40Gi")) == 0'}}],
         "capacity": {"requests": {"memory": "10Gi", "cores": "10"}}},
    ]


def test_one_shape_is_one_template_name_and_another_shape_another() -> None:
    a = template_object(one_share(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"})), "ns")
    b = template_object(one_share(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3k"})), "ns")
    c = template_object(one_share(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3001"})), "ns")
    assert a["metadata"]["name"] == b["metadata"]["name"] != c["metadata"]["name"]
    assert a["metadata"]["name"].startswith("hami-nvidia-")
    assert a["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "dra-webhook"}


# --- the patch ---------------------------------------------------------------------------------


def apply(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """Enough of RFC 6902 `add` for these patches."""
    out = json.loads(json.dumps(doc))
    for op in ops:
        assert op["op"] == "add"
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node: Any = out
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        node[last] = op["value"]
    return out


def test_patch_keeps_what_was_there_and_covers_init_containers() -> None:
    p: dict[str, Any] = {
        "metadata": {},
        "spec": {
            "initContainers": [{"name": "warmup", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}}}],
            "containers": [
                {"name": "main", "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"},
                                               "requests": {"cpu": "1", "nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"},
                                               "claims": [{"name": "mine"}]}},
                {"name": "sidecar", "resources": {"limits": {"cpu": "1"}}},
            ],
            "resourceClaims": [{"name": "mine", "resourceClaimName": "shared"}, {"name": "nvidia-main"}],
        },
    }
    plan = plan_pod(p, MAPPING, SIZES)
    assert [(c.container, c.init, c.uses) for c in plan.shares] == [("warmup", True, 1), ("main", False, None)]
    out = apply(p, pod_patch(p, plan, {plan.shares[1].share: "tpl"}))
    spec = out["spec"]
    # the init container has ended before main starts: it uses main's claim (HAMi counts the larger, not the sum)
    assert spec["initContainers"][0]["resources"] == {"claims": [{"name": "nvidia-main-2"}]}
    main = spec["containers"][0]["resources"]
    assert main == {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}, "claims": [{"name": "mine"}, {"name": "nvidia-main-2"}]}
    assert spec["containers"][1] == p["spec"]["containers"][1]
    assert spec["resourceClaims"] == [
        {"name": "mine", "resourceClaimName": "shared"}, {"name": "nvidia-main"},
        {"name": "nvidia-main-2", "resourceClaimTemplateName": "tpl"},
    ]
    converted = json.loads(out["metadata"]["annotations"][translate.CONVERTED_ANNOTATION])
    assert converted == {"main": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"},
                         "warmup": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}}


def test_pod_claim_names_are_dns_labels_even_for_long_container_names() -> None:
    taken: set[str] = set()
    long = "c" * 63
    a = translate.pod_claim_name("ascend910b4-1", long, taken)
    b = translate.pod_claim_name("ascend910b4-1", long, taken)
    assert len(a) <= 63 and len(b) <= 63 and a != b


# --- the vendor mapping file -------------------------------------------------------------------


def test_shipped_mapping_covers_nvidia_and_ascend() -> None:
    nvidia = MAPPING.vendor_of("nvidia.com/gpumem")
    assert nvidia and nvidia.device_class == GPU and nvidia.memory_unit == Mi
    ascend = MAPPING.vendor_of("huawei.com/Ascend910B3-core")
    assert ascend and ascend.device_class == NPU and ascend.model == "Ascend910B3"
    assert MAPPING.owns("huawei.com/Ascend999") and not MAPPING.owns("example.com/gpu")


BAD_MAPPINGS = [
    ({}, "vendors: is required"),
    ({"vendors": [{"name": "x"}]}, "vendors[0].deviceClass: is required"),
    ({"vendors": [{"name": "x", "deviceClass": "c", "driver": "d", "resources": {"count": "a/b"}, "colour": 1}]},
     "vendors[0].colour: unknown key"),
    ({"vendors": [{"name": "x", "deviceClass": "c", "driver": "d", "resources": {"count": "a/b"}, "maxCores": "100"}]},
     "vendors[0].maxCores: must be an integer"),
    ({"vendors": [{"name": "x", "deviceClass": "c", "driver": "d", "resources": {"count": "a/b"}},
                  {"name": "y", "deviceClass": "c", "driver": "d", "resources": {"count": "a/b"}}]},
     "resource a/b belongs to both 'x' and 'y'"),
    ({"vendors": [{"name": "X_Y", "deviceClass": "c", "driver": "d", "resources": {"count": "a/b"}}]}, "DNS label"),
]


@pytest.mark.parametrize(("raw", "message"), BAD_MAPPINGS, ids=[m for _, m in BAD_MAPPINGS])
def test_a_malformed_mapping_names_the_place(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(vendors.VendorConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        vendors.parse(raw, "m.yaml")


def test_a_new_vendor_is_data() -> None:
    m = vendors.parse({"vendors": [{
        "name": "acme", "deviceClass": "npu.acme.io", "driver": "npu.acme.io", "requestName": "npu",
        "resources": {"count": "acme.io/npu", "memory": "acme.io/npu-mem"}, "memoryUnit": "1Gi",
        "ownedPrefixes": ["acme.io/"], "attributes": {"uuid": "serial"}}]})
    plan = plan_pod(pod({"acme.io/npu": "2", "acme.io/npu-mem": "4"}), m)
    spec = template_spec(plan.shares[0].share)["spec"]["devices"]
    assert spec["requests"][0]["exactly"]["capacity"] == {"requests": {"memory": "4Gi"}}
    assert spec["constraints"][0]["distinctAttribute"] == "npu.acme.io/serial"
