"""Where a PCI device sits on the node, read from sysfs by its PCI bus ID (any vendor's driver).

- PCIe root: ``/sys/bus/pci/devices/<bus id>`` links to ``/sys/devices/pci<domain>:<bus>/...``;
  the first component is the root complex, published as ``resource.kubernetes.io/pcieRoot``
  (the value upstream's ``deviceattribute`` helper publishes, e.g. ``pci0000:15``), so
  ``matchAttribute`` can keep a claim's devices under one root, also across drivers (a GPU and
  an NPU of one heterogeneous claim).
- NUMA node: ``/sys/bus/pci/devices/<bus id>/numa_node`` (what kubelet's topology manager uses);
  ``-1`` means the platform reports none.

Neither is fatal when missing (VMs and some containers hide sysfs): the attribute is left out
and a warning says why, where HAMi's driver dereferenced a nil root and crashed.
Drivers use it as ``from dra import topology`` (vendor neutral: nothing here names a vendor).
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

log = logging.getLogger(__name__)

_ROOT = re.compile(r"^pci[0-9a-f]{4,}:[0-9a-f]{2}$")


def _device_dir(sysfs: Path, bus_id: str) -> Path:
    return sysfs / "bus" / "pci" / "devices" / bus_id


def pcie_root(sysfs: Path, bus_id: str) -> str | None:
    link = _device_dir(sysfs, bus_id)
    try:
        target = Path(os.path.realpath(link, strict=True))
    except OSError as exc:
        log.warning("PCIe root unknown: no sysfs entry", extra={"pci_bus_id": bus_id, "path": str(link), "error": str(exc)})
        return None
    devices = Path(os.path.realpath(sysfs / "devices"))
    try:
        parts = target.relative_to(devices).parts
    except ValueError:
        parts = ()
    if parts and _ROOT.match(parts[0]):
        return parts[0]
    log.warning("PCIe root unknown: unexpected sysfs path", extra={"pci_bus_id": bus_id, "path": str(target)})
    return None


def numa_node(sysfs: Path, bus_id: str) -> int | None:
    path = _device_dir(sysfs, bus_id) / "numa_node"
    try:
        node = int(path.read_text().strip())
    except (OSError, ValueError) as exc:
        log.warning("NUMA node unknown", extra={"pci_bus_id": bus_id, "path": str(path), "error": str(exc)})
        return None
    return node if node >= 0 else None


def build_fake_sysfs(root: Path, devices: list[tuple[str, str, int | None]]) -> None:
    """A minimal sysfs under `root` for the fake backend: for each (bus id, pcie root, numa node),
    ``devices/<root>/<root bus>:00.0/<bus id>/numa_node`` and the ``bus/pci/devices`` link to it,
    laid out as the kernel lays them out."""
    links = root / "bus" / "pci" / "devices"
    links.mkdir(parents=True, exist_ok=True)
    for bus, pcie, numa in devices:
        domain, root_bus = pcie.removeprefix("pci").split(":")
        bridge = f"{domain}:{root_bus}:00.0"
        device = root / "devices" / pcie / bridge / bus
        device.mkdir(parents=True, exist_ok=True)
        (device / "numa_node").write_text(f"{-1 if numa is None else numa}\n")
        link = links / bus
        if not link.is_symlink():
            link.symlink_to(os.path.relpath(device, links))
