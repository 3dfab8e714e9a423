"""The daemon's settings for this driver: ``dra run hami-core-gpu --set key=value`` (repeatable).

- ``cdiMode`` (``toolkit``): ``toolkit``: device nodes and driver libraries come from the NVIDIA
  Container Toolkit's CDI spec (``nvidia.com/gpu=<uuid>``); ``self-contained``: this driver lists them.
- ``toolkitCdiKind`` (``nvidia.com/gpu``): the kind of the toolkit's spec (devices named by UUID).
- ``driverRoot`` (``/``): self-contained mode: where the host's NVIDIA driver files are
  (``/run/nvidia/driver`` under the GPU Operator).
- ``devRoot`` (``/``): self-contained mode: where the host's ``/dev`` is seen from the daemon.
- ``deviceMemory`` (NVML's): framebuffer to publish for GPUs whose NVML reports none (unified
  memory), e.g. ``96Gi``.
- ``health`` (``on``): ``off``: no NVML event monitor (no taints, no health stream).
- ``healthProbeInterval`` (``5``): seconds between recovery-action probes.
- ``sysfs`` (``/sys``): where sysfs is mounted (PCIe root, NUMA node).

Unknown keys and bad values stop the daemon at start with a message naming the key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from dra import quantity_to_int

CDI_MODES = ("toolkit", "self-contained")


class SettingsError(ValueError):
    """A --set value this driver cannot use; the message names the key and the fix."""


@dataclasses.dataclass(frozen=True)
class Settings:
    cdi_mode: str = "toolkit"
    toolkit_cdi_kind: str = "nvidia.com/gpu"
    driver_root: Path = Path("/")
    dev_root: Path = Path("/")
    device_memory: int | None = None
    health: bool = True
    health_probe_interval: float = 5.0
    sysfs: Path = Path("/sys")

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> Settings:
        known = {
            "cdiMode", "toolkitCdiKind", "driverRoot", "devRoot", "deviceMemory", "health",
            "healthProbeInterval", "sysfs",
        }
        unknown = sorted(set(raw) - known)
        if unknown:
            raise SettingsError(f"unknown setting {unknown[0]!r} for hami-core-gpu; known: {', '.join(sorted(known))}")
        out: dict[str, object] = {}
        if "cdiMode" in raw:
            if raw["cdiMode"] not in CDI_MODES:
                raise SettingsError(f"cdiMode must be one of {list(CDI_MODES)}, not {raw['cdiMode']!r}")
            out["cdi_mode"] = raw["cdiMode"]
        if "toolkitCdiKind" in raw:
            vendor, sep, klass = raw["toolkitCdiKind"].partition("/")
            if not sep or not vendor or not klass or "=" in klass:
                raise SettingsError(f"toolkitCdiKind must look like vendor.com/class, not {raw['toolkitCdiKind']!r}")
            out["toolkit_cdi_kind"] = raw["toolkitCdiKind"]
        for key, attr in (("driverRoot", "driver_root"), ("devRoot", "dev_root"), ("sysfs", "sysfs")):
            if key in raw:
                if not raw[key].startswith("/"):
                    raise SettingsError(f"{key} must be an absolute path, not {raw[key]!r}")
                out[attr] = Path(raw[key])
        if "deviceMemory" in raw:
            try:
                memory = quantity_to_int(raw["deviceMemory"])
            except ValueError:
                memory = 0
            if memory <= 0:
                raise SettingsError(f"deviceMemory must be a positive quantity such as 96Gi, not {raw['deviceMemory']!r}")
            out["device_memory"] = memory
        if "health" in raw:
            if raw["health"] not in ("on", "off"):
                raise SettingsError(f"health must be on or off, not {raw['health']!r}")
            out["health"] = raw["health"] == "on"
        if "healthProbeInterval" in raw:
            try:
                interval = float(raw["healthProbeInterval"])
            except ValueError:
                interval = -1.0
            if not 0.01 <= interval <= 300:
                raise SettingsError(f"healthProbeInterval must be seconds in 0.01..300, not {raw['healthProbeInterval']!r}")
            out["health_probe_interval"] = interval
        return cls(**out)  # type: ignore[arg-type]
