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
KNOWN = ("deviceNodes", "driverRoot", "devRoot", "dcmiLibrary", "health", "healthInterval", "sysfs")
SettingsError = dra.settings.SettingsError


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
        dra.settings.check_known(raw, KNOWN, "ascend")
        out: dict[str, object] = {}
        if "deviceNodes" in raw:
            out["device_nodes"] = dra.settings.one_of("deviceNodes", raw["deviceNodes"], DEVICE_NODE_MODES)
        for key, attr in (("driverRoot", "driver_root"), ("devRoot", "dev_root"), ("sysfs", "sysfs"),
                          ("dcmiLibrary", "dcmi_library")):
            if key in raw:
                out[attr] = dra.settings.absolute_path(key, raw[key])
        if "health" in raw:
            out["health"] = dra.settings.on_off("health", raw["health"])
        if "healthInterval" in raw:
            out["health_interval"] = dra.settings.seconds("healthInterval", raw["healthInterval"])
        return cls(**out)  # type: ignore[arg-type]
