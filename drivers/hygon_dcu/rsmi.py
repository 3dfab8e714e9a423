"""DCU discovery through ROCm SMI (ctypes over ``librocm_smi64.so``), the management library a
Hygon DCU node exposes (the DCU driver stack, HyHAL, ships it beside ``hy-smi``).

The bindings are written from the public ROCm SMI reference (``rocm_smi.h`` as documented at
rocm.docs.amd.com/projects/rocm_smi_lib: prototypes, ``rsmi_status_t`` values, the BDFID layout,
``rsmi_error_count_t``); no AMD or Hygon header or binding is used. The same code runs on a DCU
node and under the fake backend (hookcore's stub ``librocm_smi64.so``, see `fake.py`), so the
tests exercise this path.

Every call goes through `Rsmi.call`: a failure is an `RsmiError` naming the call, the device and
the status, never a silent default. The only answers taken as "this device has no such thing"
are spelled out: a serial number or unique ID the device does not report (NOT_SUPPORTED).

What ROCm SMI does not report is read from the kernel: the compute-unit count from the KFD
topology (``/sys/class/kfd/kfd/topology/nodes/*/properties``: ``simd_count`` / ``simd_per_cu``
of the node whose ``drm_render_minor`` is the device's), PCIe root and NUMA node from sysfs
(`dra.topology`).
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dra
from dra import topology

log = logging.getLogger(__name__)

OK = 0
NOT_SUPPORTED = 2
FILE_ERROR = 3
NOT_FOUND = 10
INSUFFICIENT_SIZE = 11
MEM_TYPE_VRAM = 0
GPU_BLOCK_UMC = 1
SW_COMP_DRIVER = 0
# rsmi_status_t (rocm_smi.h) and what to check.
STATUS: dict[int, tuple[str, str]] = {
    1: ("RSMI_STATUS_INVALID_ARGS", ""),
    2: ("RSMI_STATUS_NOT_SUPPORTED", "this device or driver does not support the query"),
    3: ("RSMI_STATUS_FILE_ERROR", "is the DCU kernel driver loaded, and /sys mounted into the daemon's pod?"),
    4: ("RSMI_STATUS_PERMISSION", "the daemon needs root (or the render and video groups)"),
    5: ("RSMI_STATUS_OUT_OF_RESOURCES", ""),
    6: ("RSMI_STATUS_INTERNAL_EXCEPTION", ""),
    7: ("RSMI_STATUS_INPUT_OUT_OF_BOUNDS", ""),
    8: ("RSMI_STATUS_INIT_ERROR", "ROCm SMI could not initialise: is the DCU driver loaded (lsmod | grep hydcu or amdgpu)?"),
    9: ("RSMI_STATUS_NOT_YET_IMPLEMENTED", ""),
    10: ("RSMI_STATUS_NOT_FOUND", "the device is gone; check hy-smi and dmesg"),
    11: ("RSMI_STATUS_INSUFFICIENT_SIZE", ""),
    12: ("RSMI_STATUS_INTERRUPT", ""),
    13: ("RSMI_STATUS_UNEXPECTED_SIZE", ""),
    14: ("RSMI_STATUS_NO_DATA", ""),
    15: ("RSMI_STATUS_UNEXPECTED_DATA", ""),
    16: ("RSMI_STATUS_BUSY", "retry"),
    17: ("RSMI_STATUS_REFCOUNT_OVERFLOW", ""),
    0xFFFFFFFF: ("RSMI_STATUS_UNKNOWN_ERROR", ""),
}
# Where DCU and ROCm installs put the library (the chart mounts /opt/hyhal and /opt/rocm read-only).
DEFAULT_LIBRARIES = ("librocm_smi64.so", "/opt/hyhal/lib/librocm_smi64.so", "/opt/rocm/lib/librocm_smi64.so")


class RsmiError(dra.LibraryError):
    """A ROCm SMI call failed; the message names the call, the device and what to check."""

    library = "ROCm SMI"
    codes = STATUS
    unknown = "unknown ROCm SMI status"


class ErrorCount(ctypes.Structure):
    _fields_ = [("correctable_err", ctypes.c_uint64), ("uncorrectable_err", ctypes.c_uint64)]


class ProcessInfo(ctypes.Structure):
    """``rsmi_process_info_t``: natural alignment, 32 bytes (the last field padded to 8)."""

    _fields_ = [("process_id", ctypes.c_uint32), ("pasid", ctypes.c_uint32), ("vram_usage", ctypes.c_uint64),
                ("sdma_usage", ctypes.c_uint64), ("cu_occupancy", ctypes.c_uint32)]


_P = ctypes.POINTER
_u32, _u64 = ctypes.c_uint32, ctypes.c_uint64
PROTOTYPES: dict[str, tuple[Any, ...]] = {
    "rsmi_init": (_u64,),
    "rsmi_num_monitor_devices": (_P(_u32),),
    "rsmi_version_str_get": (ctypes.c_int, ctypes.c_char_p, _u32),
    "rsmi_dev_name_get": (_u32, ctypes.c_char_p, ctypes.c_size_t),
    "rsmi_dev_pci_id_get": (_u32, _P(_u64)),
    "rsmi_dev_unique_id_get": (_u32, _P(_u64)),
    "rsmi_dev_serial_number_get": (_u32, ctypes.c_char_p, _u32),
    "rsmi_dev_drm_render_minor_get": (_u32, _P(_u32)),
    "rsmi_dev_memory_total_get": (_u32, ctypes.c_int, _P(_u64)),
    "rsmi_dev_memory_usage_get": (_u32, ctypes.c_int, _P(_u64)),
    "rsmi_dev_ecc_count_get": (_u32, _u64, _P(ErrorCount)),  # rsmi_gpu_block_t is a 64-bit enum
    # the process API (`processes.py`): (procs or NULL, in/out count); (pid, indices or NULL, in/out
    # count); (pid, device index, one ProcessInfo)
    "rsmi_compute_process_info_get": (_P(ProcessInfo), _P(_u32)),
    "rsmi_compute_process_gpus_get": (_u32, _P(_u32), _P(_u32)),
    "rsmi_compute_process_info_by_device_get": (_u32, _u32, _P(ProcessInfo)),
}


class Rsmi(dra.VendorLibrary):
    """One loaded ``librocm_smi64.so``, initialised once; calls are serialised (`dra.VendorLibrary`:
    discovery and the health monitor share it)."""

    soname = "librocm_smi64.so"
    error = RsmiError
    prototypes = PROTOTYPES
    restype = ctypes.c_uint32  # rsmi_status_t
    install_hint = ("is the DCU driver stack (HyHAL or ROCm) installed on this node and /opt/hyhal (or /opt/rocm)"
                    " mounted into the driver's pod?")
    setting = "smiLibrary"

    def __init__(self, library: str | Path | Sequence[str | Path] = DEFAULT_LIBRARIES) -> None:
        super().__init__(library)
        self.call("rsmi_init", 0)

    # --- queries -----------------------------------------------------------------------------

    def count(self) -> int:
        n = ctypes.c_uint32(0)
        self.call("rsmi_num_monitor_devices", ctypes.byref(n))
        return n.value

    def driver_version(self) -> str:
        buf = ctypes.create_string_buffer(256)
        self.call("rsmi_version_str_get", SW_COMP_DRIVER, buf, len(buf))
        return buf.value.decode("utf-8", "replace").strip()

    def text(self, name: str, index: int, target: str) -> str:
        buf = ctypes.create_string_buffer(256)
        self.call(name, index, buf, len(buf), target=target)
        return buf.value.decode("utf-8", "replace").strip()

    def u64(self, name: str, index: int, target: str, *extra: Any) -> int:
        value = ctypes.c_uint64(0)
        self.call(name, index, *extra, ctypes.byref(value), target=target)
        return value.value

    def memory_used(self, index: int, target: str) -> int:
        """VRAM in use: what the health monitor asks to see that the device still answers."""
        return self.u64("rsmi_dev_memory_usage_get", index, target, MEM_TYPE_VRAM)

    def ecc(self, index: int, target: str) -> tuple[int, int] | None:
        """(uncorrectable, correctable) ECC errors of the memory (UMC) block; None when the device
        does not report ECC."""
        count = ErrorCount()
        try:
            self.call("rsmi_dev_ecc_count_get", index, GPU_BLOCK_UMC, ctypes.byref(count), target=target)
        except RsmiError as exc:
            if exc.code == NOT_SUPPORTED:
                return None
            raise
        return int(count.uncorrectable_err), int(count.correctable_err)


@dataclasses.dataclass(frozen=True)
class Dcu:
    """One DCU as discovered."""

    uuid: str  # DCU-<unique ID, 16 hex digits>
    index: int  # ROCm SMI's device index (hy-smi's device number)
    name: str  # the product name, e.g. "K100_AI"
    pci_bus_id: str  # sysfs form, 0000:c1:00.0
    render_minor: int  # /dev/dri/renderD<minor>
    memory: int  # VRAM bytes
    compute_units: int | None  # from the KFD topology; None when not readable
    serial: str | None
    pcie_root: str | None
    numa_node: int | None

    @property
    def target(self) -> str:
        return f"device {self.index}, {self.pci_bus_id}"


@dataclasses.dataclass(frozen=True)
class Inventory:
    driver_version: str
    dcus: tuple[Dcu, ...]


def bus_id(bdfid: int) -> str:
    """ROCm SMI's BDFID (domain << 32 | bus << 8 | device << 3 | function) as ``dddd:bb:dd.f``."""
    return f"{(bdfid >> 32) & 0xFFFF:04x}:{(bdfid >> 8) & 0xFF:02x}:{(bdfid >> 3) & 0x1F:02x}.{bdfid & 0x7:x}"


def compute_units(sysfs: Path) -> dict[int, int]:
    """Render minor -> compute units, from the KFD topology (nodes without SIMDs are CPUs)."""
    out: dict[int, int] = {}
    nodes = sysfs / "class" / "kfd" / "kfd" / "topology" / "nodes"
    for props in sorted(nodes.glob("*/properties")) if nodes.is_dir() else []:
        try:
            fields = dict(line.split(None, 1) for line in props.read_text().splitlines() if " " in line.strip())
            simd, per_cu, minor = int(fields["simd_count"]), int(fields["simd_per_cu"]), int(fields["drm_render_minor"])
        except (OSError, KeyError, ValueError):
            continue
        if simd > 0 and per_cu > 0:
            out[minor] = simd // per_cu
    return out


def discover(rsmi: Rsmi, sysfs: Path = Path("/sys")) -> Inventory:
    """Query every device ROCm SMI monitors."""
    driver = rsmi.driver_version()
    cus = compute_units(sysfs)
    dcus = [_dcu(rsmi, i, sysfs, cus) for i in range(rsmi.count())]
    for what in ("uuid", "pci_bus_id", "render_minor"):
        values = [getattr(d, what) for d in dcus]
        if len(set(values)) != len(values):
            raise RsmiError("discover", "", -1, f"two DCUs report the same {what}: {values}")
    return Inventory(driver, tuple(dcus))


def _dcu(rsmi: Rsmi, index: int, sysfs: Path, cus: dict[int, int]) -> Dcu:
    where = f"device {index}"
    bus = bus_id(rsmi.u64("rsmi_dev_pci_id_get", index, where))
    target = f"{where}, {bus}"
    try:
        uuid = f"DCU-{rsmi.u64('rsmi_dev_unique_id_get', index, target):016x}"
    except RsmiError as exc:
        if exc.code != NOT_SUPPORTED:
            raise
        uuid = "DCU-" + bus.replace(":", "").replace(".", "")  # no unique ID: the bus ID, which the node keeps
    minor = ctypes.c_uint32(0)
    rsmi.call("rsmi_dev_drm_render_minor_get", index, ctypes.byref(minor), target=target)
    memory = rsmi.u64("rsmi_dev_memory_total_get", index, target, MEM_TYPE_VRAM)
    if memory <= 0:
        raise RsmiError("rsmi_dev_memory_total_get", target, -1, "the DCU reports no VRAM")
    return Dcu(
        uuid=uuid,
        index=index,
        name=rsmi.text("rsmi_dev_name_get", index, target),
        pci_bus_id=bus,
        render_minor=minor.value,
        memory=memory,
        compute_units=cus.get(minor.value),
        serial=_serial(rsmi, index, target),
        pcie_root=topology.pcie_root(sysfs, bus),
        numa_node=topology.numa_node(sysfs, bus),
    )


def _serial(rsmi: Rsmi, index: int, target: str) -> str | None:
    try:
        return rsmi.text("rsmi_dev_serial_number_get", index, target) or None
    except RsmiError as exc:
        if exc.code == NOT_SUPPORTED:
            return None  # boards without a readable serial; the unique ID still identifies the device
        raise
