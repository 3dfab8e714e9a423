"""Fake GPUs for machines without one: the real NVML code path against hookcore's stub NVML.

`dra run hami-core-gpu --fake PROFILE_OR_FILE` (or ``DRA_FAKE_DEVICES``) selects this backend.
It describes the node's GPUs in ``HOOKCORE_STUB_DEVICES`` (the grammar of
``hookcore/stub/README.md``), loads the stub ``libnvidia-ml.so.1`` before nvidia-ml-py loads
one, and lays out a small sysfs for the PCIe root and NUMA node. Discovery, health and prepare
then run unchanged: what the tests and the demo check is the code a GPU node runs.

PROFILE is ``<model>x<count>``, e.g. ``h200x8``, ``a100-40gx4`` (models in `MODELS`), with
``-mig`` for MIG mode on every GPU (``h200x8-mig``; MIG-capable models only). Under it the stub
keeps the MIG partitioning in a file per fake node (`FakeBackend.mig_state`, or
``HOOKCORE_STUB_NVML_MIG`` when set), so a restarted daemon finds what it made; with ``mig=static``
the backend plays the admin's mig-parted once, cutting each GPU into `STATIC_LAYOUT`. FILE is
a YAML document:

    driverVersion: "580.159.04"     # optional
    cudaDriverVersion: "13.0"       # optional
    gpus:
    - model: h200                   # defaults for the keys below; all optional but one of
      memory: 40Gi                  # model / productName+memory
      numaNode: 1
    - productName: NVIDIA L4
      memory: 23034Mi
      architecture: Ada Lovelace    # names as published (see nvml.ARCHITECTURES / BRANDS)
      computeCapability: "8.9"
      multiprocessorCount: 58       # SMs, as NVML's nvmlDeviceGetAttributes reports them
      powerLimit: 60                # W in force (default: the model's default limit; none without a model)
      defaultPowerLimit: 72         # W, the board's default (default: powerLimit)
      brand: Nvidia
      migMode: unsupported          # on, off or unsupported
      uuid: GPU-...                 # default: derived from the node name and position
      pciBusID: "0000:3b:00.0"      # default: an HGX-like layout, two GPUs per PCIe root
      pcieRoot: pci0000:3a
      index: 1                      # default: position; minor likewise

Fake UUIDs are derived from the node name, so two fake nodes never share one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
import tempfile
import uuid as uuidlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dra import fakes, topology
from dra.fakes import stub
from drivers.hami_core_gpu import mig, nvml

MiB = 1 << 20


@dataclasses.dataclass(frozen=True)
class Model:
    """What NVML reports for one GPU model (values as a real GPU of that model reports them)."""

    product_name: str
    memory_mib: int
    architecture: str
    compute_capability: str
    brand: str
    pci_device_id: int
    mig: str  # "off" (MIG-capable, disabled) or "unsupported"
    sms: int  # SM count (NVML's multiprocessorCount of the whole GPU)
    power_limit_w: int  # the board's default power limit (also the one in force unless a file says)


MODELS: dict[str, Model] = {
    "h200": Model("NVIDIA H200", 143771, "Hopper", "9.0", "Nvidia", 0x233510DE, "off", 132, 700),
    "h100": Model("NVIDIA H100 80GB HBM3", 81559, "Hopper", "9.0", "Nvidia", 0x233010DE, "off", 132, 700),
    "a100-80g": Model("NVIDIA A100-SXM4-80GB", 81920, "Ampere", "8.0", "Nvidia", 0x20B210DE, "off", 108, 400),
    "a100-40g": Model("NVIDIA A100-SXM4-40GB", 40960, "Ampere", "8.0", "Nvidia", 0x20B010DE, "off", 108, 400),
    "l4": Model("NVIDIA L4", 23034, "Ada Lovelace", "8.9", "Nvidia", 0x27B810DE, "unsupported", 58, 72),
    "t4": Model("Tesla T4", 15360, "Turing", "7.5", "Tesla", 0x1EB810DE, "unsupported", 40, 70),
}
MAX_GPUS = 16
DEFAULT_DRIVER = "580.159.04"
DEFAULT_CUDA = "13.0"

# An HGX-like board: two GPUs behind each of four PCIe roots, roots 0-1 on NUMA node 0, 2-3 on 1.
_BUSES = (0x19, 0x2A, 0x4C, 0x5D, 0x9B, 0xAB, 0xCB, 0xDB)
_ROOTS = (0x15, 0x15, 0x48, 0x48, 0x97, 0x97, 0xC7, 0xC7)
_UUID = re.compile(r"GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
FakeDevicesError = fakes.FakeDevicesError


@dataclasses.dataclass(frozen=True)
class FakeGpu:
    uuid: str
    index: int
    minor: int
    product_name: str
    memory: int
    architecture: str
    compute_capability: str
    brand: str
    mig: str
    pci_bus_id: str
    pcie_root: str
    numa_node: int | None
    pci_device_id: int = 0x233510DE
    sms: int = 132  # the stub's `sms` key: NVML's multiprocessorCount and libcuda's MULTIPROCESSOR_COUNT
    power_limit_w: int | None = None  # the stub's `power` key (W); None: NOT_SUPPORTED
    default_power_limit_w: int | None = None  # the stub's `powerdefault` key (W); None: as power_limit_w

    def stub_fields(self, index: int | None = None) -> dict[str, str]:
        """This GPU's ``HOOKCORE_STUB_DEVICES`` fields (NVML's numeric enums)."""
        arch = _code(nvml.ARCHITECTURES, self.architecture, "architecture")
        brand = _code(nvml.BRANDS, self.brand, "brand")
        fields = {
            "uuid": self.uuid, "name": self.product_name, "memory": str(self.memory),
            "index": str(self.index if index is None else index), "minor": str(self.minor),
            "pci": self.pci_bus_id, "pciid": hex(self.pci_device_id), "arch": str(arch), "brand": str(brand),
            "cc": self.compute_capability, "mig": self.mig, "sms": str(self.sms),
        }
        if self.power_limit_w is not None:
            fields["power"] = str(self.power_limit_w)
        if self.default_power_limit_w is not None:
            fields["powerdefault"] = str(self.default_power_limit_w)
        return fields


@dataclasses.dataclass(frozen=True)
class FakeNode:
    """The fake GPUs of one node and the driver versions their NVML reports."""

    gpus: tuple[FakeGpu, ...]
    driver_version: str = DEFAULT_DRIVER
    cuda_version: str = DEFAULT_CUDA

    def stub_devices(self, uuids: Sequence[str] | None = None) -> str:
        """``HOOKCORE_STUB_DEVICES`` for the node, or for the GPUs a container sees (`uuids`, in
        that order, numbered from 0 as NVML numbers a container's GPUs)."""
        if uuids is None:
            return stub.stub_devices([g.stub_fields() for g in self.gpus])
        by_uuid = {g.uuid: g for g in self.gpus}
        return stub.stub_devices([by_uuid[u].stub_fields(index=i) for i, u in enumerate(uuids)])

    def stub_env(self) -> dict[str, str]:
        major, _, minor = self.cuda_version.partition(".")
        return {
            stub.STUB_DEVICES_ENV: self.stub_devices(),
            "HOOKCORE_STUB_NVML_DRIVER": self.driver_version,
            "HOOKCORE_STUB_NVML_CUDA": str(int(major) * 1000 + int(minor or 0) * 10),
        }


def _code(table: Mapping[int, str], name: str, what: str) -> int:
    for code, known in table.items():
        if known == name:
            return code
    raise FakeDevicesError(f"{what} {name!r} is not known; known: {sorted(set(table.values()))}")


def fake_uuid(node: str, position: int) -> str:
    return "GPU-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"hami-core-gpu.fake/{node}/{position}"))


def _from_model(model: Model, node: str, position: int) -> FakeGpu:
    bus, root, numa = fakes.pci_layout(position, _BUSES, _ROOTS)
    return FakeGpu(
        uuid=fake_uuid(node, position), index=position, minor=position, product_name=model.product_name,
        memory=model.memory_mib * MiB, architecture=model.architecture, compute_capability=model.compute_capability,
        brand=model.brand, mig=model.mig, pci_bus_id=bus, pcie_root=root, numa_node=numa,
        pci_device_id=model.pci_device_id, sms=model.sms, power_limit_w=model.power_limit_w,
        default_power_limit_w=model.power_limit_w,
    )


# The MIG devices a static fake GPU is cut into (profile, placement start): 3 + 2 + 1 of 7 compute slices.
STATIC_LAYOUT = (("3g.71gb", 0), ("2g.35gb", 4), ("1g.18gb", 6))
MIG_SUFFIX = "-mig"


def profile(name: str, node: str) -> FakeNode:
    if name.endswith(MIG_SUFFIX):
        base = profile(name[: -len(MIG_SUFFIX)], node)
        if any(g.mig == "unsupported" for g in base.gpus):
            raise FakeDevicesError(f"fake-device profile {name!r}: that model has no MIG")
        return dataclasses.replace(base, gpus=tuple(dataclasses.replace(g, mig="on") for g in base.gpus))
    model_name, count = fakes.parse_profile(name, MODELS, example="h200x8")
    if not 1 <= count <= MAX_GPUS:
        raise FakeDevicesError(f"fake-device profile {name!r}: count must be 1..{MAX_GPUS}")
    model = MODELS[model_name]
    return FakeNode(tuple(_from_model(model, node, i) for i in range(count)))


_GPU_KEYS = {
    "model", "uuid", "index", "minor", "productName", "memory", "architecture", "computeCapability", "brand",
    "migMode", "pciBusID", "pcieRoot", "numaNode", "multiprocessorCount", "powerLimit", "defaultPowerLimit",
}


def from_document(doc: Any, node: str, source: str = "fake-device file") -> FakeNode:
    """A `FakeNode` from a parsed YAML document (see the module docstring)."""
    entries = fakes.document_entries(doc, source, "gpus", ("driverVersion", "cudaDriverVersion"), MAX_GPUS, "GPUs")
    gpus = [_gpu_entry(e, node, i, f"{source}: gpus[{i}]") for i, e in enumerate(entries)]
    fakes.check_unique(gpus, ("uuid", "pci_bus_id", "index", "minor"), source, "GPUs")
    driver = str(doc.get("driverVersion", DEFAULT_DRIVER))
    cuda = str(doc.get("cudaDriverVersion", DEFAULT_CUDA))
    try:
        nvml.version(driver)
        nvml.version(cuda)
    except ValueError:
        raise FakeDevicesError(f"{source}: driverVersion/cudaDriverVersion must be dotted numbers") from None
    return FakeNode(tuple(gpus), driver, cuda)


def _gpu_entry(entry: Any, node: str, position: int, where: str) -> FakeGpu:
    entry = fakes.entry_mapping(entry, where, _GPU_KEYS)
    model_name = entry.get("model")
    if model_name is not None and model_name not in MODELS:
        raise FakeDevicesError(f"{where}: unknown model {model_name!r}; known: {sorted(MODELS)}")
    if model_name is None and not {"productName", "memory"} <= set(entry):
        raise FakeDevicesError(f"{where}: give `model:` or at least `productName:` and `memory:`")
    base = _from_model(MODELS[model_name or "h200"], node, position)
    changes: dict[str, Any] = {} if model_name else {"power_limit_w": None, "default_power_limit_w": None}
    simple = {"uuid": "uuid", "productName": "product_name", "architecture": "architecture", "brand": "brand",
              "pciBusID": "pci_bus_id", "pcieRoot": "pcie_root"}
    for key, attr in simple.items():
        if key in entry:
            changes[attr] = str(entry[key])
    for key, attr in (("index", "index"), ("minor", "minor"), ("numaNode", "numa_node"), ("multiprocessorCount", "sms"),
                      ("powerLimit", "power_limit_w"), ("defaultPowerLimit", "default_power_limit_w")):
        if key in entry:
            if not isinstance(entry[key], int) or isinstance(entry[key], bool):
                raise FakeDevicesError(f"{where}: {key} must be an integer, got {entry[key]!r}")
            changes[attr] = entry[key]
    if "memory" in entry:
        changes["memory"] = fakes.memory_quantity(entry, where, example="40Gi")
    if "computeCapability" in entry:
        changes["compute_capability"] = str(entry["computeCapability"])
    if "migMode" in entry:
        mig = entry["migMode"]
        mig = {True: "on", False: "off"}.get(mig, mig)  # YAML 1.1 reads a bare off as false
        if mig not in ("on", "off", "unsupported"):
            raise FakeDevicesError(f"{where}: migMode must be on, off or unsupported, got {entry['migMode']!r}")
        changes["mig"] = mig
    gpu = dataclasses.replace(base, **changes)
    _code(nvml.ARCHITECTURES, gpu.architecture, f"{where}: architecture")
    _code(nvml.BRANDS, gpu.brand, f"{where}: brand")
    if not _UUID.fullmatch(gpu.uuid):
        raise FakeDevicesError(f"{where}: uuid {gpu.uuid!r} must look like GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (hex)")
    if not stub.check_stub_value(gpu.product_name):
        raise FakeDevicesError(f"{where}: productName {gpu.product_name!r}: 1..95 characters, no ',', ';' or '='")
    fakes.check_pci_address(where, gpu.pci_bus_id, gpu.pcie_root, bus_example="0000:3b:00.0", root_example="pci0000:3a")
    if not re.fullmatch(r"[0-9]+\.[0-9]+", gpu.compute_capability):
        raise FakeDevicesError(f"{where}: computeCapability {gpu.compute_capability!r} must look like 8.6")
    if gpu.memory <= 0:
        raise FakeDevicesError(f"{where}: memory must be positive")
    if not 1 <= gpu.sms <= 4096:
        raise FakeDevicesError(f"{where}: multiprocessorCount must be an SM count, 1..4096, got {gpu.sms}")
    for key, watts in (("powerLimit", gpu.power_limit_w), ("defaultPowerLimit", gpu.default_power_limit_w)):
        if watts is not None and not 1 <= watts <= 10000:
            raise FakeDevicesError(f"{where}: {key} must be a power limit in W, 1..10000, got {watts}")
    return gpu


def load(spec: str, node: str) -> FakeNode:
    """A profile name, or the path of a YAML file (anything with a `/` or a .yaml/.yml suffix)."""
    return fakes.load(spec, node, profile, from_document)


def stub_library() -> Path:
    """hookcore's stub libnvidia-ml.so.1 (`dra.fakes.stub.stub_library`)."""
    return stub.stub_library("libnvidia-ml.so.1")


class FakeBackend:
    """Activates a `FakeNode` in this process: the stub NVML, its environment and a sysfs."""

    def __init__(self, node: FakeNode, stub_library: Path) -> None:
        if not stub_library.exists():
            raise FakeDevicesError(
                f"the stub NVML library {stub_library} is not built: run `make -C hookcore` (or reinstall the package)"
            )
        self.node = node
        self.stub_library = stub_library
        self.sysfs = fake_sysfs([(g.pci_bus_id, g.pcie_root, g.numa_node) for g in node.gpus])
        os.environ.update(node.stub_env())  # the stub reads its devices at nvmlInit
        digest = hashlib.sha256(",".join(g.uuid for g in node.gpus).encode()).hexdigest()[:16]
        default = Path(tempfile.gettempdir()) / f"hami-core-gpu-fake-mig-{digest}.state"
        self.mig_state = Path(os.environ.setdefault("HOOKCORE_STUB_NVML_MIG", str(default)))
        nvml.load_library(stub_library)

    @property
    def mps_control(self) -> Path:
        """The FAKE nvidia-cuda-mps-control (records the commands it gets; no MPS server)."""
        return Path(__file__).resolve().parent / "fake_mps" / "nvidia-cuda-mps-control"

    @property
    def mps_root(self) -> Path:
        """Where the fake node's MPS daemons keep their dirs (a restart of the daemon finds them)."""
        return self.mig_state.with_name(self.mig_state.name.replace(".state", "") + "-mps")

    def seed_static_mig(self, found: Mapping[str, mig.MigGpu]) -> bool:
        """Cut every MIG GPU that has no instance into `STATIC_LAYOUT`, through NVML (as mig-parted
        would); True when anything was made (then discover again)."""
        made = False
        for uuid, gpu in found.items():
            if gpu.devices or mig.instances(uuid, gpu.profiles):
                continue
            by_name = {p.name: p for p in gpu.profiles}
            for name, start in STATIC_LAYOUT:
                if name in by_name and start in by_name[name].starts:
                    mig.create(uuid, by_name[name], start)
                    made = True
        return made

    def container_env(self, uuids: Iterable[str], migs: Sequence[mig.MigDevice] = ()) -> dict[str, str]:
        """What a workload of a claim needs to see these GPUs under the stub CUDA and NVML. A MIG
        device is a device of its memory to the stub, named ``GPU-`` + the MIG UUID's digits (the
        stub CUDA spells every UUID so), and CUDA_VISIBLE_DEVICES says it the stub's way."""
        listed = list(uuids)
        if not migs:
            return {stub.STUB_DEVICES_ENV: self.node.stub_devices(listed)}
        parents = {g.uuid: g for g in self.node.gpus}
        entries: list[dict[str, str | int]] = []
        visible: list[str] = []
        for i, dev in enumerate(migs):
            stub_uuid = "GPU-" + dev.uuid.removeprefix("MIG-")
            name = f"{parents[dev.parent_uuid].product_name} MIG {dev.profile.name}" if dev.parent_uuid in parents \
                else f"MIG {dev.profile.name}"
            entries.append({"uuid": stub_uuid, "name": name, "memory": dev.memory, "index": i, "minor": i, "mig": "off"})
            visible.append(stub_uuid)
        return {stub.STUB_DEVICES_ENV: stub.stub_devices(entries), "CUDA_VISIBLE_DEVICES": ",".join(visible)}

    def close(self) -> None:
        """Nothing to release: the fake sysfs is shared by every process faking the same layout."""


def fake_sysfs(layout: list[tuple[str, str, int | None]]) -> Path:
    """A sysfs for `layout` (bus id, PCIe root, NUMA node per GPU) under the temp dir, named after
    its content: built once (in a scratch dir renamed into place), then reused by every process
    that fakes the same board, so daemons and their short-lived children leave no dir each."""
    digest = hashlib.sha256(repr(sorted(layout, key=str)).encode()).hexdigest()[:16]
    root = Path(tempfile.gettempdir()) / f"hami-core-gpu-fake-sysfs-{digest}"
    if not root.is_dir():
        scratch = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
        topology.build_fake_sysfs(scratch, layout)
        try:
            os.rename(scratch, root)
        except OSError:  # another process got there first: theirs is the same
            shutil.rmtree(scratch, ignore_errors=True)
    return root
