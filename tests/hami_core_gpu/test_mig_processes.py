"""The processes of MIG devices: the stub NVML's process list in MIG mode (STUB_NVML_PROCESSES
lines ``<index>/<gi>/<ci> <pid> <bytes>``), as NVML answers it on a GPU's handle and on its MIG
devices' handles."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pynvml
import pytest
from driver_helpers import isolated_env

from dra import DriverContext
from drivers.hami_core_gpu import nvml
from drivers.hami_core_gpu.driver import HamiCoreGpuDriver

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

    def make(mode: str, fake: str = str(tmp_path / "mixed.yaml"), ctx: DriverContext | None = None,
             **settings: str) -> HamiCoreGpuDriver:
        d = HamiCoreGpuDriver()
        d.setup(ctx or DriverContext("node-a", "node-a", {"mig": mode, "health": "off", **settings}, fake=fake,
                                     on_recorded_devices=lambda: ()))
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
