"""DCMI discovery through ctypes against the stub libdcmi.so: what the node reports, and failures
that name the call."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from drivers.ascend import dcmi, devices, fake, models

GiB = 1 << 30


def test_910b3x8_is_eight_910b3_with_die_uuids_and_topology(fake_npus) -> None:
    backend = fake_npus("910b3x8", node="node-a")
    inv = dcmi.discover(backend.dcmi, backend.sysfs)
    assert inv.driver_version == "25.0.rc1.1"
    assert [n.logic_id for n in inv.npus] == list(range(8))
    n0 = inv.npus[0]
    assert (n0.chip_name, n0.product_name, n0.ai_cores, n0.memory) == ("910B3", "Ascend910B3", 20, 64 * GiB)
    assert (n0.card, n0.chip, n0.phy_id, n0.pci_device_id) == (0, 0, 0, 0xD802)
    assert n0.uuid == fake.fake_uuid("node-a", 0) and n0.uuid.startswith("NPU-") and len(n0.uuid) == 48
    # PCIe root and NUMA node come from (the fake) sysfs, two NPUs per root, half per NUMA node
    assert [n.pcie_root for n in inv.npus[:3]] == ["pci0000:c0", "pci0000:c0", "pci0000:80"]
    assert [n.numa_node for n in inv.npus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert len({n.uuid for n in inv.npus}) == 8


def test_uuids_differ_between_fake_nodes(fake_npus) -> None:
    a = {n.uuid for n in dcmi.discover(fake_npus("910b3x2", node="a").dcmi).npus}
    b = {n.uuid for n in dcmi.discover(fake_npus("910b3x2", node="b").dcmi).npus}
    assert not a & b


def test_910c_modules_carry_two_chips_each(fake_npus) -> None:
    backend = fake_npus("910cx16")
    inv = dcmi.discover(backend.dcmi, backend.sysfs)
    assert len(inv.npus) == 16
    assert [(n.card, n.chip) for n in inv.npus[:4]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert {devices.family(n) for n in inv.npus} == {"Ascend910A3"}
    assert all(n.chip in (0, 1) for n in inv.npus)  # each module's MCU (id device_id_max) is not an NPU


def test_310p_memory_comes_from_ddr_when_hbm_is_not_supported(fake_npus) -> None:
    inv = dcmi.discover(fake_npus("310p3x2").dcmi)
    assert {(n.memory, devices.family(n)) for n in inv.npus} == {(24 * GiB, "Ascend310P")}


@pytest.mark.parametrize("call", [
    "dcmi_get_device_hbm_info", "dcmi_get_device_chip_info", "dcmi_get_device_die_v2", "dcmi_get_device_logic_id",
    "dcmi_get_device_phyid_from_logicid", "dcmi_get_device_pcie_info_v2", "dcmi_get_device_health",
])
def test_a_failed_query_is_an_error_naming_the_call_and_the_npu(fake_npus, call: str) -> None:
    backend = fake_npus("910b3x2")
    uuid1 = backend.node.npus[1].uuid
    os.environ["HOOKCORE_STUB_DCMI_FAIL"] = f"{call}@{uuid1}=-8009"
    with pytest.raises(dcmi.DcmiError) as err:
        dcmi.discover(backend.dcmi)
    msg = str(err.value)
    assert msg.startswith(f"DCMI {call}(card 1 chip 0")
    assert "DCMI_ERR_CODE_IOCTL_FAIL (-8009)" in msg and "/dev/davinci_manager" in msg
    if call != "dcmi_get_device_die_v2":  # the die ID is what names the NPU afterwards
        assert uuid1 in msg


def test_memory_is_never_a_silent_default(fake_npus) -> None:
    backend = fake_npus("910b3x1")
    os.environ["HOOKCORE_STUB_DCMI_FAIL"] = "dcmi_get_device_hbm_info=-8255,dcmi_get_device_memory_info_v3=-8005"
    with pytest.raises(dcmi.DcmiError, match=r"dcmi_get_device_memory_info_v3\(card 0 chip 0, NPU-.*INNER_ERR"):
        dcmi.discover(backend.dcmi)


def test_no_electronic_label_means_no_serial_other_label_errors_fail(fake_npus) -> None:
    backend = fake_npus("910b3x1")
    os.environ["HOOKCORE_STUB_DCMI_FAIL"] = "dcmi_get_device_elabel_info=-8255"
    assert dcmi.discover(backend.dcmi).npus[0].serial is None
    os.environ["HOOKCORE_STUB_DCMI_FAIL"] = "dcmi_get_device_elabel_info=-8006"
    with pytest.raises(dcmi.DcmiError, match=r"dcmi_get_device_elabel_info.*TIME_OUT"):
        dcmi.discover(backend.dcmi)


def test_init_failure_and_missing_library(fake_npus, stub_dcmi: Path, tmp_path: Path) -> None:
    fake_npus("910b3x1")
    os.environ["HOOKCORE_STUB_DCMI_FAIL"] = "dcmi_init=-8002"
    with pytest.raises(dcmi.DcmiError, match=r"dcmi_init\(\) failed: DCMI_ERR_CODE_OPER_NOT_PERMITTED"):
        dcmi.Dcmi(stub_dcmi)
    with pytest.raises(dcmi.DcmiError, match=r"libdcmi\.so not found: is the Ascend driver installed"):
        dcmi.Dcmi([tmp_path / "libdcmi.so"])


def test_yaml_file_describes_a_mixed_node(fake_npus, tmp_path: Path) -> None:
    f = tmp_path / "node.yaml"
    f.write_text(
        "driverVersion: 24.1.rc3\n"
        "npus:\n"
        "- {model: 910b4, numaNode: 1, serial: SN0001}\n"
        "- {chipName: 910B2, memory: 64Gi, aiCores: 24, logicID: 5, physicalID: 9, card: 3, pciBusID: '0000:3d:00.0',"
        "   pcieRoot: pci0000:3a}\n"
    )
    backend = fake_npus(str(f))
    inv = dcmi.discover(backend.dcmi, backend.sysfs)
    a, b = inv.npus
    assert inv.driver_version == "24.1.rc3"
    assert (a.chip_name, a.memory, a.numa_node, a.serial) == ("910B4", 32 * GiB, 1, "SN0001")
    assert (b.logic_id, b.phy_id, b.card, b.pci_bus_id, b.pcie_root) == (5, 9, 3, "0000:3d:00.0", "pci0000:3a")


@pytest.mark.parametrize("doc,error", [
    ("npus: []\n", "`npus:` must be a non-empty list"),
    ("gpus: [{model: h200}]\n", "unknown keys \\['gpus'\\]"),
    ("npus:\n- {model: 950}\n", "unknown model '950'"),
    ("npus:\n- {chipName: 910B3}\n", "give `model:` or at least `chipName:` and `memory:`"),
    ("npus:\n- {model: 910b3, uuid: GPU-1}\n", "uuid 'GPU-1' must look like NPU-"),
    ("npus:\n- {model: 910b3, health: 5}\n", "health must be an integer in 0..3"),
    ("npus:\n- {model: 910b3}\n- {model: 910b3, logicID: 0}\n", "two NPUs share one logic_id"),
    ("npus:\n- {model: 910b3, memory: lots}\n", "memory 'lots' is not a quantity"),
])
def test_bad_fake_files_say_what_to_change(tmp_path: Path, doc: str, error: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(doc)
    with pytest.raises(fake.FakeDevicesError, match=error):
        fake.load(str(f), "node-a")


@pytest.mark.parametrize("spec,error", [
    ("h200x8", "unknown fake-device profile 'h200x8'"),
    ("910cx3", "multiple of 2"),
    ("910b3x0", "count must be 1..32"),
])
def test_bad_profiles(spec: str, error: str) -> None:
    with pytest.raises(fake.FakeDevicesError, match=error):
        fake.load(spec, "node-a")


def test_stub_rejects_a_malformed_description(stub_dcmi: Path, clean_stub_env: None, capfd) -> None:
    os.environ["HOOKCORE_STUB_NPUS"] = "uuid=NPU-1,memory=64Gi"
    d = dcmi.Dcmi(stub_dcmi)
    assert d.chips() == []  # no NPU, not a default one
    assert "stub: HOOKCORE_STUB_NPUS: NPU 0: uuid=NPU-1: expected NPU-" in capfd.readouterr().err


# --- HAMi's model names: one table for the driver and the admission webhook -----------------------


@pytest.mark.parametrize(("profile", "model"), [
    ("910ax2", "Ascend910A"), ("910b2x2", "Ascend910B2"), ("910b3x2", "Ascend910B3"), ("910b4x2", "Ascend910B4"),
    ("310p3x2", "Ascend310P"), ("910cx2", "Ascend910C"),
])
def test_every_hami_model_is_published_under_the_name_its_pods_ask_for(fake_npus, profile: str, model: str) -> None:
    """The webhook turns huawei.com/<model> into a claim selecting productName == <model>: the fake
    of each chip HAMi lists must publish exactly that (a 310P3 is HAMi's Ascend310P)."""
    from dra.webhook import translate, vendors

    backend = fake_npus(profile)
    inv = dcmi.discover(backend.dcmi, backend.sysfs)
    published = {devices.to_device(n, inv).attributes["productName"] for n in inv.npus}
    assert published == {model}
    pod = {"spec": {"containers": [{"name": "c", "resources": {"limits": {f"huawei.com/{model}": "2"}}}]}}
    plan = translate.plan_pod(pod, vendors.load())
    assert not plan.problems, plan.problems
    assert f'.productName == "{model}"' in plan.shares[0].share.selectors[0]


def test_the_driver_reads_the_webhooks_model_table_and_keeps_unlisted_chips_dcmi_name(fake_npus) -> None:
    from dra.webhook import vendors

    table = {chip: v.model_info.name for v in vendors.load().vendors if v.model_info for chip in v.model_info.chips}
    assert models.chip_models() == table and table["310P3"] == "Ascend310P" and table["910_9392"] == "Ascend910C"
    inv = dcmi.discover(fake_npus("910b1x2").dcmi)  # a chip HAMi does not list
    assert {devices.to_device(n, inv).attributes["productName"] for n in inv.npus} == {"Ascend910B1"}
    assert models.parse({"vendors": [{"name": "nvidia", "models": [{"name": "x", "chips": ["y"]}]}]}) == {}
