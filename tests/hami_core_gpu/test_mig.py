"""MIG on the fake H200s (``--fake h200x8-mig``, the stub NVML's MIG): static and dynamic devices,
prepare/unprepare creating and destroying instances (the stub's record), the repair at start."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from pathlib import Path

import pytest
from driver_helpers import isolated_env
from kube_helpers import wait_for

from dra import AllocatedDevice, ClaimRef, DriverContext, PrepareError
from dra._runtime.publish.desired import desired_pool, slice_object
from drivers.hami_core_gpu import fake, mig
from drivers.hami_core_gpu.config import GpuConfig
from drivers.hami_core_gpu.driver import HamiCoreGpuDriver
from drivers.hami_core_gpu.health import HealthMonitor

# The stub variables a test may set (conftest.py's list and the MIG record), unset inside, restored after.
STUB_ENV = ("HOOKCORE_STUB_DEVICES", "HOOKCORE_STUB_NVML_DRIVER", "HOOKCORE_STUB_NVML_CUDA", "HOOKCORE_STUB_NVML_FAIL",
            "HOOKCORE_STUB_NVML_EVENTS", "HOOKCORE_STUB_NVML_MIG")
CLAIM = ClaimRef("0c6a3f6e-0000-4000-8000-00000000a1a1", "default", "mig")
H200_PROFILES = ["1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"]
MakeDriver = Callable[..., HamiCoreGpuDriver]


@pytest.fixture
def record(tmp_path: Path, stub_nvml: Path) -> Iterator[Path]:
    """The stub's MIG state and record for this test."""
    with isolated_env(STUB_ENV):
        path = tmp_path / "mig.state"
        import os

        os.environ["HOOKCORE_STUB_NVML_MIG"] = str(path)
        yield path


@pytest.fixture
def driver(record: Path) -> Iterator[MakeDriver]:
    made: list[HamiCoreGpuDriver] = []

    def make(mode: str, recorded: Collection[str] | None = (), profile: str = "h200x8-mig",
             **settings: str) -> HamiCoreGpuDriver:
        d = HamiCoreGpuDriver()
        d.setup(DriverContext("node-a", "node-a", {"mig": mode, "health": "off", **settings}, fake=profile,
                              on_recorded_devices=lambda: None if recorded is None else set(recorded)))
        made.append(d)
        return d

    yield make
    for d in made:
        d.close()


def lines(path: Path, verb: str) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if ln.startswith(verb)] if path.exists() else []


def alloc(device: str, config: GpuConfig | None = None) -> AllocatedDevice:
    return AllocatedDevice("mig", "node-a", device, config=config)


def test_the_fake_profile_has_mig_on_and_refuses_a_model_without_mig() -> None:
    node = fake.profile("h200x8-mig", "n")
    assert len(node.gpus) == 8 and {g.mig for g in node.gpus} == {"on"}
    with pytest.raises(fake.FakeDevicesError, match="no MIG"):
        fake.profile("l4x2-mig", "n")


def test_static_mig_publishes_each_mig_device_never_the_whole_gpu(driver: MakeDriver, record: Path) -> None:
    d = driver("static")
    devs = d.devices()
    assert not [x for x in devs if x.attributes["type"] != "mig"], "a GPU in MIG mode is also offered whole"
    assert len(devs) == 8 * len(fake.STATIC_LAYOUT)
    one = next(x for x in devs if x.name == "hami-gpu-3-mig-2g35gb-4")
    a = one.attributes
    assert a["profile"] == "2g.35gb" and a["parentMinor"] == 3 and a["parentIndex"] == 3
    assert str(a["uuid"]).startswith("MIG-") and str(a["parentUUID"]).startswith("GPU-")
    assert one.capacity["multiprocessors"].value == "32"
    assert int(one.capacity["memory"].value) == 143771 * (1 << 20) * 2 // 8 // (1 << 20) * (1 << 20)
    assert not one.allow_multiple_allocations
    assert len(lines(record, "gi+")) == 8 * len(fake.STATIC_LAYOUT)  # the fake's mig-parted, once


def test_static_mig_prepare_exposes_exactly_that_device_without_the_hook(driver: MakeDriver, record: Path) -> None:
    d = driver("static")
    dev = next(x for x in d.devices() if x.name == "hami-gpu-0-mig-3g71gb-0")
    prepared = d.prepare(CLAIM, [alloc(dev.name)])
    env = d.claim_edits(CLAIM, prepared).env
    assert env["NVIDIA_VISIBLE_DEVICES"] == dev.attributes["uuid"]
    assert env["HOOKCORE_STUB_DEVICES"].count("uuid=") == 1  # the workload's stub CUDA sees one device
    assert d.enforcement(CLAIM, prepared) is None
    before = record.read_text()
    d.unprepare(CLAIM, prepared)
    assert record.read_text() == before, "unprepare of a static MIG device must not touch the partitioning"


def test_a_hook_setting_on_a_mig_device_is_refused_naming_it(driver: MakeDriver) -> None:
    d = driver("static")
    with pytest.raises(PrepareError, match=r"hami-gpu-0-mig-3g71gb-0 is a MIG device.*computeMode"):
        d.prepare(CLAIM, [alloc("hami-gpu-0-mig-3g71gb-0", GpuConfig(compute_mode="strict"))])
    with pytest.raises(PrepareError, match=r"MIG device.*clockElasticity do not apply"):
        d.prepare(CLAIM, [alloc("hami-gpu-0-mig-3g71gb-0", GpuConfig(compute_mode="strict", clock_elasticity=0.0))])


def test_dynamic_mig_devices_draw_on_each_gpus_counters(driver: MakeDriver) -> None:
    d = driver("dynamic")
    devs = d.devices()
    assert sorted({str(x.attributes["profile"]) for x in devs}) == sorted(H200_PROFILES)
    assert len(devs) == 8 * (7 + 4 + 3 + 2 + 1 + 1)
    three = next(x for x in devs if x.name == "hami-gpu-1-mig-3g71gb-4")
    (use,) = three.consumes_counters
    assert use.counter_set.name == "hami-gpu-1-mig"
    assert use.counters == {"memory-slice-4": "1", "memory-slice-5": "1", "memory-slice-6": "1",
                            "memory-slice-7": "1", "compute-slices": "3"}
    pool = desired_pool(d.name, "node-a", devs)
    assert len(pool.slices) == 8  # one slice per GPU: its devices and its counter set
    spec = slice_object(pool, 1, 1, "uid")["spec"]
    assert [c["name"] for c in spec["sharedCounters"]] == ["hami-gpu-1-mig"]
    assert {x["name"].split("-mig-")[0] for x in spec["devices"]} == {"hami-gpu-1"}


def test_dynamic_prepare_creates_unprepare_destroys_and_both_are_idempotent(driver: MakeDriver, record: Path) -> None:
    d = driver("dynamic")
    name = "hami-gpu-2-mig-1g35gb-6"
    prepared = d.prepare(CLAIM, [alloc(name)])
    assert [ln.split()[3:] for ln in lines(record, "gi+")] == [["15", "6", "2"]]
    assert len(lines(record, "ci+")) == 1
    uuid = prepared[0].state["uuid"]
    assert d.claim_edits(CLAIM, prepared).env["NVIDIA_VISIBLE_DEVICES"] == uuid
    again = d.prepare(CLAIM, [alloc(name)])  # kubelet's retry after a crash: the same instance
    assert again[0].state["uuid"] == uuid and len(lines(record, "gi+")) == 1
    d.unprepare(CLAIM, prepared)
    assert len(lines(record, "gi-")) == 1 and len(lines(record, "ci-")) == 1
    d.unprepare(CLAIM, prepared)  # already gone
    assert len(lines(record, "gi-")) == 1


def test_dynamic_prepare_on_an_occupied_placement_is_refused_naming_device_and_gpu(driver: MakeDriver) -> None:
    d = driver("dynamic")
    d.prepare(CLAIM, [alloc("hami-gpu-0-mig-4g71gb-0")])
    other = ClaimRef("0c6a3f6e-0000-4000-8000-00000000a1a2", "default", "other")
    with pytest.raises(PrepareError, match=r"hami-gpu-0-mig-2g35gb-2: cannot create MIG 2g.35gb at slice 2 on GPU-"):
        d.prepare(other, [alloc("hami-gpu-0-mig-2g35gb-2")])


def test_a_mixed_claim_is_refused(driver: MakeDriver) -> None:
    d = driver("dynamic")
    with pytest.raises(PrepareError, match="MIG devices and hook-shared GPUs"):
        d.migs.is_mig([alloc("hami-gpu-0-mig-4g71gb-0"), alloc("hami-gpu-9")])


def test_start_destroys_instances_no_record_names_and_keeps_recorded_ones(driver: MakeDriver, record: Path) -> None:
    first = driver("dynamic")
    first.prepare(CLAIM, [alloc("hami-gpu-0-mig-7g141gb-0")])  # then "crashed" before its record
    first.prepare(CLAIM, [alloc("hami-gpu-1-mig-2g35gb-0")])
    driver("dynamic", recorded=None)  # checkpoint unreadable: nothing repaired
    assert lines(record, "gi-") == []
    driver("dynamic", recorded={"hami-gpu-1-mig-2g35gb-0"})
    parent = {x.name: str(x.attributes["parentUUID"]) for x in first.devices()}
    gone = lines(record, "gi-")
    assert [ln.split()[1] for ln in gone] == [parent["hami-gpu-0-mig-7g141gb-0"]]
    gpu1 = parent["hami-gpu-1-mig-2g35gb-0"]
    assert [(p.name, start) for p, start in mig.instances(gpu1, mig.discover([gpu1])[gpu1].profiles)] == [("2g.35gb", 0)]


def test_mig_off_leaves_mig_gpus_out(driver: MakeDriver) -> None:
    assert driver("off").devices() == []


def test_a_bad_mig_setting_is_refused_naming_the_key() -> None:
    from drivers.hami_core_gpu.settings import Settings, SettingsError

    with pytest.raises(SettingsError, match="mig"):
        Settings.parse({"mig": "sometimes"})


def test_from_1_35_counter_sets_get_slices_of_their_own(driver: MakeDriver) -> None:
    d = driver("dynamic")
    pool = desired_pool(d.name, "node-a", d.devices(), separate_counters=True)
    # 8 counter sets: one slice of sets (at most 8 per slice), then the 144 devices, at most 64 per slice
    assert [len(s) for s in pool.slices] == [0, 64, 64, 16]
    assert [len(pool.shared_counters(i)) for i in range(len(pool.slices))] == [8, 0, 0, 0]
    first = slice_object(pool, 0, 1, "uid")["spec"]
    assert "devices" not in first and len(first["sharedCounters"]) == 8  # 1.37 refuses even an empty list
    assert "sharedCounters" not in slice_object(pool, 1, 1, "uid")["spec"]


def test_an_xid_on_a_mig_gpu_taints_its_mig_devices_and_reports_them_unhealthy(driver: MakeDriver, tmp_path: Path) -> None:
    import os

    events = tmp_path / "events"
    events.touch()
    os.environ["HOOKCORE_STUB_NVML_EVENTS"] = str(events)
    d = driver("static", health="on", healthProbeInterval="0.2")
    assert isinstance(d.monitor, HealthMonitor) and d.monitor.watching.wait(1)  # XIDs injected from now on are seen
    parent = {x.name: str(x.attributes["parentUUID"]) for x in d.devices()}["hami-gpu-2-mig-3g71gb-0"]
    assert not any(x.taints for x in d.devices())
    with events.open("a") as f:
        f.write(f"xid {parent} 48 1\n")  # double-bit ECC, recovery action: reset (stays until reset)
    wait_for(lambda: any(x.taints for x in d.devices()), 30, 0.05, what="a MIG device tainted")
    tainted = sorted(x.name for x in d.devices() if x.taints)
    assert tainted == ["hami-gpu-2-mig-1g18gb-6", "hami-gpu-2-mig-2g35gb-4", "hami-gpu-2-mig-3g71gb-0"]
    health = {e.device: e.healthy for e in d.health_events()}
    assert health["hami-gpu-2-mig-3g71gb-0"] is False and health["hami-gpu-3-mig-3g71gb-0"] is True


def test_create_adopts_only_an_instance_no_other_record_names(driver: MakeDriver, record: Path) -> None:
    """review 2026-12-04 #8: `create` finds an instance already at its placement (a retried prepare)
    only when no other claim's record names it (`held`), and none when the records are unknown."""
    d = driver("dynamic")
    gpu, profile, start = d.migs.dynamic["hami-gpu-1-mig-2g35gb-2"]
    made = mig.create(gpu.uuid, profile, start, {})
    assert mig.create(gpu.uuid, profile, start, {}) == made  # adopted: nobody else names it
    with pytest.raises(PrepareError, match=r"GPU instance \d+, MIG-.*is claim ns/other \(u1\)'s: not adopted;"
                                           r" kubelet retries once that claim is unprepared"):
        mig.create(gpu.uuid, profile, start, {(made.gpu_instance, made.uuid): "ns/other (u1)"})
    with pytest.raises(PrepareError, match="a checkpoint record is unreadable"):
        mig.create(gpu.uuid, profile, start, None)
    assert len(lines(record, "gi+")) == 1


def test_destroy_removes_only_the_named_instance(driver: MakeDriver, record: Path) -> None:
    """review 2026-12-04 #8: `destroy` with the record's (GI id, UUID) leaves another instance at the
    placement, and one whose UUID another record names (`keep`)."""
    d = driver("dynamic")
    gpu, profile, start = d.migs.dynamic["hami-gpu-1-mig-2g35gb-2"]
    made = mig.create(gpu.uuid, profile, start, {})
    assert mig.destroy(gpu.uuid, profile, start, (made.gpu_instance + 1, made.uuid)) == "another"
    assert mig.destroy(gpu.uuid, profile, start, (made.gpu_instance, "MIG-not-it")) == "another"
    assert mig.destroy(gpu.uuid, profile, start, (made.gpu_instance, made.uuid), keep=[made.uuid]) == "kept"
    assert lines(record, "gi-") == []
    assert mig.destroy(gpu.uuid, profile, start, (made.gpu_instance, made.uuid)) == "destroyed"
    assert mig.destroy(gpu.uuid, profile, start, (made.gpu_instance, made.uuid)) == "none"
    assert len(lines(record, "gi-")) == 1
