"""Fake MLUs for machines without one: the real CNDev code path against hookcore's stub libcndev.so.

`dra run cambricon-mlu --fake PROFILE_OR_FILE` (or ``DRA_FAKE_DEVICES``) selects this backend. It
describes the node's MLUs in ``HOOKCORE_STUB_MLUS`` (grammar: ``hookcore/stub/README.md``), loads
the stub ``libcndev.so`` instead of Cambricon's, keeps the stub's sMLU table (the instances the
vendor's driver would hold) in a directory of its own, and lays out a small sysfs for the PCIe
root and NUMA node. Discovery, health, the sMLU instances of prepare and unprepare then run
unchanged; a claim's containers get the description of their MLUs, the stub ``libcndev.so`` and
``libcnrt.so``, and the sMLU table read-only, so the stub runtime holds a workload to the
instance the daemon made for its claim.

PROFILE is ``<model>x<count>``, e.g. ``mlu370-x8x8``, ``mlu590x4`` (models in `MODELS`; sources in
the driver's README). FILE is YAML:

    driverVersion: "5.10.29"        # optional
    mlus:
    - model: mlu370-x8              # defaults for the keys below; give model or name+memory
      numaNode: 1
    - name: MLU370-X4
      memory: 24Gi
      cores: 16
      uuid: MLU-...                 # default: derived from the node name and position
      pciBusID: "0000:3b:00.0"
      pcieRoot: pci0000:3a
      serial: "3e8000a1b2"          # hex, as cnmon prints it
      smlu: false                   # sMLU mode off: published whole

Fake UUIDs are derived from the node name, so two fake nodes never share one.
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
from drivers.cambricon_mlu import cndev

MiB = 1 << 20
MAX_MLUS = 16
DEFAULT_DRIVER = "5.10.29"
STUB_ENV = "HOOKCORE_STUB_MLUS"
TABLE_ENV = "HOOKCORE_STUB_CNDEV_SMLU"
STUB_LIBRARIES = ("libcndev.so", "libcnrt.so")
CONTAINER_LIB_DIR = "/usr/lib"
CONTAINER_TABLE_DIR = "/run/cambricon-mlu-fake/smlu"


@dataclasses.dataclass(frozen=True)
class Model:
    """What CNDev reports for one card model."""

    name: str  # cndevGetCardNameStringByDevId
    memory_mib: int
    cores: int  # cndevGetCoreCount


MODELS: dict[str, Model] = {
    "mlu370-x4": Model("MLU370-X4", 24576, 16),
    "mlu370-x8": Model("MLU370-X8", 49152, 32),
    "mlu290": Model("MLU290-M5", 32768, 64),
    "mlu590": Model("MLU590", 98304, 48),
}
# A two-socket board: MLUs behind PCIe roots two by two, the first half on NUMA node 0.
_BUSES = (0x3B, 0x3C, 0x5E, 0x5F, 0x86, 0x87, 0xAF, 0xB0)
_ROOTS = (0x3A, 0x3A, 0x5D, 0x5D, 0x85, 0x85, 0xAE, 0xAE)
FakeDevicesError = fakes.FakeDevicesError


@dataclasses.dataclass(frozen=True)
class FakeMlu:
    uuid: str
    name: str
    memory: int
    cores: int
    pci_bus_id: str
    pcie_root: str
    numa_node: int | None
    serial: str | None = None
    smlu: bool = True

    def stub_fields(self, slot: int) -> dict[str, str]:
        """This MLU's ``HOOKCORE_STUB_MLUS`` fields (`slot`: its index on the node)."""
        fields = {"uuid": self.uuid, "memory": str(self.memory), "name": self.name, "cores": str(self.cores),
                  "pci": self.pci_bus_id, "slot": str(slot), "smlu": str(int(self.smlu))}
        if self.serial:
            fields["sn"] = self.serial
        return fields


@dataclasses.dataclass(frozen=True)
class FakeNode:
    mlus: tuple[FakeMlu, ...]
    driver_version: str = DEFAULT_DRIVER

    def stub_devices(self, indices: Sequence[int] | None = None) -> str:
        """``HOOKCORE_STUB_MLUS`` for the node, or for the MLUs a container sees (`indices`, the
        container numbering them by index ascending)."""
        chosen = range(len(self.mlus)) if indices is None else sorted(indices)
        return stub.stub_devices([self.mlus[i].stub_fields(i) for i in chosen])


def fake_uuid(node: str, position: int) -> str:
    h = hashlib.sha256(f"cambricon-mlu.fake/{node}/{position}".encode()).hexdigest()
    return f"MLU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _from_model(model: Model, node: str, position: int) -> FakeMlu:
    bus, root, numa = fakes.pci_layout(position, _BUSES, _ROOTS)
    return FakeMlu(uuid=fake_uuid(node, position), name=model.name, memory=model.memory_mib * MiB, cores=model.cores,
                   pci_bus_id=bus, pcie_root=root, numa_node=numa)


def profile(name: str, node: str) -> FakeNode:
    model_name, count = fakes.parse_profile(name, MODELS, example="mlu370-x8x8")
    if not 1 <= count <= MAX_MLUS:
        raise FakeDevicesError(f"fake-device profile {name!r}: count must be 1..{MAX_MLUS}")
    return FakeNode(tuple(_from_model(MODELS[model_name], node, i) for i in range(count)))


_MLU_KEYS = {"model", "name", "uuid", "memory", "cores", "pciBusID", "pcieRoot", "numaNode", "serial", "smlu"}


def from_document(doc: Any, node: str, source: str = "fake-device file") -> FakeNode:
    """A `FakeNode` from a parsed YAML document (see the module docstring)."""
    entries = fakes.document_entries(doc, source, "mlus", ("driverVersion",), MAX_MLUS, "MLUs")
    mlus = [_mlu_entry(e, node, i, f"{source}: mlus[{i}]") for i, e in enumerate(entries)]
    fakes.check_unique(mlus, ("uuid", "pci_bus_id"), source, "MLUs")
    driver = doc.get("driverVersion", DEFAULT_DRIVER)
    if not isinstance(driver, str) or not re.fullmatch(r"[0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,6}", driver):
        raise FakeDevicesError(f"{source}: driverVersion must be major.minor.build, such as 5.10.29")
    return FakeNode(tuple(mlus), driver)


def _mlu_entry(entry: Any, node: str, position: int, where: str) -> FakeMlu:
    entry = fakes.entry_mapping(entry, where, _MLU_KEYS)
    base = _from_model(MODELS[fakes.entry_model(entry, where, MODELS, "mlu370-x8", ("name", "memory"))], node, position)
    changes = fakes.entry_changes(
        entry, where, {"uuid": "uuid", "name": "name", "pciBusID": "pci_bus_id", "pcieRoot": "pcie_root", "serial": "serial"},
        {"cores": ("cores", 1, 1024), "numaNode": ("numa_node", 0, 1023)}, memory_example="48Gi")
    if "smlu" in entry:
        if not isinstance(entry["smlu"], bool):
            raise FakeDevicesError(f"{where}: smlu must be true or false, got {entry['smlu']!r}")
        changes["smlu"] = entry["smlu"]
    mlu = dataclasses.replace(base, **changes)
    if not re.fullmatch(r"MLU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", mlu.uuid):
        raise FakeDevicesError(f"{where}: uuid {mlu.uuid!r} must look like MLU- and a lower-case 8-4-4-4-12 hex UUID")
    if not re.fullmatch(r"[0-9A-Za-z_-]{1,31}", mlu.name) or mlu.name == "Unknown":
        raise FakeDevicesError(f"{where}: name {mlu.name!r} must be letters, digits, _ or - (e.g. MLU370-X8)")
    fakes.check_pci_address(where, mlu.pci_bus_id, mlu.pcie_root, bus_example="0000:3b:00.0", root_example="pci0000:3a")
    if mlu.memory < MiB:
        raise FakeDevicesError(f"{where}: memory must be at least 1Mi")
    if mlu.serial is not None and not re.fullmatch(r"[0-9a-f]{1,16}", mlu.serial):
        raise FakeDevicesError(f"{where}: serial must be 1..16 lower-case hex digits")
    return mlu


def load(spec: str, node: str) -> FakeNode:
    """A profile name, or the path of a YAML file (anything with a `/` or a .yaml/.yml suffix)."""
    return fakes.load(spec, node, profile, from_document)


def stub_library() -> Path:
    """hookcore's stub ``libcndev.so`` (`dra.fakes.stub.stub_library`)."""
    return stub.stub_library("libcndev.so")


class FakeBackend(fakes.FakeTree):
    """Activates a `FakeNode` in this process: the stub CNDev, its environment, its sMLU table and
    a sysfs. The table is the caller's when ``HOOKCORE_STUB_CNDEV_SMLU`` names one (every process
    of one fake node shares it: the daemon, a restarted one, its workloads), else in the tree's
    `shared_dir` (a host directory when the daemon runs in a pod). Its state file takes
    ``health``/``driver`` lines: health at run time."""

    def __init__(self, node: FakeNode, stub_cndev: Path) -> None:
        super().__init__("cambricon-mlu-fake-", stub_cndev, "CNDev",
                         [(m.pci_bus_id, m.pcie_root, m.numa_node) for m in node.mlus], "HOOKCORE_STUB_CNDEV_STATE",
                         "cndev-state")
        self.node = node
        os.environ[STUB_ENV] = node.stub_devices()  # the stub reads its MLUs at cndevInit
        os.environ["HOOKCORE_STUB_CNDEV_DRIVER"] = node.driver_version
        # a directory of the node's own (its MLUs' UUIDs name it), which a claim's container mounts
        digest = hashlib.sha256(",".join(m.uuid for m in node.mlus).encode()).hexdigest()[:16]
        table_dir = self.shared_dir(f"cambricon-mlu-smlu-{digest}")
        self.table = Path(os.environ.setdefault(TABLE_ENV, str(table_dir / "table")))
        self.cndev = cndev.Cndev(stub_cndev)

    def container_env(self, indices: Iterable[int]) -> dict[str, str]:
        """What a workload of a claim needs to see these MLUs under the stub runtime, and the sMLU
        table where `container_mounts` puts it."""
        return {STUB_ENV: self.node.stub_devices(list(indices)), TABLE_ENV: f"{CONTAINER_TABLE_DIR}/{self.table.name}"}

    def container_mounts(self) -> tuple[dra.Mount, ...]:
        """The fake's "Neuware": the stub libcndev.so and libcnrt.so, where the loader looks by
        default (/usr/lib), and the sMLU table's directory, read-only."""
        return (*self.stub_mounts(STUB_LIBRARIES, CONTAINER_LIB_DIR), dra.Mount(str(self.table.parent), CONTAINER_TABLE_DIR))

    def set_health(self, uuid: str, good: bool = True, driver_state: int = 4) -> None:
        """Change an MLU's health as CNDev will report it (device good or in problem, driver state)."""
        self.append_state(f"health {uuid} {int(good)}", f"driver {uuid} {driver_state}")
