"""The daemon's settings for this driver: ``dra run ascend --set key=value`` (repeatable).

| key | default | meaning |
|---|---|---|
| ``deviceNodes`` | ``cdi`` | ``cdi``: this driver lists device nodes and driver files; ``runtime``: the Ascend runtime does |
| ``driverRoot`` | ``/`` | where the host's ``/usr/local/Ascend/driver`` and ``/etc/ascend_install.info`` are, seen from the daemon |
| ``devRoot`` | ``/`` | where the host's ``/dev`` is seen from the daemon (device nodes must exist at start in ``cdi`` mode) |
| ``dcmiLibrary`` | (search) | ``libdcmi.so``: the loader's path, ``/usr/local/Ascend/driver/lib64/driver``, ``/usr/local/dcmi`` |
| ``health`` | ``on`` | ``off``: no health polling (no taints, no health stream) |
| ``healthInterval`` | ``5`` | seconds between DCMI health polls |
| ``sysfs`` | ``/sys`` | where sysfs is mounted (PCIe root, NUMA node) |

Unknown keys and bad values stop the daemon at start with a message naming the key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

import dra.settings

DEVICE_NODE_MODES = ("cdi", "runtime")
SettingsError = dra.settings.SettingsError
FIELDS: dra.settings.Fields = {
    "deviceNodes": ("device_nodes", dra.settings.choice(*DEVICE_NODE_MODES)),
    "driverRoot": ("driver_root", dra.settings.absolute_path),
    "devRoot": ("dev_root", dra.settings.absolute_path),
    "dcmiLibrary": ("dcmi_library", dra.settings.absolute_path),
    "health": ("health", dra.settings.on_off),
    "healthInterval": ("health_interval", dra.settings.seconds),
    "sysfs": ("sysfs", dra.settings.absolute_path),
}


@dataclasses.dataclass(frozen=True)
class Settings:
    device_nodes: str = "cdi"
    driver_root: Path = Path("/")
    dev_root: Path = Path("/")
    dcmi_library: Path | None = None
    health: bool = True
    health_interval: float = 5.0
    sysfs: Path = Path("/sys")

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> Settings:
        return dra.settings.parse(cls, raw, FIELDS, "ascend")
