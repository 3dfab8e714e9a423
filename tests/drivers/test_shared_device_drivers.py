"""What every driver built on `dra.SharedDeviceDriver` must do, written once and run for each
(hami-core-gpu on fake H200s, ascend on fake 910B3s, hygon-dcu on fake K100_AIs, cambricon-mlu on fake
MLU370-X8s, whose shares the vendor's sMLU holds instead of a hook): the driver class on its fake backend
(setup, refusals, whole devices, the strongest preload, health through its stub, settings), its
daemon on the real control plane (the published slice, a fault becoming a taint and kubelet
health until it clears), and every driver's example manifests. What only one driver does stays
in its own tests (tests/hami_core_gpu, tests/ascend, tests/hygon_dcu, tests/cambricon_mlu)."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from driver_helpers import Recorder, fake_drivers, running_daemon, slice_devices
from kube_helpers import create_node, unique, wait_for
from kubernetes import client

import dra
from dra import AllocatedDevice, ClaimRef, PrepareError
from dra_dev.cluster.controlplane import ControlPlane
from drivers.ascend import devices as npu_devices
from drivers.ascend import settings as npu_settings
from drivers.ascend.config import NpuConfig
from drivers.ascend.dcmi import DcmiError
from drivers.ascend.driver import AscendDriver
from drivers.cambricon_mlu import devices as mlu_devices
from drivers.cambricon_mlu import settings as mlu_settings
from drivers.cambricon_mlu.cndev import CndevError
from drivers.cambricon_mlu.config import MluConfig
from drivers.cambricon_mlu.driver import CambriconMluDriver
from drivers.hami_core_gpu import devices as gpu_devices
from drivers.hami_core_gpu import fake as gpu_fake
from drivers.hami_core_gpu import nvml
from drivers.hami_core_gpu import settings as gpu_settings
from drivers.hami_core_gpu.config import GpuConfig
from drivers.hami_core_gpu.driver import HamiCoreGpuDriver
from drivers.hygon_dcu import devices as dcu_devices
from drivers.hygon_dcu import settings as dcu_settings
from drivers.hygon_dcu.config import DcuConfig
from drivers.hygon_dcu.driver import HygonDcuDriver
from drivers.hygon_dcu.rsmi import RsmiError

GiB = 1 << 30
CLAIM = ClaimRef("0c6a3f6e-0000-4000-8000-00000000d5c1", "default", "c")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@dataclasses.dataclass(frozen=True)
class HealthStep:
    """Lines for the stub's fault file (``{uuid}`` the device's), then what the driver reports."""

    lines: str
    healthy: bool
    message: str  # a regular expression the health event's message matches (re.search)
    taints: frozenset[tuple[str, str]]  # (key below the driver's name, value), all NoSchedule


@dataclasses.dataclass(frozen=True)
class Vendor:
    id: str
    driver_class: type[dra.SharedDeviceDriver[Any, Any]]
    command: str  # `dra run COMMAND`
    driver_name: str  # the DRA driver name of its slices
    request: str  # the request name of a claim's results
    fake: str  # the fake profile of eight devices
    fake_pair: str  # a fake profile of two
    names: Sequence[str]  # `fake`'s device names, in order
    product: str  # every device's productName
    uuid_prefix: str
    whole: tuple[int, int]  # (memory bytes, cores) of one whole device
    config: Callable[..., Any]  # the opaque config class (preload, compute_limit)
    fault_env: str  # the stub's fault file, named in the environment
    interval: str  # the health setting of the monitor's period
    steps: Sequence[HealthStep]  # a fault, its recovery, a lost device
    settings_error: type[Exception]
    missing_library: tuple[Callable[[Path], Mapping[str, str]], type[Exception], str]  # settings, error, match
    node_libraries: Callable[[], None]  # what the node has besides (loaded in this process)
    sample: str  # the device whose slice entry `sample_wire` describes
    sample_wire: Mapping[str, Any]  # attributes in wire form
    sample_memory: str
    fault_key: str = "uuid"  # the attribute that names a device in the stub's fault file

    def __str__(self) -> str:
        return self.id


GPU = Vendor(
    id="hami-core-gpu", driver_class=HamiCoreGpuDriver, command="hami-core-gpu", driver_name=gpu_devices.DRIVER_NAME,
    request="gpu", fake="h200x8", fake_pair="h200x2", names=[f"hami-gpu-{i}" for i in range(8)],
    product="NVIDIA H200", uuid_prefix="GPU-", whole=(143771 << 20, 100), config=GpuConfig,
    fault_env="HOOKCORE_STUB_NVML_EVENTS", interval="healthProbeInterval",
    steps=[
        HealthStep("xid {uuid} 48 1", False, "XID 48: double-bit ECC error",  # NVML: the GPU needs a reset
                   frozenset({("xid", "48"), ("recovery-action", "gpu-reset")})),
        HealthStep("reset {uuid}", True, "^$", frozenset()),
        HealthStep("xid {uuid} 79", False, "fallen off the bus", frozenset({("gpu-lost", "")})),
    ],
    settings_error=gpu_settings.SettingsError,
    missing_library=(lambda root: {"cdiMode": "self-contained", "driverRoot": str(root)}, FileNotFoundError,
                     r"libcuda\.so\.1 not found under driverRoot"),
    node_libraries=lambda: nvml.load_library(gpu_fake.stub_library()),  # NVML answers: the stub's, as --fake loads it
    sample="hami-gpu-0",
    sample_wire={"type": {"string": "hami-gpu"}, "productName": {"string": "NVIDIA H200"},
                 "resource.kubernetes.io/pcieRoot": {"string": "pci0000:15"}, "numaNode": {"int": 0},
                 "driverVersion": {"version": "580.159.4"}, "cudaDriverVersion": {"version": "13.0.0"}},
    sample_memory="143771Mi",
)
NPU = Vendor(
    id="ascend", driver_class=AscendDriver, command="ascend", driver_name=npu_devices.DRIVER_NAME,
    request="npu", fake="910b3x8", fake_pair="910b3x2", names=[f"npu-{i}-0" for i in range(8)],
    product="Ascend910B3", uuid_prefix="NPU-", whole=(64 * GiB, 100), config=NpuConfig,
    fault_env="HOOKCORE_STUB_DCMI_STATE", interval="healthInterval",
    steps=[
        HealthStep("health {uuid} 3\nerrors {uuid} 80e01801", False, "critical alarm, error codes 0x80e01801",
                   frozenset({("health", "critical")})),
        HealthStep("health {uuid} 1\nerrors {uuid} 1", True, "^minor alarm, error codes 0x1$", frozenset()),
        HealthStep("health {uuid} lost\nerrors {uuid}", False, r"does not exist \(health 0xFFFFFFFF\)", frozenset({("npu-lost", "")})),
    ],
    settings_error=npu_settings.SettingsError,
    missing_library=(lambda root: {"dcmiLibrary": str(root / "libdcmi.so")}, DcmiError, r"libdcmi\.so not found"),
    node_libraries=lambda: None,
    sample="npu-5-0",
    sample_wire={"type": {"string": "HAMivNPUCore"}, "model": {"string": "Ascend910B"}, "index": {"int": 5},
                 "physicalID": {"int": 5}, "chipName": {"string": "910B3"}, "numaNode": {"int": 1},
                 "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"}},
    sample_memory="64Gi",
)
DCU = Vendor(
    id="hygon-dcu", driver_class=HygonDcuDriver, command="hygon-dcu", driver_name=dcu_devices.DRIVER_NAME,
    request="dcu", fake="k100-aix8", fake_pair="k100-aix2", names=[f"dcu-{i}" for i in range(8)],
    product="K100_AI", uuid_prefix="DCU-", whole=(64 * GiB, 100), config=DcuConfig,
    fault_env="HOOKCORE_STUB_RSMI_STATE", interval="healthInterval",
    steps=[
        HealthStep("ecc {uuid} 2 3", False, r"^2 uncorrectable ECC error\(s\) in VRAM \(3 correctable\)$",
                   frozenset({("health", "uncorrectable-ecc")})),
        HealthStep("ecc {uuid} 0 3", True, r"^ok, 3 correctable ECC error\(s\)$", frozenset()),  # a driver reload resets them
        HealthStep("lost {uuid}", False, r"DCU gone: ROCm SMI rsmi_dev_memory_usage_get\(",
                   frozenset({("dcu-lost", "")})),
    ],
    settings_error=dcu_settings.SettingsError,
    missing_library=(lambda root: {"smiLibrary": str(root / "librocm_smi64.so")}, RsmiError,
                     r"librocm_smi64\.so not found"),
    node_libraries=lambda: None,
    sample="dcu-5",
    sample_wire={"type": {"string": "DCU"}, "productName": {"string": "K100_AI"}, "index": {"int": 5},
                 "computeUnits": {"int": 120}, "numaNode": {"int": 1},
                 "resource.kubernetes.io/pciBusID": {"string": "0000:02:00.0"}},
    sample_memory="64Gi",
    fault_key="resource.kubernetes.io/pciBusID",  # the stub ROCm SMI's state file names a DCU by its bus ID
)
MLU = Vendor(
    id="cambricon-mlu", driver_class=CambriconMluDriver, command="cambricon-mlu", driver_name=mlu_devices.DRIVER_NAME,
    request="mlu", fake="mlu370-x8x8", fake_pair="mlu370-x8x2", names=[f"mlu-{i}" for i in range(8)],
    product="MLU370-X8", uuid_prefix="MLU-", whole=(48 * GiB, 100), config=MluConfig,
    fault_env="HOOKCORE_STUB_CNDEV_STATE", interval="healthInterval",
    steps=[
        HealthStep("health {uuid} 0", False, r"^the MLU is in problem", frozenset({("health", "in-problem")})),
        HealthStep("health {uuid} 1", True, "^$", frozenset()),
        HealthStep("driver {uuid} 6", False, "the MLU driver is not running: reset", frozenset({("health", "driver-reset")})),
    ],
    settings_error=mlu_settings.SettingsError,
    missing_library=(lambda root: {"cndevLibrary": str(root / "libcndev.so")}, CndevError, r"libcndev\.so not found"),
    node_libraries=lambda: None,
    sample="mlu-5",
    sample_wire={"type": {"string": "MLU"}, "productName": {"string": "MLU370-X8"}, "index": {"int": 5},
                 "smlu": {"bool": True}, "numaNode": {"int": 1}, "resource.kubernetes.io/pcieRoot": {"string": "pci0000:85"}},
    sample_memory="48Gi",
)
VENDORS = [GPU, NPU, DCU, MLU]

BAD_SETTINGS = [
    (GPU, {"cdimode": "toolkit"}, "unknown setting 'cdimode'"),
    (GPU, {"cdiMode": "host"}, "cdiMode must be one of"),
    (GPU, {"deviceMemory": "lots"}, "deviceMemory must be a positive quantity"),
    (GPU, {"healthProbeInterval": "0"}, "healthProbeInterval must be seconds"),
    (GPU, {"driverRoot": "run/nvidia"}, "driverRoot must be an absolute path"),
    (GPU, {"toolkitCdiKind": "nvidia.com"}, "toolkitCdiKind must look like vendor.com/class"),
    (GPU, {"health": "yes"}, "health must be on or off"),
    (GPU, {"fullLoadClockMhz": "1.5GHz"}, "fullLoadClockMhz must be a clock in MHz, 1..99999"),
    (GPU, {"fullLoadClockMhz": "0"}, "fullLoadClockMhz must be a clock in MHz"),
    (GPU, {"clockElasticity": "lots"}, r"clockElasticity must be a number from 0 to 1 with at most 3 decimals \(H100:"
                                       r" 0.5\), not 'lots'"),
    (GPU, {"clockElasticity": "1.5"}, "clockElasticity must be a number from 0 to 1"),
    (GPU, {"clockElasticity": "0.4567"}, "clockElasticity must be a number from 0 to 1 with at most 3 decimals"),
    (GPU, {"clockElasticity": "-0"}, "clockElasticity must be a number from 0 to 1"),
    (GPU, {"clockElasticity": "4.5e-1"}, "clockElasticity must be a number from 0 to 1"),
    (GPU, {"clockElasticity": "nan"}, "clockElasticity must be a number from 0 to 1"),
    (GPU, {"clockElasticity": ""}, "clockElasticity must be a number from 0 to 1"),
    (GPU, {"contextMemory": "-1Mi"}, "contextMemory must be a quantity from 0 to 64Gi"),
    (GPU, {"contextMemory": "1e999999999"}, "contextMemory must be a quantity from 0 to 64Gi"),
    (GPU, {"contextMemory": "lots"}, "contextMemory must be a quantity from 0 to 64Gi"),
    (NPU, {"devicenodes": "cdi"}, "unknown setting 'devicenodes'"),
    (NPU, {"deviceNodes": "both"}, "deviceNodes must be one of"),
    (NPU, {"healthInterval": "0"}, "healthInterval must be seconds"),
    (NPU, {"driverRoot": "usr"}, "driverRoot must be an absolute path"),
    (NPU, {"health": "yes"}, "health must be on or off"),
    (DCU, {"devRoots": "/"}, "unknown setting 'devRoots'"),
    (DCU, {"healthInterval": "0"}, "healthInterval must be seconds"),
    (DCU, {"driverRoot": "opt"}, "driverRoot must be an absolute path"),
    (DCU, {"health": "yes"}, "health must be on or off"),
    (MLU, {"smlu": "on"}, "unknown setting 'smlu'"),
    (MLU, {"sharing": "mig"}, "sharing must be one of"),
    (MLU, {"devRoot": "dev"}, "devRoot must be an absolute path"),
    (MLU, {"healthInterval": "0"}, "healthInterval must be seconds"),
]

OFF = {"health": "off"}
MakeDriver = Callable[..., dra.SharedDeviceDriver[Any, Any]]


@pytest.fixture(params=VENDORS, ids=str)
def vendor(request: pytest.FixtureRequest) -> Vendor:
    v: Vendor = request.param
    return v


@pytest.fixture
def driver(vendor: Vendor) -> Iterator[MakeDriver]:
    yield from fake_drivers(vendor.driver_class, vendor.fake)


def alloc(vendor: Vendor, device: str, share: str | None = "s1", config: Any = None, **capacity: int) -> AllocatedDevice:
    return AllocatedDevice(vendor.request, "node-a", device, share, capacity, config=config)


# --- the driver class on its fake backend ---------------------------------------------------------

def test_setup_publishes_every_device_of_the_fake_node_shareable_and_untainted(vendor: Vendor, driver: MakeDriver) -> None:
    devs = driver(settings=OFF).devices()
    assert [d.name for d in devs] == list(vendor.names)
    assert all(d.attributes["productName"] == vendor.product and str(d.attributes["uuid"]).startswith(vendor.uuid_prefix)
               for d in devs)
    assert all(d.allow_multiple_allocations and not d.taints for d in devs)
    cores = dra.Capacity("100", dra.RequestPolicy(default="100", min="1", max="100", step="1"))
    assert all(d.capacity["cores"] == cores and d.capacity["memory"].value for d in devs)


def test_devices_before_setup_is_a_clear_error(vendor: Vendor) -> None:
    with pytest.raises(RuntimeError, match="before setup"):
        vendor.driver_class().devices()


def test_a_result_without_consumed_capacity_holds_the_whole_device(vendor: Vendor, driver: MakeDriver) -> None:
    (v,) = driver(settings=OFF).visible(CLAIM, [alloc(vendor, vendor.names[0], None)])
    assert (v.memory, v.cores) == vendor.whole


def test_a_device_of_another_node_is_refused_with_the_known_ones(vendor: Vendor, driver: MakeDriver) -> None:
    d = driver(fake=vendor.fake_pair, settings=OFF)
    known = repr(list(vendor.names[:2])).replace("[", r"\[").replace("]", r"\]")
    with pytest.raises(PrepareError, match=rf"{vendor.names[7]} .* this node has {known}"):
        d.prepare(CLAIM, [alloc(vendor, vendor.names[7], memory=GiB, cores=10)])


def test_two_preload_modes_in_one_claim_give_the_strongest(vendor: Vendor, driver: MakeDriver) -> None:
    """Review 2026-12-04 #10: claim-wide values are the strongest across requests (file over env).
    A driver whose devices hold their shares loads no hook: a preload is refused, naming it."""
    d = driver(settings=OFF)
    devices = [alloc(vendor, vendor.names[0], "a", vendor.config(preload="env"), memory=GiB, cores=10),
               alloc(vendor, vendor.names[1], "b", vendor.config(preload="file"), memory=GiB, cores=10)]
    if vendor.driver_class.shares_held_by_device:
        with pytest.raises(PrepareError, match="preload: file names how to load a hook"):
            d.prepare(CLAIM, devices)
        return
    e = d.enforcement(CLAIM, d.prepare(CLAIM, devices))
    assert e is not None and e.preload is dra.Preload.FILE


def test_health_changes_taint_republish_and_reach_the_health_stream(vendor: Vendor, driver: MakeDriver,
                                                                   tmp_path: Path) -> None:
    """Each step written to the stub's fault file: the device's health event and taints follow,
    the other device stays healthy, and the driver asks for a republish."""
    faults = tmp_path / "faults"
    faults.write_text("")
    os.environ[vendor.fault_env] = str(faults)  # the stubs' environment is restored after each test
    ctx = Recorder()
    d = driver(fake=vendor.fake_pair, settings={vendor.interval: "0.05"}, recorder=ctx)
    first, second = vendor.names[:2]
    uuid = str(d.devices()[1].attributes[vendor.fault_key])
    wait_for(lambda: ctx.health and all(e.healthy for e in ctx.health[-1]), 5, 0.01, what="both devices healthy")
    for step in vendor.steps:
        changed = ctx.changed
        with faults.open("a") as f:
            f.write(step.lines.format(uuid=uuid) + "\n")
        expected = {(f"{vendor.driver_name}/{k}", v, "NoSchedule") for k, v in step.taints}

        def taints() -> set[tuple[str, str | None, str]]:
            return {(t.key, t.value, t.effect) for t in d.devices()[1].taints}

        # An event's taint comes with it; a taint from the probe after it (the GPU's recovery action) a period later.
        wait_for(lambda: ctx.changed > changed and ctx.health[-1][1].healthy is step.healthy  # noqa: B023
                 and taints() == expected, 5, 0.01,  # noqa: B023
                 what=f"{second} healthy={step.healthy} and tainted {sorted(expected)} after {step.lines!r}")
        last = ctx.health[-1]
        assert [(e.device, e.healthy) for e in last] == [(first, True), (second, step.healthy)]
        assert re.search(step.message, last[1].message), last[1].message
        assert not d.devices()[0].taints


@pytest.mark.parametrize(("vendor", "raw", "error"), BAD_SETTINGS, ids=str)
def test_bad_settings_name_the_key(vendor: Vendor, raw: dict[str, str], error: str) -> None:
    with pytest.raises(vendor.settings_error, match=error):
        vendor.driver_class().setup(Recorder().context(raw, vendor.fake))


def test_a_node_without_the_vendors_libraries_says_what_is_missing(vendor: Vendor, tmp_path: Path) -> None:
    settings, error, match = vendor.missing_library
    vendor.node_libraries()
    with pytest.raises(error, match=match):
        vendor.driver_class().setup(Recorder().context(settings(tmp_path), None))


# --- the daemon on the real control plane -----------------------------------------------------------

@pytest.fixture
def fake_node(vendor: Vendor, cluster: ControlPlane, api_client: client.ApiClient) -> Iterator[dict[str, Any]]:
    """`dra run VENDOR --fake …` for a new Node, its stub's fault file in `faults`."""
    node = unique(vendor.command)
    create_node(api_client, node)
    try:
        with tempfile.TemporaryDirectory(prefix=f"dra-{vendor.command}-", dir="/tmp") as work:
            faults = Path(work) / "faults"
            faults.write_text("")
            with running_daemon(cluster, vendor.command, node, Path(work),
                                ["--fake", vendor.fake, "--set", f"{vendor.interval}=0.1"],
                                env={vendor.fault_env: str(faults)}) as (daemon, harness):
                yield {"node": node, "daemon": daemon, "harness": harness, "faults": faults}
    finally:
        client.CoreV1Api(api_client).delete_node(node)  # its slices go with it (owned by the Node)


@pytest.mark.cluster
def test_the_fake_node_publishes_every_device(vendor: Vendor, api_client: client.ApiClient,
                                              fake_node: dict[str, Any]) -> None:
    devices = wait_for(lambda: slice_devices(api_client, fake_node["node"], vendor.driver_name) or None, 30,
                       what="the slice")
    assert sorted(d["name"] for d in devices) == sorted(vendor.names)
    d = next(d for d in devices if d["name"] == vendor.sample)
    assert {k: d["attributes"][k] for k in vendor.sample_wire} == vendor.sample_wire
    assert d["attributes"]["uuid"]["string"].startswith(vendor.uuid_prefix)
    assert d["capacity"]["memory"]["value"] == vendor.sample_memory and d["allowMultipleAllocations"] is True
    assert d["capacity"]["cores"]["requestPolicy"]["validRange"] == {"min": "1", "max": "100", "step": "1"}


@pytest.mark.cluster
def test_a_fault_taints_the_device_and_reaches_kubelet_until_it_clears(vendor: Vendor, api_client: client.ApiClient,
                                                                      fake_node: dict[str, Any]) -> None:
    node, faults, harness = fake_node["node"], fake_node["faults"], fake_node["harness"]
    name = vendor.names[3]
    devices = wait_for(lambda: slice_devices(api_client, node, vendor.driver_name) or None, 30, what="the slice")
    uuid = next(d for d in devices if d["name"] == name)["attributes"][vendor.fault_key]["string"]
    fault, recovery = vendor.steps[:2]
    harness.wait_for_plugin(vendor.driver_name)
    with harness.watch_health(driver=vendor.driver_name) as watch:

        def health() -> str | None:
            msg = watch.next(timeout=15)
            return next((h.health for h in msg if h.device_name == name), None)

        def tainted() -> list[dict[str, Any]] | None:
            d = next(d for d in slice_devices(api_client, node, vendor.driver_name) if d["name"] == name)
            return d.get("taints") or None

        wait_for(lambda: health() == "Healthy" or None, 30, interval=0, what=f"{name} healthy")
        with faults.open("a") as f:
            f.write(fault.lines.format(uuid=uuid) + "\n")
        expected = {(f"{vendor.driver_name}/{k}", v, "NoSchedule") for k, v in fault.taints}
        # The slice may first carry the event's taint alone, then the probe's beside it (a republish later).
        wait_for(lambda: {(t["key"], t.get("value"), t["effect"]) for t in tainted() or ()} == expected or None, 30,
                 what=f"the taints {sorted(expected)} in the ResourceSlice")
        wait_for(lambda: health() == "Unhealthy" or None, 30, interval=0, what="Unhealthy in kubelet's stream")
        others = [d for d in slice_devices(api_client, node, vendor.driver_name) if d["name"] != name]
        assert not any(d.get("taints") for d in others)
        with faults.open("a") as f:
            f.write(recovery.lines.format(uuid=uuid) + "\n")
        wait_for(lambda: None if tainted() else True, 30, what="the taint lifted")
        wait_for(lambda: health() == "Healthy" or None, 30, interval=0, what="Healthy again")


# --- every driver's examples ----------------------------------------------------------------------

EXAMPLE_DIRS = ("hami-core-gpu", "ascend", "hygon-dcu", "cambricon-mlu", "gpu.example.com", "heterogeneous")
MANIFESTS = sorted(p for d in EXAMPLE_DIRS for p in (EXAMPLES / d).glob("*.yaml") if p.name != "demo.yaml")
"""demo.yaml: the demo's data, not a manifest; hami-compat's pods need the webhook (test_webhook.py)."""


def test_every_driver_has_examples_and_each_says_what_it_shows() -> None:
    assert {d: sum(p.parent.name == d for p in MANIFESTS) >= 1 for d in EXAMPLE_DIRS} == dict.fromkeys(EXAMPLE_DIRS, True)
    for path in MANIFESTS:
        assert path.read_text().startswith("# "), f"{path.parent.name}/{path.name} must open with a comment saying what it shows"


@pytest.mark.cluster
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_example_is_accepted_by_the_api_server(cluster: ControlPlane, path: Path) -> None:
    kubectl = [str(cluster.bins.path("kubectl")), "--kubeconfig", str(cluster.kubeconfig)]
    proc = subprocess.run([*kubectl, "apply", "--dry-run=server", "-n", "default", "-f", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "(server dry run)" in proc.stdout
