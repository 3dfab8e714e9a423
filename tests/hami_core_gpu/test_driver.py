"""The driver class against fake GPUs: the claim's visible GPUs, CDI modes, quotas, settings. What
every shared-device driver does is in tests/drivers/test_shared_device_drivers.py."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from driver_helpers import fake_drivers

import hookcore
from dra import AllocatedDevice, ClaimRef, PrepareError
from drivers.hami_core_gpu import strict_defaults
from drivers.hami_core_gpu.config import GpuConfig
from drivers.hami_core_gpu.driver import HamiCoreGpuDriver
from drivers.hami_core_gpu.settings import Settings

GiB = 1 << 30
CLAIM = ClaimRef("0c6a3f6e-0000-4000-8000-00000000c1a1", "default", "c")


@pytest.fixture
def driver(fake_node) -> Iterator[Callable[..., HamiCoreGpuDriver]]:
    yield from fake_drivers(HamiCoreGpuDriver, "h200x8")


def alloc(device: str, share: str | None = "s1", config: GpuConfig | None = None, **capacity: int) -> AllocatedDevice:
    return AllocatedDevice("gpu", "node-a", device, share, capacity, config=config)


def test_visible_gpus_follow_allocation_order_and_sum_shares(driver) -> None:
    d = driver(settings={"health": "off"})
    uuid = {x.name: x.attributes["uuid"] for x in d.devices()}
    got = d.visible(CLAIM, [
        alloc("hami-gpu-5", "a", memory=3 * GiB, cores=30),
        alloc("hami-gpu-2", "b", memory=4 * GiB, cores=20),
        alloc("hami-gpu-5", "c", memory=1 * GiB, cores=90),  # a second share of GPU 5
    ])
    assert [(v.device.uuid, v.device.minor, v.memory, v.cores) for v in got] == [
        (uuid["hami-gpu-5"], 5, 4 * GiB, 100), (uuid["hami-gpu-2"], 2, 4 * GiB, 20)]
    edits = d.claim_edits(CLAIM, d.prepare(CLAIM, [alloc("hami-gpu-5", memory=GiB, cores=30),
                                                  alloc("hami-gpu-2", memory=GiB, cores=30)]))
    want = f"{uuid['hami-gpu-5']},{uuid['hami-gpu-2']}"
    assert edits.env["CUDA_VISIBLE_DEVICES"] == edits.env["NVIDIA_VISIBLE_DEVICES"] == want
    # the fake backend tells the workload's stub CUDA which GPUs its container has, in that order
    stub = edits.env["HOOKCORE_STUB_DEVICES"].split(";")
    assert [e.split(",")[0] for e in stub] == [f"uuid={u}" for u in want.split(",")]


def test_self_contained_mode_mounts_the_stub_driver_for_fake_gpus(driver) -> None:
    d = driver(settings={"health": "off", "cdiMode": "self-contained"})
    e = d.claim_edits(CLAIM, d.prepare(CLAIM, [alloc("hami-gpu-0", memory=GiB, cores=10)]))
    mounted = {m.container_path: m.host_path for m in e.mounts}
    assert mounted["/usr/local/nvidia/lib64/libcuda.so.1"] == str((hookcore.stub_dir() / "libcuda.so.1").resolve())
    assert "/usr/local/nvidia/lib64/libnvidia-ml.so.1" in mounted
    assert e.env["LD_LIBRARY_PATH"].startswith("/usr/local/nvidia/lib64")
    assert e.device_nodes == ()  # fake GPUs have no /dev/nvidia*


def test_settings_parse() -> None:
    s = Settings.parse({"cdiMode": "self-contained", "deviceMemory": "96Gi", "healthProbeInterval": "2.5"})
    assert (s.cdi_mode, s.device_memory, s.health_probe_interval) == ("self-contained", 96 * GiB, 2.5)
    assert Settings.parse({}).clock_elasticity is None  # the hook's prior, 1
    for raw, want in (("0.45", 0.45), ("1", 1.0), ("0", 0.0), ("1.000", 1.0), ("0.005", 0.005)):
        assert Settings.parse({"clockElasticity": raw}).clock_elasticity == want


def as_gpu_node(d: HamiCoreGpuDriver, **settings: Any) -> HamiCoreGpuDriver:
    """The driver as on a GPU node: the same inventory, but no fake backend (toolkit IDs, device nodes)."""
    d.fake = None
    d.settings = dataclasses.replace(d.settings, **settings)
    return d


def test_toolkit_mode_composes_with_the_nvidia_toolkit_spec(driver) -> None:
    d = as_gpu_node(driver(settings={"health": "off"}))
    d.files = None
    uuid = d.devices()[3].attributes["uuid"]
    (p,) = d.prepare(CLAIM, [alloc("hami-gpu-3", memory=GiB, cores=10)])
    assert p.cdi_devices == (f"nvidia.com/gpu={uuid}",) and p.edits.device_nodes == ()
    assert d.claim_edits(CLAIM, [p]).mounts == ()  # the toolkit's spec brings the driver files


def test_self_contained_mode_lists_the_device_nodes(driver, tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    for name in ("nvidia2", "nvidiactl", "nvidia-uvm"):
        (tmp_path / "dev" / name).touch()
    d = as_gpu_node(driver(settings={"health": "off", "cdiMode": "self-contained"}), dev_root=tmp_path)
    (p,) = d.prepare(CLAIM, [alloc("hami-gpu-2", memory=GiB, cores=10)])
    assert p.cdi_devices == () and [(n.path, n.host_path) for n in p.edits.device_nodes] == [
        ("/dev/nvidia2", str(tmp_path / "dev" / "nvidia2"))]
    nodes = [n.path for n in d.claim_edits(CLAIM, [p]).device_nodes]
    assert nodes == ["/dev/nvidiactl", "/dev/nvidia-uvm"]
    with pytest.raises(PrepareError, match=r"nvidia5 does not exist"):
        d.prepare(CLAIM, [alloc("hami-gpu-5", memory=GiB, cores=10)])


def test_enforcement_is_one_quota_per_visible_gpu(driver) -> None:
    d = driver(settings={"health": "off"})
    uuid = {x.name: x.attributes["uuid"] for x in d.devices()}
    prepared = d.prepare(CLAIM, [alloc("hami-gpu-4", "a", GpuConfig(preload="env"), memory=3 * GiB, cores=30),
                                 alloc("hami-gpu-1", "b", GpuConfig(compute_limit=False, preload="env"), memory=GiB, cores=5)])
    e = d.enforcement(CLAIM, prepared)
    assert e.library.name == "libvgpu.so" and e.preload is not None and e.preload.value == "env"
    assert [(q.uuid, q.memory, q.cores) for q in e.quotas] == [
        (uuid["hami-gpu-4"], 3 * GiB, 30), (uuid["hami-gpu-1"], GiB, 100)]  # computeLimit false: no compute limit


def test_a_strict_claim_is_capped_at_the_full_load_clock_of_its_config_or_the_daemon(driver) -> None:
    d = driver(settings={"health": "off", "fullLoadClockMhz": "1500"})
    uuid = {x.name: x.attributes["uuid"] for x in d.devices()}
    strict = GpuConfig(compute_mode="strict")
    prepared = d.prepare(CLAIM, [alloc("hami-gpu-0", "a", strict, memory=GiB, cores=30),
                                 alloc("hami-gpu-1", "b", None, memory=GiB, cores=100)])
    e = d.enforcement(CLAIM, prepared)
    # the whole GPU has nothing to cap; the share is held to 30% of throughput at 1500 MHz
    assert [(q.uuid, q.cores, q.strict, q.full_load_mhz) for q in e.quotas] == [
        (uuid["hami-gpu-0"], 30, True, 1500), (uuid["hami-gpu-1"], 100, False, None)]
    own = GpuConfig(compute_mode="strict", full_load_clock_mhz=1410)
    (q,) = d.enforcement(CLAIM, d.prepare(CLAIM, [alloc("hami-gpu-0", config=own, memory=GiB, cores=50)])).quotas
    assert (q.strict, q.full_load_mhz) == (True, 1410)
    (q,) = d.enforcement(CLAIM, d.prepare(CLAIM, [alloc("hami-gpu-0", memory=GiB, cores=50)])).quotas
    assert (q.strict, q.full_load_mhz) == (False, None)  # the default: a share of GPU time


def test_a_strict_claim_is_charged_the_clock_elasticity_of_its_config_or_the_daemon(driver: Callable[..., HamiCoreGpuDriver]) -> None:
    """The claim's (or its class's) clockElasticity, else the daemon's setting, else the GPU model's
    (strict_defaults); 0 is a value, not unset; only a strict cap carries it; the hook's parser reads it back."""
    from dra._runtime.enforcement import ClaimHooks
    from dra._runtime.hookdir import HookDir

    def quota(d: HamiCoreGpuDriver, config: GpuConfig | None, cores: int = 30) -> tuple[bool, float | None]:
        e = d.enforcement(CLAIM, d.prepare(CLAIM, [alloc("hami-gpu-0", config=config, memory=GiB, cores=cores)]))
        assert e is not None
        (q,) = e.quotas
        return q.strict, q.clock_elasticity

    strict = GpuConfig(compute_mode="strict")
    daemon = driver(settings={"health": "off", "clockElasticity": "0.45"})
    assert quota(daemon, strict) == (True, 0.45)
    assert quota(daemon, GpuConfig(compute_mode="strict", clock_elasticity=0.6)) == (True, 0.6)
    assert quota(daemon, GpuConfig(compute_mode="strict", clock_elasticity=0.0)) == (True, 0.0)
    assert quota(daemon, None) == (False, None)  # a share of GPU time: no boost to charge
    assert quota(daemon, strict, cores=100) == (False, None)  # nothing to cap on a whole GPU
    assert quota(driver(settings={"health": "off"}), strict) == (True, 0.58)  # the H200's measured value
    e = daemon.enforcement(CLAIM, daemon.prepare(CLAIM, [alloc("hami-gpu-0", config=strict, memory=GiB, cores=30)]))
    assert e is not None
    plan = ClaimHooks(Path(tempfile.mkdtemp()), HookDir(Path(tempfile.mkdtemp()))).plan(e)
    assert "HOOKCORE_COMPUTE_ELASTICITY_0=0.45\n" in plan.config_text
    assert plan.config.devices[0].clock_elasticity == 0.45


@pytest.mark.parametrize(("gpu", "want"), [
    ("model: h100", (1400, 0.5)),  # at its default 700 W: measured (bench/results/h100-2026-12-0[56]-shares*)
    ("model: h200", (1500, 0.58)),
    ("model: h100\n  powerLimit: 500", (None, None)),  # capped lower by the admin: not the table's clock
    ("model: h100\n  powerLimit: 700\n  defaultPowerLimit: 700", (1400, 0.5)),
    ("model: a100-80g", (None, None)),  # not measured: the hook's own defaults
    ("productName: NVIDIA H100 80GB HBM3\n  memory: 80Gi", (None, None)),  # NVML says no power limit
])
def test_a_strict_claim_without_settings_gets_its_gpu_models_measured_clock_and_elasticity(
        driver: Callable[..., HamiCoreGpuDriver], tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch, gpu: str,
        want: tuple[int | None, float | None]) -> None:
    """Only where the GPU runs at the power limit the model was measured at; the daemon's settings and
    the claim's config win over it; a GPU left out says why, once, with the fix."""
    monkeypatch.setattr(strict_defaults, "_logged", set())  # said once per GPU: once per case here
    path = tmp_path / "gpus.yaml"
    path.write_text(f"gpus:\n- {gpu}\n")
    d = driver(fake=str(path), settings={"health": "off"})
    strict = GpuConfig(compute_mode="strict")
    (q,) = d.enforcement(CLAIM, d.prepare(CLAIM, [alloc("hami-gpu-0", config=strict, memory=GiB, cores=30)])).quotas
    assert (q.strict, q.full_load_mhz, q.clock_elasticity) == (True, *want)
    # a listed model left out (a lowered or unknown limit) says so; an unlisted one has nothing to say
    assert ("not the one measured at" in caplog.text) == ("powerLimit: 500" in gpu or "productName" in gpu), caplog.text
    own = GpuConfig(compute_mode="strict", full_load_clock_mhz=1300, clock_elasticity=0.9)
    (q,) = d.enforcement(CLAIM, d.prepare(CLAIM, [alloc("hami-gpu-0", config=own, memory=GiB, cores=30)])).quotas
    assert (q.full_load_mhz, q.clock_elasticity) == (1300, 0.9)
    daemon = driver(fake=str(path), settings={"health": "off", "fullLoadClockMhz": "1200", "clockElasticity": "0.2"})
    (q,) = daemon.enforcement(CLAIM, daemon.prepare(CLAIM, [alloc("hami-gpu-0", config=strict, memory=GiB,
                                                                  cores=30)])).quotas
    assert (q.full_load_mhz, q.clock_elasticity) == (1200, 0.2)


def test_each_gpu_is_charged_the_highest_clock_elasticity_of_its_requests(driver: Callable[..., HamiCoreGpuDriver]) -> None:
    """A lower elasticity charges a boosted batch less: the merge takes the highest; set against unset
    (the daemon's, which it cannot compare) is refused, naming both."""
    d = driver(settings={"health": "off"})
    e = d.enforcement(CLAIM, d.prepare(CLAIM, [
        alloc("hami-gpu-0", "a", GpuConfig(compute_mode="strict", clock_elasticity=0.45), memory=GiB, cores=10),
        alloc("hami-gpu-0", "b", GpuConfig(compute_mode="strict", clock_elasticity=0.8), memory=GiB, cores=10)]))
    assert e is not None
    assert [(q.strict, q.clock_elasticity) for q in e.quotas] == [(True, 0.8)]
    with pytest.raises(PrepareError, match=r"no strictest clockElasticity \(request 'gpu' on hami-gpu-0: 0.45; "
                                           r"request 'gpu' on hami-gpu-0: unset\)"):
        d.prepare(CLAIM, [alloc("hami-gpu-0", "a", GpuConfig(compute_mode="strict", clock_elasticity=0.45), memory=GiB,
                                cores=10),
                          alloc("hami-gpu-0", "b", GpuConfig(compute_mode="strict"), memory=GiB, cores=10)])


def test_the_quota_carries_the_gpus_sm_count_from_nvml_to_the_hook_config(driver) -> None:
    """The daemon's NVML reading of the GPU's SMs (the fake H200: 132) goes with each quota into the
    claim's read-only config, the whole the hook measures an MPS client's SMs against (review
    2026-12-04 #5: CUDA inside the client answers its own part)."""
    from dra._runtime.enforcement import ClaimHooks
    from dra._runtime.hookdir import HookDir

    d = driver(settings={"health": "off"})
    e = d.enforcement(CLAIM, d.prepare(CLAIM, [alloc("hami-gpu-0", memory=GiB, cores=30)]))
    assert [q.device_sms for q in e.quotas] == [132]
    plan = ClaimHooks(Path(tempfile.mkdtemp()), HookDir(Path(tempfile.mkdtemp()))).plan(e)
    assert "HOOKCORE_DEVICE_SMS_0=132\n" in plan.config_text


def test_contexts_are_charged_to_a_memory_quota_as_the_setting_says(driver) -> None:
    from dra._runtime.enforcement import ClaimHooks
    from dra._runtime.hookdir import HookDir

    d = driver(settings={"health": "off", "contextMemory": "300Mi"})
    e = d.enforcement(CLAIM, d.prepare(CLAIM, [alloc("hami-gpu-0", memory=GiB, cores=30)]))
    assert [q.context_memory for q in e.quotas] == [300 * 2**20]
    # the hook's own parser reads the charge back from the claim's config file
    plan = ClaimHooks(Path(tempfile.mkdtemp()), HookDir(Path(tempfile.mkdtemp()))).plan(e)
    assert plan.settings["HOOKCORE_CONTEXT_MEMORY_0"] == str(300 * 2**20)
    # the fake's contexts hold no device memory: not charged unless set; no memory quota: nothing to charge
    plain = driver(settings={"health": "off"})
    assert [q.context_memory for q in plain.enforcement(CLAIM, plain.prepare(CLAIM, [alloc("hami-gpu-0", memory=GiB)])).quotas] == [None]


def test_each_gpu_is_held_by_the_strictest_compute_mode_and_clock_of_its_requests(driver) -> None:
    """Review 2026-12-04 #10: per GPU the strictest of every request on it; GPUs of one claim may differ."""
    d = driver(settings={"health": "off"})
    uuid = {x.name: x.attributes["uuid"] for x in d.devices()}
    strict = GpuConfig(compute_mode="strict", full_load_clock_mhz=1500)
    e = d.enforcement(CLAIM, d.prepare(CLAIM, [
        alloc("hami-gpu-0", "a", strict, memory=GiB, cores=10),
        alloc("hami-gpu-0", "b", GpuConfig(compute_mode="strict", full_load_clock_mhz=1200), memory=GiB, cores=10),
        alloc("hami-gpu-0", "c", GpuConfig(compute_mode="share"), memory=GiB, cores=10),
        alloc("hami-gpu-1", "d", GpuConfig(compute_mode="share"), memory=GiB, cores=10)]))
    assert [(q.uuid, q.cores, q.strict, q.full_load_mhz) for q in e.quotas] == [
        (uuid["hami-gpu-0"], 30, True, 1200), (uuid["hami-gpu-1"], 10, False, None)]


def test_a_full_load_clock_set_by_one_request_and_left_unset_by_another_is_refused(driver) -> None:
    """Unset means the daemon's clock, which the merge cannot compare with a set one: refused, naming both."""
    d = driver(settings={"health": "off"})
    with pytest.raises(PrepareError, match=r"no strictest fullLoadClockMhz \(request 'gpu' on hami-gpu-0: 1500; "
                                           r"request 'gpu' on hami-gpu-0: unset\)"):
        d.prepare(CLAIM, [alloc("hami-gpu-0", "a", GpuConfig(compute_mode="strict", full_load_clock_mhz=1500), memory=GiB, cores=10),
                          alloc("hami-gpu-0", "b", GpuConfig(compute_mode="strict"), memory=GiB, cores=10)])
