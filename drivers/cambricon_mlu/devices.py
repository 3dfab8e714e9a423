"""The device model: one ResourceSlice device per MLU.

Each MLU is published as ``mlu-<index>`` (CNDev's index, ``/dev/cambricon_dev<index>``). In sMLU
mode (the default, ``--set sharing=smlu``) an MLU whose sMLU mode is on is shared by consumable
capacity (``allowMultipleAllocations``) and each claim's share becomes an sMLU instance of the
vendor's driver (`smlu.py`); an MLU with sMLU off, and every MLU with ``sharing=whole``, is
allocated whole.

Attributes, in the words HAMi's MLU support selects on: ``type`` is ``MLU`` (HAMi's device type
word), ``productName`` the card (``MLU370-X8``: what HAMi's ``cambricon.com/use-mlutype``
annotation matches by substring), ``uuid`` CNDev's UUID with ``MLU-`` (what
``cambricon.com/use-gpuuuid`` names here; HAMi named ``<node>-cambricon-mlu-<i>``). Added:
``index``, ``brand``, ``mluCores`` (``cndevGetCoreCount``), ``smlu`` (shared by sMLU instances),
``driverVersion``, ``serialNumber``, ``numaNode`` and the standard
``resource.kubernetes.io/pciBusID`` and ``pcieRoot``, so a heterogeneous claim can
``matchAttribute`` an MLU with a GPU, NPU or DCU under one PCIe root.

Capacities of a shared MLU, consumable by several claims:
- ``cores``: 100 (percent: the sMLU instance's ``mluQuota``); default 100, 1..100 in steps of 1.
- ``memory``: the MLU's memory in bytes, whole MiB (the instance's ``memorySize``); default all,
  1Mi..all in steps of 1Mi.
A request without capacity gets the whole MLU (an instance of all of it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import dra
from dra import Capacity, Device, Taint, whole_mib
from drivers.cambricon_mlu.cndev import Inventory, Mlu

DRIVER_NAME = "cambricon-mlu.project-hami.io"
DEVICE_TYPE = "MLU"
BRAND = "Cambricon"


def device_name(mlu: Mlu) -> str:
    return f"mlu-{mlu.index}"


def usable_memory(mlu: Mlu) -> int:
    """Bytes published for `mlu`: whole MiB, so the 1Mi step divides the range."""
    return whole_mib(mlu.memory)


def to_device(mlu: Mlu, inventory: Inventory, shared: bool, taints: Sequence[Taint] = ()) -> Device:
    """`mlu` as a Device: shared by capacity (`shared`: sMLU), or whole."""
    attributes: dict[str, str | int | bool] = {
        "type": DEVICE_TYPE,
        "uuid": mlu.uuid,
        "index": mlu.index,
        "productName": mlu.name,
        "brand": BRAND,
        "mluCores": mlu.cores,
        "smlu": shared,
        "driverVersion": inventory.driver_version,
        "resource.kubernetes.io/pciBusID": mlu.pci_bus_id,
    }
    if mlu.serial:
        attributes["serialNumber"] = mlu.serial
    if shared:
        return dra.shared_device(device_name(mlu), attributes, mlu.memory, mlu.pcie_root, mlu.numa_node, taints)
    if mlu.pcie_root is not None:
        attributes["resource.kubernetes.io/pcieRoot"] = mlu.pcie_root
    if mlu.numa_node is not None:
        attributes["numaNode"] = mlu.numa_node
    return Device(name=device_name(mlu), attributes=attributes,
                  capacity={"memory": Capacity(f"{usable_memory(mlu) >> 20}Mi")}, taints=tuple(taints))


def to_devices(inventory: Inventory, shared: Sequence[str], taints: Mapping[str, Sequence[Taint]] | None = None
               ) -> list[Device]:
    """Every MLU as a Device, by index; `shared` names the sMLU-shared ones, `taints` maps MLU
    UUIDs to their current taints."""
    taints = taints or {}
    return [to_device(m, inventory, device_name(m) in shared, taints.get(m.uuid, ()))
            for m in sorted(inventory.mlus, key=lambda m: m.index)]
