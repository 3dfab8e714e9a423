"""MLU discovery, health, sMLU instances and the process list through CNDev, Cambricon's device
management library (ctypes over ``libcndev.so``).

The bindings are written from CNDev's public C header (``cndev.h``, as Cambricon's open-source
Kubernetes device plugin ships it, and its MLU exporter: prototypes, struct layouts, return codes);
no Cambricon code is used. The same code runs on an MLU node (the driver's ``libcndev.so``) and under the fake backend
(hookcore's stub ``libcndev.so``, see `fake.py`), so the tests exercise this path.

Every call goes through `Cndev.call`: a failure is a `CndevError` naming the call, the MLU and
CNDev's return code, never a silent default. The only answers taken as "this MLU has no such
thing" are spelled out: an sMLU mode query answering NOT_SUPPORTED (an MLU or driver without
sMLU: shared whole). PCIe root and NUMA node come from sysfs (`dra.topology`).

What one MLU is: CNDev numbers a node's MLUs 0..n-1 (``cndevGetDeviceCount``); the index is the
``/dev/cambricon_dev<N>`` minor and what cnmon calls the card. Calls take a device handle
(``cndevGetDeviceHandleByIndex``), never the index. Its UUID is CNDev's (``cndevGetUUID``) with
``MLU-`` before it, as Cambricon's device plugin publishes it.
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

VERSION = 6  # CNDEV_VERSION_6: the struct version every versioned call is given
UUID_SIZE = 37
NAME_SIZE = 100  # CNDEV_MLUINSTANCE_PROFILE_NAME_BUFFER_SIZE (and the device node name's)
MAX_INSTANCES = 128
OK = 0
INSUFFICIENT_SPACE = 9
NOT_SUPPORTED = 10
NOT_FOUND = 14
IN_USE = 15
DUPLICATE = 16
DRIVER_RUNNING = 4  # cndevDriverHealthStateEnum_t CNDEV_HEALTH_STATE_DRIVER_RUNNING
# CNDev return codes (cndevRet_t) and what to check.
CODES: dict[int, tuple[str, str]] = {
    1: ("CNDEV_ERROR_NO_DRIVER", "is the MLU kernel driver (cambricon-drv) loaded on this node?"),
    2: ("CNDEV_ERROR_LOW_DRIVER_VERSION", "the MLU driver is older than this libcndev.so supports"),
    3: ("CNDEV_ERROR_UNSUPPORTED_API_VERSION", "libcndev.so is older than this driver's struct version"),
    4: ("CNDEV_ERROR_UNINITIALIZED", ""),
    5: ("CNDEV_ERROR_INVALID_ARGUMENT", ""),
    6: ("CNDEV_ERROR_INVALID_DEVICE_ID", ""),
    7: ("CNDEV_ERROR_UNKNOWN", "check the MLU with `cnmon` and the driver's kernel log"),
    8: ("CNDEV_ERROR_MALLOC", ""),
    9: ("CNDEV_ERROR_INSUFFICIENT_SPACE", "the MLU has no room for it (memory or instances)"),
    10: ("CNDEV_ERROR_NOT_SUPPORTED", "this MLU or driver does not support the call"),
    11: ("CNDEV_ERROR_INVALID_LINK", ""),
    12: ("CNDEV_ERROR_NO_DEVICES", "no MLU found: is the driver loaded and /dev/cambricon_dev* mounted into the daemon's pod?"),
    13: ("CNDEV_ERROR_NO_PERMISSION", "the daemon needs root for sMLU management"),
    14: ("CNDEV_ERROR_NOT_FOUND", ""),
    15: ("CNDEV_ERROR_IN_USE", ""),
    16: ("CNDEV_ERROR_DUPLICATE", ""),
    17: ("CNDEV_ERROR_TIMEOUT", ""),
    18: ("CNDEV_ERROR_IN_PROBLEM", "the MLU is in problem; check `cnmon`"),
}
# Where Cambricon's driver package puts the library (the chart mounts /usr/local/neuware and /usr/lib*).
DEFAULT_LIBRARIES = ("libcndev.so", "/usr/local/neuware/lib64/libcndev.so", "/usr/lib/x86_64-linux-gnu/libcndev.so",
                     "/usr/lib/aarch64-linux-gnu/libcndev.so", "/usr/lib64/libcndev.so")


class CndevError(dra.LibraryError):
    """A CNDev call failed; the message names the call, the MLU and what to check."""

    library = "CNDev"
    codes = CODES
    unknown = "unknown CNDev error"


# --- struct layouts (CNDev's public header) ------------------------------------------------------

_i32, _u32, _u16, _u8 = ctypes.c_int32, ctypes.c_uint32, ctypes.c_uint16, ctypes.c_uint8
_i64, _u64 = ctypes.c_long, ctypes.c_ulong  # the header's __int64_t/__uint64_t: long, unsigned long


class CardInfo(ctypes.Structure):
    _fields_ = [("version", _i32), ("number", _u32)]


class Uuid(ctypes.Structure):
    _fields_ = [("version", _i32), ("uuid", _u8 * UUID_SIZE), ("ncsUUID64", _u64)]


class MemoryInfoV2(ctypes.Structure):
    _fields_ = [("physicalMemoryTotal", _i64), ("physicalMemoryUsed", _i64), ("reservedMemory", _i64),
                ("virtualMemoryTotal", _i64), ("virtualMemoryUsed", _i64), ("globalMemory", _u64),
                ("reserved", _u64 * 16)]  # MB


class CoreCount(ctypes.Structure):
    _fields_ = [("version", _i32), ("count", _i32)]


class CardSN(ctypes.Structure):
    _fields_ = [("version", _i32), ("sn", _u64), ("motherBoardSn", _u64)]


class PCIeInfoV2(ctypes.Structure):
    _fields_ = [("subsystemId", _u32), ("deviceId", _u32), ("vendor", _u16), ("subsystemVendor", _u16),
                ("domain", _u32), ("bus", _u32), ("device", _u32), ("function", _u32), ("moduleId", _u16),
                ("slotId", _u16), ("reserved", _u32 * 8)]


class VersionInfo(ctypes.Structure):
    _fields_ = [("version", _i32), ("mcuMajorVersion", _u32), ("mcuMinorVersion", _u32), ("mcuBuildVersion", _u32),
                ("driverMajorVersion", _u32), ("driverMinorVersion", _u32), ("driverBuildVersion", _u32)]


class CardHealthState(ctypes.Structure):
    _fields_ = [("version", _i32), ("health", _i32), ("deviceState", ctypes.c_int), ("driverState", ctypes.c_int)]


class SmluMode(ctypes.Structure):
    _fields_ = [("version", _i32), ("smluMode", ctypes.c_int)]


class SmluSet(ctypes.Structure):
    _fields_ = [("version", _i32), ("mluQuota", _u32), ("memorySize", _u64)]


class SmluInfo(ctypes.Structure):
    _fields_ = [("version", _i32), ("profileId", _i32), ("instanceId", _i32), ("uuid", _u8 * UUID_SIZE),
                ("domain", _i32), ("bus", _i32), ("device", _i32), ("function", _i32),
                ("profileName", ctypes.c_char * NAME_SIZE), ("instanceName", ctypes.c_char * NAME_SIZE),
                ("devNodeName", ctypes.c_char * NAME_SIZE), ("mluQuota", _u32 * 2), ("memorySize", _u64 * 2),
                ("reserved", _u32 * 128)]


class SmluProfileIdInfo(ctypes.Structure):
    _fields_ = [("version", _i32), ("count", _i32), ("profileId", _i32 * 128)]


class SmluProfileInfo(ctypes.Structure):
    _fields_ = [("version", _i32), ("profileId", _i32), ("name", ctypes.c_char * NAME_SIZE),
                ("totalCapacity", _u32), ("remainCapacity", _u32), ("mluQuota", _u32 * 2), ("memorySize", _u64 * 2)]


class ProcessInfo(ctypes.Structure):
    """``cndevProcessInfo_t``: one process on an MLU, its PID and the MLU memory it holds, in KiB
    (24 bytes on LP64: the 64-bit fields aligned to 8 after two 32-bit ones). The caller sets the
    version of the array's first entry (`processes.py`)."""

    _fields_ = [("version", _i32), ("pid", _u32), ("physicalMemoryUsed", _u64), ("virtualMemoryUsed", _u64)]


_P = ctypes.POINTER
_dev = _i32  # cndevDevice_t
PROTOTYPES: dict[str, tuple[Any, ...]] = {
    "cndevInit": (_i32,),
    "cndevGetDeviceCount": (_P(CardInfo),),
    "cndevGetDeviceHandleByIndex": (_i32, _P(_dev)),
    "cndevGetUUID": (_P(Uuid), _dev),
    "cndevGetCardNameStringByDevId": (_dev,),
    "cndevGetCardSN": (_P(CardSN), _dev),
    "cndevGetMemoryUsageV2": (_P(MemoryInfoV2), _dev),
    "cndevGetCoreCount": (_P(CoreCount), _dev),
    "cndevGetPCIeInfoV2": (_P(PCIeInfoV2), _dev),
    "cndevGetVersionInfo": (_P(VersionInfo), _dev),
    "cndevGetCardHealthState": (_P(CardHealthState), _dev),
    "cndevGetSMLUMode": (_P(SmluMode), _dev),
    "cndevGetSMluProfileIdInfo": (_P(SmluProfileIdInfo), _dev),
    "cndevGetSMluProfileInfo": (_P(SmluProfileInfo), _i32, _dev),
    "cndevCreateSMluProfileInfo": (_P(SmluSet), _P(_i32), _dev),
    "cndevDestroySMluProfileInfo": (_i32, _dev),
    "cndevCreateSMluInstanceByProfileId": (_P(_i32), _u32, _dev, ctypes.c_char_p),
    "cndevDestroySMluInstanceByInstanceName": (_dev, ctypes.c_char_p),
    "cndevGetAllSMluInstanceInfo": (_P(_i32), _P(SmluInfo), _dev),
    # the processes on an MLU (`processes.py`): (in: the array's room, out: the MLU's count; the array; handle)
    "cndevGetProcessInfo": (_P(_u32), _P(ProcessInfo), _dev),
}


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace").strip()


class Cndev(dra.VendorLibrary):
    """One loaded ``libcndev.so``, initialised once; calls are serialised (`dra.VendorLibrary`: CNDev
    is not documented as thread safe, and prepare, the repair and the health monitor share it)."""

    soname = "libcndev.so"
    error = CndevError
    prototypes = PROTOTYPES
    restypes = {"cndevGetCardNameStringByDevId": ctypes.c_char_p}  # the others return a cndevRet_t
    install_hint = ("is Cambricon's driver installed on this node and its library directory mounted into the driver's"
                    " pod?")
    setting = "cndevLibrary"
    too_old = "the MLU driver is older than this driver supports (sMLU needs driver >= 5.10)"

    def __init__(self, library: str | Path | Sequence[str | Path] = DEFAULT_LIBRARIES) -> None:
        super().__init__(library)
        self.call("cndevInit", 0)
        self._handles: dict[int, int] = {}

    def handle(self, index: int) -> int:
        """The device handle of MLU `index` (asked once)."""
        if index not in self._handles:
            h = _i32(0)
            self.call("cndevGetDeviceHandleByIndex", index, ctypes.byref(h), target=f"MLU {index}")
            self._handles[index] = h.value
        return self._handles[index]

    def versioned(self, struct: type[ctypes.Structure], call: str, index: int, target: str) -> Any:
        """A `struct` with its version set, filled by ``call(&struct, handle)``."""
        out = struct()
        out.version = VERSION
        self.call(call, ctypes.byref(out), self.handle(index), target=target)
        return out

    # --- queries -----------------------------------------------------------------------------

    def count(self) -> int:
        info = CardInfo(version=VERSION)
        self.call("cndevGetDeviceCount", ctypes.byref(info))
        return int(info.number)

    def health(self, index: int, target: str = "") -> CardHealthState:
        """CNDev's health of MLU `index`: its health flag, device state (1 good) and driver state."""
        state: CardHealthState = self.versioned(CardHealthState, "cndevGetCardHealthState", index, target)
        return state

    def smlu_enabled(self, index: int, target: str = "") -> bool:
        """Whether the MLU's sMLU mode is on; NOT_SUPPORTED (no sMLU on it) is off."""
        try:
            return bool(self.versioned(SmluMode, "cndevGetSMLUMode", index, target).smluMode)
        except CndevError as exc:
            if exc.code == NOT_SUPPORTED:
                return False
            raise

    # --- sMLU ---------------------------------------------------------------------------------

    def instances(self, index: int, target: str = "") -> list[SmluInstance]:
        """Every sMLU instance on MLU `index` (whoever made it)."""
        infos = (SmluInfo * MAX_INSTANCES)()
        infos[0].version = VERSION
        count = _i32(MAX_INSTANCES)
        self.call("cndevGetAllSMluInstanceInfo", ctypes.byref(count), infos, self.handle(index), target=target)
        return [SmluInstance(index, _text(i.instanceName), int(i.instanceId), int(i.profileId), _text(i.devNodeName),
                             int(i.mluQuota[0]), int(i.memorySize[0])) for i in list(infos)[: max(0, count.value)]]

    def profile(self, index: int, quota: int, memory: int, target: str = "") -> int:
        """The ID of MLU `index`'s sMLU profile of `quota` percent and `memory` bytes, made when it
        has none (profiles are templates that instances are made from)."""
        with self.lock:
            ids = self.versioned(SmluProfileIdInfo, "cndevGetSMluProfileIdInfo", index, target)
            for pid in list(ids.profileId)[: max(0, min(ids.count, 128))]:
                info = SmluProfileInfo(version=VERSION)
                self.call("cndevGetSMluProfileInfo", ctypes.byref(info), pid, self.handle(index), target=target)
                if int(info.mluQuota[0]) == quota and int(info.memorySize[0]) == memory:
                    return int(pid)
            made = _i32(0)
            wanted = SmluSet(version=VERSION, mluQuota=quota, memorySize=memory)
            self.call("cndevCreateSMluProfileInfo", ctypes.byref(wanted), ctypes.byref(made), self.handle(index),
                      target=f"{target}, {quota}% {memory >> 20}Mi")
            return int(made.value)

    def create_instance(self, index: int, name: str, quota: int, memory: int, target: str = "") -> SmluInstance:
        """An sMLU instance named `name` of `quota` percent and `memory` bytes on MLU `index`."""
        with self.lock:
            pid = self.profile(index, quota, memory, target)
            handle = _i32(0)
            self.call("cndevCreateSMluInstanceByProfileId", ctypes.byref(handle), pid, self.handle(index),
                      name.encode(), target=f"{target}, {name}")
            made = next((i for i in self.instances(index, target) if i.name == name), None)
            if made is None:
                raise CndevError("cndevGetAllSMluInstanceInfo", target, -1, f"the sMLU instance {name} just made is"
                                 " not listed; check `cnmon smlu -l`")
            return made

    def destroy_instance(self, index: int, name: str, target: str = "") -> bool:
        """Destroy MLU `index`'s instance `name` and its profile when no instance uses it any more;
        False when there was no such instance (unprepare retried)."""
        with self.lock:
            gone = next((i for i in self.instances(index, target) if i.name == name), None)
            if gone is None:
                return False
            self.call("cndevDestroySMluInstanceByInstanceName", self.handle(index), name.encode(),
                      target=f"{target}, {name}")
            if not any(i.profile == gone.profile for i in self.instances(index, target)):
                try:
                    self.call("cndevDestroySMluProfileInfo", gone.profile, self.handle(index), target=target)
                except CndevError as exc:  # made or used by someone else meanwhile: theirs to keep
                    log.info("sMLU profile left in place", extra={"mlu": index, "profile": gone.profile,
                                                                  "why": str(exc)})
            return True


@dataclasses.dataclass(frozen=True)
class SmluInstance:
    """One sMLU instance on an MLU, as CNDev lists it."""

    index: int  # the MLU's
    name: str
    id: int
    profile: int
    node: str  # its device node, /dev/cambricon-caps/cap_dev<N>_mi<id>
    quota: int  # percent
    memory: int  # bytes


@dataclasses.dataclass(frozen=True)
class Mlu:
    """One MLU as discovered."""

    uuid: str  # MLU-<CNDev's UUID>
    index: int  # /dev/cambricon_dev<index>
    name: str  # MLU370-X8
    cores: int
    memory: int  # bytes
    pci_bus_id: str  # 0000:3b:00.0
    serial: str | None
    smlu: bool  # sMLU mode on: shared by sMLU instances
    pcie_root: str | None
    numa_node: int | None

    @property
    def target(self) -> str:
        return f"MLU {self.index}, {self.uuid}"


@dataclasses.dataclass(frozen=True)
class Inventory:
    driver_version: str
    mlus: tuple[Mlu, ...]


def discover(cndev: Cndev, sysfs: Path = Path("/sys")) -> Inventory:
    """Query every MLU CNDev enumerates."""
    mlus = [_mlu(cndev, i, sysfs) for i in range(cndev.count())]
    for what in ("uuid", "pci_bus_id"):
        values = [getattr(m, what) for m in mlus]
        if len(set(values)) != len(values):
            raise CndevError("discover", "", -1, f"two MLUs report the same {what}: {values}")
    driver = "unknown"
    if mlus:
        v = cndev.versioned(VersionInfo, "cndevGetVersionInfo", 0, "MLU 0")
        driver = f"{v.driverMajorVersion}.{v.driverMinorVersion}.{v.driverBuildVersion}"
    return Inventory(driver, tuple(mlus))


def _mlu(cndev: Cndev, index: int, sysfs: Path) -> Mlu:
    where = f"MLU {index}"
    raw = _text(bytes(cndev.versioned(Uuid, "cndevGetUUID", index, where).uuid))
    if not raw:
        raise CndevError("cndevGetUUID", where, -1, "the MLU reports an empty UUID (nothing to publish)")
    uuid = f"MLU-{raw}"
    target = f"{where}, {uuid}"
    name_fn = cndev.function("cndevGetCardNameStringByDevId")
    with cndev.lock:
        name = (name_fn(cndev.handle(index)) or b"").decode("utf-8", "replace").strip()
    if not name or name == "Unknown":
        raise CndevError("cndevGetCardNameStringByDevId", target, -1, "the MLU reports no card name")
    memory = MemoryInfoV2()
    cndev.call("cndevGetMemoryUsageV2", ctypes.byref(memory), cndev.handle(index), target=target)
    if memory.physicalMemoryTotal <= 0:
        raise CndevError("cndevGetMemoryUsageV2", target, -1, "the MLU reports no device memory")
    cores = cndev.versioned(CoreCount, "cndevGetCoreCount", index, target).count
    pcie = PCIeInfoV2()
    cndev.call("cndevGetPCIeInfoV2", ctypes.byref(pcie), cndev.handle(index), target=target)
    bus = f"{pcie.domain & 0xFFFF:04x}:{pcie.bus & 0xFF:02x}:{pcie.device & 0x1F:02x}.{pcie.function & 0x7:x}"
    sn = cndev.versioned(CardSN, "cndevGetCardSN", index, target).sn
    return Mlu(uuid=uuid, index=index, name=name, cores=int(cores), memory=int(memory.physicalMemoryTotal) << 20,
               pci_bus_id=bus, serial=f"{sn:x}" if sn else None, smlu=cndev.smlu_enabled(index, target),
               pcie_root=topology.pcie_root(sysfs, bus), numa_node=topology.numa_node(sysfs, bus))
