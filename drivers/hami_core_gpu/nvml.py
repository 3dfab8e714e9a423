"""GPU discovery through NVML (nvidia-ml-py): what the node has, read once at start.

The same code runs on a GPU node (the driver's libnvidia-ml.so.1) and under the fake backend
(hookcore's stub libnvidia-ml loaded first, see `fake.py`), so the tests exercise this path.

Every NVML call goes through `call`: a failure is an `NvmlError` naming the call, the GPU and
NVML's answer, never a silent default. The exceptions are queries whose NOT_SUPPORTED answer
means "this GPU has no such thing" (MIG mode on a GPU without MIG); they say so explicitly.
PCIe root and NUMA node are not NVML's: they come from sysfs (`dra.topology`).
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pynvml

from dra import topology

log = logging.getLogger(__name__)
_T = TypeVar("_T")

# NVML enums as the NVIDIA drivers' attributes spell them (go-nvlib's strings), so CEL selectors
# written for HAMi's and NVIDIA's DRA drivers (`brand == "Nvidia"`, `architecture == "Hopper"`)
# keep matching.
BRANDS = {
    pynvml.NVML_BRAND_UNKNOWN: "Unknown", pynvml.NVML_BRAND_QUADRO: "Quadro", pynvml.NVML_BRAND_TESLA: "Tesla",
    pynvml.NVML_BRAND_NVS: "NVS", pynvml.NVML_BRAND_GRID: "Grid", pynvml.NVML_BRAND_GEFORCE: "GeForce",
    pynvml.NVML_BRAND_TITAN: "Titan", pynvml.NVML_BRAND_NVIDIA_VAPPS: "NvidiaVApps",
    pynvml.NVML_BRAND_NVIDIA_VPC: "NvidiaVPC", pynvml.NVML_BRAND_NVIDIA_VCS: "NvidiaVCS",
    pynvml.NVML_BRAND_NVIDIA_VWS: "NvidiaVWS", pynvml.NVML_BRAND_NVIDIA_CLOUD_GAMING: "NvidiaCloudGaming",
    pynvml.NVML_BRAND_QUADRO_RTX: "QuadroRTX", pynvml.NVML_BRAND_NVIDIA_RTX: "NvidiaRTX",
    pynvml.NVML_BRAND_NVIDIA: "Nvidia", pynvml.NVML_BRAND_GEFORCE_RTX: "GeForceRTX",
    pynvml.NVML_BRAND_TITAN_RTX: "TitanRTX",
}
# (pynvml constant, name); constants a given nvidia-ml-py lacks are skipped.
_ARCH_NAMES = (
    ("KEPLER", "Kepler"), ("MAXWELL", "Maxwell"), ("PASCAL", "Pascal"), ("VOLTA", "Volta"),
    ("TURING", "Turing"), ("AMPERE", "Ampere"), ("ADA", "Ada Lovelace"), ("HOPPER", "Hopper"),
    ("BLACKWELL", "Blackwell"), ("RUBIN", "Rubin"), ("UNKNOWN", "Unknown"),
)
ARCHITECTURES = {
    getattr(pynvml, f"NVML_DEVICE_ARCH_{c}"): name for c, name in _ARCH_NAMES if hasattr(pynvml, f"NVML_DEVICE_ARCH_{c}")
}


class NvmlError(RuntimeError):
    """An NVML call failed; the message names the call, the GPU and what to check."""

    def __init__(self, call: str, target: str, code: int, text: str, hint: str = "") -> None:
        where = f"{call}({target})" if target else f"{call}()"
        super().__init__(f"NVML {where} failed: {text} (NVML return {code}){'; ' + hint if hint else ''}")
        self.call = call
        self.code = code


def _hint(code: int) -> str:
    return {
        pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: "libnvidia-ml.so.1 is not on the library path: is the NVIDIA "
        "driver installed on this node, and its library directory mounted into the driver's pod? (without a GPU: "
        "--fake h200x8)",
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "the NVIDIA kernel module is not loaded on this node",
        pynvml.NVML_ERROR_NO_PERMISSION: "the daemon needs access to /dev/nvidia* (run it privileged)",
        pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: "the NVML library and the kernel module differ in version: "
        "reboot the node or reload the module after a driver upgrade",
        pynvml.NVML_ERROR_GPU_IS_LOST: "the GPU fell off the bus; it needs a reset or the node a reboot",
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND: "the NVIDIA driver is older than this query (upgrade the driver)",
    }.get(code, "")


def call(fn: Callable[..., _T], *args: Any, target: str = "") -> _T:
    """`fn(*args)`, with an NVML failure turned into an `NvmlError` naming `fn` and `target`."""
    try:
        return fn(*args)
    except pynvml.NVMLError as exc:
        code = int(getattr(exc, "value", -1))
        raise NvmlError(fn.__name__, target, code, str(exc), _hint(code)) from None


def not_supported(exc: NvmlError) -> bool:
    return bool(exc.code == pynvml.NVML_ERROR_NOT_SUPPORTED)


# One initialisation at a time in the process; NVML counts nvmlInit/nvmlShutdown pairs itself.
_init_lock = threading.Lock()
_loaded: str | None = None


def load_library(path: Path | None) -> None:
    """Make `path` the libnvidia-ml.so.1 of this process (the fake backend's stub).

    Loaded with RTLD_GLOBAL before nvidia-ml-py's own ``CDLL("libnvidia-ml.so.1")``, which the
    dynamic loader then answers with this already-loaded library of the same soname. None keeps
    the system's library (a GPU node).
    """
    global _loaded
    if path is None:
        return
    with _init_lock:
        if _loaded == str(path):
            return
        if _loaded is not None or pynvml.nvmlLib is not None:
            raise RuntimeError(f"another libnvidia-ml is already loaded in this process ({_loaded or 'the system one'})")
        ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        _loaded = str(path)


def init() -> None:
    """nvmlInit for a long-lived reader (the watchdog's); pair it with ``pynvml.nvmlShutdown``."""
    with _init_lock:
        call(pynvml.nvmlInit)


@contextmanager
def session() -> Iterator[None]:
    """nvmlInit ... nvmlShutdown."""
    with _init_lock:
        call(pynvml.nvmlInit)
    try:
        yield
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as exc:  # shutting down cannot make things worse
            log.warning("nvmlShutdown failed", extra={"error": str(exc)})


def version(value: str) -> str:
    """A driver version as a semantic version: ``580.159.04`` -> ``580.159.4`` (semver forbids
    leading zeros, the API rejects them), two parts padded (``550.54`` -> ``550.54.0``)."""
    parts = [str(int(p)) for p in value.strip().split(".")[:3]]
    while len(parts) < 3:
        parts.append("0")
    return ".".join(parts)


def cuda_version(encoded: int) -> str:
    """NVML's CUDA driver version (``12090``) as a semantic version (``12.9.0``)."""
    return f"{encoded // 1000}.{(encoded % 1000) // 10}.0"


def bus_id(raw: str) -> str:
    """NVML's PCI bus ID (``00000000:19:00.0``) in sysfs' form (``0000:19:00.0``)."""
    domain, bus, rest = raw.strip().lower().split(":")
    return f"{int(domain, 16):04x}:{bus}:{rest}"


@dataclasses.dataclass(frozen=True)
class Gpu:
    """One physical GPU as discovered."""

    uuid: str
    index: int  # NVML's enumeration index (nvidia-smi's)
    minor: int  # /dev/nvidia<minor>
    product_name: str
    brand: str
    architecture: str
    compute_capability: str  # semantic version, e.g. 9.0.0
    memory: int  # bytes of framebuffer
    pci_bus_id: str  # sysfs form
    pcie_root: str | None  # e.g. pci0000:15; None when sysfs cannot tell
    numa_node: int | None  # None: no NUMA affinity known
    mig_enabled: bool | None  # None: the GPU has no MIG
    sms: int | None = None  # SM count (nvmlDeviceGetAttributes); None: NVML did not say (see `_sms`)
    power_limit_w: int | None = None  # the power limit in force; None: NVML did not say
    default_power_limit_w: int | None = None  # the board's default power limit; None: NVML did not say


@dataclasses.dataclass(frozen=True)
class Inventory:
    """What discovery found on the node."""

    driver_version: str  # semantic version
    cuda_driver_version: str  # semantic version
    gpus: tuple[Gpu, ...]
    skipped: tuple[str, ...] = ()  # why GPUs were left out (lost at discovery)


def discover(sysfs: Path = Path("/sys"), memory_override: int | None = None) -> Inventory:
    """Query every GPU NVML enumerates. `memory_override` (bytes) stands in for GPUs whose NVML
    reports no framebuffer size (unified-memory GPUs such as GB10 answer NOT_SUPPORTED)."""
    with session():
        driver = version(call(pynvml.nvmlSystemGetDriverVersion))
        cuda = cuda_version(call(pynvml.nvmlSystemGetCudaDriverVersion_v2))
        count = call(pynvml.nvmlDeviceGetCount)
        gpus: list[Gpu] = []
        skipped: list[str] = []
        for i in range(count):
            handle = call(pynvml.nvmlDeviceGetHandleByIndex, i, target=f"index {i}")
            try:
                gpus.append(_gpu(handle, f"index {i}", sysfs, memory_override))
            except NvmlError as exc:
                if exc.code != pynvml.NVML_ERROR_GPU_IS_LOST:
                    raise
                log.error("GPU left out: lost at discovery", extra={"index": i, "error": str(exc)})
                skipped.append(str(exc))
    return Inventory(driver, cuda, tuple(gpus), tuple(skipped))


_sms_unknown_logged = False


FP32_CORES_PER_SM = {(7, 0): 64, (7, 2): 64, (7, 5): 64, (8, 0): 64, (8, 6): 128, (8, 7): 128, (8, 9): 128,
                     (9, 0): 128, (10, 0): 128, (10, 3): 128, (12, 0): 128}
"""FP32 cores per SM by compute capability (NVIDIA's CUDA programming guide, throughput of 32-bit
floating-point add per clock per multiprocessor): what turns NVML's core count into SMs."""


def _sms(handle: Any, target: str, cc: tuple[int, int]) -> int | None:
    """The GPU's SM count, for the hook's config (`HOOKCORE_DEVICE_SMS_<i>`): CUDA inside an MPS
    client answers the client's own part, so the hook cannot learn the whole from there.

    NVML's nvmlDeviceGetAttributes_v2 gives it for MIG device handles (its reference says only
    those; driver 580 answers NOT_SUPPORTED for a whole H200, measured); for a whole GPU it is
    nvmlDeviceGetNumGpuCores divided by the cores per SM of the GPU's compute capability (an H200:
    16896 / 128 = 132). A capability this table does not know, or counts that do not divide, leave
    it None, logged once: the hook then asks CUDA, as before (right outside MPS; a full charge
    inside it, so an MPS client is throttled twice)."""
    global _sms_unknown_logged
    why = ""
    try:
        sms = int(call(pynvml.nvmlDeviceGetAttributes, handle, target=target).multiprocessorCount)
        if 1 <= sms <= 4096:
            return sms
        why = f"NVML's attributes report {sms} SMs"
    except NvmlError as exc:
        if exc.code == pynvml.NVML_ERROR_GPU_IS_LOST:
            raise
        why = str(exc)
    per_sm = FP32_CORES_PER_SM.get(cc)
    try:
        cores = int(call(pynvml.nvmlDeviceGetNumGpuCores, handle, target=target))
        if per_sm and cores % per_sm == 0 and 1 <= cores // per_sm <= 4096:
            return cores // per_sm
        why += f"; {cores} cores, compute capability {cc[0]}.{cc[1]} ({per_sm or 'unknown'} per SM)"
    except NvmlError as exc:
        if exc.code == pynvml.NVML_ERROR_GPU_IS_LOST:
            raise
        why += f"; {exc}"
    if not _sms_unknown_logged:
        _sms_unknown_logged = True
        log.warning("the GPU's SM count is unknown: under MPS the hook charges a client's full device time,"
                    " throttling it twice (by MPS and by the claim's cores)", extra={"gpu": target, "error": why})
    return None


def _watts(fn: Callable[..., int], handle: Any, target: str) -> int | None:
    """A power limit in whole watts, or None where the GPU has no power management (or the driver
    lacks the query): what needs it (the strict cap's measured model defaults) then does without."""
    try:
        return round(int(call(fn, handle, target=target)) / 1000)
    except NvmlError as exc:
        if exc.code == pynvml.NVML_ERROR_GPU_IS_LOST:
            raise
        return None


def _gpu(handle: Any, where: str, sysfs: Path, memory_override: int | None) -> Gpu:
    uuid = call(pynvml.nvmlDeviceGetUUID, handle, target=where)
    target = f"{where}, {uuid}"
    brand = call(pynvml.nvmlDeviceGetBrand, handle, target=target)
    arch = call(pynvml.nvmlDeviceGetArchitecture, handle, target=target)
    major, minor_cc = call(pynvml.nvmlDeviceGetCudaComputeCapability, handle, target=target)
    pci = call(pynvml.nvmlDeviceGetPciInfo_v3, handle, target=target)
    raw_bus = pci.busId.decode() if isinstance(pci.busId, bytes) else str(pci.busId)
    bus = bus_id(raw_bus)
    try:
        memory = int(call(pynvml.nvmlDeviceGetMemoryInfo, handle, target=target).total)
    except NvmlError as exc:
        if not not_supported(exc):
            raise
        if memory_override is None:
            raise NvmlError(exc.call, target, exc.code, "this GPU reports no framebuffer size (unified memory?)",
                            "publish a size with `--set deviceMemory=<quantity>`") from None
        memory = memory_override
    try:
        current, _pending = call(pynvml.nvmlDeviceGetMigMode, handle, target=target)
        mig: bool | None = bool(current == pynvml.NVML_DEVICE_MIG_ENABLE)
    except NvmlError as exc:
        if not not_supported(exc):
            raise
        mig = None  # this GPU has no MIG
    return Gpu(
        uuid=uuid,
        index=call(pynvml.nvmlDeviceGetIndex, handle, target=target),
        minor=call(pynvml.nvmlDeviceGetMinorNumber, handle, target=target),
        product_name=call(pynvml.nvmlDeviceGetName, handle, target=target),
        brand=BRANDS.get(brand, f"Unknown({brand})"),
        architecture=ARCHITECTURES.get(arch, f"Unknown({arch})"),
        compute_capability=f"{major}.{minor_cc}.0",
        memory=memory,
        pci_bus_id=bus,
        pcie_root=topology.pcie_root(sysfs, bus),
        numa_node=topology.numa_node(sysfs, bus),
        mig_enabled=mig,
        sms=_sms(handle, target, (int(major), int(minor_cc))),
        power_limit_w=_watts(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle, target),
        default_power_limit_w=_watts(pynvml.nvmlDeviceGetPowerManagementDefaultLimit, handle, target),
    )
