"""Fake NPUs for machines without one: the real DCMI code path against hookcore's stub libdcmi.so.

`dra run ascend --fake PROFILE_OR_FILE` (or ``DRA_FAKE_DEVICES``) selects this backend. It
describes the node's NPUs in ``HOOKCORE_STUB_NPUS`` (grammar: ``hookcore/stub/README.md``),
loads the stub ``libdcmi.so`` instead of Huawei's, and lays out a small sysfs for the PCIe root
and NUMA node. Discovery, health and prepare then run unchanged; a claim's containers get the
same description (only their NPUs), which the stub ``libascendcl.so`` reads.

PROFILE is ``<model>x<count>``, e.g. ``910b3x8``, ``910cx16``, ``310p3x4``, ``910ax8`` (models in `MODELS`;
values as the real chips report them, from Huawei's product documentation). FILE is YAML:

    driverVersion: "25.0.rc1.1"     # optional
    npus:
    - model: 910b3                  # defaults for the keys below; give model or chipName+memory
      memory: 32Gi
      numaNode: 1
    - chipName: 910B4
      memory: 32Gi
      aiCores: 20
      uuid: NPU-...                 # default: derived from the node name and position
      logicID: 1                    # default: position; physicalID likewise
      card: 1                       # npu-smi -i (default: position / chips per card)
      chip: 0                       # npu-smi -c
      pciBusID: "0000:c1:00.0"
      pcieRoot: pci0000:c0
      serial: "033VNY10N1000123"
      health: 0                     # DCMI health at start: 0 ok, 1 minor, 2 major, 3 critical

Fake UUIDs (die IDs) are derived from the node name, so two fake nodes never share one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import dra
from dra import fakes
from dra.fakes import stub
from drivers.ascend import dcmi

MiB = 1 << 20
MAX_NPUS = 32
DEFAULT_DRIVER = "25.0.rc1.1"
STUB_ENV = stub.STUB_NPUS_ENV
STUB_RUNTIME_LIBRARIES = ("libascendcl.so", "libruntime.so")
CONTAINER_LIB_DIR = "/usr/lib"


@dataclasses.dataclass(frozen=True)
class Model:
    """What DCMI reports for one chip model."""

    chip_name: str
    memory_mib: int
    ai_cores: int
    pci_device_id: int
    chips_per_card: int = 1
    hbm: bool = True  # 310P chips have LPDDR, reported through memory_info_v3


MODELS: dict[str, Model] = {
    "910a": Model("910A", 32768, 30, 0xD801),
    "910b1": Model("910B1", 65536, 24, 0xD802),
    "910b2": Model("910B2", 65536, 24, 0xD802),
    "910b3": Model("910B3", 65536, 20, 0xD802),
    "910b4": Model("910B4", 32768, 20, 0xD802),
    "910c": Model("910_9392", 65536, 24, 0xD803, chips_per_card=2),  # Atlas A3: two dies per module
    "310p3": Model("310P3", 24576, 8, 0xD500, hbm=False),
}
# An Atlas 800-like board: NPUs behind PCIe roots two by two, the first half on NUMA node 0.
_BUSES = (0xC1, 0xC2, 0x81, 0x82, 0x01, 0x02, 0x41, 0x42)
_ROOTS = (0xC0, 0xC0, 0x80, 0x80, 0x00, 0x00, 0x40, 0x40)
FakeDevicesError = fakes.FakeDevicesError


@dataclasses.dataclass(frozen=True)
class FakeNpu:
    uuid: str
    logic_id: int
    phy_id: int
    card: int
    chip: int
    chip_name: str
    memory: int
    ai_cores: int
    pci_bus_id: str
    pcie_root: str
    numa_node: int | None
    pci_device_id: int = 0xD802
    hbm: bool = True
    serial: str | None = None
    health: int = 0

    def stub_fields(self, logic_id: int | None = None) -> dict[str, str]:
        """This NPU's ``HOOKCORE_STUB_NPUS`` fields."""
        fields = {
            "uuid": self.uuid, "memory": str(self.memory), "name": self.chip_name, "aicore": str(self.ai_cores),
            "card": str(self.card), "chip": str(self.chip), "logic": str(self.logic_id if logic_id is None else logic_id),
            "phy": str(self.phy_id), "pci": self.pci_bus_id, "pciid": hex(self.pci_device_id), "hbm": str(int(self.hbm)),
            "health": str(self.health),
        }
        if self.serial:
            fields["serial"] = self.serial
        return fields


@dataclasses.dataclass(frozen=True)
class FakeNode:
    npus: tuple[FakeNpu, ...]
    driver_version: str = DEFAULT_DRIVER

    def stub_devices(self, uuids: Sequence[str] | None = None) -> str:
        """``HOOKCORE_STUB_NPUS`` for the node, or for the NPUs a container sees (`uuids`, in that
        order, numbered from 0 as the runtime numbers a container's NPUs)."""
        if uuids is None:
            return stub.stub_devices([n.stub_fields() for n in self.npus])
        by_uuid = {n.uuid: n for n in self.npus}
        return stub.stub_devices([by_uuid[u].stub_fields(logic_id=i) for i, u in enumerate(uuids)])


def fake_uuid(node: str, position: int) -> str:
    digest = hashlib.sha256(f"ascend.fake/{node}/{position}".encode()).digest()
    return dcmi.die_uuid([int.from_bytes(digest[i : i + 4], "big") for i in range(0, 20, 4)])


def _from_model(model: Model, node: str, position: int) -> FakeNpu:
    bus, root, numa = fakes.pci_layout(position, _BUSES, _ROOTS)
    card, chip = divmod(position, model.chips_per_card)
    return FakeNpu(
        uuid=fake_uuid(node, position), logic_id=position, phy_id=position, card=card, chip=chip,
        chip_name=model.chip_name, memory=model.memory_mib * MiB, ai_cores=model.ai_cores, pci_bus_id=bus,
        pcie_root=root, numa_node=numa, pci_device_id=model.pci_device_id, hbm=model.hbm,
    )


def profile(name: str, node: str) -> FakeNode:
    model_name, count = fakes.parse_profile(name, MODELS, example="910b3x8")
    model = MODELS[model_name]
    if not 1 <= count <= MAX_NPUS or count % model.chips_per_card:
        raise FakeDevicesError(
            f"fake-device profile {name!r}: count must be 1..{MAX_NPUS}"
            + (f" and a multiple of {model.chips_per_card} (chips per module)" if model.chips_per_card > 1 else "")
        )
    return FakeNode(tuple(_from_model(model, node, i) for i in range(count)))


_NPU_KEYS = {
    "model", "uuid", "logicID", "physicalID", "card", "chip", "chipName", "memory", "aiCores", "pciBusID",
    "pcieRoot", "numaNode", "serial", "health",
}


def from_document(doc: Any, node: str, source: str = "fake-device file") -> FakeNode:
    """A `FakeNode` from a parsed YAML document (see the module docstring)."""
    entries = fakes.document_entries(doc, source, "npus", ("driverVersion",), MAX_NPUS, "NPUs")
    npus = [_npu_entry(e, node, i, f"{source}: npus[{i}]") for i, e in enumerate(entries)]
    fakes.check_unique(npus, ("uuid", "pci_bus_id", "logic_id", "phy_id"), source, "NPUs")
    places = [(n.card, n.chip) for n in npus]
    if len(set(places)) != len(places):
        raise FakeDevicesError(f"{source}: two NPUs share one card and chip: {places}")
    driver = doc.get("driverVersion", DEFAULT_DRIVER)
    if not isinstance(driver, str) or not re.fullmatch(r"[0-9A-Za-z.]{1,32}", driver):
        raise FakeDevicesError(f"{source}: driverVersion must be a version string such as 25.0.rc1.1")
    return FakeNode(tuple(npus), driver)


def _npu_entry(entry: Any, node: str, position: int, where: str) -> FakeNpu:
    entry = fakes.entry_mapping(entry, where, _NPU_KEYS)
    base = _from_model(MODELS[fakes.entry_model(entry, where, MODELS, "910b3", ("chipName", "memory"))], node, position)
    npu = dataclasses.replace(base, **fakes.entry_changes(
        entry, where, {"uuid": "uuid", "chipName": "chip_name", "pciBusID": "pci_bus_id", "pcieRoot": "pcie_root",
                       "serial": "serial"},
        {"logicID": ("logic_id", 0, 1023), "physicalID": ("phy_id", 0, 1023), "card": ("card", 0, 63),
         "chip": ("chip", 0, 7), "aiCores": ("ai_cores", 0, 1024), "numaNode": ("numa_node", 0, 1023),
         "health": ("health", 0, 3)}, memory_example="64Gi"))
    if not re.fullmatch(r"NPU(-[0-9a-f]{8}){5}", npu.uuid):
        raise FakeDevicesError(f"{where}: uuid {npu.uuid!r} must look like NPU- and five groups of 8 lower-case hex digits")
    if not re.fullmatch(r"[0-9A-Za-z_]{1,31}", npu.chip_name):
        raise FakeDevicesError(f"{where}: chipName {npu.chip_name!r} must be letters, digits or _ (e.g. 910B3)")
    fakes.check_pci_address(where, npu.pci_bus_id, npu.pcie_root, bus_example="0000:c1:00.0", root_example="pci0000:c0")
    if npu.memory < MiB:
        raise FakeDevicesError(f"{where}: memory must be at least 1Mi")
    if npu.serial is not None and not re.fullmatch(r"[0-9A-Za-z]{1,64}", npu.serial):
        raise FakeDevicesError(f"{where}: serial must be letters and digits")
    return npu


def load(spec: str, node: str) -> FakeNode:
    """A profile name, or the path of a YAML file (anything with a `/` or a .yaml/.yml suffix)."""
    return fakes.load(spec, node, profile, from_document)


def stub_library() -> Path:
    """hookcore's stub ``libdcmi.so`` (`dra.fakes.stub.stub_library`; not found through the GPU hook)."""
    return stub.stub_library("libdcmi.so")


class FakeBackend(fakes.FakeTree):
    """Activates a `FakeNode` in this process: the stub DCMI, its environment and a sysfs. Its
    state file takes ``health <uuid> <n>`` and ``errors`` lines: health at run time."""

    def __init__(self, node: FakeNode, stub: Path) -> None:
        super().__init__("ascend-fake-", stub, "DCMI", [(n.pci_bus_id, n.pcie_root, n.numa_node) for n in node.npus],
                         "HOOKCORE_STUB_DCMI_STATE", "dcmi-state")
        self.node = node
        os.environ[STUB_ENV] = node.stub_devices()  # the stub reads its NPUs at dcmi_init
        os.environ["HOOKCORE_STUB_DCMI_DRIVER"] = node.driver_version
        self.dcmi = dcmi.Dcmi(stub)

    def container_env(self, uuids: Iterable[str]) -> dict[str, str]:
        """What a workload of a claim needs to see these NPUs under the stub ACL runtime."""
        return {STUB_ENV: self.node.stub_devices(list(uuids))}

    def container_mounts(self) -> tuple[dra.Mount, ...]:
        """The fake's "CANN": the stub libascendcl.so and libruntime.so, mounted where the loader
        looks by default (/usr/lib), so no LD_LIBRARY_PATH is needed (another driver's CDI device
        in the same container may set that one)."""
        return self.stub_mounts(STUB_RUNTIME_LIBRARIES, CONTAINER_LIB_DIR)

    def set_health(self, uuid: str, health: int | str, errors: Sequence[int] = ()) -> None:
        """Change an NPU's health as DCMI will report it (0-3, or "lost")."""
        self.append_state(f"health {uuid} {health}", f"errors {uuid} {' '.join(f'{c:x}' for c in errors)}")
