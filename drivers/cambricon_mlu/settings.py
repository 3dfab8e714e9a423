"""The daemon's settings for this driver: ``dra run cambricon-mlu --set key=value`` (repeatable).

| key | default | meaning |
|---|---|---|
| ``sharing`` | ``smlu`` | ``smlu``: MLUs in sMLU mode are shared (a share: an sMLU instance); ``whole``: all whole |
| ``devRoot`` | ``/`` | where the host's ``/dev`` is seen from the daemon (``/dev/cambricon_dev*`` must exist at prepare) |
| ``cndevLibrary`` | (search) | ``libcndev.so``: the loader's path, ``/usr/local/neuware/lib64``, the usual lib dirs |
| ``health`` | ``on`` | ``off``: no health polling (no taints, no health stream) |
| ``healthInterval`` | ``5`` | seconds between CNDev health polls |
| ``sysfs`` | ``/sys`` | where sysfs is mounted (PCIe root, NUMA node) |

Unknown keys and bad values stop the daemon at start with a message naming the key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

import dra.settings

SHARING = ("smlu", "whole")
SettingsError = dra.settings.SettingsError
FIELDS: dra.settings.Fields = {
    "sharing": ("sharing", dra.settings.choice(*SHARING)),
    "devRoot": ("dev_root", dra.settings.absolute_path),
    "cndevLibrary": ("cndev_library", dra.settings.absolute_path),
    "health": ("health", dra.settings.on_off),
    "healthInterval": ("health_interval", dra.settings.seconds),
    "sysfs": ("sysfs", dra.settings.absolute_path),
}


@dataclasses.dataclass(frozen=True)
class Settings:
    sharing: str = "smlu"
    dev_root: Path = Path("/")
    cndev_library: Path | None = None
    health: bool = True
    health_interval: float = 5.0
    sysfs: Path = Path("/sys")

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> Settings:
        return dra.settings.parse(cls, raw, FIELDS, "cambricon-mlu")
