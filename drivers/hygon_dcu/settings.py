"""The daemon's settings for this driver: ``dra run hygon-dcu --set key=value`` (repeatable).

| key | default | meaning |
|---|---|---|
| ``driverRoot`` | ``/`` | where the host's ``/opt/hyhal`` (the DCU driver's user space) is, seen from the daemon |
| ``devRoot`` | ``/`` | where the host's ``/dev`` is seen from the daemon (``/dev/kfd`` and the render nodes must exist at start) |
| ``smiLibrary`` | (search) | ``librocm_smi64.so``: the loader's path, ``/opt/hyhal/lib``, ``/opt/rocm/lib`` |
| ``health`` | ``on`` | ``off``: no health polling (no taints, no health stream) |
| ``healthInterval`` | ``5`` | seconds between ROCm SMI health polls |
| ``sysfs`` | ``/sys`` | where sysfs is mounted (KFD topology, PCIe root, NUMA node) |

Unknown keys and bad values stop the daemon at start with a message naming the key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

import dra.settings

SettingsError = dra.settings.SettingsError
FIELDS: dra.settings.Fields = {
    "driverRoot": ("driver_root", dra.settings.absolute_path),
    "devRoot": ("dev_root", dra.settings.absolute_path),
    "smiLibrary": ("smi_library", dra.settings.absolute_path),
    "health": ("health", dra.settings.on_off),
    "healthInterval": ("health_interval", dra.settings.seconds),
    "sysfs": ("sysfs", dra.settings.absolute_path),
}


@dataclasses.dataclass(frozen=True)
class Settings:
    driver_root: Path = Path("/")
    dev_root: Path = Path("/")
    smi_library: Path | None = None
    health: bool = True
    health_interval: float = 5.0
    sysfs: Path = Path("/sys")

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> Settings:
        return dra.settings.parse(cls, raw, FIELDS, "hygon-dcu")
