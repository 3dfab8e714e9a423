"""`gpu.example.com`: fake shareable accelerators, the smallest complete DRA driver.

Copy this file to start a driver. It shows every part of the vendor interface: devices with
attributes and consumable capacities, opaque config decoded by the framework, container edits
per share, and unprepare. No gRPC, API calls or file writes: the framework owns those.

Configuration (environment, so the demo and tests need no hardware):
  EXAMPLE_DEVICE_COUNT   number of fake devices (default 2)
  EXAMPLE_DEVICE_MEMORY  memory per device as a Kubernetes quantity (default 16Gi)
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from dra.driver import (
    AllocatedDevice,
    Capacity,
    ClaimRef,
    ContainerEdits,
    Device,
    Driver,
    PreparedDevice,
    PrepareError,
    RequestPolicy,
    Version,
    quantity_to_int,
)


@dataclasses.dataclass(frozen=True)
class ExampleConfig:
    """Opaque config: `{"apiVersion": "gpu.example.com/v1alpha1", "kind": "ExampleConfig", ...}`."""

    mode: str = "shared"  # "shared" or "exclusive"
    log_level: str = "info"


class ExampleDriver(Driver):
    name = "gpu.example.com"
    cdi_kind = "k8s.gpu.example.com/claim"
    config_type = ExampleConfig
    config_api_version = "gpu.example.com/v1alpha1"

    def __init__(self, count: int | None = None, memory: str | None = None) -> None:
        self.count = count if count is not None else int(os.environ.get("EXAMPLE_DEVICE_COUNT", "2"))
        self.memory = memory or os.environ.get("EXAMPLE_DEVICE_MEMORY", "16Gi")
        self.memory_bytes = quantity_to_int(self.memory)
        # prepare() checks names only; building the Device objects for that costs CPU per claim.
        self._names = frozenset(d.name for d in self.devices())

    def devices(self) -> Sequence[Device]:
        return [
            Device(
                name=f"gpu-{i}",
                attributes={
                    "index": i,
                    "uuid": f"GPU-example-{i:04d}",
                    "model": "Example Accelerator",
                    "driverVersion": Version("1.0.0"),
                },
                capacity={
                    "cores": Capacity("100", RequestPolicy(default="100", min="1", max="100", step="1")),
                    "memory": Capacity(
                        self.memory, RequestPolicy(default=self.memory, min="1Mi", max=self.memory, step="1Mi")
                    ),
                },
                allow_multiple_allocations=True,
            )
            for i in range(self.count)
        ]

    def validate_config(self, config: ExampleConfig) -> None:
        if config.mode not in ("shared", "exclusive"):
            raise ValueError(f"mode must be 'shared' or 'exclusive', not {config.mode!r}")

    def prepare(self, claim: ClaimRef, devices: Sequence[AllocatedDevice]) -> Sequence[PreparedDevice]:
        prepared = []
        for dev in devices:
            if dev.device not in self._names:
                raise PrepareError(f"device {dev.device} is not on this node (known: {sorted(self._names)})")
            cfg = dev.config or ExampleConfig()
            memory = dev.consumed_capacity.get("memory", self.memory_bytes)
            env = {
                f"EXAMPLE_DEVICE_{dev.device.upper().replace('-', '_')}": dev.key,
                "EXAMPLE_MEMORY_LIMIT": str(memory),
                "EXAMPLE_CORES_LIMIT": str(dev.consumed_capacity.get("cores", 100)),
                "EXAMPLE_MODE": cfg.mode,
            }
            prepared.append(PreparedDevice(dev, ContainerEdits(env=env), state={"memory": memory}))
        return prepared

    def unprepare(self, claim: ClaimRef, prepared: Sequence[PreparedDevice]) -> None:
        return None  # fake devices hold nothing to release
