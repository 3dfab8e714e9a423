"""dra: a framework for Kubernetes DRA drivers that share devices with enforced quotas.

This module is the public face, everything a vendor driver uses: the `Driver` class (and
`SharedDeviceDriver`, the skeleton of a driver of hook-shared devices, `dra/shared.py`), the value
types it exchanges with the framework, its errors, `PolledHealth` (a health monitor that polls each
device, `dra/health.py`), `VendorLibrary` (a vendor's C library over ctypes, `dra/library.py`),
`decode_config`, `share_capacity` (the
``cores``/``memory`` capacities of a shared device), `dra.topology` (PCIe root
and NUMA node from sysfs), `dra.fakes` (the ``--fake PROFILE_OR_FILE`` grammar of fake-device
backends and their stub libraries), `dra.settings` (checks for ``--set key=value`` values),
`until` (the one poll loop) and `dra.testing` (test helpers and the conformance suite, for a
driver's tests). A driver's code imports only `dra`, `dra.topology`, `dra.fakes` and
`dra.settings` (an import contract checks it); `dra._runtime` is the framework's own business.

    import dra

    class MyDriver(dra.Driver):
        name = "gpu.example.com"
        cdi_kind = "k8s.gpu.example.com/claim"
        def devices(self): ...
        def prepare(self, claim, devices): ...
        def unprepare(self, claim, prepared): ...

Importing `dra` stays light (no gRPC, no Kubernetes client): the node daemon's memory is the
product's.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dra._runtime.loosening import strength
from dra._runtime.wait import WaitTimeout, until
from dra.capacity import (
    DeviceShare,
    ShareConfig,
    claim_share_config,
    device_share_configs,
    device_shares,
    share_capacity,
    whole_mib,
)
from dra.config import ConfigError, decode_config, encode_config
from dra.driver import (
    HOOK_KEY,
    WHOLE_MEMORY,
    AllocatedDevice,
    Capacity,
    ClaimRef,
    ContainerEdits,
    CounterConsumption,
    CounterSet,
    Device,
    DeviceKey,
    DeviceNode,
    DeviceProcess,
    Driver,
    DriverContext,
    Enforcement,
    HealthEvent,
    Mount,
    Preload,
    PreparedDevice,
    PrepareError,
    Quota,
    RecordedDevice,
    RequestPolicy,
    Taint,
    Version,
    quantity_to_int,
)
from dra.health import DeviceHealth, HealthWatch, PolledHealth, Processed
from dra.library import LibraryError, VendorLibrary
from dra.process_reader import DeviceProcessReader
from dra.shared import ClaimView, SharedDeviceDriver, Visible, shared_device
from dra.warn_once import WarnOnce

if TYPE_CHECKING:
    from dra import fakes, settings, testing, topology

__all__ = [
    "HOOK_KEY",
    "WHOLE_MEMORY",
    "AllocatedDevice",
    "Capacity",
    "ClaimRef",
    "ClaimView",
    "ConfigError",
    "ContainerEdits",
    "CounterConsumption",
    "CounterSet",
    "Device",
    "DeviceHealth",
    "DeviceKey",
    "DeviceNode",
    "DeviceProcess",
    "DeviceProcessReader",
    "DeviceShare",
    "Driver",
    "DriverContext",
    "Enforcement",
    "HealthEvent",
    "HealthWatch",
    "LibraryError",
    "Mount",
    "PolledHealth",
    "Preload",
    "PrepareError",
    "PreparedDevice",
    "Processed",
    "Quota",
    "RecordedDevice",
    "RequestPolicy",
    "ShareConfig",
    "SharedDeviceDriver",
    "Taint",
    "VendorLibrary",
    "Version",
    "Visible",
    "WaitTimeout",
    "WarnOnce",
    "claim_share_config",
    "decode_config",
    "device_share_configs",
    "device_shares",
    "encode_config",
    "fakes",
    "hook_library",
    "quantity_to_int",
    "settings",
    "share_capacity",
    "shared_device",
    "strength",
    "testing",
    "topology",
    "until",
    "whole_mib",
]


def hook_library(stem: str) -> Path:
    """The hook library ``lib<stem>.so`` built with this framework (hookcore), for
    `Enforcement.library`; raises FileNotFoundError naming the build step when it is missing."""
    from hookcore import BUILD_DIR

    path = BUILD_DIR / f"lib{stem}.so"
    if not path.is_file():
        raise FileNotFoundError(f"hook library {path} is not built; run `make -C hookcore` (or pip install -e .)")
    return path


def __getattr__(name: str) -> Any:
    if name in ("fakes", "settings", "testing", "topology"):  # loaded on first use: the daemon never pays for the test helpers
        import importlib

        return importlib.import_module(f"dra.{name}")
    raise AttributeError(f"module 'dra' has no attribute {name!r}")
