"""The device model: one ResourceSlice device per NPU chip, named and shaped like HAMi's driver.

Compatibility with HAMi's `ascend.project-hami.io` driver is the point: its users' claims and
CEL selectors keep working. So the device is ``npu-<logicID>-0`` and carries HAMi's attributes
(``index`` = DCMI logic ID, ``physicalID``, ``uuid``, ``model``, ``productName``, ``brand``,
``type``), with two differences: ``uuid`` is the chip's hardware die ID (HAMi published
``<node>-<logicID>``, which says nothing about the chip and collides after a re-install), and
``productName`` is HAMi's model of the chip (``Ascend910B3``, ``Ascend310P`` for a 310P3,
``Ascend910C`` for an Atlas A3 die: what HAMi's resource names ``huawei.com/<model>`` and the
admission webhook's selectors name; `models` reads the one table both use), while ``model``
stays the family HAMi published in both (``Ascend910B``). Added: ``chipName`` (``910B3``), ``aiCores``, ``cardID``/``chipID`` (npu-smi's
``-i``/``-c``), ``driverVersion``, ``serialNumber`` (when the board has an electronic label),
``numaNode`` and the standard ``resource.kubernetes.io/pciBusID`` and ``pcieRoot``, so a
heterogeneous claim can ``matchAttribute`` a GPU and an NPU under one PCIe root.

Capacities, consumable by several claims (``allowMultipleAllocations``):
- ``cores``: 100 (percent of the NPU's compute time, enforced by libvnpu's limiter); default 100,
  1..100 in steps of 1. HAMi allowed 0 and passed it to hami-vnpu-core as a *priority weight*;
  here every share costs at least 1 and is a cap.
- ``memory``: the device memory in bytes (HBM, or LPDDR on 310P), whole MiB; default all of it,
  1Mi..all in steps of 1Mi. A failed memory query is an error at start, never HAMi's silent 32Gi.
A request without capacity therefore gets the whole NPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import dra
from dra import Device, Taint, whole_mib
from drivers.ascend import models
from drivers.ascend.dcmi import Inventory, Npu

DRIVER_NAME = "ascend.project-hami.io"
DEVICE_TYPE = "HAMivNPUCore"
BRAND = "Huawei"


def device_name(npu: Npu) -> str:
    """``npu-<logicID>-0``: HAMi's name (its ``-0`` numbered hardware vNPU slices, which this
    driver does not carve; kept so names written for HAMi still match)."""
    return f"npu-{npu.logic_id}-0"


def family(npu: Npu) -> str:
    """The chip family HAMi publishes as ``model``: ``910B3`` -> ``Ascend910B``, ``910_9392``
    (Atlas A3) -> ``Ascend910A3``, ``310P3`` -> ``Ascend310P``."""
    name = npu.chip_name.upper()
    for prefix, fam in (("310P", "310P"), ("310B", "310B"), ("910B", "910B"), ("910_93", "910A3")):
        if name.startswith(prefix):
            return f"{npu.chip_type}{fam}"
    for prefix in ("310", "910"):
        if name.startswith(prefix):
            return f"{npu.chip_type}{prefix}"
    return npu.product_name


def usable_memory(npu: Npu) -> int:
    """Bytes published for `npu`: whole MiB, so the 1Mi step divides the range."""
    return whole_mib(npu.memory)


def to_device(npu: Npu, inventory: Inventory, taints: Sequence[Taint] = ()) -> Device:
    attributes: dict[str, str | int | bool] = {
        "type": DEVICE_TYPE,
        "uuid": npu.uuid,
        "index": npu.logic_id,
        "physicalID": npu.phy_id,
        "model": family(npu),
        "productName": models.model_of(npu.chip_type, npu.chip_name),
        "brand": BRAND,
        "chipName": npu.chip_name,
        "aiCores": npu.ai_cores,
        "cardID": npu.card,
        "chipID": npu.chip,
        "driverVersion": inventory.driver_version,
        "resource.kubernetes.io/pciBusID": npu.pci_bus_id,
    }
    if npu.serial:
        attributes["serialNumber"] = npu.serial
    return dra.shared_device(device_name(npu), attributes, npu.memory, npu.pcie_root, npu.numa_node, taints)


def to_devices(inventory: Inventory, taints: Mapping[str, Sequence[Taint]] | None = None) -> list[Device]:
    """Every NPU as a Device, by logic ID; `taints` maps NPU UUIDs to their current taints."""
    taints = taints or {}
    return [to_device(n, inventory, taints.get(n.uuid, ())) for n in sorted(inventory.npus, key=lambda n: n.logic_id)]
