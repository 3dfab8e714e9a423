"""The device model: one ResourceSlice device per GPU, named and shaped like HAMi's driver.

Compatibility with HAMi's `hami-core-gpu.project-hami.io` driver is the point: its users'
claims and CEL selectors keep working. So the device is ``hami-gpu-<minor>`` and carries HAMi's
attributes (``type``, ``uuid``, ``minor``, ``productName``, ``brand``, ``architecture``,
``cudaComputeCapability``, ``driverVersion``, ``cudaDriverVersion``, ``pcieBusID``,
``resource.kubernetes.io/pcieRoot``), plus what HAMi lacks: ``index`` (nvidia-smi's),
``numaNode`` and the standard ``resource.kubernetes.io/pciBusID``.

Capacities, consumable by several claims (``allowMultipleAllocations``):
- ``cores``: 100 (percent of the GPU's compute time); default 100, 1..100 in steps of 1. HAMi
  allows 0, which costs the scheduler nothing and gave an unlimited share; here every share
  costs at least 1.
- ``memory``: the framebuffer in bytes (rounded down to whole MiB); default all of it, 1Mi..all
  in steps of 1Mi.
A request without capacity therefore gets the whole GPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import dra
from dra import Device, Taint, Version, whole_mib
from drivers.hami_core_gpu.nvml import Gpu, Inventory

DRIVER_NAME = "hami-core-gpu.project-hami.io"
DEVICE_TYPE = "hami-gpu"


def device_name(gpu: Gpu) -> str:
    return f"hami-gpu-{gpu.minor}"


def usable_memory(gpu: Gpu) -> int:
    """Bytes published for `gpu`: whole MiB, so the 1Mi step divides the range."""
    return whole_mib(gpu.memory)


def to_device(gpu: Gpu, inventory: Inventory, taints: Sequence[Taint] = ()) -> Device:
    attributes: dict[str, str | int | bool | Version] = {
        "type": DEVICE_TYPE,
        "uuid": gpu.uuid,
        "minor": gpu.minor,
        "index": gpu.index,
        "productName": gpu.product_name,
        "brand": gpu.brand,
        "architecture": gpu.architecture,
        "cudaComputeCapability": Version(gpu.compute_capability),
        "driverVersion": Version(inventory.driver_version),
        "cudaDriverVersion": Version(inventory.cuda_driver_version),
        "pcieBusID": gpu.pci_bus_id,
        "resource.kubernetes.io/pciBusID": gpu.pci_bus_id,
    }
    return dra.shared_device(device_name(gpu), attributes, gpu.memory, gpu.pcie_root, gpu.numa_node, taints)


def publishable(inventory: Inventory) -> tuple[Gpu, ...]:
    """The GPUs this driver shares: not those in MIG mode (a MIG-enabled GPU runs no CUDA work
    outside its MIG instances, and hookcore cannot meter inside them)."""
    return tuple(g for g in inventory.gpus if not g.mig_enabled)


def to_devices(inventory: Inventory, taints: Mapping[str, Sequence[Taint]] | None = None) -> list[Device]:
    """Every publishable GPU as a Device; `taints` maps GPU UUIDs to their current taints."""
    taints = taints or {}
    return [to_device(g, inventory, taints.get(g.uuid, ())) for g in sorted(publishable(inventory), key=lambda g: g.minor)]
