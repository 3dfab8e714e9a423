"""NPU discovery through DCMI, Huawei's device management library (ctypes over ``libdcmi.so``).

The bindings are written from Huawei's public DCMI API reference (prototypes, struct layouts,
return codes); no Huawei header or binding is used. The same code runs on an Ascend node (the
driver's ``libdcmi.so``) and under the fake backend (hookcore's stub ``libdcmi.so``, see
`fake.py`), so the tests exercise this path.

Every call goes through `Dcmi.call`: a failure is a `DcmiError` naming the call, the NPU and
DCMI's return code, never a silent default. The only answers taken as "this NPU has no such
thing" are spelled out: HBM info NOT_SUPPORT (310P chips use LPDDR: memory comes from
``dcmi_get_device_memory_info_v3`` instead) and an electronic label NOT_SUPPORT (no serial).
PCIe root and NUMA node are not DCMI's: they come from sysfs (`dra.topology`).

What one NPU is: DCMI numbers a node's NPU modules ("cards", ``npu-smi -i``) and the chips on
each (``npu-smi -c``; Atlas A3 boards carry two). Every chip has a logic ID (what
``ASCEND_RT_VISIBLE_DEVICES`` and the runtime count) and a physical ID (the ``/dev/davinci<N>``
minor, what ``ASCEND_VISIBLE_DEVICES`` names). Its UUID is the chip's VDIE die ID
(``dcmi_get_device_die_v2``), a hardware identifier, formatted ``NPU-`` + five 8-digit hex words.
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

MAX_CARDS = 64
MAX_CHIP_NAME_LEN = 32
MAX_LENTH = 256
DIE_ID_COUNT = 5
VDIE = 1  # enum dcmi_die_type {NDIE, VDIE}
HEALTH_GONE = 0xFFFFFFFF  # dcmi_get_device_health: "the device does not exist"

OK = 0
ERR_NOT_SUPPORT = -8255
ERR_NOT_SUPPORT_IN_CONTAINER = -8013
# DCMI return codes (Huawei's "Return Codes" table) and what to check.
CODES: dict[int, tuple[str, str]] = {
    -8001: ("DCMI_ERR_CODE_INVALID_PARAMETER", ""),
    -8002: ("DCMI_ERR_CODE_OPER_NOT_PERMITTED", "the daemon needs root or the HwHiAiUser group and /dev/davinci_manager"),
    -8003: ("DCMI_ERR_CODE_MEM_OPERATE_FAIL", ""),
    -8004: ("DCMI_ERR_CODE_SECURE_FUN_FAIL", ""),
    -8005: ("DCMI_ERR_CODE_INNER_ERR", "see the driver's logs under /var/log/npu"),
    -8006: ("DCMI_ERR_CODE_TIME_OUT", "the NPU did not answer in time; retry, then check `npu-smi info`"),
    -8007: ("DCMI_ERR_CODE_INVALID_DEVICE_ID", ""),
    -8008: ("DCMI_ERR_CODE_DEVICE_NOT_EXIST", "the NPU is gone from the bus; check `npu-smi info` and dmesg"),
    -8009: ("DCMI_ERR_CODE_IOCTL_FAIL", "is the Ascend kernel driver loaded and /dev/davinci_manager mounted into the daemon's pod?"),
    -8010: ("DCMI_ERR_CODE_SEND_MSG_FAIL", ""),
    -8011: ("DCMI_ERR_CODE_RECV_MSG_FAIL", ""),
    -8012: ("DCMI_ERR_CODE_NOT_REDAY", "the device is not ready yet; retry after it has booted"),
    -8013: ("DCMI_ERR_CODE_NOT_SUPPORT_IN_CONTAINER", "this query is refused inside a container; run the daemon privileged"),
    -8017: ("DCMI_ERR_CODE_IS_UPGRADING", "a firmware upgrade is in progress"),
    -8020: ("DCMI_ERR_CODE_RESOURCE_OCCUPIED", ""),
    -8023: ("DCMI_ERR_CODE_CONFIG_INFO_NOT_EXIST", ""),
    -8255: ("DCMI_ERR_CODE_NOT_SUPPORT", "this NPU or driver does not support the query"),
}
# Where Ascend driver installs put the library (the chart mounts /usr/local/Ascend and /usr/local/dcmi).
DEFAULT_LIBRARIES = ("libdcmi.so", "/usr/local/Ascend/driver/lib64/driver/libdcmi.so", "/usr/local/dcmi/libdcmi.so")


class DcmiError(dra.LibraryError):
    """A DCMI call failed; the message names the call, the NPU and what to check."""

    library = "DCMI"
    codes = CODES
    unknown = "unknown DCMI error"


# --- struct layouts (Huawei's DCMI API reference) -------------------------------------------------


class ChipInfo(ctypes.Structure):
    _fields_ = [
        ("chip_type", ctypes.c_ubyte * MAX_CHIP_NAME_LEN),
        ("chip_name", ctypes.c_ubyte * MAX_CHIP_NAME_LEN),
        ("chip_ver", ctypes.c_ubyte * MAX_CHIP_NAME_LEN),
        ("aicore_cnt", ctypes.c_uint),
    ]


class PcieInfoAll(ctypes.Structure):
    _fields_ = [
        ("venderid", ctypes.c_uint),
        ("subvenderid", ctypes.c_uint),
        ("deviceid", ctypes.c_uint),
        ("subdeviceid", ctypes.c_uint),
        ("domain", ctypes.c_int),
        ("bdf_busid", ctypes.c_uint),
        ("bdf_deviceid", ctypes.c_uint),
        ("bdf_funcid", ctypes.c_uint),
        ("reserve", ctypes.c_ubyte * 32),
    ]


class HbmInfo(ctypes.Structure):
    _fields_ = [
        ("memory_size", ctypes.c_ulonglong),  # MB
        ("freq", ctypes.c_uint),
        ("memory_usage", ctypes.c_ulonglong),  # MB
        ("temp", ctypes.c_int),
        ("bandwith_util_rate", ctypes.c_uint),
    ]


class MemoryInfoV3(ctypes.Structure):
    _fields_ = [
        ("memory_size", ctypes.c_ulonglong),  # MB
        ("memory_available", ctypes.c_ulonglong),
        ("freq", ctypes.c_uint),
        ("hugepagesize", ctypes.c_ulong),
        ("hugepages_total", ctypes.c_ulong),
        ("hugepages_free", ctypes.c_ulong),
        ("utiliza", ctypes.c_uint),
        ("reserve", ctypes.c_ubyte * 60),
    ]


class DieId(ctypes.Structure):
    _fields_ = [("soc_die", ctypes.c_uint * DIE_ID_COUNT)]


class ElabelInfo(ctypes.Structure):
    _fields_ = [
        ("product_name", ctypes.c_char * MAX_LENTH),
        ("model", ctypes.c_char * MAX_LENTH),
        ("manufacturer", ctypes.c_char * MAX_LENTH),
        ("manufacturer_date", ctypes.c_char * MAX_LENTH),
        ("serial_number", ctypes.c_char * MAX_LENTH),
    ]


class ProcMemInfo(ctypes.Structure):
    """``struct dcmi_proc_mem_info``: a host PID and the device memory (bytes) it holds on the chip;
    16 bytes on LP64 (``unsigned long`` is 64 bits, aligned to 8 after the 4-byte ``int``)."""

    _fields_ = [("proc_id", ctypes.c_int), ("proc_mem_usage", ctypes.c_ulong)]


_P = ctypes.POINTER
_int, _uint = ctypes.c_int, ctypes.c_uint
PROTOTYPES: dict[str, tuple[Any, ...]] = {
    "dcmi_init": (),
    "dcmi_get_driver_version": (ctypes.c_char_p, _uint),
    "dcmi_get_card_list": (_P(_int), _P(_int), _int),
    "dcmi_get_device_id_in_card": (_int, _P(_int), _P(_int), _P(_int)),
    "dcmi_get_device_logic_id": (_P(_int), _int, _int),
    "dcmi_get_device_phyid_from_logicid": (_uint, _P(_uint)),
    "dcmi_get_device_chip_info": (_int, _int, _P(ChipInfo)),
    "dcmi_get_device_hbm_info": (_int, _int, _P(HbmInfo)),
    "dcmi_get_device_memory_info_v3": (_int, _int, _P(MemoryInfoV3)),
    "dcmi_get_device_pcie_info_v2": (_int, _int, _P(PcieInfoAll)),
    "dcmi_get_device_die_v2": (_int, _int, _int, _P(DieId)),
    "dcmi_get_device_elabel_info": (_int, _int, _P(ElabelInfo)),
    "dcmi_get_device_health": (_int, _int, _P(_uint)),
    "dcmi_get_device_errorcode_v2": (_int, _int, _P(_int), _P(_uint), _uint),
    # the processes on a chip (`processes.py`): (card, chip, a caller's array, out: how many written)
    "dcmi_get_device_resource_info": (_int, _int, _P(ProcMemInfo), _P(_int)),
}


def _text(raw: Any) -> str:
    return bytes(raw).split(b"\0", 1)[0].decode("utf-8", "replace").strip()


class Dcmi(dra.VendorLibrary):
    """One loaded ``libdcmi.so``, initialised once; calls are serialised (`dra.VendorLibrary`:
    DCMI is not documented as thread safe, and discovery and the health monitor share it)."""

    soname = "libdcmi.so"
    error = DcmiError
    prototypes = PROTOTYPES
    install_hint = ("is the Ascend driver installed on this node and /usr/local/Ascend (or /usr/local/dcmi) mounted"
                    " into the driver's pod?")
    setting = "dcmiLibrary"
    too_old = "the Ascend driver is older than this driver supports"

    def __init__(self, library: str | Path | Sequence[str | Path] = DEFAULT_LIBRARIES) -> None:
        super().__init__(library)
        self.call("dcmi_init")

    # --- queries -----------------------------------------------------------------------------

    def driver_version(self) -> str:
        buf = ctypes.create_string_buffer(256)
        self.call("dcmi_get_driver_version", buf, ctypes.c_uint(len(buf)))
        return buf.value.decode("utf-8", "replace").strip()

    def chips(self) -> list[tuple[int, int]]:
        """(card, chip) of every NPU chip of the node, in DCMI's order."""
        num = ctypes.c_int(0)
        cards = (ctypes.c_int * MAX_CARDS)()
        self.call("dcmi_get_card_list", ctypes.byref(num), cards, ctypes.c_int(MAX_CARDS))
        out: list[tuple[int, int]] = []
        for card in list(cards)[: num.value]:
            chips, mcu, cpu = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
            self.call("dcmi_get_device_id_in_card", card, ctypes.byref(chips), ctypes.byref(mcu), ctypes.byref(cpu),
                      target=f"card {card}")
            out.extend((card, chip) for chip in range(chips.value))  # the MCU (mcu_id) is not an NPU
        return out

    def health(self, card: int, chip: int, target: str = "") -> tuple[int, tuple[int, ...]]:
        """DCMI's health (0 ok, 1 minor, 2 major, 3 critical alarm, HEALTH_GONE) and, when it is
        not ok, the chip's current error codes."""
        value = ctypes.c_uint(0)
        self.call("dcmi_get_device_health", card, chip, ctypes.byref(value), target=target)
        if value.value == 0:
            return 0, ()
        if value.value == HEALTH_GONE:
            return HEALTH_GONE, ()
        count = ctypes.c_int(0)
        codes = (ctypes.c_uint * 128)()
        self.call("dcmi_get_device_errorcode_v2", card, chip, ctypes.byref(count), codes, ctypes.c_uint(128), target=target)
        return int(value.value), tuple(int(c) for c in list(codes)[: max(0, min(count.value, 128))])


@dataclasses.dataclass(frozen=True)
class Npu:
    """One NPU chip as discovered."""

    uuid: str  # NPU-<VDIE die ID>
    logic_id: int  # the runtime's device ID on the node (npu-smi's "NPU" column for one chip per card)
    phy_id: int  # /dev/davinci<phy_id>, ASCEND_VISIBLE_DEVICES
    card: int  # npu-smi -i
    chip: int  # npu-smi -c
    chip_type: str  # "Ascend"
    chip_name: str  # "910B3"
    ai_cores: int
    memory: int  # bytes
    pci_bus_id: str  # sysfs form, 0000:c1:00.0
    pci_device_id: int  # 0xd802 (910B)
    serial: str | None
    health: int  # DCMI health at discovery
    pcie_root: str | None
    numa_node: int | None

    @property
    def product_name(self) -> str:
        """``Ascend910B3``, ``Ascend310P3``: DCMI's chip type and name (the published ``productName`` is
        HAMi's model for it: `drivers.ascend.models`)."""
        return f"{self.chip_type}{self.chip_name}"

    @property
    def target(self) -> str:
        return f"card {self.card} chip {self.chip}, {self.uuid}"


@dataclasses.dataclass(frozen=True)
class Inventory:
    driver_version: str
    npus: tuple[Npu, ...]


def die_uuid(words: Sequence[int]) -> str:
    return "NPU-" + "-".join(f"{w & 0xFFFFFFFF:08x}" for w in words)


def discover(dcmi: Dcmi, sysfs: Path = Path("/sys")) -> Inventory:
    """Query every NPU chip DCMI enumerates."""
    driver = dcmi.driver_version()
    npus = [_npu(dcmi, card, chip, sysfs) for card, chip in dcmi.chips()]
    for what in ("uuid", "logic_id", "phy_id"):
        values = [getattr(n, what) for n in npus]
        if len(set(values)) != len(values):
            raise DcmiError("discover", "", -1, f"two NPUs report the same {what}: {values}")
    return Inventory(driver, tuple(sorted(npus, key=lambda n: n.logic_id)))


def _npu(dcmi: Dcmi, card: int, chip: int, sysfs: Path) -> Npu:
    where = f"card {card} chip {chip}"
    die = DieId()
    dcmi.call("dcmi_get_device_die_v2", card, chip, VDIE, ctypes.byref(die), target=where)
    uuid = die_uuid(list(die.soc_die))
    if uuid == die_uuid([0] * DIE_ID_COUNT):
        raise DcmiError("dcmi_get_device_die_v2", where, -1, "the chip reports an all-zero die ID (no UUID to publish)")
    target = f"{where}, {uuid}"
    logic = ctypes.c_int(0)
    dcmi.call("dcmi_get_device_logic_id", ctypes.byref(logic), card, chip, target=target)
    phy = ctypes.c_uint(0)
    dcmi.call("dcmi_get_device_phyid_from_logicid", ctypes.c_uint(logic.value), ctypes.byref(phy), target=target)
    info = ChipInfo()
    dcmi.call("dcmi_get_device_chip_info", card, chip, ctypes.byref(info), target=target)
    pcie = PcieInfoAll()
    dcmi.call("dcmi_get_device_pcie_info_v2", card, chip, ctypes.byref(pcie), target=target)
    bus = f"{pcie.domain & 0xFFFF:04x}:{pcie.bdf_busid:02x}:{pcie.bdf_deviceid:02x}.{pcie.bdf_funcid:x}"
    health, _codes = dcmi.health(card, chip, target=target)
    return Npu(
        uuid=uuid,
        logic_id=logic.value,
        phy_id=phy.value,
        card=card,
        chip=chip,
        chip_type=_text(info.chip_type) or "Ascend",
        chip_name=_text(info.chip_name),
        ai_cores=int(info.aicore_cnt),
        memory=_memory(dcmi, card, chip, target),
        pci_bus_id=bus,
        pci_device_id=int(pcie.deviceid),
        serial=_serial(dcmi, card, chip, target),
        health=health,
        pcie_root=topology.pcie_root(sysfs, bus),
        numa_node=topology.numa_node(sysfs, bus),
    )


def _memory(dcmi: Dcmi, card: int, chip: int, target: str) -> int:
    """Device memory in bytes: HBM on the 910 series; 310P chips have none (NOT_SUPPORT) and
    report their LPDDR through memory_info_v3. Zero from both is an error, not a default."""
    hbm = HbmInfo()
    try:
        dcmi.call("dcmi_get_device_hbm_info", card, chip, ctypes.byref(hbm), target=target)
        if hbm.memory_size:
            return int(hbm.memory_size) << 20
    except DcmiError as exc:
        if exc.code != ERR_NOT_SUPPORT:
            raise
    ddr = MemoryInfoV3()
    dcmi.call("dcmi_get_device_memory_info_v3", card, chip, ctypes.byref(ddr), target=target)
    if not ddr.memory_size:
        raise DcmiError("dcmi_get_device_memory_info_v3", target, -1, "the NPU reports no device memory")
    return int(ddr.memory_size) << 20


def _serial(dcmi: Dcmi, card: int, chip: int, target: str) -> str | None:
    label = ElabelInfo()
    try:
        dcmi.call("dcmi_get_device_elabel_info", card, chip, ctypes.byref(label), target=target)
    except DcmiError as exc:
        if exc.code in (ERR_NOT_SUPPORT, ERR_NOT_SUPPORT_IN_CONTAINER):
            return None  # boards without an electronic label; the UUID still identifies the chip
        raise
    return label.serial_number.decode("utf-8", "replace").strip() or None
