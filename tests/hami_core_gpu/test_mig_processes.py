"""The processes of MIG devices: the stub NVML's process list in MIG mode (STUB_NVML_PROCESSES
lines ``<index>/<gi>/<ci> <pid> <bytes>``), as NVML answers it on a GPU's handle and on its MIG
devices' handles; the driver's `processes()` over them (static and dynamic MIG, each process under
the MIG device it runs in, an instance the driver does not publish under a name no device has);
and the framework's watchdog judging them against claims the driver prepared, whose containers
carry the claim's marker (their processes' /proc entries made up in a `FakeProc` tree: no root)."""

from __future__ import annotations

import logging
import os
import uuid as uuidlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pynvml
import pytest
from driver_helpers import isolated_env

from dra import AllocatedDevice, ClaimRef, DriverContext, RecordedDevice
from drivers.hami_core_gpu import mig, nvml, processes
from drivers.hami_core_gpu.config import API_VERSION
from drivers.hami_core_gpu.driver import HamiCoreGpuDriver
from tests.watchdog.watchdog_rig import PreparedRig, pod_cgroup

ENV = "STUB_NVML_PROCESSES"
STUB_ENV = ("HOOKCORE_STUB_DEVICES", "HOOKCORE_STUB_NVML_DRIVER", "HOOKCORE_STUB_NVML_CUDA", "HOOKCORE_STUB_NVML_FAIL",
            "HOOKCORE_STUB_NVML_EVENTS", "HOOKCORE_STUB_NVML_MIG", ENV)
NO_INSTANCE = 0xFFFFFFFF
MiB, GiB = 1 << 20, 1 << 30
MakeDriver = Callable[..., HamiCoreGpuDriver]
# Two H200s in MIG mode and one shared (MIG off): what a node mid-migration has.
MIXED = """gpus:
- {model: h200, migMode: "on"}
- {model: h200, migMode: "on"}
- {model: h200, migMode: "off"}
"""


@pytest.fixture
def listing(tmp_path: Path, stub_nvml: Path) -> Iterator[Path]:
    """The stub's process list (empty) and MIG state for this test."""
    with isolated_env(STUB_ENV):
        os.environ["HOOKCORE_STUB_NVML_MIG"] = str(tmp_path / "mig.state")
        path = tmp_path / "nvml-processes"
        path.write_text("")
        os.environ[ENV] = str(path)
        yield path


@pytest.fixture
def driver(listing: Path, tmp_path: Path) -> Iterator[MakeDriver]:
    """`make(mode)`: the driver on a fake node (default: the mixed node above), ``mig=mode``."""
    made: list[HamiCoreGpuDriver] = []
    (tmp_path / "mixed.yaml").write_text(MIXED)

    def make(mode: str, fake: str = str(tmp_path / "mixed.yaml"), recorded: tuple[RecordedDevice, ...] | None = (),
             **settings: str) -> HamiCoreGpuDriver:
        """`recorded`: the checkpoint's records of this driver's devices (None: one is unreadable)."""
        d = HamiCoreGpuDriver()
        d.setup(DriverContext("node-a", "node-a", {"mig": mode, "health": "off", **settings}, fake=fake,
                              on_recorded_devices=lambda: None if recorded is None else {r.device for r in recorded},
                              on_recorded=lambda: recorded))
        made.append(d)
        return d

    yield make
    for d in made:
        d.close()


# --------------------------------------------------------------------------------------------
# The stub


def test_the_stub_answers_a_mig_gpu_per_instance_and_in_aggregate_as_nvml_documents(
        driver: MakeDriver, listing: Path) -> None:
    """A line ``<index>/<gi>/<ci>`` is a process in that MIG device: its handle lists it (with
    the instance IDs), the GPU's handle lists every line of the GPU (NVML's aggregate in MIG mode),
    no MIG device lists a line of another instance or one without an instance; per-process
    utilization is NOT_SUPPORTED on both handles (MIG-enabled GPUs); a GPU with MIG off lists only
    its lines without an instance, utilization as before."""
    d = driver("static")
    a, b = sorted(d.migs.static.values(), key=lambda m: (m.parent_uuid != d.inventory.gpus[0].uuid, m.start))[:2]
    listing.write_text(f"0/{a.gpu_instance}/{a.compute_instance} 4001 {GiB}\n"
                       f"0/{b.gpu_instance}/{b.compute_instance} 4002 {2 * GiB} 70\n"
                       f"0 4003 {MiB}\n0/14/0 4004 1\n2 4005 {3 * GiB} 40\n2/1/0 4006 1\n")
    with nvml.session():
        gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
        every = [(p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId)
                 for p in pynvml.nvmlDeviceGetComputeRunningProcesses(gpu)]
        assert every == [(4001, GiB, a.gpu_instance, a.compute_instance), (4002, 2 * GiB, b.gpu_instance, 0),
                         (4003, MiB, NO_INSTANCE, NO_INSTANCE), (4004, 1, 14, 0)]
        per_device = {}
        for i in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(gpu)):
            try:
                handle = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, i)
            except pynvml.NVMLError_NotFound:
                continue
            per_device[pynvml.nvmlDeviceGetUUID(handle)] = [
                (p.pid, p.usedGpuMemory, p.gpuInstanceId) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)]
            with pytest.raises(pynvml.NVMLError_NotSupported):
                pynvml.nvmlDeviceGetProcessUtilization(handle, 0)
        assert per_device == {a.uuid: [(4001, GiB, a.gpu_instance)], b.uuid: [(4002, 2 * GiB, b.gpu_instance)],
                              **{m.uuid: [] for m in d.migs.static.values()
                                 if m.parent_uuid == a.parent_uuid and m not in (a, b)}}
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetProcessUtilization(gpu, 0)
        shared = pynvml.nvmlDeviceGetHandleByIndex(2)
        assert [(p.pid, p.gpuInstanceId) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(shared)] == [
            (4005, NO_INSTANCE)]
        assert [(s.pid, s.smUtil) for s in pynvml.nvmlDeviceGetProcessUtilization(shared, 0)] == [(4005, 40)]


def test_the_stub_skips_a_malformed_instance_naming_each_line_and_keeps_the_old_grammar(
        driver: MakeDriver, listing: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Between good lines: an instance without its compute instance, a word for an ID, NVML's
    "no instance" as an ID, a trailing slash, a space inside it: each skipped with one stderr line
    each time the file is read (nvidia-ml-py's list call reads it twice: the count, then the list).
    The lines without an instance read as before."""
    driver("static")
    listing.write_text("\n".join([f"2 4101 {MiB} 30", "0/1 4102 1", "0/x/0 4103 1", f"0/{NO_INSTANCE}/0 4104 1",
                                  "0/1/ 4105 1", "0/1/0/ 4106 1", "0 /1/0 4107 1", f"2 4108 {MiB}", ""]))
    with nvml.session():
        got = [(p.pid, p.usedGpuMemory) for p in
               pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(2))]
    assert got == [(4101, MiB), (4108, MiB)]
    skipped = [line for line in capfd.readouterr().err.splitlines() if ENV in line]
    assert [line.split(" line ")[1].split(":")[0] for line in skipped] == ["2", "3", "4", "5", "6", "7"] * 2


# --------------------------------------------------------------------------------------------
# The driver's processes()

CLAIM = ClaimRef("0c6a3f6e-0000-4000-8000-00000000b1b1", "default", "mig")


def seen(d: HamiCoreGpuDriver) -> list[tuple[str, str, int, int, float | None]]:
    return sorted((p.device, p.uuid, p.pid, p.memory, p.utilization) for p in d.processes())


def static_on(d: HamiCoreGpuDriver, minor: int, profile: str) -> tuple[str, mig.MigDevice]:
    """The published static MIG device of `profile` on GPU `minor` (name, device)."""
    return next((name, m) for name, m in d.migs.static.items()
                if m.profile.name == profile and m.parent_uuid == d.inventory.gpus[minor].uuid)


def line(minor: int, gi: int, ci: int, pid: int, used: int) -> str:
    return f"{minor}/{gi}/{ci} {pid} {used}\n"  # the mixed node's index = minor = position


def test_static_mig_processes_are_under_their_mig_devices_and_the_shared_gpus_as_before(
        driver: MakeDriver, listing: Path) -> None:
    """Each process in the MIG device it runs in, with the MIG UUID, the memory it holds there and no
    utilization (NVML has none on MIG); two processes in one instance are two; the shared GPU's
    process as before (its name, the GPU's UUID, its utilization)."""
    d = driver("static")
    name_a, a = static_on(d, 0, "3g.71gb")
    name_b, b = static_on(d, 1, "1g.18gb")
    shared = d.inventory.gpus[2]
    listing.write_text(line(0, a.gpu_instance, a.compute_instance, 4001, GiB)
                       + line(1, b.gpu_instance, b.compute_instance, 4002, 2 * GiB)
                       + line(1, b.gpu_instance, b.compute_instance, 4003, MiB) + f"2 4004 {3 * GiB} 40\n")
    assert seen(d) == [("hami-gpu-0-mig-3g71gb-0", a.uuid, 4001, GiB, None),
                       ("hami-gpu-1-mig-1g18gb-6", b.uuid, 4002, 2 * GiB, None),
                       ("hami-gpu-1-mig-1g18gb-6", b.uuid, 4003, MiB, None),
                       ("hami-gpu-2", shared.uuid, 4004, 3 * GiB, 40.0)]
    assert (name_a, name_b) == ("hami-gpu-0-mig-3g71gb-0", "hami-gpu-1-mig-1g18gb-6")
    listing.write_text("")
    assert seen(d) == []


def test_an_instance_the_driver_does_not_publish_is_reported_under_a_name_no_device_has(
        driver: MakeDriver, listing: Path) -> None:
    """The admin cuts GPU 0's 1g.18gb again after a static start: its new instance (a new MIG UUID)
    is no published device; its process is reported under hami-gpu-0-mig-gi<gi>-ci<ci>, which no
    device is named (`mig.parse_name` refuses it), never dropped; the old name lists nothing."""
    d = driver("static")
    name, old = static_on(d, 0, "1g.18gb")
    parent = old.parent_uuid
    assert mig.destroy(parent, old.profile, old.start) == "destroyed"
    new = mig.create(parent, old.profile, old.start)
    assert new.uuid != old.uuid
    listing.write_text(line(0, new.gpu_instance, new.compute_instance, 4101, GiB))
    unpublished = mig.unpublished_name(0, new.gpu_instance, new.compute_instance)
    assert seen(d) == [(unpublished, new.uuid, 4101, GiB, None)]
    assert unpublished == f"hami-gpu-0-mig-gi{new.gpu_instance}-ci{new.compute_instance}"
    assert mig.parse_name(unpublished) is None and unpublished not in {x.name for x in d.devices()}
    assert name in {x.name for x in d.devices()}


def test_dynamic_mig_processes_are_under_the_placement_a_claim_holds_and_nothing_else_is(
        driver: MakeDriver, listing: Path) -> None:
    """A prepared claim's instance is its placement's device while the claim holds it; an instance
    the admin made at a free placement is not published (unheld under its instance's name); a
    restart finds the claim's instance from its record (the admin's, recorded by none, is repaired
    away); with a record unreadable at start, every instance there is named by its placement (whose
    each is is unknown: a claim's processes are never made unheld by it); after unprepare, the
    instance and its name are gone."""
    d = driver("dynamic")
    [p] = d.prepare(CLAIM, [AllocatedDevice("mig", "node-a", "hami-gpu-1-mig-2g35gb-2")])
    gi, ci, uuid = int(p.state["gi"]), int(p.state["ci"]), str(p.state["uuid"])
    profiles = {x.name: x for x in mig.discover([d.inventory.gpus[0].uuid])[d.inventory.gpus[0].uuid].profiles}
    admin = mig.create(d.inventory.gpus[0].uuid, profiles["1g.18gb"], 3)
    listing.write_text(line(1, gi, ci, 4201, GiB) + line(0, admin.gpu_instance, admin.compute_instance, 4202, MiB))
    claims = ("hami-gpu-1-mig-2g35gb-2", uuid, 4201, GiB, None)
    assert seen(d) == [(mig.unpublished_name(0, admin.gpu_instance, admin.compute_instance), admin.uuid, 4202, MiB,
                        None), claims]
    unreadable = driver("dynamic", recorded=None)  # nothing repaired, nothing known
    assert seen(unreadable) == [("hami-gpu-0-mig-1g18gb-3", admin.uuid, 4202, MiB, None), claims]
    record = RecordedDevice(CLAIM, "prepared", "node-a", "hami-gpu-1-mig-2g35gb-2", state=dict(p.state))
    restarted = driver("dynamic", recorded=(record,))  # the repair destroys the admin's instance
    assert seen(restarted) == [claims]
    d.unprepare(CLAIM, [p])
    assert seen(d) == [] and uuid not in d.migs.published()


def test_a_mig_gpu_whose_query_fails_is_skipped_with_one_warning(driver: MakeDriver, listing: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """GPU 0's MIG devices failing their process query (UNKNOWN): GPU 0 is left out of every poll
    with one warning naming it, GPU 1's MIG devices and the shared GPU are read; once it answers,
    it is back. The walk itself failing (GPU 1's MIG device handles): the same. NOT_FOUND from a MIG
    device (its instance destroyed between the walk and the query): passed over, no warning."""
    d = driver("static")
    _, a = static_on(d, 0, "3g.71gb")
    _, b = static_on(d, 1, "3g.71gb")
    gpu0, gpu1 = d.inventory.gpus[0].uuid, d.inventory.gpus[1].uuid
    listing.write_text(line(0, a.gpu_instance, a.compute_instance, 4301, GiB)
                       + line(1, b.gpu_instance, b.compute_instance, 4302, GiB) + f"2 4303 {GiB}\n")
    every = [p for _d, _u, p, _m, _x in seen(d)]
    assert every == [4301, 4302, 4303]
    with caplog.at_level(logging.INFO, logger=processes.__name__):
        os.environ["HOOKCORE_STUB_NVML_FAIL"] = f"nvmlDeviceGetComputeRunningProcesses_v3@{gpu0}=999"
        for _ in range(3):
            assert [p for _d, _u, p, _m, _x in seen(d)] == [4302, 4303]
        os.environ["HOOKCORE_STUB_NVML_FAIL"] = f"nvmlDeviceGetMigDeviceHandleByIndex@{gpu1}=999"
        for _ in range(3):
            assert [p for _d, _u, p, _m, _x in seen(d)] == [4301, 4303]
        os.environ["HOOKCORE_STUB_NVML_FAIL"] = f"nvmlDeviceGetComputeRunningProcesses_v3@{gpu0}=6"
        assert [p for _d, _u, p, _m, _x in seen(d)] == [4302, 4303]
        del os.environ["HOOKCORE_STUB_NVML_FAIL"]
        assert [p for _d, _u, p, _m, _x in seen(d)] == every
    warned = [(r.getMessage(), r.__dict__["device"], r.__dict__["uuid"]) for r in caplog.records]
    assert warned == [("GPU's processes unreadable; skipped until it answers", "hami-gpu-0", gpu0),
                      ("GPU's processes unreadable; skipped until it answers", "hami-gpu-1", gpu1)]
    assert "nvmlDeviceGetMigDeviceHandleByIndex" in caplog.records[1].__dict__["error"]


def test_with_mig_off_no_mig_gpu_is_read(driver: MakeDriver, listing: Path) -> None:
    """mig=off publishes no MIG device (another driver may hold them): their processes are not
    this driver's to judge; the shared GPU's are."""
    d = driver("off")
    listing.write_text(line(0, 1, 0, 4401, GiB) + f"2 4402 {GiB}\n")
    assert [(dev, pid) for dev, _u, pid, _m, _x in seen(d)] == [("hami-gpu-2", 4402)]


# --------------------------------------------------------------------------------------------
# The watchdog


@pytest.fixture
def gpu_rig(driver: MakeDriver, tmp_path: Path) -> Callable[[str], PreparedRig]:
    def make(mode: str) -> PreparedRig:
        return PreparedRig(driver(mode), tmp_path / mode, device_type="mig", library="",
                           config={"apiVersion": API_VERSION, "kind": "GpuConfig"})
    return make


def admin_instance(d: HamiCoreGpuDriver) -> mig.MigDevice:
    """A MIG instance on GPU 1 the driver does not publish: the admin's 1g.18gb at slice 6 (static:
    cut again after the start, so another UUID)."""
    parent = d.inventory.gpus[1].uuid
    profile = next(p for p in mig.discover([parent])[parent].profiles if p.name == "1g.18gb")
    if d.settings.mig == "static":
        assert mig.destroy(parent, profile, 6) == "destroyed"
    return mig.create(parent, profile, 6)


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_a_mig_claims_process_is_held_by_its_mig_device_and_every_other_one_there_is_unheld(
        gpu_rig: Callable[[str], PreparedRig], listing: Path, mode: str) -> None:
    """A MIG claim the driver prepared (static: the existing instance; dynamic: made now), its
    container carrying the claim's marker: its process on its MIG device is held by the device and
    counted in the claim, judged against the instance's memory (the record's, the device being
    allocated whole) once NVML lists it past it; another pod's process on the same MIG device and a
    host process in an instance nobody published: unheld, in no claim, the latter under the
    instance's name."""
    rig = gpu_rig(mode)
    device = "hami-gpu-0-mig-3g71gb-0"
    c = rig.claim(device, None)
    [rec] = [r for r in rig.checkpoint.records() if r.uid == c.uid]
    st = rec.devices[0].state
    gi, ci, memory = int(st["gi"]), int(st["ci"]), int(st["memory"])
    admin = admin_instance(rig.driver)
    nobody = mig.unpublished_name(1, admin.gpu_instance, admin.compute_instance)
    rig.process(7001, c)
    rig.proc.process(7002, cgroup=pod_cgroup(str(uuidlib.uuid4())))
    rig.proc.process(7003)
    others = line(0, gi, ci, 7002, GiB) + line(1, admin.gpu_instance, admin.compute_instance, 7003, GiB)
    listing.write_text(line(0, gi, ci, 7001, 4 * GiB) + others)
    wd = rig.watchdog()
    got = wd.poll()
    assert sorted((v.kind, v.device, v.pid, v.claim) for v in got) == [
        ("unheld", device, 7002, None), ("unheld", nobody, 7003, None)]
    assert rig.events.got == got and wd.poll() == []
    assert rig.metric(f'dra_device_processes{{device="{device}"') == 2
    assert rig.metric(f'dra_device_processes_unheld{{device="{device}"') == 1
    assert rig.metric(f'dra_device_processes_unheld{{device="{nobody}"') == 1
    assert rig.metric(f'dra_claim_memory_over_quota_bytes{{claim="{c.name}"') == 0  # counted in the claim
    listing.write_text(line(0, gi, ci, 7001, memory + GiB) + others)
    [over] = wd.poll()
    assert (over.kind, over.device, over.pid, over.claim and over.claim.uid, over.amount) == (
        "over-quota", device, 7001, c.uid, float(GiB - 64 * MiB))


def test_the_reader_keeps_no_handle_of_a_mig_device_across_polls(driver: MakeDriver, listing: Path) -> None:
    """Dynamic instances come and go between polls (a MIG device handle "must be requested again"
    once its instance is destroyed, nvml.h): an instance made after the first poll is read at the
    next, one destroyed is no longer read."""
    d = driver("dynamic")
    listing.write_text(line(0, 1, 0, 4501, GiB))
    assert seen(d) == []
    [p] = d.prepare(CLAIM, [AllocatedDevice("mig", "node-a", "hami-gpu-0-mig-7g141gb-0")])
    assert (int(p.state["gi"]), int(p.state["ci"])) == (1, 0)
    assert seen(d) == [("hami-gpu-0-mig-7g141gb-0", str(p.state["uuid"]), 4501, GiB, None)]
    d.unprepare(CLAIM, [p])
    assert seen(d) == []


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_a_taint_of_an_instance_the_driver_does_not_publish_goes_on_its_gpus_mig_devices(
        gpu_rig: Callable[[str], PreparedRig], listing: Path, mode: str) -> None:
    """With ``taint``, a host process in the admin's instance on GPU 1 taints every MIG device the
    driver publishes on GPU 1 (the instance holds slices of it) and none of GPU 0's, until it
    exits; the name it is reported under carries no taint (no device has it)."""
    rig = gpu_rig(mode)
    admin = admin_instance(rig.driver)
    nobody = mig.unpublished_name(1, admin.gpu_instance, admin.compute_instance)
    rig.proc.process(7101)
    listing.write_text(line(1, admin.gpu_instance, admin.compute_instance, 7101, GiB))
    gpus = [g.uuid for g in rig.driver.inventory.gpus]
    on = {g: {x.name for x in rig.driver.devices() if x.attributes.get("parentUUID") == g} for g in gpus[:2]}
    assert on[gpus[0]] and on[gpus[1]]
    wd = rig.watchdog(action="taint")
    [v] = wd.poll()
    assert (v.kind, v.device, v.pid, set(v.taint_on or ())) == ("unheld", nobody, 7101, on[gpus[1]])
    assert f"the {len(on[gpus[1]])} published devices on its hardware" in v.outcome
    assert {x for x in on[gpus[1]] if wd.taints(x)} == on[gpus[1]]
    assert not any(wd.taints(x) for x in on[gpus[0]]) and wd.taints(nobody) == ()
    listing.write_text("")
    wd.poll()
    assert not any(wd.taints(x) for x in on[gpus[1]])
