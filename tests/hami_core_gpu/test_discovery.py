"""Discovery through the real NVML code path (nvidia-ml-py) against the stub libnvidia-ml."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dra import topology
from dra._runtime.publish.desired import desired_pool, encode_device
from drivers.hami_core_gpu import devices, fake, nvml

GiB = 1 << 30
MiB = 1 << 20


def test_h200x8_profile_is_discovered_with_every_attribute(fake_node) -> None:
    backend = fake_node("h200x8", "node-a")
    inv = nvml.discover(backend.sysfs)
    assert (inv.driver_version, inv.cuda_driver_version) == ("580.159.4", "13.0.0")
    assert [g.index for g in inv.gpus] == list(range(8))
    g0 = inv.gpus[0]
    assert g0.product_name == "NVIDIA H200" and g0.memory == 143771 * MiB
    assert (g0.brand, g0.architecture, g0.compute_capability) == ("Nvidia", "Hopper", "9.0.0")
    assert g0.mig_enabled is False
    assert [g.sms for g in inv.gpus] == [132] * 8  # NVML's cores / 128 per SM (cc 9.0), the stub's `sms` (the H200's)
    # two GPUs per PCIe root, the first four on NUMA node 0, as the profile lays out the board
    assert [g.pcie_root for g in inv.gpus] == ["pci0000:15"] * 2 + ["pci0000:48"] * 2 + ["pci0000:97"] * 2 + ["pci0000:c7"] * 2
    assert [g.numa_node for g in inv.gpus] == [0] * 4 + [1] * 4
    assert g0.pci_bus_id == "0000:19:00.0"
    assert len({g.uuid for g in inv.gpus}) == 8 and all(g.uuid.startswith("GPU-") for g in inv.gpus)


def test_fake_uuids_differ_between_nodes(fake_node) -> None:
    a = fake.load("a100-40gx4", "node-a")
    b = fake.load("a100-40gx4", "node-b")
    assert not {g.uuid for g in a.gpus} & {g.uuid for g in b.gpus}
    assert [g.uuid for g in a.gpus] == [g.uuid for g in fake.load("a100-40gx4", "node-a").gpus]  # stable


def test_device_model_matches_hami_names_and_adds_topology(fake_node) -> None:
    inv = nvml.discover(fake_node("a100-40gx4").sysfs)
    dev = devices.to_devices(inv)[1]
    assert dev.name == "hami-gpu-1"
    a = dev.attributes
    assert a["type"] == "hami-gpu" and a["uuid"] == inv.gpus[1].uuid
    assert (a["minor"], a["index"], a["numaNode"]) == (1, 1, 0)
    assert a["productName"] == "NVIDIA A100-SXM4-40GB"
    assert a["pcieBusID"] == a["resource.kubernetes.io/pciBusID"] == "0000:2a:00.0"
    assert a["resource.kubernetes.io/pcieRoot"] == "pci0000:15"
    assert str(a["driverVersion"]) and a["cudaComputeCapability"].value == "8.0.0"
    assert dev.allow_multiple_allocations
    wire = encode_device(dev)  # the framework's encoder accepts it as the API will
    assert wire["capacity"]["cores"] == {
        "value": "100", "requestPolicy": {"default": "100", "validRange": {"min": "1", "max": "100", "step": "1"}}}
    assert wire["capacity"]["memory"] == {
        "value": "40960Mi", "requestPolicy": {"default": "40960Mi", "validRange": {"min": "1Mi", "max": "40960Mi", "step": "1Mi"}}}
    assert len(desired_pool(devices.DRIVER_NAME, "node-a", devices.to_devices(inv)).slices) == 1


def test_yaml_file_mixes_models_and_overrides(fake_node, tmp_path: Path) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text(
        'driverVersion: "570.86.15"\ncudaDriverVersion: "12.8"\n'
        "gpus:\n"
        "- model: h100\n  numaNode: 1\n"
        "- productName: NVIDIA L4\n  memory: 23034Mi\n  architecture: Ada Lovelace\n  computeCapability: '8.9'\n"
        "  migMode: unsupported\n  multiprocessorCount: 58\n"
        "  pciBusID: '0000:3b:00.0'\n  pcieRoot: pci0000:3a\n  uuid: GPU-0000c0de-0000-4000-8000-000000000014\n"
        "- model: a100-80g\n  migMode: on\n"
    )
    inv = nvml.discover(fake_node(str(path)).sysfs)
    assert (inv.driver_version, inv.cuda_driver_version) == ("570.86.15", "12.8.0")
    h100, l4, a100 = inv.gpus
    assert h100.product_name == "NVIDIA H100 80GB HBM3" and h100.numa_node == 1
    assert l4.uuid == "GPU-0000c0de-0000-4000-8000-000000000014"
    assert (l4.architecture, l4.compute_capability, l4.mig_enabled) == ("Ada Lovelace", "8.9.0", None)
    assert (l4.pci_bus_id, l4.pcie_root, l4.memory) == ("0000:3b:00.0", "pci0000:3a", 23034 * MiB)
    assert a100.mig_enabled is True
    assert (h100.sms, l4.sms, a100.sms) == (132, 58, 108)  # the model's, the file's, the model's
    # power limits: the model's default (in force unless the file says); none where NVML has none
    assert (h100.power_limit_w, h100.default_power_limit_w, l4.power_limit_w, a100.power_limit_w) == (700, 700, None, 400)
    # a GPU in MIG mode runs no CUDA work outside its MIG instances: not shared, not published
    assert [d.attributes["uuid"] for d in devices.to_devices(inv)] == [h100.uuid, l4.uuid]


@pytest.mark.parametrize("text,error", [
    ("gpus: []\n", "non-empty list"),
    ("gpus:\n- model: h300\n", "unknown model 'h300'"),
    ("gpus:\n- model: h200\n  colour: green\n", "unknown keys ['colour']"),
    ("gpus:\n- productName: X\n", "give `model:` or at least `productName:` and `memory:`"),
    ("gpus:\n- model: h200\n  pciBusID: '19:00.0'\n", "pciBusID '19:00.0' must look like 0000:3b:00.0"),
    ("gpus:\n- model: h200\n  memory: lots\n", "memory 'lots' is not a quantity"),
    ("gpus:\n- model: h200\n  architecture: Fermi\n", "gpus[0]: architecture 'Fermi' is not known"),
    ("gpus:\n- model: h200\n- model: h200\n  index: 0\n  pciBusID: '0000:77:00.0'\n", "two GPUs share one index"),
    ("gpu:\n- model: h200\n", "unknown keys ['gpu']"),
    ("gpus:\n- model: h200\n  uuid: GPU-1\n", "uuid 'GPU-1' must look like GPU-xxxxxxxx"),
    ("gpus:\n- model: h200\n  productName: 'a,b'\n", "no ',', ';' or '='"),
    ("gpus:\n- model: h200\n  multiprocessorCount: 0\n", "multiprocessorCount must be an SM count, 1..4096"),
    ("gpus:\n- model: h200\n  multiprocessorCount: '132'\n", "multiprocessorCount must be an integer"),
    ("gpus:\n- model: h200\n  powerLimit: 0\n", "powerLimit must be a power limit in W, 1..10000"),
    ("gpus:\n- model: h200\n  defaultPowerLimit: '700'\n", "defaultPowerLimit must be an integer"),
])
def test_bad_fake_files_say_what_to_change(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text(text)
    with pytest.raises(fake.FakeDevicesError) as e:
        fake.load(str(path), "node-a")
    assert error in str(e.value) and str(path) in str(e.value)


@pytest.mark.parametrize("spec", ["h200", "h200x0", "h200x17", "rtx9090x2", ""])
def test_bad_profiles_list_the_models(spec: str) -> None:
    with pytest.raises(fake.FakeDevicesError, match="h200"):
        fake.load(spec, "node-a")


def test_missing_fake_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(fake.FakeDevicesError, match="cannot read fake-device file"):
        fake.load(str(tmp_path / "nope.yaml"), "node-a")


def test_a_failed_nvml_query_names_the_call_and_the_gpu(fake_node) -> None:
    backend = fake_node("h200x2")
    uuid = backend.node.gpus[1].uuid
    os.environ["HOOKCORE_STUB_NVML_FAIL"] = f"nvmlDeviceGetBrand@{uuid}=999"
    with pytest.raises(nvml.NvmlError) as e:
        nvml.discover(backend.sysfs)
    assert "nvmlDeviceGetBrand(index 1, " + uuid + ")" in str(e.value) and "NVML return 999" in str(e.value)


def test_library_errors_carry_a_hint(fake_node) -> None:
    backend = fake_node("h200x1")
    os.environ["HOOKCORE_STUB_NVML_FAIL"] = "nvmlInit=18"
    with pytest.raises(nvml.NvmlError, match=r"nvmlInit.*reboot the node or reload the module"):
        nvml.discover(backend.sysfs)


def test_unified_memory_gpu_needs_a_published_size(fake_node) -> None:
    backend = fake_node("h200x1")
    os.environ["HOOKCORE_STUB_NVML_FAIL"] = "nvmlDeviceGetMemoryInfo=3"
    with pytest.raises(nvml.NvmlError, match="deviceMemory"):
        nvml.discover(backend.sysfs)
    inv = nvml.discover(backend.sysfs, memory_override=96 * GiB)
    assert inv.gpus[0].memory == 96 * GiB


def test_a_gpu_lost_at_discovery_is_left_out_not_fatal(fake_node) -> None:
    backend = fake_node("h200x3")
    lost = backend.node.gpus[1].uuid
    os.environ["HOOKCORE_STUB_NVML_FAIL"] = f"nvmlDeviceGetBrand@{lost}=15"
    inv = nvml.discover(backend.sysfs)
    assert [g.index for g in inv.gpus] == [0, 2]
    assert len(inv.skipped) == 1 and "GPU is lost" in inv.skipped[0]


def test_a_whole_gpus_sm_count_comes_from_its_cores_as_on_the_h200(fake_node) -> None:
    """Driver 580 refuses nvmlDeviceGetAttributes for a whole H200 (NOT_SUPPORTED, measured: its
    reference documents MIG handles only), as the stub does: the count is NVML's core count over the
    cores per SM of the compute capability (16896 / 128 = 132; an A100's 6912 / 64 = 108)."""
    backend = fake_node("h200x1")
    assert [g.sms for g in nvml.discover(backend.sysfs).gpus] == [132]
    backend = fake_node("a100-40gx4")
    assert [g.sms for g in nvml.discover(backend.sysfs).gpus] == [108] * 4


def test_a_gpu_whose_nvml_gives_no_sm_count_is_discovered_without_one(fake_node, caplog: pytest.LogCaptureFixture) -> None:
    """Neither the attributes nor the core count: the count stays unknown (the hook then asks CUDA,
    as before), logged once."""
    backend = fake_node("h200x2")
    os.environ["HOOKCORE_STUB_NVML_FAIL"] = "nvmlDeviceGetNumGpuCores=3"  # NVML_ERROR_NOT_SUPPORTED
    nvml._sms_unknown_logged = False
    with caplog.at_level("WARNING", logger=nvml.log.name):
        inv = nvml.discover(backend.sysfs)
    assert [g.sms for g in inv.gpus] == [None, None]
    assert [r.message for r in caplog.records].count(
        "the GPU's SM count is unknown: under MPS the hook charges a client's full device time, throttling it twice"
        " (by MPS and by the claim's cores)") == 1


def test_missing_sysfs_leaves_topology_out(fake_node, tmp_path: Path) -> None:
    fake_node("h200x1")
    inv = nvml.discover(tmp_path / "empty-sys")
    g = inv.gpus[0]
    assert g.pcie_root is None and g.numa_node is None
    attrs = devices.to_devices(inv)[0].attributes
    assert "resource.kubernetes.io/pcieRoot" not in attrs and "numaNode" not in attrs


def test_sysfs_numa_minus_one_means_none(tmp_path: Path) -> None:
    topology.build_fake_sysfs(tmp_path, [("0000:19:00.0", "pci0000:15", None)])
    assert topology.numa_node(tmp_path, "0000:19:00.0") is None
    assert topology.pcie_root(tmp_path, "0000:19:00.0") == "pci0000:15"


@pytest.mark.parametrize("raw,want", [("580.159.04", "580.159.4"), ("550.54", "550.54.0"), ("535.104.05", "535.104.5")])
def test_driver_versions_become_semver(raw: str, want: str) -> None:
    assert nvml.version(raw) == want


def test_bus_ids_take_sysfs_form() -> None:
    assert nvml.bus_id("00000000:1B:00.0") == "0000:1b:00.0"
    assert nvml.cuda_version(12090) == "12.9.0"
