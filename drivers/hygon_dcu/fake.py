"""Fake DCUs for machines without one: the real ROCm SMI code path against hookcore's stub
``librocm_smi64.so``.

`dra run hygon-dcu --fake PROFILE_OR_FILE` (or ``DRA_FAKE_DEVICES``) selects this backend. It
describes the node's DCUs in ``HOOKCORE_STUB_HIP_DEVICES`` (grammar: ``hookcore/stub/README.md``),
loads the stub ``librocm_smi64.so`` instead of the vendor's, and lays out a small sysfs (PCIe root,
NUMA node, the KFD topology the compute-unit count is read from). Discovery, health and prepare
then run unchanged; a claim's containers get the same description (only their DCUs, numbered
from 0), which the stub ``libamdhip64.so`` reads.

PROFILE is ``<model>x<count>``, e.g. ``k100-aix8``, ``k100x4``, ``z100x2`` (models in `MODELS`).
FILE is YAML:

    driverVersion: "6.3.8"          # optional
    dcus:
    - model: k100-ai                # defaults for the keys below; give model or name+memory
      memory: 64Gi
      numaNode: 1
    - name: K100_AI
      memory: 64Gi
      computeUnits: 120
      uuid: DCU-0123456789abcdef    # default: derived from the node name and position
      pciBusID: "0000:c1:00.0"
      pcieRoot: pci0000:c0
      renderMinor: 129              # default 128 + position
      serial: "HY0000000001"

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
from drivers.hygon_dcu import rsmi

MiB = 1 << 20
MAX_DCUS = 16
DEFAULT_DRIVER = "6.3.8"
STUB_ENV = "HOOKCORE_STUB_HIP_DEVICES"
STUB_RUNTIME = "libamdhip64.so.6"
CONTAINER_LIB_DIR = "/usr/lib"


@dataclasses.dataclass(frozen=True)
class Model:
    """What ROCm SMI and the KFD topology report for one DCU model."""

    name: str  # rsmi_dev_name_get
    memory_mib: int
    compute_units: int


# Public figures (see the driver's README for their sources): Z100 (gfx906) 32 GB HBM2 and 60 CUs
# as hy-virtual reports it (34342961152 bytes = 32752 MiB); K100 (gfx926) and K100_AI (gfx928)
# 64 GB HBM2e, 120 CUs. The product name is what the runtime reports (torch.cuda.get_device_name:
# "K100_AI").
MODELS: dict[str, Model] = {
    "z100": Model("Z100", 32752, 60),
    "k100": Model("K100", 65536, 120),
    "k100-ai": Model("K100_AI", 65536, 120),
}
# A two-socket board: DCUs behind PCIe roots two by two, the first half on NUMA node 0.
_BUSES = (0xC1, 0xC2, 0x81, 0x82, 0x01, 0x02, 0x41, 0x42)
_ROOTS = (0xC0, 0xC0, 0x80, 0x80, 0x00, 0x00, 0x40, 0x40)
FakeDevicesError = fakes.FakeDevicesError


@dataclasses.dataclass(frozen=True)
class FakeDcu:
    uuid: str
    name: str
    memory: int
    compute_units: int
    pci_bus_id: str
    pcie_root: str
    numa_node: int | None
    render_minor: int
    serial: str | None = None

    def stub_fields(self) -> dict[str, str]:
        """This DCU's ``HOOKCORE_STUB_HIP_DEVICES`` fields."""
        fields = {"pci": self.pci_bus_id, "memory": str(self.memory), "name": self.name,
                  "uuid": self.uuid, "render": str(self.render_minor)}
        if self.serial:
            fields["serial"] = self.serial
        return fields


@dataclasses.dataclass(frozen=True)
class FakeNode:
    dcus: tuple[FakeDcu, ...]
    driver_version: str = DEFAULT_DRIVER

    def stub_devices(self, pci_bus_ids: Sequence[str] | None = None) -> str:
        """``HOOKCORE_STUB_HIP_DEVICES`` for the node, or for the DCUs a container sees (in that order)."""
        if pci_bus_ids is None:
            return stub.stub_devices([d.stub_fields() for d in self.dcus])
        by_bus = {d.pci_bus_id: d for d in self.dcus}
        return stub.stub_devices([by_bus[b].stub_fields() for b in pci_bus_ids])


def fake_uuid(node: str, position: int) -> str:
    return "DCU-" + hashlib.sha256(f"hygon-dcu.fake/{node}/{position}".encode()).hexdigest()[:16]


def _from_model(model: Model, node: str, position: int) -> FakeDcu:
    bus, root, numa = fakes.pci_layout(position, _BUSES, _ROOTS)
    return FakeDcu(uuid=fake_uuid(node, position), name=model.name, memory=model.memory_mib * MiB,
                   compute_units=model.compute_units, pci_bus_id=bus, pcie_root=root, numa_node=numa,
                   render_minor=128 + position)


def profile(name: str, node: str) -> FakeNode:
    model_name, count = fakes.parse_profile(name, MODELS, example="k100-aix8")
    if not 1 <= count <= MAX_DCUS:
        raise FakeDevicesError(f"fake-device profile {name!r}: count must be 1..{MAX_DCUS}")
    return FakeNode(tuple(_from_model(MODELS[model_name], node, i) for i in range(count)))


_DCU_KEYS = {"model", "name", "uuid", "memory", "computeUnits", "pciBusID", "pcieRoot", "numaNode", "renderMinor", "serial"}


def from_document(doc: Any, node: str, source: str = "fake-device file") -> FakeNode:
    """A `FakeNode` from a parsed YAML document (see the module docstring)."""
    entries = fakes.document_entries(doc, source, "dcus", ("driverVersion",), MAX_DCUS, "DCUs")
    dcus = [_dcu_entry(e, node, i, f"{source}: dcus[{i}]") for i, e in enumerate(entries)]
    fakes.check_unique(dcus, ("uuid", "pci_bus_id", "render_minor"), source, "DCUs")
    driver = doc.get("driverVersion", DEFAULT_DRIVER)
    if not isinstance(driver, str) or not re.fullmatch(r"[0-9A-Za-z.+-]{1,32}", driver):
        raise FakeDevicesError(f"{source}: driverVersion must be a version string such as 6.3.8")
    return FakeNode(tuple(dcus), driver)


def _dcu_entry(entry: Any, node: str, position: int, where: str) -> FakeDcu:
    entry = fakes.entry_mapping(entry, where, _DCU_KEYS)
    base = _from_model(MODELS[fakes.entry_model(entry, where, MODELS, "k100-ai", ("name", "memory"))], node, position)
    dcu = dataclasses.replace(base, **fakes.entry_changes(
        entry, where, {"uuid": "uuid", "name": "name", "pciBusID": "pci_bus_id", "pcieRoot": "pcie_root", "serial": "serial"},
        {"computeUnits": ("compute_units", 1, 4096), "numaNode": ("numa_node", 0, 1023),
         "renderMinor": ("render_minor", 128, 255)}, memory_example="64Gi"))
    if not re.fullmatch(r"DCU-[0-9a-f]{16}", dcu.uuid):
        raise FakeDevicesError(f"{where}: uuid {dcu.uuid!r} must look like DCU- and 16 lower-case hex digits")
    if not re.fullmatch(r"[0-9A-Za-z_-]{1,31}", dcu.name):
        raise FakeDevicesError(f"{where}: name {dcu.name!r} must be letters, digits, _ or - (e.g. K100_AI)")
    fakes.check_pci_address(where, dcu.pci_bus_id, dcu.pcie_root, bus_example="0000:c1:00.0", root_example="pci0000:c0")
    if dcu.memory < MiB:
        raise FakeDevicesError(f"{where}: memory must be at least 1Mi")
    if dcu.serial is not None and not re.fullmatch(r"[0-9A-Za-z]{1,64}", dcu.serial):
        raise FakeDevicesError(f"{where}: serial must be letters and digits")
    return dcu


def load(spec: str, node: str) -> FakeNode:
    """A profile name, or the path of a YAML file (anything with a `/` or a .yaml/.yml suffix)."""
    return fakes.load(spec, node, profile, from_document)


def stub_library() -> Path:
    """hookcore's stub ``librocm_smi64.so`` (`dra.fakes.stub.stub_library`)."""
    return stub.stub_library("librocm_smi64.so")


def _kfd_topology(sysfs: Path, dcus: Sequence[FakeDcu]) -> None:
    """``class/kfd/kfd/topology/nodes/<n>/properties`` as the kernel writes them: node 0 a CPU (no
    SIMDs), then one node per DCU with its render minor, SIMD count (4 per CU) and location."""
    nodes = sysfs / "class" / "kfd" / "kfd" / "topology" / "nodes"
    (nodes / "0").mkdir(parents=True, exist_ok=True)
    (nodes / "0" / "properties").write_text("cpu_cores_count 64\nsimd_count 0\ndrm_render_minor 0\n")
    for i, d in enumerate(dcus, start=1):
        domain, bus, rest = d.pci_bus_id.split(":")
        dev, fn = rest.split(".")
        location = int(bus, 16) << 8 | int(dev, 16) << 3 | int(fn, 16)
        (nodes / str(i)).mkdir(exist_ok=True)
        (nodes / str(i) / "properties").write_text(
            f"cpu_cores_count 0\nsimd_count {4 * d.compute_units}\nsimd_per_cu 4\n"
            f"drm_render_minor {d.render_minor}\nlocation_id {location}\ndomain {int(domain, 16)}\n")


class FakeBackend(fakes.FakeTree):
    """Activates a `FakeNode` in this process: the stub ROCm SMI, its environment and a sysfs
    (with the KFD topology). Its state file takes ``ecc``/``lost``/``back`` lines: health at run time."""

    def __init__(self, node: FakeNode, stub_smi: Path) -> None:
        super().__init__("hygon-dcu-fake-", stub_smi, "ROCm SMI", [(d.pci_bus_id, d.pcie_root, d.numa_node) for d in node.dcus],
                         "HOOKCORE_STUB_RSMI_STATE", "rsmi-state")
        self.node = node
        _kfd_topology(self.sysfs, node.dcus)
        os.environ[STUB_ENV] = node.stub_devices()  # the stub reads its devices at rsmi_init
        os.environ["HOOKCORE_STUB_RSMI_DRIVER"] = node.driver_version
        self.rsmi = rsmi.Rsmi(stub_smi)

    def container_env(self, pci_bus_ids: Iterable[str]) -> dict[str, str]:
        """What a workload of a claim needs to see these DCUs under the stub HIP runtime."""
        return {STUB_ENV: self.node.stub_devices(list(pci_bus_ids))}

    def container_mounts(self) -> tuple[dra.Mount, ...]:
        """The fake's "HIP": the stub libamdhip64.so, mounted where the loader looks by default
        (/usr/lib) under its soname and its development name, as the runtime package lays it out."""
        real = os.path.realpath(self.stub.parent / STUB_RUNTIME)
        return tuple(dra.Mount(real, f"{CONTAINER_LIB_DIR}/{name}") for name in (STUB_RUNTIME, "libamdhip64.so"))

    def set_ecc(self, pci_bus_id: str, uncorrectable: int, correctable: int = 0) -> None:
        self.append_state(f"ecc {pci_bus_id} {uncorrectable} {correctable}")

    def set_lost(self, pci_bus_id: str, lost: bool = True) -> None:
        self.append_state(f"{'lost' if lost else 'back'} {pci_bus_id}")
