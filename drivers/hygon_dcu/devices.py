"""The device model: one ResourceSlice device per DCU, shared by consumable capacity.

Each DCU is published as ``dcu-<index>`` (ROCm SMI's device index, hy-smi's device number) with
``allowMultipleAllocations`` and the attributes HAMi's DCU support selects on, in DRA terms:
``type`` is ``DCU`` (HAMi's device type word), ``productName`` the product (``K100_AI``: what
HAMi's ``hygon.com/use-dcutype`` annotation matches, by substring of ``DCU-<product>``), ``uuid``
the device's unique ID (what ``hygon.com/use-gpuuuid`` names). Added: ``index``, ``brand``,
``computeUnits`` (when the KFD topology tells), ``renderMinor`` (``/dev/dri/renderD<N>``),
``driverVersion``, ``serialNumber`` (when the board reports one), ``numaNode`` and the standard
``resource.kubernetes.io/pciBusID`` and ``pcieRoot``, so a heterogeneous claim can
``matchAttribute`` a DCU with a GPU or an NPU under one PCIe root.

Capacities, consumable by several claims:
- ``cores``: 100 (percent of the DCU's compute time, enforced by libvhip's limiter); default 100,
  1..100 in steps of 1.
- ``memory``: the VRAM in bytes, whole MiB; default all of it, 1Mi..all in steps of 1Mi.
A request without capacity therefore gets the whole DCU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import dra
from dra import Device, Taint, whole_mib
from drivers.hygon_dcu.rsmi import Dcu, Inventory

DRIVER_NAME = "hygon-dcu.project-hami.io"
DEVICE_TYPE = "DCU"
BRAND = "Hygon"


def device_name(dcu: Dcu) -> str:
    return f"dcu-{dcu.index}"


def usable_memory(dcu: Dcu) -> int:
    """Bytes published for `dcu`: whole MiB, so the 1Mi step divides the range."""
    return whole_mib(dcu.memory)


def to_device(dcu: Dcu, inventory: Inventory, taints: Sequence[Taint] = ()) -> Device:
    attributes: dict[str, str | int | bool] = {
        "type": DEVICE_TYPE,
        "uuid": dcu.uuid,
        "index": dcu.index,
        "productName": dcu.name,
        "brand": BRAND,
        "renderMinor": dcu.render_minor,
        "driverVersion": inventory.driver_version,
        "resource.kubernetes.io/pciBusID": dcu.pci_bus_id,
    }
    if dcu.compute_units is not None:
        attributes["computeUnits"] = dcu.compute_units
    if dcu.serial:
        attributes["serialNumber"] = dcu.serial
    return dra.shared_device(device_name(dcu), attributes, dcu.memory, dcu.pcie_root, dcu.numa_node, taints)


def to_devices(inventory: Inventory, taints: Mapping[str, Sequence[Taint]] | None = None) -> list[Device]:
    """Every DCU as a Device, by index; `taints` maps DCU UUIDs to their current taints."""
    taints = taints or {}
    return [to_device(d, inventory, taints.get(d.uuid, ())) for d in sorted(inventory.dcus, key=lambda d: d.index)]
