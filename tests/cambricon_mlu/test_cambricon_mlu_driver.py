"""The driver class against fake MLUs (the stub CNDev): the device model, a claim's share as the
vendor's sMLU instance (made, found again, replaced, refused, destroyed, repaired at start), the
edits that hand the container its instance, and the stub runtime holding a workload to it. What
every shared-device driver does is in tests/drivers/test_shared_device_drivers.py."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

import dra
from dra import AllocatedDevice, ClaimRef, DriverContext, PrepareError, RecordedDevice
from drivers.cambricon_mlu import edits, fake, smlu
from drivers.cambricon_mlu.cndev import Cndev, CndevError
from drivers.cambricon_mlu.config import MluConfig
from drivers.cambricon_mlu.driver import CambriconMluDriver

GiB = 1 << 30
CLAIM = ClaimRef("0c6a3f6e-0000-4000-8000-00000000c5c1", "default", "c")
OTHER = ClaimRef("0c6a3f6e-0000-4000-8000-00000000c5c2", "default", "d")
WORKLOAD = Path(__file__).resolve().parents[2] / "hookcore" / "build" / "workload" / "mlu_workload"
MakeDriver = Callable[..., CambriconMluDriver]
OFF = {"health": "off"}


def alloc(device: str, share: str | None = "s1", config: MluConfig | None = None, **capacity: int) -> AllocatedDevice:
    return AllocatedDevice("mlu", "node-a", device, share, capacity, config=config)


def instances(d: CambriconMluDriver, index: int) -> list[tuple[str, int, int]]:
    assert d.library is not None
    return sorted((i.name, i.quota, i.memory) for i in d.library.instances(index))


def test_an_mlu_is_published_shared_with_hamis_words_and_its_capacity(driver: MakeDriver) -> None:
    devs = driver(settings=OFF).devices()
    assert [d.name for d in devs] == [f"mlu-{i}" for i in range(8)]
    a = devs[5].attributes
    assert {k: a[k] for k in ("type", "index", "productName", "brand", "mluCores", "smlu", "driverVersion")} == {
        "type": "MLU", "index": 5, "productName": "MLU370-X8", "brand": "Cambricon", "mluCores": 32, "smlu": True,
        "driverVersion": "5.10.29"}
    assert str(a["uuid"]).startswith("MLU-") and a["resource.kubernetes.io/pciBusID"] == "0000:87:00.0"
    assert (a["resource.kubernetes.io/pcieRoot"], a["numaNode"]) == ("pci0000:85", 1)
    assert devs[5].allow_multiple_allocations and devs[5].capacity["memory"] == dra.Capacity(
        "49152Mi", dra.RequestPolicy(default="49152Mi", min="1Mi", max="49152Mi", step="1Mi"))


def test_an_mlu_with_smlu_off_and_every_mlu_of_sharing_whole_are_published_whole(driver: MakeDriver,
                                                                                 tmp_path: Path) -> None:
    spec = tmp_path / "mlus.yaml"
    spec.write_text("mlus:\n- model: mlu590\n- model: mlu590\n  smlu: false\n")
    devs = driver(fake=str(spec), settings=OFF).devices()
    assert [(d.allow_multiple_allocations, d.attributes["smlu"]) for d in devs] == [(True, True), (False, False)]
    assert devs[1].capacity == {"memory": dra.Capacity("98304Mi")}
    whole = driver(fake="mlu370-x4x2", settings={**OFF, "sharing": "whole"}).devices()
    assert not any(d.allow_multiple_allocations or d.attributes["smlu"] for d in whole)


def test_a_share_is_an_smlu_instance_of_its_cores_and_memory_and_no_hook(driver: MakeDriver) -> None:
    d = driver(settings=OFF)
    prepared = d.prepare(CLAIM, [alloc("mlu-3", memory=16 * GiB, cores=30)])
    assert instances(d, 3) == [(f"dra-{CLAIM.uid}", 30, 16 * GiB)]
    (p,) = prepared
    assert p.state["smlu"] == {"name": f"dra-{CLAIM.uid}", "node": "/dev/cambricon-caps/cap_dev3_mi1", "quota": 30,
                               "memory": 16 * GiB}
    e = d.claim_edits(CLAIM, prepared)
    assert e.env["VIRTUAL_DEVICES"] == "/dev/cambricon_dev3,/dev/cambricon_ipcm3,/dev/cambricon-caps/cap_dev3_mi1"
    assert "CAMBRICON_VISIBLE_DEVICES" not in e.env  # the runtime must not hand this container the whole MLU
    assert d.enforcement(CLAIM, prepared) is None and list(d.hook_libraries()) == []
    assert not any(m.container_path == "/etc/ld.so.preload" for m in e.mounts) and "LD_PRELOAD" not in e.env


def test_two_shares_of_one_mlu_in_a_claim_are_one_instance_of_their_sum(driver: MakeDriver) -> None:
    d = driver(settings=OFF)
    d.prepare(CLAIM, [alloc("mlu-0", "a", memory=3 * GiB, cores=30), alloc("mlu-2", "b", memory=GiB, cores=5),
                      alloc("mlu-0", "c", memory=GiB, cores=20)])
    assert instances(d, 0) == [(f"dra-{CLAIM.uid}", 50, 4 * GiB)] and instances(d, 2) == [(f"dra-{CLAIM.uid}", 5, GiB)]


def test_a_lifted_compute_limit_is_quota_100_unless_a_request_on_the_mlu_keeps_it(driver: MakeDriver) -> None:
    d = driver(settings=OFF)
    free = MluConfig(compute_limit=False)
    d.prepare(CLAIM, [alloc("mlu-0", "a", free, memory=GiB, cores=1), alloc("mlu-1", "b", free, memory=GiB, cores=1),
                      alloc("mlu-1", "c", MluConfig(), memory=GiB, cores=10)])
    assert instances(d, 0) == [(f"dra-{CLAIM.uid}", 100, GiB)]
    assert instances(d, 1) == [(f"dra-{CLAIM.uid}", 11, 2 * GiB)]  # the strict request holds the MLU


def test_a_preload_names_a_hook_that_is_not_there_and_is_refused(driver: MakeDriver) -> None:
    d = driver(settings=OFF)
    with pytest.raises(PrepareError, match="preload: env names how to load a hook"):
        d.prepare(CLAIM, [alloc("mlu-0", config=MluConfig(preload="env"), memory=GiB, cores=10)])
    assert instances(d, 0) == []  # refused before anything was made


def test_prepare_again_finds_its_instance_and_unprepare_twice_is_fine(driver: MakeDriver) -> None:
    d = driver(settings=OFF)
    devices = [alloc("mlu-1", memory=8 * GiB, cores=25)]
    first = d.prepare(CLAIM, devices)
    assert [p.state for p in d.prepare(CLAIM, devices)] == [p.state for p in first]
    assert len(instances(d, 1)) == 1
    d.unprepare(CLAIM, first)
    d.unprepare(CLAIM, first)
    assert instances(d, 1) == []
    assert d.library is not None and d.library.instances(1) == []


def test_unprepare_of_a_record_without_state_finds_the_instance_by_its_claim(driver: MakeDriver) -> None:
    """A record still "preparing" (a crash after the instance was made) carries no state."""
    d = driver(settings=OFF)
    d.prepare(CLAIM, [alloc("mlu-4", memory=GiB, cores=10)])
    d.unprepare(CLAIM, [dra.PreparedDevice(alloc("mlu-4", memory=GiB, cores=10), dra.ContainerEdits())])
    assert instances(d, 4) == []


def test_an_instance_of_the_claim_with_another_share_is_replaced(driver: MakeDriver) -> None:
    d = driver(settings=OFF)
    d.prepare(CLAIM, [alloc("mlu-0", memory=GiB, cores=10)])
    d.prepare(CLAIM, [alloc("mlu-0", memory=2 * GiB, cores=20)])
    assert instances(d, 0) == [(f"dra-{CLAIM.uid}", 20, 2 * GiB)]


def test_two_claims_on_one_mlu_each_get_only_their_own_instance(driver: MakeDriver) -> None:
    d = driver(settings=OFF)
    a = d.claim_edits(CLAIM, d.prepare(CLAIM, [alloc("mlu-0", memory=GiB, cores=10)]))
    b = d.claim_edits(OTHER, d.prepare(OTHER, [alloc("mlu-0", memory=GiB, cores=10)]))
    assert a.env["VIRTUAL_DEVICES"].endswith("cap_dev0_mi1") and b.env["VIRTUAL_DEVICES"].endswith("cap_dev0_mi2")
    d.unprepare(CLAIM, [])
    d.unprepare(CLAIM, d.prepare(CLAIM, [alloc("mlu-0", memory=GiB, cores=10)]))
    assert instances(d, 0) == [(f"dra-{OTHER.uid}", 10, GiB)]  # the other claim's instance stays


def test_an_mlu_without_room_refuses_the_claim_naming_cndevs_answer(driver: MakeDriver) -> None:
    d = driver(fake="mlu370-x4x2", settings=OFF)
    assert d.library is not None
    d.library.create_instance(0, "admin-made", 50, 20 * GiB)  # someone else's instance holds most of it
    with pytest.raises(PrepareError, match=r"MLU 0 .*cannot make the claim's sMLU instance of 30% and 8192Mi:"
                                           r".*CNDEV_ERROR_INSUFFICIENT_SPACE"):
        d.prepare(CLAIM, [alloc("mlu-0", memory=8 * GiB, cores=30)])


def test_a_whole_mlu_needs_no_instance_and_is_listed_as_whole(driver: MakeDriver, tmp_path: Path) -> None:
    spec = tmp_path / "mlus.yaml"
    spec.write_text("mlus:\n- model: mlu370-x8\n  smlu: false\n- model: mlu370-x8\n")
    d = driver(fake=str(spec), settings=OFF)
    e = d.claim_edits(CLAIM, d.prepare(CLAIM, [alloc("mlu-0", None), alloc("mlu-1", memory=GiB, cores=10)]))
    assert e.env["CAMBRICON_VISIBLE_DEVICES"] == "0" and e.env["VIRTUAL_DEVICES"].startswith("/dev/cambricon_dev1,")


def _recording(records: list[RecordedDevice] | None) -> DriverContext:
    return DriverContext("node-a", "node-a", {"health": "off"}, fake="mlu370-x8x2",
                         on_recorded_devices=lambda: None if records is None else {r.device for r in records},
                         on_recorded=lambda: records)


def test_the_start_destroys_only_dra_instances_no_record_names(driver: MakeDriver) -> None:
    d = driver(fake="mlu370-x8x2", settings=OFF)
    assert d.library is not None
    for claim in (CLAIM, OTHER):
        d.prepare(claim, [alloc("mlu-0", memory=GiB, cores=10)])
    d.library.create_instance(0, "admin-made", 10, GiB)
    d.library.create_instance(1, f"dra-{CLAIM.uid}", 10, GiB)  # the recorded claim, on an MLU it does not hold
    kept = [RecordedDevice(CLAIM, "prepared", "node-a", "mlu-0", "s1")]

    unreadable = CambriconMluDriver()
    unreadable.setup(_recording(None))  # a record it cannot read: whose an instance is is unknown
    assert len(instances(d, 0)) == 3 and len(instances(d, 1)) == 1
    unreadable.close()

    restarted = CambriconMluDriver()
    restarted.setup(_recording(kept))
    assert [n for n, _q, _m in instances(d, 0)] == ["admin-made", f"dra-{CLAIM.uid}"]
    assert instances(d, 1) == []
    restarted.close()


@pytest.mark.parametrize("node", ["/dev/../etc/shadow", "/dev/sda", "/dev/cambricon-caps/../../etc", "cap_dev0_mi1"])
def test_an_instance_node_that_is_not_a_cambricon_caps_node_is_refused(node: str) -> None:
    with pytest.raises(PrepareError, match="not a /dev/cambricon-caps/ node"):
        edits.virtual_device(0, node)


@pytest.mark.parametrize("uid", ["../x", "a b", "x" * 64, "", "a;b"])
def test_a_claim_uid_that_cannot_name_an_instance_is_refused(uid: str) -> None:
    with pytest.raises(PrepareError, match="cannot name an sMLU instance"):
        smlu.instance_name(uid)


def test_cdi_mode_lists_the_claims_own_nodes_from_the_hosts_dev(driver: MakeDriver, tmp_path: Path) -> None:
    d = driver(settings=OFF)
    dev = tmp_path / "dev"
    (dev / "cambricon-caps").mkdir(parents=True)
    for name in ("cambricon_dev0", "cambricon_ipcm0", "cambricon_dev1", "cambr-msgq:1", "cambricon_ctl",
                 "cambricon-caps/cap_dev0_mi1", "cambricon-caps/cap_dev0_mi2", "cambricon-caps/cap_dev1_mi1"):
        (dev / name).touch()
    d.prepare(OTHER, [alloc("mlu-0", memory=GiB, cores=10)])  # makes cap_dev0_mi1
    prepared = d.prepare(CLAIM, [alloc("mlu-0", memory=GiB, cores=10), alloc("mlu-1", None)])
    d.fake, d.settings = None, dataclasses.replace(d.settings, dev_root=tmp_path)  # as on a node: the host's /dev
    e = d.claim_edits(CLAIM, prepared)
    assert [(n.path, n.host_path) for n in e.device_nodes] == [(p, p) for p in (
        "/dev/cambricon_ctl", "/dev/cambricon_dev0", "/dev/cambricon_ipcm0", "/dev/cambricon-caps/cap_dev0_mi2",
        "/dev/cambricon_dev1", "/dev/cambricon-caps/cap_dev1_mi1")]  # no other claim's instance, no whole-MLU extras
    assert not e.mounts
    (dev / "cambricon-caps/cap_dev0_mi2").unlink()
    with pytest.raises(PrepareError, match="cap_dev0_mi2 does not exist under devRoot"):
        d.claim_edits(CLAIM, prepared)


def test_discovery_names_the_failing_call_and_the_mlu(stub_cndev: Path, clean_stub_env: None) -> None:
    os.environ["HOOKCORE_STUB_CNDEV_FAIL"] = "cndevGetMemoryUsageV2=12"
    with pytest.raises(CndevError, match=r"cndevGetMemoryUsageV2\(MLU 0, MLU-[0-9a-f-]+\) failed: "
                                         r"CNDEV_ERROR_NO_DEVICES \(12\)"):
        CambriconMluDriver().setup(DriverContext("n", "n", OFF, fake="mlu590x2"))


def test_a_fake_file_is_checked_entry_by_entry(tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    for text, error in (("mlus:\n- model: mlu999\n", "unknown model 'mlu999'"),
                        ("mlus:\n- name: MLU370-X4\n", "give `model:` or at least `name:` and `memory:`"),
                        ("mlus:\n- model: mlu590\n  smlu: 1\n", "smlu must be true or false"),
                        ("mlus:\n- model: mlu590\n  uuid: GPU-1\n", "must look like MLU-"),
                        ("mlus:\n- model: mlu590\n  cores: 0\n", "cores must be an integer in 1..1024")):
        spec.write_text(text)
        with pytest.raises(fake.FakeDevicesError, match=error):
            fake.load(str(spec), "n")


def test_a_failing_health_query_is_unknown_and_a_reset_error_taints(driver: MakeDriver) -> None:
    d = driver(fake="mlu370-x8x2", settings={"healthInterval": "60"})
    assert d.fake is not None and d.monitor is not None
    uuid = str(d.devices()[1].attributes["uuid"])
    os.environ["HOOKCORE_STUB_CNDEV_FAIL"] = f"cndevGetCardHealthState@{uuid}=7"
    d.monitor.poll()  # type: ignore[attr-defined]
    assert [h for u, h, _m in d.monitor.snapshot() if u == uuid] == [None] and not d.devices()[1].taints
    del os.environ["HOOKCORE_STUB_CNDEV_FAIL"]
    d.fake.set_health(uuid, good=True, driver_state=7)
    d.monitor.poll()  # type: ignore[attr-defined]
    assert [(t.key, t.value) for t in d.devices()[1].taints] == [("cambricon-mlu.project-hami.io/health",
                                                                  "driver-reset-error")]


# --- the stub runtime holds a workload to its claim's instance -----------------------------------

def _run(env: dict[str, str], *args: str) -> tuple[int, dict[str, str]]:
    lib = str(WORKLOAD.parents[1] / "stub")
    proc = subprocess.run([str(WORKLOAD), *args], env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": lib, **env},
                          capture_output=True, text=True, timeout=30)
    return proc.returncode, dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


def _container_env(d: CambriconMluDriver, e: dra.ContainerEdits) -> dict[str, str]:
    """The claim's env, with the sMLU table at the host path the container would see mounted."""
    assert d.fake is not None
    return {**e.env, "HOOKCORE_STUB_CNDEV_SMLU": str(d.fake.table)}


def test_the_workload_prints_its_smlu_settings_and_is_held_to_them(driver: MakeDriver) -> None:
    d = driver(settings=OFF)
    e = d.claim_edits(CLAIM, d.prepare(CLAIM, [alloc("mlu-2", memory=6 * GiB, cores=40), alloc("mlu-6", None)]))
    rc, kv = _run(_container_env(d, e), "--device", "0")
    assert rc == 0, kv
    assert (kv["smlu_instance"], kv["smlu_name"], kv["smlu_quota_percent"], kv["smlu_memory_bytes"]) == (
        "/dev/cambricon-caps/cap_dev2_mi1", f"dra-{CLAIM.uid}", "40", str(6 * GiB))
    assert (kv["quota_total_bytes"], kv["within_quota_alloc"], kv["over_quota_alloc"]) == (str(6 * GiB), "ok", "refused")
    rc, kv = _run(_container_env(d, e), "--device", "1")  # the whole MLU: an instance of all of it
    assert rc == 0 and kv["smlu_quota_percent"] == "100" and kv["quota_total_bytes"] == str(48 * GiB)


def test_the_tenants_own_description_does_not_enlarge_its_instance(driver: MakeDriver) -> None:
    """The limit is the vendor's instance (the stub's table, read-only in the container), not
    anything in the container's environment."""
    d = driver(settings=OFF)
    e = d.claim_edits(CLAIM, d.prepare(CLAIM, [alloc("mlu-0", memory=2 * GiB, cores=10)]))
    env = _container_env(d, e)
    env["HOOKCORE_STUB_MLUS"] = env["HOOKCORE_STUB_MLUS"].replace(f"memory={48 * GiB}", f"memory={96 * GiB}")
    rc, kv = _run(env)
    assert rc == 0 and kv["quota_total_bytes"] == str(2 * GiB) and kv["over_quota_alloc"] == "refused"


def test_a_workload_whose_instance_is_gone_cannot_open_the_mlu(driver: MakeDriver) -> None:
    d = driver(settings=OFF)
    prepared = d.prepare(CLAIM, [alloc("mlu-0", memory=2 * GiB, cores=10)])
    env = _container_env(d, d.claim_edits(CLAIM, prepared))
    d.unprepare(CLAIM, prepared)
    rc, kv = _run(env)
    assert rc == 3 and "cannot be opened" in kv["error"] and kv["smlu_info"] == "unavailable"


def test_a_missing_libcndev_says_what_to_mount(tmp_path: Path) -> None:
    with pytest.raises(CndevError, match=r"libcndev\.so not found: is Cambricon's driver installed"):
        Cndev(tmp_path / "libcndev.so")
