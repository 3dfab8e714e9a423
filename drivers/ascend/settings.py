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

DEVICE_NODE_MODES = ("cdi", "runtime")
KNOWN = ("deviceNodes", "driverRoot", "devRoot", "dcmiLibrary", "health", "healthInterval", "sysfs")


class SettingsError(ValueError):
    """A --set value this driver cannot use; the message names the key and the fix."""


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
        unknown = sorted(set(raw) - set(KNOWN))
        if unknown:
            raise SettingsError(f"unknown setting {unknown[0]!r} for ascend; known: {', '.join(sorted(KNOWN))}")
        out: dict[str, object] = {}
        if "deviceNodes" in raw:
            if raw["deviceNodes"] not in DEVICE_NODE_MODES:
                raise SettingsError(f"deviceNodes must be one of {list(DEVICE_NODE_MODES)}, not {raw['deviceNodes']!r}")
            out["device_nodes"] = raw["deviceNodes"]
        for key, attr in (("driverRoot", "driver_root"), ("devRoot", "dev_root"), ("sysfs", "sysfs"),
                          ("dcmiLibrary", "dcmi_library")):
            if key in raw:
                if not raw[key].startswith("/"):
                    raise SettingsError(f"{key} must be an absolute path, not {raw[key]!r}")
                out[attr] = Path(raw[key])
        if "health" in raw:
            if raw["health"] not in ("on", "off"):
                raise SettingsError(f"health must be on or off, not {raw['health']!r}")
            out["health"] = raw["health"] == "on"
        if "healthInterval" in raw:
            try:
                interval = float(raw["healthInterval"])
            except ValueError:
                interval = -1.0
            if not 0.01 <= interval <= 300:
                raise SettingsError(f"healthInterval must be seconds in 0.01..300, not {raw['healthInterval']!r}")
            out["health_interval"] = interval
        return cls(**out)  # type: ignore[arg-type]
