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
KNOWN = ("sharing", "devRoot", "cndevLibrary", "health", "healthInterval", "sysfs")
SettingsError = dra.settings.SettingsError


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
        dra.settings.check_known(raw, KNOWN, "cambricon-mlu")
        out: dict[str, object] = {}
        if "sharing" in raw:
            out["sharing"] = dra.settings.one_of("sharing", raw["sharing"], SHARING)
        for key, attr in (("devRoot", "dev_root"), ("sysfs", "sysfs"), ("cndevLibrary", "cndev_library")):
            if key in raw:
                out[attr] = dra.settings.absolute_path(key, raw[key])
        if "health" in raw:
            out["health"] = dra.settings.on_off("health", raw["health"])
        if "healthInterval" in raw:
            out["health_interval"] = dra.settings.seconds("healthInterval", raw["healthInterval"])
        return cls(**out)  # type: ignore[arg-type]
