"""HAMi's meanings the webhook keeps (issue 30), table by table: memory-only shares stay shared,
Ascend pods split as HAMi's default does, nothing is dropped without a word. What kube-scheduler
makes of the claims: tests/integration/test_webhook.py; every HAMi input with its result:
tests/unit/test_webhook_hami_compat.py and examples/hami-compat/README.md.
"""

from __future__ import annotations

from typing import Any

import pytest

from dra.webhook import translate, vendors
from dra.webhook.inventory import StaticInventory
from dra.webhook.review import MAX_WARNING
from dra.webhook.translate import plan_pod, template_spec

pytestmark = pytest.mark.scheduler

MAPPING = vendors.load()
GPU = "hami-core-gpu.project-hami.io"
NPU = "ascend.project-hami.io"
MEMORY_ONLY_GPU, MEMORY_ONLY_NPU = f"memory-only.{GPU}", f"memory-only.{NPU}"
MIG, MPS = f"mig.{GPU}", f"mps.{GPU}"
Mi, Gi = 1 << 20, 1 << 30
SIZES = StaticInventory({GPU: (80 * Gi, 40 * Gi), NPU: (64 * Gi,)})


def pod(limits: dict[str, str], annotations: dict[str, str] | None = None, **container: Any) -> dict[str, Any]:
    return {"metadata": {"annotations": annotations or {}},
            "spec": {"containers": [{"name": "main", "resources": {"limits": limits}, **container}]}}


def plan(p: dict[str, Any], classes: Any = None) -> translate.PodPlan:
    got = plan_pod(p, MAPPING, SIZES, classes)
    assert all(len(w) <= MAX_WARNING for w in got.warnings), "an admission warning past 256 characters is cut"
    return got


def request(p: dict[str, Any], classes: Any = None) -> dict[str, Any]:
    got = plan(p, classes)
    assert not got.problems, got.problems
    (cs,) = got.shares
    return template_spec(cs.share, SIZES)["spec"]["devices"]


def exactly(p: dict[str, Any], classes: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = request(p, classes)["requests"][0]["exactly"]
    return body


# --- 1. memory-only shares stay shared ---------------------------------------------------------------

MEMORY_ONLY = [
    # HAMi's README pod, examples/nvidia/example.yaml: memory, no gpucores -> no compute limit, shared GPU
    ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}, {"memory": "3000Mi", "cores": "1"}),
    ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "0"}, {"memory": "3000Mi", "cores": "1"}),
    ({"nvidia.com/gpumem": "1024"}, {"memory": "1Gi", "cores": "1"}),  # the count defaults to 1, as in HAMi
]


@pytest.mark.parametrize(("limits", "capacity"), MEMORY_ONLY, ids=[str(m[0]) for m in MEMORY_ONLY])
def test_memory_without_cores_is_a_memory_quota_on_a_device_others_share(limits: dict[str, str],
                                                                       capacity: dict[str, str]) -> None:
    """HAMi: cores 0, no compute limit, up to deviceSplitCount such pods on one GPU. Here: the
    memory-only class (its config lifts the compute limit) at 1 core, the least a share costs:
    99 more fit beside it, and a GPU whose 100 cores are all taken refuses it, as HAMi refuses a
    cores-0 task on a fully used GPU."""
    got = exactly(pod(limits))
    assert got["deviceClassName"] == MEMORY_ONLY_GPU and got["capacity"]["requests"] == capacity
    assert "config" not in request(pod(limits)), "the class's config applies; the claim writes none"


def test_a_memory_percentage_without_cores_is_memory_only_on_every_size() -> None:
    subs = request(pod({"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "50"}))["requests"][0]["firstAvailable"]
    assert [(s["deviceClassName"], s["capacity"]["requests"]) for s in subs] == [
        (MEMORY_ONLY_GPU, {"cores": "1", "memory": "40Gi"}), (MEMORY_ONLY_GPU, {"cores": "1", "memory": "20Gi"})]


def test_with_cores_or_whole_the_share_stays_on_the_drivers_class() -> None:
    assert exactly(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}))[
        "deviceClassName"] == GPU
    assert exactly(pod({"nvidia.com/gpu": "1"}))["deviceClassName"] == GPU
    assert exactly(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"})) == {
        "deviceClassName": GPU, "allocationMode": "ExactCount", "count": 1}


def test_a_priority_on_a_memory_only_share_repeats_the_classes_config() -> None:
    """A claim's config replaces its class's: written for the priority, it must say computeLimit:
    false again (the same as the class, so it loosens nothing)."""
    devices = request(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/priority": "0"}))
    assert devices["config"][0]["opaque"]["parameters"] == {
        "apiVersion": f"{GPU}/v1alpha1", "kind": "GpuConfig", "computeLimit": False, "priority": "high"}


def test_without_the_memory_only_class_the_share_is_whole_compute_and_says_so() -> None:
    got = plan(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}), classes=lambda name: name != MEMORY_ONLY_GPU)
    (cs,) = got.shares
    assert cs.share.device_class is None and cs.share.cores is None
    assert "memory-only.hami-core-gpu.project-hami.io (memory-only shares) does not exist" in got.warnings[0]


def test_an_mps_share_without_cores_is_warned_that_it_takes_the_whole_compute() -> None:
    got = plan(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}, {"nvidia.com/vgpu-mode": "mps"}))
    assert got.shares[0].share.device_class == MPS and "takes the device's whole compute" in got.warnings[0]


@pytest.mark.parametrize(("limits", "problem"), [
    ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "0.5"}, "is not a whole number"),
    ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1e30"}, "beyond the webhook's limit"),
    ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "900000"}, "is more than any published"),
    ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "-0.001"}, "negative"),
])
def test_hostile_memory_only_inputs_are_still_refused(limits: dict[str, str], problem: str) -> None:
    got = plan(pod(limits))
    assert not got.shares and any(problem in p for p in got.problems), got.problems


# --- 2. Ascend pods split as HAMi's default does ---------------------------------------------------

def npu(model: str, count: str = "1", memory: str | None = None, core: str | None = None) -> dict[str, str]:
    out = {f"huawei.com/{model}": count}
    if memory is not None:
        out[f"huawei.com/{model}-memory"] = memory
    if core is not None:
        out[f"huawei.com/{model}-core"] = core
    return out


# HAMi's examples/ascend jobs (2000 MiB, no annotation) and the templates they round up to:
# (memory MiB, AI cores of the template) / the model's AI cores, as cores percent (rounded up).
TEMPLATES = [
    ("Ascend910A", "2000", {"memory": "2184Mi", "cores": "7"}),  # vir02: 2 of 30 AI cores
    ("Ascend910B2", "2000", {"memory": "8Gi", "cores": "13"}),  # vir03_1c_8g: 3 of 24
    ("Ascend910B3", "2000", {"memory": "16Gi", "cores": "25"}),  # vir05_1c_16g: 5 of 20
    ("Ascend910B4", "2000", {"memory": "8Gi", "cores": "25"}),  # vir05_1c_8g
    ("Ascend910B4-1", "20000", {"memory": "32Gi", "cores": "50"}),  # vir10_3c_32g
    ("Ascend310P", "2000", {"memory": "3Gi", "cores": "13"}),  # vir01: 1 of 8
    ("Ascend310P", "6144", {"memory": "6Gi", "cores": "25"}),  # exactly vir02
]


@pytest.mark.parametrize(("model", "memory", "capacity"), TEMPLATES, ids=[f"{m}-{x}" for m, x, _ in TEMPLATES])
def test_hamis_default_split_rounds_up_to_its_template(model: str, memory: str, capacity: dict[str, str]) -> None:
    got = exactly(pod(npu(model, memory=memory)))
    assert got["deviceClassName"] == NPU and got["capacity"]["requests"] == capacity
    assert got["selectors"] == [{"cel": {"expression": f'device.attributes["{NPU}"].productName == "{model}"'}}]


def test_past_the_largest_template_the_split_is_the_whole_device_and_past_the_device_refused() -> None:
    assert "capacity" not in exactly(pod(npu("Ascend310P", memory="20000")))  # HAMi: memoryAllocatable, the whole NPU
    got = plan(pod(npu("Ascend310P", memory="24577")))
    assert "huawei.com/Ascend310P-memory=24577 is more than a Ascend310P has (24576 MiB)" in got.problems[0]


def test_cores_or_the_mode_annotation_make_it_hamis_soft_split() -> None:
    """HAMi: -core (or vnpu-mode hami-core) means hami-vnpu-core's soft split, memory as asked."""
    assert exactly(pod(npu("Ascend910B3", memory="2000", core="30")))["capacity"]["requests"] == {
        "memory": "2000Mi", "cores": "30"}
    got = exactly(pod(npu("Ascend910B3", memory="2000"), {"huawei.com/vnpu-mode": "hami-core"}))
    assert got["deviceClassName"] == MEMORY_ONLY_NPU and got["capacity"]["requests"] == {"memory": "2000Mi", "cores": "1"}
    got = exactly(pod(npu("Ascend910B3", memory="2000", core="0")))  # -core 0: no compute limit, as HAMi
    assert got["deviceClassName"] == MEMORY_ONLY_NPU


def test_a_910c_request_takes_whole_modules() -> None:
    """HAMi rounds 1 up to 2 (a module's two dies) and refuses other odd counts."""
    got = plan(pod(npu("Ascend910C", memory="16384")))
    assert "huawei.com/Ascend910C=1 is rounded up to 2, one whole module" in got.warnings[0]
    devices = template_spec(got.shares[0].share)["spec"]["devices"]
    assert [r["name"] for r in devices["requests"]] == ["npu-0", "npu-1"]
    assert {r["exactly"]["capacity"]["requests"]["memory"] for r in devices["requests"]} == {"16Gi"}
    assert devices["constraints"] == [{"requests": ["npu-0", "npu-1"], "distinctAttribute": f"{NPU}/uuid"},
                                      {"requests": ["npu-0", "npu-1"], "matchAttribute": f"{NPU}/cardID"}]
    devices = request(pod(npu("Ascend910C", "4")))
    assert devices["constraints"][1:] == [{"requests": ["npu-0", "npu-1"], "matchAttribute": f"{NPU}/cardID"},
                                          {"requests": ["npu-2", "npu-3"], "matchAttribute": f"{NPU}/cardID"}]


@pytest.mark.parametrize(("limits", "annotations", "problem"), [
    (npu("Ascend910C", "3"), {}, "must be 1 or a multiple of 2"),
    (npu("Ascend910B3", "2", memory="2000"), {}, "is one device's (HAMi: vNPU is not supported for multiple devices)"),
    (npu("Ascend910B3", "0", memory="2000"), {}, "asks for no device, but huawei.com/Ascend910B3-memory is set"),
    (npu("Ascend910B3", memory="1e40"), {}, "beyond the webhook's limit"),
    ({"huawei.com/Ascend910c": "1"}, {}, "is not a resource this webhook knows (did you mean huawei.com/Ascend910C"),
    (npu("Ascend910B3"), {"huawei.com/vnpu-mode": "hami-core,\u202e"}, "asks for a mode the DRA drivers do not serve"),
])
def test_hostile_ascend_inputs_are_refused_naming_the_fix(limits: dict[str, str], annotations: dict[str, str],
                                                         problem: str) -> None:
    got = plan(pod(limits, annotations))
    assert not got.shares and any(problem in p for p in got.problems), got.problems


# --- 3. nothing dropped without a word ------------------------------------------------------------

def gpu_share(**extra: str) -> dict[str, str]:
    return {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30", **extra}


@pytest.mark.parametrize(("value", "priority"), [("0", "high"), ("1", "normal")])
def test_task_priority_becomes_the_claims_priority(value: str, priority: str) -> None:
    (config,) = request(pod(gpu_share(**{"nvidia.com/priority": value})))["config"]
    assert config == {"requests": ["gpu"], "opaque": {"driver": GPU, "parameters": {
        "apiVersion": f"{GPU}/v1alpha1", "kind": "GpuConfig", "priority": priority}}}


@pytest.mark.parametrize("value", ["2", "-1", "0.5", "1e20"])
def test_a_priority_hami_does_not_have_is_refused(value: str) -> None:
    got = plan(pod(gpu_share(**{"nvidia.com/priority": value})))
    assert not got.shares and any("nvidia.com/priority" in p for p in got.problems), got.problems


def env(name: str, value: str | None) -> list[dict[str, Any]]:
    return [{"name": name, "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}} if value is None
            else {"name": name, "value": value}]


def test_compute_policy_disable_lifts_the_limit_and_keeps_the_cores_reserved() -> None:
    got = exactly(pod(gpu_share(), env=env("GPU_CORE_UTILIZATION_POLICY", "disable")))
    assert got["deviceClassName"] == MEMORY_ONLY_GPU and got["capacity"]["requests"] == {"memory": "3000Mi", "cores": "30"}
    for value in ("force", "default"):  # what the hook always does
        assert exactly(pod(gpu_share(), env=env("GPU_CORE_UTILIZATION_POLICY", value)))["deviceClassName"] == GPU


@pytest.mark.parametrize(("value", "warning"), [
    ("turbo", "is not a policy HAMi-core knows (default, force, disable); the compute limit stays"),
    (None, "comes from a reference admission cannot read; the compute limit stays"),
    ("x" * 5000, "'" + "x" * 40 + "...' is not a policy"),
])
def test_a_compute_policy_the_webhook_cannot_apply_is_warned(value: str | None, warning: str) -> None:
    got = plan(pod(gpu_share(), env=env("GPU_CORE_UTILIZATION_POLICY", value)))
    assert got.shares[0].share.device_class is None and warning in got.warnings[0]


def test_disable_control_is_refused_on_a_share_and_meaningless_on_a_whole_gpu() -> None:
    got = plan(pod(gpu_share(), env=env("CUDA_DISABLE_CONTROL", "true")))
    assert "env CUDA_DISABLE_CONTROL='true' would lift every limit of a device others share" in got.problems[0]
    assert "ask for whole devices (nvidia.com/gpu alone)" in got.problems[0]
    whole = plan(pod({"nvidia.com/gpu": "1"}, env=env("CUDA_DISABLE_CONTROL", "true")))
    assert not whole.problems and not whole.warnings
    assert not plan(pod(gpu_share(), env=env("CUDA_DISABLE_CONTROL", "false"))).problems


def test_privileged_containers_are_refused_as_hami_refuses_them() -> None:
    got = plan(pod({"nvidia.com/gpu": "1"}, securityContext={"privileged": True}))
    assert "container 'main' is privileged" in got.problems[0] and "remove securityContext.privileged" in got.problems[0]
    p = pod({"nvidia.com/gpu": "1"})
    p["spec"]["initContainers"] = [{"name": "setup", "securityContext": {"privileged": True}}]
    assert "container 'setup' is privileged" in plan(p).problems[0]
    p = pod({"cpu": "1"}, securityContext={"privileged": True})
    assert not plan(p).problems, "a pod without HAMi resources is none of the webhook's business"


def two(init: dict[str, str], app: dict[str, str], restart: str | None = None) -> dict[str, Any]:
    p = pod(app)
    p["spec"]["initContainers"] = [{"name": "warmup", "resources": {"limits": init},
                                    **({"restartPolicy": restart} if restart else {})}]
    return p


def test_an_init_container_uses_the_app_containers_claim_when_it_covers_it() -> None:
    got = plan(two(gpu_share(**{"nvidia.com/gpumem": "2000", "nvidia.com/gpucores": "20"}), gpu_share()))
    assert [(c.container, c.uses) for c in got.shares] == [("warmup", 1), ("main", None)] and not got.warnings
    assert len(got.shapes()) == 1


def test_a_larger_init_container_keeps_its_own_claim_and_is_warned() -> None:
    got = plan(two(gpu_share(**{"nvidia.com/gpumem": "20480"}), gpu_share()))
    assert [c.uses for c in got.shares] == [None, None] and len(got.shapes()) == 2
    assert "init container 'warmup': its nvidia request is larger than any app container's" in got.warnings[0]


def test_a_sidecar_runs_for_the_pods_life_and_keeps_its_own_claim() -> None:
    got = plan(two(gpu_share(), gpu_share(), restart="Always"))
    assert [(c.init, c.uses) for c in got.shares] == [(False, None), (False, None)] and not got.warnings


def test_uuid_pinning_in_mig_mode_matches_the_parent_gpu_as_hami_does() -> None:
    got = exactly(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"},
                      {"nvidia.com/vgpu-mode": "mig", "nvidia.com/use-gpuuuid": "GPU-a", "nvidia.com/nouse-gpuuuid": "GPU-b"}))
    a = f'device.attributes["{GPU}"]'
    assert [s["cel"]["expression"] for s in got["selectors"]][:2] == [f'{a}.parentUUID in ["GPU-a"]',
                                                                      f'!({a}.parentUUID in ["GPU-b"])']


FALLBACK = vendors.with_unannotated(MAPPING, ["nvidia=hami-core,mig"])  # dra webhook run --unannotated-modes


def test_without_the_mode_a_share_may_also_land_on_a_mig_device_where_the_admin_turned_the_fallback_on() -> None:
    """HAMi's one pool: a pod without vgpu-mode goes to a hami-core GPU or a MIG one, where the
    admin's mapping says so (mode.unannotated)."""
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000", "nvidia.com/gpucores": "20"}
    for classes in (lambda name: True, None):  # the MIG class exists, or nobody knows: the same claims
        got = plan_pod(pod(limits), FALLBACK, SIZES, classes)
        assert not got.problems, got.problems
        subs = template_spec(got.shares[0].share, SIZES)["spec"]["devices"]["requests"][0]["firstAvailable"]
        assert [(s["name"], s["deviceClassName"]) for s in subs] == [("hami-core", GPU), ("mig", MIG)]
        assert "capacity" not in subs[1]
        assert subs[1]["selectors"][-1]["cel"]["expression"].endswith('compareTo(quantity("8000Mi")) >= 0')
    # a whole GPU: no MIG fallback (nothing to size the MIG device by)
    (cs,) = plan_pod(pod({"nvidia.com/gpu": "1"}), FALLBACK, SIZES, lambda name: True).shares
    assert "exactly" in template_spec(cs.share, SIZES)["spec"]["devices"]["requests"][0]


def test_with_the_fallback_on_a_missing_mig_class_refuses_the_pod_instead_of_changing_its_claims() -> None:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000", "nvidia.com/gpucores": "20"}
    got = plan_pod(pod(limits), FALLBACK, SIZES, lambda name: name != MIG)
    assert not got.shares
    (problem,) = got.problems
    assert f"DeviceClass {MIG} does not exist" in problem and "nvidia.com/vgpu-mode: hami-core" in problem, problem
    assert "mode.unannotated" in problem
    # the pod's own word is the way out: its claims are the share's alone
    annotated = plan_pod(pod(limits, {"nvidia.com/vgpu-mode": "hami-core"}), FALLBACK, SIZES, lambda name: name != MIG)
    assert not annotated.problems and not annotated.shares[0].share.alternatives


@pytest.mark.parametrize("mig_class", [True, False, None])
def test_the_shipped_mapping_gives_a_pod_without_the_mode_the_same_claims_whatever_classes_exist(
        mig_class: bool | None) -> None:
    """Off unless the admin turns it on: the claims (and so the template's name, a hash of them)
    never depend on whether someone created the MIG class."""
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000", "nvidia.com/gpucores": "20"}
    got = plan(pod(limits), classes=lambda name: mig_class if name == MIG else True)
    (cs,) = got.shares
    assert not got.problems and not cs.share.alternatives
    body = translate.template_object(cs.share, "ns", SIZES)
    assert body["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == GPU
    assert body["metadata"]["name"] == translate.template_object(plan(pod(limits)).shares[0].share, "ns", SIZES)[
        "metadata"]["name"]


@pytest.mark.parametrize(("setting", "error"), [
    ("nvidia", "write VENDOR=MODE"),
    ("nvida=hami-core,mig", "write VENDOR=MODE"),
    ("nvidia=hami-core,vfio", "'vfio' is not a mode of 'nvidia'"),
    ("ascend910b3=hami-core", "serves one mode only"),
])
def test_a_bad_unannotated_modes_setting_is_refused_naming_it(setting: str, error: str) -> None:
    with pytest.raises(vendors.VendorConfigError, match=error):
        vendors.with_unannotated(MAPPING, [setting])


def test_an_empty_unannotated_modes_setting_turns_the_fallback_off() -> None:
    off = vendors.with_unannotated(FALLBACK, ["nvidia="])
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000", "nvidia.com/gpucores": "20"}
    assert not plan_pod(pod(limits), off, SIZES, lambda name: True).shares[0].share.alternatives


def test_a_mode_list_offers_every_listed_mode() -> None:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}
    subs = request(pod(limits, {"nvidia.com/vgpu-mode": "mig,hami-core"}))["requests"][0]["firstAvailable"]
    assert [(s["name"], s["deviceClassName"]) for s in subs] == [("hami-core", MEMORY_ONLY_GPU), ("mig", MIG)]


@pytest.mark.parametrize(("annotations", "warning"), [
    ({"hami.io/node-scheduler-policy": "spread"}, "LeastAllocated (spread), named in spec.schedulerName"),
    ({"hami.io/gpu-scheduler-policy": "topology-aware"}, "or a claim with matchAttribute"),
    ({"hami.io/device-scoring-weights": "slot=1,core=2"}, "kube-scheduler's allocator has no device scores"),
    ({"hami.io/some-new-knob": "1"}, "annotation hami.io/some-new-knob is not a HAMi input this webhook reads"),
    ({"hami.io/node-scheduler-policy": "\n" * 300}, "is not honoured under DRA"),
])
def test_annotations_nothing_under_dra_honours_are_warned_with_the_dra_way(annotations: dict[str, str],
                                                                         warning: str) -> None:
    got = plan(pod({"nvidia.com/gpu": "1"}, annotations))
    assert got.shares and any(warning in w for w in got.warnings), got.warnings


def test_many_unknown_annotations_are_counted_not_listed() -> None:
    got = plan(pod({"nvidia.com/gpu": "1"}, {f"hami.io/x{i}": "1" for i in range(50)}))
    assert len(got.warnings) == 5 and "46 more annotations" in got.warnings[-1]


# HAMi's scheduler reads these for every vendor's devices; under DRA nothing does.
SCHEDULER_WIDE = ("hami.io/node-scheduler-policy", "hami.io/gpu-scheduler-policy", "hami.io/device-scoring-weights")
ONE_DEVICE = {"nvidia": {"nvidia.com/gpu": "1"}, "ascend": {"huawei.com/Ascend910B3": "1"},
              "hygon-dcu": {"hygon.com/dcunum": "1"}, "cambricon-mlu": {"cambricon.com/vmlu": "1"}}


def test_every_vendor_of_the_mapping_warns_on_every_scheduler_wide_annotation() -> None:
    """Each vendor (an Ascend model each) carries a DRA way for all three, so a pod of any vendor
    with one of them is warned, never converted in silence (they were, on Ascend, DCU and MLU pods)."""
    for v in MAPPING.vendors:
        missing = [a for a in SCHEDULER_WIDE if v.dra_way(a) is None]
        assert not missing, f"vendor {v.name} would drop {missing} without a word"
    # and the pods below reach every vendor (the Ascend models are one vendor of the file)
    assert {"ascend" if v.model else v.name for v in MAPPING.vendors} == set(ONE_DEVICE)


@pytest.mark.parametrize("vendor", sorted(ONE_DEVICE))
@pytest.mark.parametrize("annotation", SCHEDULER_WIDE)
@pytest.mark.parametrize("value", ["spread", "binpack,numa", "\x1b[31m" + "spread" * 60 + "\n"])
def test_a_scheduler_policy_on_any_vendors_pod_is_warned_naming_it_and_the_dra_way(vendor: str, annotation: str,
                                                                                   value: str) -> None:
    """Hostile values too: an escape sequence and a newline are quoted, 300 characters cut; the pod
    keeps its meaning (its devices are what it asked for), it only learns what DRA does instead."""
    got = plan(pod(ONE_DEVICE[vendor], {annotation: value}))
    assert not got.problems and len(got.shares) == 1, got.problems
    (w,) = [w for w in got.warnings if annotation in w]
    assert "is not honoured under DRA: " in w and ("kube-scheduler" in w)
    assert "\x1b" not in w and "\n" not in w and len(w) <= MAX_WARNING, w


@pytest.mark.parametrize("vendor", sorted(ONE_DEVICE))
def test_binpack_is_what_the_allocator_does_for_every_vendor_and_is_not_warned(vendor: str) -> None:
    got = plan(pod(ONE_DEVICE[vendor], {"hami.io/gpu-scheduler-policy": " binpack"}))
    assert not got.problems and not got.warnings, got.warnings
