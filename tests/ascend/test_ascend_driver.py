"""The driver class against fake NPUs: its attributes, the claim's visible NPUs, edits, quotas, health
queries, CDI files. What every shared-device driver does is in tests/drivers/test_shared_device_drivers.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from driver_helpers import fake_drivers

import dra
from dra import AllocatedDevice, ClaimRef, PrepareError
from drivers.ascend import edits
from drivers.ascend.config import NpuConfig
from drivers.ascend.driver import AscendDriver

GiB = 1 << 30
CLAIM = ClaimRef("0c6a3f6e-0000-4000-8000-00000000a5c1", "default", "c")


@pytest.fixture
def driver(stub_dcmi: Path, clean_stub_env: None) -> Iterator[Callable[..., AscendDriver]]:
    yield from fake_drivers(AscendDriver, "910b3x8")


def alloc(device: str, share: str | None = "s1", config: NpuConfig | None = None, **capacity: int) -> AllocatedDevice:
    return AllocatedDevice("npu", "node-a", device, share, capacity, config=config)


def test_an_npu_is_published_with_hamis_attribute_names_and_its_capacity(driver) -> None:
    devs = driver(settings={"health": "off"}).devices()
    a = devs[3].attributes
    assert {k: a[k] for k in ("type", "index", "physicalID", "model", "productName", "brand", "chipName", "aiCores")} == {
        "type": "HAMivNPUCore", "index": 3, "physicalID": 3, "model": "Ascend910B", "productName": "Ascend910B3",
        "brand": "Huawei", "chipName": "910B3", "aiCores": 20,
    }
    assert str(a["uuid"]).startswith("NPU-") and a["resource.kubernetes.io/pciBusID"] == "0000:82:00.0"
    assert (a["resource.kubernetes.io/pcieRoot"], a["numaNode"], a["driverVersion"]) == ("pci0000:80", 0, "25.0.rc1.1")
    cap = devs[0].capacity
    assert cap["memory"] == dra.Capacity("65536Mi", dra.RequestPolicy(default="65536Mi", min="1Mi", max="65536Mi", step="1Mi"))
    assert cap["cores"] == dra.Capacity("100", dra.RequestPolicy(default="100", min="1", max="100", step="1"))


def test_visible_npus_are_in_physical_order_with_shares_summed(driver) -> None:
    d = driver(settings={"health": "off"})
    uuid = {x.name: x.attributes["uuid"] for x in d.devices()}
    got = d.visible(CLAIM, [
        alloc("npu-5-0", "a", memory=3 * GiB, cores=30),
        alloc("npu-2-0", "b", memory=4 * GiB, cores=20),
        alloc("npu-5-0", "c", memory=1 * GiB, cores=90),  # a second share of NPU 5
    ])
    assert [(v.device.uuid, v.device.phy_id, v.memory, v.cores) for v in got] == [
        (uuid["npu-2-0"], 2, 4 * GiB, 20), (uuid["npu-5-0"], 5, 4 * GiB, 100)]
    e = d.claim_edits(CLAIM, d.prepare(CLAIM, [alloc("npu-5-0", memory=GiB, cores=30), alloc("npu-2-0", memory=GiB, cores=30)]))
    assert e.env["ASCEND_VISIBLE_DEVICES"] == "2,5"
    # the fake backend tells the workload's stub ACL which NPUs its container has, numbered from 0
    stub = [dict(kv.split("=") for kv in entry.split(",")) for entry in e.env["HOOKCORE_STUB_NPUS"].split(";")]
    assert [(s["uuid"], s["logic"], s["phy"]) for s in stub] == [(uuid["npu-2-0"], "0", "2"), (uuid["npu-5-0"], "1", "5")]
    assert e.device_nodes == ()  # fake NPUs have no /dev/davinci*; their "CANN" is the stub ACL, at /usr/lib
    assert {m.container_path: Path(m.host_path).name for m in e.mounts} == {
        "/usr/lib/libascendcl.so": "libascendcl.so", "/usr/lib/libruntime.so": "libruntime.so"}
    assert "LD_LIBRARY_PATH" not in e.env  # another driver's device in the same container may set it


def test_enforcement_is_libvnpu_with_one_quota_per_visible_npu_keyed_by_physical_id(driver) -> None:
    d = driver(settings={"health": "off"})
    allocs = [alloc("npu-6-0", "a", memory=3 * GiB, cores=30), alloc("npu-1-0", "b", memory=GiB, cores=60),
              alloc("npu-6-0", "c", memory=GiB, cores=10)]
    prepared = d.prepare(CLAIM, allocs)
    enf = d.enforcement(CLAIM, prepared)
    # each prepared device's state keeps the key its quota names it by (the watchdog and the ledger
    # metrics match the hook's devices with it: the published UUID is not what the hook sees)
    assert [p.state[dra.HOOK_KEY] for p in prepared] == ["davinci6", "davinci1", "davinci6"]
    assert enf.library.name == "libvnpu.so" and enf.preload is None
    assert list(d.hook_libraries()) == [enf.library]  # installed at daemon start, before the first publish
    assert list(enf.quotas) == [dra.Quota("davinci1", GiB, 60), dra.Quota("davinci6", 4 * GiB, 40)]
    cfg = NpuConfig(preload="env", compute_limit=False)
    enf = d.enforcement(CLAIM, d.prepare(CLAIM, [alloc("npu-2-0", "a", cfg, memory=GiB, cores=30)]))
    assert enf.preload is dra.Preload.ENV and list(enf.quotas) == [dra.Quota("davinci2", GiB, 100)]


def test_more_memory_than_the_npu_is_refused(driver) -> None:
    d = driver(fake="910b4x1", settings={"health": "off"})
    with pytest.raises(PrepareError, match="more than the NPU's 34359738368"):
        d.prepare(CLAIM, [alloc("npu-0-0", "a", memory=20 * GiB, cores=10), alloc("npu-0-0", "b", memory=20 * GiB, cores=10)])


def test_each_npu_is_held_by_the_strictest_compute_limit_of_its_requests(driver) -> None:
    """Review 2026-12-04 #10: an NPU's compute limit lifted only where every request on it lifts it."""
    d = driver(settings={"health": "off"})
    off = NpuConfig(preload="env", compute_limit=False)
    e = d.enforcement(CLAIM, d.prepare(CLAIM, [alloc("npu-0-0", "a", NpuConfig(preload="file"), memory=GiB, cores=10),
                                               alloc("npu-0-0", "b", off, memory=GiB, cores=5),
                                               alloc("npu-1-0", "c", off, memory=GiB, cores=5)]))
    assert [q.cores for q in e.quotas] == [15, 100]


def test_opaque_config_is_strict_and_refuses_hamis_traditional_mode() -> None:
    ok = dra.decode_config(AscendDriver, {"apiVersion": "ascend.project-hami.io/v1alpha1", "kind": "NpuConfig",
                                          "preload": "env", "computeLimit": False})
    assert ok == NpuConfig(preload="env", compute_limit=False)
    with pytest.raises(dra.ConfigError, match="'sharing': unknown field"):
        dra.decode_config(AscendDriver, {"apiVersion": "ascend.project-hami.io/v1alpha1", "kind": "NpuConfig",
                                         "sharing": {"strategy": "TimeSlicing"}})
    with pytest.raises(dra.ConfigError, match="preload"):
        dra.decode_config(AscendDriver, {"apiVersion": "ascend.project-hami.io/v1alpha1", "kind": "NpuConfig", "preload": "ld"})


def _host(tmp_path: Path, chips: int = 2) -> tuple[Path, Path]:
    dev, drv = tmp_path / "dev-root", tmp_path / "driver-root"
    (dev / "dev").mkdir(parents=True)
    for name in ("davinci_manager", "devmm_svm", "hisi_hdc", *(f"davinci{i}" for i in range(chips))):
        (dev / "dev" / name).touch()
    (drv / "usr/local/Ascend/driver/lib64").mkdir(parents=True)
    (drv / "usr/local/Ascend/driver/version.info").write_text("Version=25.0.rc1.1\n")
    (drv / "etc").mkdir()
    (drv / "etc/ascend_install.info").write_text("Driver_Install_Path_Param=/usr/local/Ascend\n")
    return dev, drv


def test_cdi_mode_lists_device_nodes_and_driver_files(tmp_path: Path) -> None:
    dev, drv = _host(tmp_path)
    files = edits.HostFiles.find(dev, drv)
    e = files.claim_edits()
    assert [n.path for n in e.device_nodes] == ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]
    assert {m.container_path: m.host_path for m in e.mounts} == {
        "/usr/local/Ascend/driver/lib64": str(drv / "usr/local/Ascend/driver/lib64"),
        "/usr/local/Ascend/driver/version.info": str(drv / "usr/local/Ascend/driver/version.info"),
        "/etc/ascend_install.info": str(drv / "etc/ascend_install.info"),
    }
    assert all("ro" in m.options for m in e.mounts)
    assert edits.chip_node(1, dev) == dra.DeviceNode("/dev/davinci1", host_path=str(dev / "dev/davinci1"))
    with pytest.raises(PrepareError, match="/dev/davinci7 does not exist under devRoot"):
        edits.chip_node(7, dev)
    (dev / "dev/hisi_hdc").unlink()
    with pytest.raises(FileNotFoundError, match="/dev/hisi_hdc not found under devRoot"):
        edits.HostFiles.find(dev, drv)
    with pytest.raises(FileNotFoundError, match="usr/local/Ascend/driver/lib64 not found under driverRoot"):
        edits.HostFiles.find(*_host(tmp_path / "b", 0)[:1], tmp_path)


def test_a_failing_health_query_is_unknown_not_tainted(driver) -> None:
    import os

    d = driver(fake="910b3x1", settings={"health": "off"})
    os.environ["HOOKCORE_STUB_DCMI_FAIL"] = "dcmi_get_device_health=-8006"
    from drivers.ascend.health import HealthMonitor

    assert d.inventory is not None and d.fake is not None
    m = HealthMonitor(d.fake.dcmi, d.inventory.npus, lambda: None)
    m.poll()
    ((_, healthy, message),) = m.snapshot()
    assert healthy is None and "dcmi_get_device_health" in message and "TIME_OUT" in message
    assert m.taints() == {}
