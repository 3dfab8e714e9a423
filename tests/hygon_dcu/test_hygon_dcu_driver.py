"""The Hygon DCU driver against fake DCUs: ROCm SMI discovery through ctypes on the stub
librocm_smi64.so, the device model, the claim's visible devices, edits, enforcement, health,
settings, and failures that name the call."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from driver_helpers import fake_drivers

import dra
from dra import AllocatedDevice, ClaimRef, PrepareError
from drivers.hygon_dcu import devices, edits, fake, rsmi
from drivers.hygon_dcu.config import DcuConfig
from drivers.hygon_dcu.driver import HygonDcuDriver
from drivers.hygon_dcu.health import HealthMonitor
from drivers.hygon_dcu.settings import Settings

GiB, MiB = 1 << 30, 1 << 20
CLAIM = ClaimRef("0c6a3f6e-0000-4000-8000-00000000dc01", "default", "c")


@pytest.fixture
def driver(stub_rsmi: Path, clean_stub_env: None) -> Iterator[Callable[..., HygonDcuDriver]]:
    yield from fake_drivers(HygonDcuDriver, "k100-aix8")


def alloc(device: str, share: str | None = "s1", config: DcuConfig | None = None, **capacity: int) -> AllocatedDevice:
    return AllocatedDevice("dcu", "node-a", device, share, capacity, config=config)


# --------------------------------------------------------------------------------------------
# Discovery


def test_k100_ai_x8_is_eight_devices_with_unique_ids_and_topology(fake_dcus) -> None:
    backend = fake_dcus("k100-aix8", node="node-a")
    inv = rsmi.discover(backend.rsmi, backend.sysfs)
    assert inv.driver_version == "6.3.8"
    assert [d.index for d in inv.dcus] == list(range(8))
    d0 = inv.dcus[0]
    assert (d0.name, d0.memory, d0.compute_units, d0.render_minor) == ("K100_AI", 64 * GiB, 120, 128)
    assert d0.uuid == fake.fake_uuid("node-a", 0) and len(d0.uuid) == len("DCU-") + 16
    assert [d.pci_bus_id for d in inv.dcus[:3]] == ["0000:c1:00.0", "0000:c2:00.0", "0000:81:00.0"]
    # PCIe root and NUMA node from (the fake) sysfs, two DCUs per root, half per NUMA node
    assert [d.pcie_root for d in inv.dcus[:3]] == ["pci0000:c0", "pci0000:c0", "pci0000:80"]
    assert [d.numa_node for d in inv.dcus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert d0.serial is None  # the stub reports none unless told: NOT_SUPPORTED is "no serial"


@pytest.mark.parametrize("spec,name,memory,cus", [("z100x2", "Z100", 32752 * MiB, 60), ("k100x1", "K100", 64 * GiB, 120)])
def test_profiles_of_other_models(fake_dcus, spec: str, name: str, memory: int, cus: int) -> None:
    backend = fake_dcus(spec)
    assert {(d.name, d.memory, d.compute_units) for d in rsmi.discover(backend.rsmi, backend.sysfs).dcus} == {
        (name, memory, cus)}


def test_compute_units_come_from_the_kfd_topology_or_are_left_out(fake_dcus, tmp_path: Path) -> None:
    backend = fake_dcus("k100-aix2")
    assert rsmi.compute_units(backend.sysfs) == {128: 120, 129: 120}  # node 0 is the CPU: no SIMDs
    inv = rsmi.discover(backend.rsmi, tmp_path)  # no KFD topology where sysfs is
    assert {d.compute_units for d in inv.dcus} == {None}
    assert "computeUnits" not in devices.to_device(inv.dcus[0], inv).attributes


def test_uuids_differ_between_fake_nodes(fake_dcus) -> None:
    a = {d.uuid for d in rsmi.discover(fake_dcus("k100-aix2", node="a").rsmi).dcus}
    b = {d.uuid for d in rsmi.discover(fake_dcus("k100-aix2", node="b").rsmi).dcus}
    assert not a & b


@pytest.mark.parametrize("call", ["rsmi_dev_pci_id_get", "rsmi_dev_name_get", "rsmi_dev_memory_total_get",
                                  "rsmi_dev_drm_render_minor_get", "rsmi_dev_unique_id_get"])
def test_a_failed_query_is_an_error_naming_the_call_and_the_device(fake_dcus, call: str) -> None:
    backend = fake_dcus("k100-aix2")
    os.environ["HOOKCORE_STUB_RSMI_FAIL"] = f"{call}@0000:c2:00.0=3"
    with pytest.raises(rsmi.RsmiError) as err:
        rsmi.discover(backend.rsmi)
    msg = str(err.value)
    assert msg.startswith(f"ROCm SMI {call}(device 1") and "RSMI_STATUS_FILE_ERROR (3)" in msg and "DCU kernel driver" in msg
    if call != "rsmi_dev_pci_id_get":  # the bus ID is what names the device afterwards
        assert "0000:c2:00.0" in msg


def test_no_unique_id_falls_back_to_the_bus_id_no_serial_is_none(fake_dcus) -> None:
    backend = fake_dcus("k100-aix1")
    os.environ["HOOKCORE_STUB_RSMI_FAIL"] = "rsmi_dev_unique_id_get=2,rsmi_dev_serial_number_get=2"
    (d,) = rsmi.discover(backend.rsmi).dcus
    assert (d.uuid, d.serial) == ("DCU-0000c1000", None)
    os.environ["HOOKCORE_STUB_RSMI_FAIL"] = "rsmi_dev_serial_number_get=4"
    with pytest.raises(rsmi.RsmiError, match=r"rsmi_dev_serial_number_get.*PERMISSION.*root"):
        rsmi.discover(backend.rsmi)


def test_init_failure_and_missing_library(fake_dcus, stub_rsmi: Path, tmp_path: Path) -> None:
    fake_dcus("k100-aix1")
    os.environ["HOOKCORE_STUB_RSMI_FAIL"] = "rsmi_init=8"
    with pytest.raises(rsmi.RsmiError, match=r"rsmi_init\(\) failed: RSMI_STATUS_INIT_ERROR \(8\)"):
        rsmi.Rsmi(stub_rsmi)
    with pytest.raises(rsmi.RsmiError, match=r"librocm_smi64\.so not found: is the DCU driver stack"):
        rsmi.Rsmi([tmp_path / "librocm_smi64.so"])


def test_yaml_file_describes_a_mixed_node(fake_dcus, tmp_path: Path) -> None:
    f = tmp_path / "node.yaml"
    f.write_text(
        "driverVersion: 6.2.26\n"
        "dcus:\n"
        "- {model: z100, numaNode: 1, serial: HY0001}\n"
        "- {name: K100_AI, memory: 64Gi, computeUnits: 104, pciBusID: '0000:3d:00.0', pcieRoot: pci0000:3a,"
        "   renderMinor: 140, uuid: DCU-00000000000000ab}\n"
    )
    backend = fake_dcus(str(f))
    a, b = rsmi.discover(backend.rsmi, backend.sysfs).dcus
    assert (a.name, a.memory, a.numa_node, a.serial, a.compute_units) == ("Z100", 32752 * MiB, 1, "HY0001", 60)
    assert (b.uuid, b.pci_bus_id, b.pcie_root, b.render_minor, b.compute_units) == (
        "DCU-00000000000000ab", "0000:3d:00.0", "pci0000:3a", 140, 104)


@pytest.mark.parametrize("doc,error", [
    ("dcus: []\n", "`dcus:` must be a non-empty list"),
    ("npus: [{model: k100}]\n", "unknown keys \\['npus'\\]"),
    ("dcus:\n- {model: bw1000}\n", "unknown model 'bw1000'"),
    ("dcus:\n- {name: K100}\n", "give `model:` or at least `name:` and `memory:`"),
    ("dcus:\n- {model: k100, uuid: GPU-1}\n", "uuid 'GPU-1' must look like DCU-"),
    ("dcus:\n- {model: k100, renderMinor: 7}\n", "renderMinor must be an integer in 128..255"),
    ("dcus:\n- {model: k100}\n- {model: k100, pciBusID: '0000:c1:00.0'}\n", "two DCUs share one pci_bus_id"),
    ("dcus:\n- {model: k100, memory: lots}\n", "memory 'lots' is not a quantity"),
])
def test_bad_fake_files_say_what_to_change(tmp_path: Path, doc: str, error: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(doc)
    with pytest.raises(fake.FakeDevicesError, match=error):
        fake.load(str(f), "node-a")


@pytest.mark.parametrize("spec,error", [("h200x8", "unknown fake-device profile 'h200x8'"),
                                        ("k100x17", "count must be 1..16")])
def test_bad_profiles(spec: str, error: str) -> None:
    with pytest.raises(fake.FakeDevicesError, match=error):
        fake.load(spec, "node-a")


def test_stub_rejects_a_malformed_description(stub_rsmi: Path, clean_stub_env: None, capfd) -> None:
    os.environ["HOOKCORE_STUB_HIP_DEVICES"] = "pci=c1:00.0,memory=64Gi"
    assert rsmi.Rsmi(stub_rsmi).count() == 0  # no device, not a default one
    assert "stub: HOOKCORE_STUB_HIP_DEVICES: device 0: pci=c1:00.0: expected dddd:bb:dd.f" in capfd.readouterr().err


# --------------------------------------------------------------------------------------------
# The driver


def test_setup_publishes_each_dcus_attributes_and_memory_policy(driver) -> None:
    """What only DCUs publish (names, uuids, cores and shareability: test_shared_device_drivers)."""
    devs = driver(settings={"health": "off"}).devices()
    a = devs[5].attributes
    assert {k: a[k] for k in ("type", "index", "productName", "brand", "computeUnits", "renderMinor", "driverVersion")} == {
        "type": "DCU", "index": 5, "productName": "K100_AI", "brand": "Hygon", "computeUnits": 120, "renderMinor": 133,
        "driverVersion": "6.3.8"}
    assert a["resource.kubernetes.io/pciBusID"] == "0000:02:00.0"
    assert (a["resource.kubernetes.io/pcieRoot"], a["numaNode"]) == ("pci0000:00", 1)
    assert devs[0].capacity["memory"] == dra.Capacity(
        "65536Mi", dra.RequestPolicy(default="65536Mi", min="1Mi", max="65536Mi", step="1Mi"))


def test_visible_dcus_are_in_bus_order_with_shares_summed_and_the_stub_told(driver) -> None:
    d = driver(settings={"health": "off"})
    got = d.visible(CLAIM, [
        alloc("dcu-2", "a", memory=3 * GiB, cores=30),   # 0000:81:00.0
        alloc("dcu-1", "b", memory=4 * GiB, cores=20),   # 0000:c2:00.0
        alloc("dcu-2", "c", memory=1 * GiB, cores=90),   # a second share of dcu-2
    ])
    assert [(v.device.pci_bus_id, v.memory, v.cores) for v in got] == [("0000:81:00.0", 4 * GiB, 100),
                                                                       ("0000:c2:00.0", 4 * GiB, 20)]
    e = d.claim_edits(CLAIM, d.prepare(CLAIM, [alloc("dcu-1", memory=GiB, cores=30), alloc("dcu-2", memory=GiB, cores=30)]))
    assert e.env["HIP_VISIBLE_DEVICES"] == "0,1"
    stub = [dict(kv.split("=") for kv in entry.split(",")) for entry in e.env["HOOKCORE_STUB_HIP_DEVICES"].split(";")]
    assert [s["pci"] for s in stub] == ["0000:81:00.0", "0000:c2:00.0"]  # the container's devices, numbered from 0
    assert e.device_nodes == ()  # fake DCUs have no /dev/kfd; their "HIP" is the stub, at /usr/lib
    assert {m.container_path: Path(m.host_path).name for m in e.mounts} == {
        "/usr/lib/libamdhip64.so.6": "libamdhip64.so.6", "/usr/lib/libamdhip64.so": "libamdhip64.so.6"}


def test_enforcement_is_libvhip_with_one_quota_per_dcu_keyed_by_bus_id(driver) -> None:
    d = driver(settings={"health": "off"})
    allocs = [alloc("dcu-6", "a", memory=3 * GiB, cores=30), alloc("dcu-1", "b", memory=GiB, cores=60),
              alloc("dcu-6", "c", memory=GiB, cores=10)]
    enf = d.enforcement(CLAIM, d.prepare(CLAIM, allocs))
    assert enf.library.name == "libvhip.so" and enf.preload is None
    assert list(d.hook_libraries()) == [enf.library]
    assert list(enf.quotas) == [dra.Quota("pci-0000:41:00.0", 4 * GiB, 40), dra.Quota("pci-0000:c2:00.0", GiB, 60)]
    cfg = DcuConfig(preload="env", compute_limit=False)
    enf = d.enforcement(CLAIM, d.prepare(CLAIM, [alloc("dcu-0", "a", cfg, memory=GiB, cores=30)]))
    assert enf.preload is dra.Preload.ENV and list(enf.quotas) == [dra.Quota("pci-0000:c1:00.0", GiB, 100)]


def test_shares_over_the_dcus_memory_are_refused(driver) -> None:
    d = driver(fake="z100x2", settings={"health": "off"})
    with pytest.raises(PrepareError, match="more than the DCU's"):
        d.prepare(CLAIM, [alloc("dcu-0", "a", memory=20 * GiB, cores=10), alloc("dcu-0", "b", memory=20 * GiB, cores=10)])


def test_opaque_config_is_strict() -> None:
    ok = dra.decode_config(HygonDcuDriver, {"apiVersion": "hygon-dcu.project-hami.io/v1alpha1", "kind": "DcuConfig",
                                            "preload": "env", "computeLimit": False})
    assert ok == DcuConfig(preload="env", compute_limit=False)
    with pytest.raises(dra.ConfigError, match="'cuMask': unknown field"):
        dra.decode_config(HygonDcuDriver, {"apiVersion": "hygon-dcu.project-hami.io/v1alpha1", "kind": "DcuConfig",
                                           "cuMask": "0xff"})


def test_dcu_config_marks_what_loosens_as_the_npus_does() -> None:
    """The loosening rule covers the config type's declaration: a claim's own config may not set
    these below its class's without the admin's allowClaimLoosening (dra._runtime.loosening)."""
    from dra._runtime.loosening import marked_fields
    from drivers.ascend.config import NpuConfig

    assert marked_fields(DcuConfig) == marked_fields(NpuConfig) == ["preload", "computeLimit", "watchdogAction"]


def _host(tmp_path: Path, renders: int = 2, mkfd: bool = True, hyhal: bool = True) -> tuple[Path, Path]:
    dev, drv = tmp_path / "dev-root", tmp_path / "driver-root"
    (dev / "dev" / "dri").mkdir(parents=True)
    (dev / "dev" / "kfd").touch()
    if mkfd:
        (dev / "dev" / "mkfd").touch()
    for i in range(renders):
        (dev / "dev" / "dri" / f"renderD{128 + i}").touch()
    drv.mkdir()
    if hyhal:
        (drv / "opt" / "hyhal" / "lib").mkdir(parents=True)
    return dev, drv


def test_host_edits_list_kfd_the_render_nodes_and_hyhal(tmp_path: Path) -> None:
    dev, drv = _host(tmp_path)
    e = edits.HostFiles.find(dev, drv).claim_edits()
    assert [n.path for n in e.device_nodes] == ["/dev/kfd", "/dev/mkfd"]
    assert [(m.host_path, m.container_path, "ro" in m.options) for m in e.mounts] == [
        (str(drv / "opt/hyhal"), "/opt/hyhal", True)]
    assert edits.render_node(129, dev) == dra.DeviceNode("/dev/dri/renderD129", host_path=str(dev / "dev/dri/renderD129"))
    with pytest.raises(PrepareError, match="/dev/dri/renderD140 does not exist under devRoot"):
        edits.render_node(140, dev)
    bare = edits.HostFiles.find(*_host(tmp_path / "b", mkfd=False, hyhal=False)).claim_edits()
    assert [n.path for n in bare.device_nodes] == ["/dev/kfd"] and bare.mounts == ()
    (dev / "dev/kfd").unlink()
    with pytest.raises(FileNotFoundError, match="/dev/kfd not found under devRoot"):
        edits.HostFiles.find(dev, drv)


def test_a_real_node_claim_gets_kfd_its_render_nodes_and_hip_visible_devices(driver, tmp_path: Path) -> None:
    """The real backend's edits, on fake DCUs with a host /dev laid out (the fake backend has no nodes)."""
    d = driver(fake="k100-aix2", settings={"health": "off"})
    dev, drv = _host(tmp_path)
    d.fake, d.host_files = None, edits.HostFiles.find(dev, drv)
    d.settings = Settings(dev_root=dev, driver_root=drv, health=False)
    prepared = d.prepare(CLAIM, [alloc("dcu-1", memory=GiB, cores=10), alloc("dcu-0", memory=GiB, cores=10)])
    assert [n.path for p in prepared for n in p.edits.device_nodes] == ["/dev/dri/renderD129", "/dev/dri/renderD128"]
    e = d.claim_edits(CLAIM, prepared)
    assert e.env == {"HIP_VISIBLE_DEVICES": "0,1"} and [n.path for n in e.device_nodes] == ["/dev/kfd", "/dev/mkfd"]


# --------------------------------------------------------------------------------------------
# Health


def test_a_failing_health_query_is_unknown_not_tainted_and_no_ecc_is_fine(driver) -> None:
    d = driver(fake="k100-aix1", settings={"health": "off"})
    assert d.inventory is not None and d.fake is not None
    m = HealthMonitor(d.fake.rsmi, d.inventory.dcus, lambda: None)
    os.environ["HOOKCORE_STUB_RSMI_FAIL"] = "rsmi_dev_ecc_count_get=16"
    m.poll()
    ((_, healthy, message),) = m.snapshot()
    assert healthy is None and "rsmi_dev_ecc_count_get" in message and "BUSY" in message and m.taints() == {}
    os.environ["HOOKCORE_STUB_RSMI_FAIL"] = "rsmi_dev_ecc_count_get=2"
    m.poll()
    assert m.snapshot() == [(d.inventory.dcus[0].uuid, True, "ok (no ECC reporting)")]
