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
- ``fullLoadClockMhz`` (unset): the sustained SM clock under full load of this node's GPUs, for
  claims with ``computeMode: strict`` that give none (H200: ~1500; ``bench/hookcore_gpu.py`` measures it).
  Unset: the GPU model's measured value (``strict_defaults``), else NVML's default application clock.
- ``clockElasticity`` (unset): the clock elasticity of this node's GPU model (0..1, at most 3
  decimals), for claims with ``computeMode: strict`` that give none: what the hook charges a
  boosted batch where the claim's own batches cannot show it (H100: ~0.5, 2026-12-06;
  ``bench/shares_h200.py``'s strict runs print it). Unset: the GPU model's measured value
  (``strict_defaults``), else the hook's 1, the whole boost charged.

- ``contextMemory`` (``692Mi`` on real GPUs, ``0`` on the fake): device memory charged to a
  claim's memory quota for each CUDA context of its processes (one per process, plus each extra
  ``cuCtxCreate``), so the process's whole footprint in nvidia-smi stays inside the quota. 692Mi is
  an H200's context under driver 580 (676 MiB measured natively, plus 16 MiB for what a context
  loads later: ``bench/results/h200-2026-12-01-run4``); measure yours with
  ``bench/hookcore_gpu.py --sections context``. ``0``: contexts are not charged. The stub's
  contexts hold no device memory, so the fake charges none unless set.

- ``mig`` (``static``): what a GPU in MIG mode is published as: ``static``, its existing MIG
  devices; ``dynamic``, its profiles at every placement (partitionable devices; instances made at
  prepare); ``off``, nothing (`mig.py`). GPUs with MIG off are shared by the hook in every mode.

- ``mpsRoot`` (``/run/hami-core-gpu/mps``): where the MPS control daemons keep their pipe and log
  directories and the record of their claims (`mps.py`); a host path (the claims' containers get
  its pipe dirs read-only).
- ``mpsControl`` (``nvidia-cuda-mps-control``): the MPS control program (the fake backend's default
  is the fake of ``fake_mps/``).
- ``mpsSharing`` (``namespace``): ``namespace``: a GPU's MPS server serves the claims of one
  namespace; a claim of another is refused at prepare until they end (kubelet retries).
  ``any``: the admin accepts MPS servers shared across namespaces (one fault domain, one client
  uid at a time, and root in any of the containers can ``quit`` the server of all of them).

Unknown keys and bad values stop the daemon at start with a message naming the key.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path

import dra.settings
from dra import quantity_to_int
from drivers.hami_core_gpu.config import ELASTICITY_RULE, MAX_MHZ, is_elasticity

CDI_MODES = ("toolkit", "self-contained")
DEFAULT_CONTEXT_MEMORY = 692 * 2**20
"""An H200's CUDA context under driver 580 (676 MiB measured) plus 16 MiB of later loads."""
SettingsError = dra.settings.SettingsError


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
    full_load_clock_mhz: int | None = None
    clock_elasticity: float | None = None
    mig: str = "static"
    mps_root: Path = Path("/run/hami-core-gpu/mps")
    mps_control: str | None = None  # None: nvidia-cuda-mps-control (the fake's under --fake)
    mps_sharing: str = "namespace"
    context_memory: int | None = None  # None: DEFAULT_CONTEXT_MEMORY on real GPUs, 0 on the fake

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> Settings:
        return dra.settings.parse(cls, raw, FIELDS, "hami-core-gpu")

    def context_charge(self, fake: bool) -> int:
        """Bytes charged per context: the setting, else the measured default on real GPUs (none on the
        fake, whose stub contexts take no memory)."""
        if self.context_memory is not None:
            return self.context_memory
        return 0 if fake else DEFAULT_CONTEXT_MEMORY


def _cdi_kind(key: str, value: str) -> str:
    vendor, sep, klass = value.partition("/")
    if not sep or not vendor or not klass or "=" in klass:
        raise SettingsError(f"{key} must look like vendor.com/class, not {value!r}")
    return value


def _program(key: str, value: str) -> str:
    if not value.strip():
        raise SettingsError(f"{key} must name the nvidia-cuda-mps-control program, not be empty")
    return value


def _device_memory(key: str, value: str) -> int:
    try:
        memory = quantity_to_int(value)
    except ValueError:
        memory = 0
    if memory <= 0:
        raise SettingsError(f"{key} must be a positive quantity such as 96Gi, not {value!r}")
    return memory


def _context_memory(key: str, value: str) -> int:
    try:
        context = quantity_to_int(value)
    except ValueError:
        context = -1
    if not 0 <= context <= 64 * 2**30:
        raise SettingsError(f"{key} must be a quantity from 0 to 64Gi such as 692Mi (0: contexts not charged),"
                            f" not {value!r}")
    return context


def _clock_mhz(key: str, value: str) -> int:
    if not (value.isdigit() and 1 <= int(value) <= MAX_MHZ):
        raise SettingsError(f"{key} must be a clock in MHz, 1..{MAX_MHZ}, not {value!r}")
    return int(value)


def _elasticity(key: str, value: str) -> float:
    elasticity = float(value) if re.fullmatch(r"[01](\.[0-9]{1,3})?", value) else None
    if elasticity is None or not is_elasticity(elasticity):
        raise SettingsError(f"{key} must be {ELASTICITY_RULE}, not {value!r}")
    return elasticity


FIELDS: dra.settings.Fields = {
    "cdiMode": ("cdi_mode", dra.settings.choice(*CDI_MODES)),
    "toolkitCdiKind": ("toolkit_cdi_kind", _cdi_kind),
    "driverRoot": ("driver_root", dra.settings.absolute_path),
    "devRoot": ("dev_root", dra.settings.absolute_path),
    "deviceMemory": ("device_memory", _device_memory),
    "health": ("health", dra.settings.on_off),
    "healthProbeInterval": ("health_probe_interval", dra.settings.seconds),
    "sysfs": ("sysfs", dra.settings.absolute_path),
    "fullLoadClockMhz": ("full_load_clock_mhz", _clock_mhz),
    "clockElasticity": ("clock_elasticity", _elasticity),
    "mig": ("mig", dra.settings.choice("off", "static", "dynamic")),
    "mpsRoot": ("mps_root", dra.settings.absolute_path),
    "mpsControl": ("mps_control", _program),
    "mpsSharing": ("mps_sharing", dra.settings.choice("namespace", "any")),
    "contextMemory": ("context_memory", _context_memory),
}
