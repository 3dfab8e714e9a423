"""`gpu.example.com`: fake shareable accelerators, the smallest complete DRA driver.

Copy this file to start a driver. It shows every part of the vendor interface: set-up from the
driver context, devices with attributes and consumable capacities, opaque config decoded and
validated by the framework, container edits per share, and unprepare. No gRPC, API calls or
file writes: the framework owns those. It imports only `dra`.

Settings (``dra run example --set key=value``):
  count    number of fake devices (default 2)
  memory   memory per device as a Kubernetes quantity (default 16Gi)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import dra


@dataclasses.dataclass(frozen=True)
class ExampleConfig:
    """Opaque config: `{"apiVersion": "gpu.example.com/v1alpha1", "kind": "ExampleConfig", ...}`."""

    mode: str = "shared"  # "shared" or "exclusive"
    log_level: str = "info"

    def validate(self) -> None:
        if self.mode not in ("shared", "exclusive"):
            raise ValueError(f"mode must be 'shared' or 'exclusive', not {self.mode!r}")


class ExampleDriver(dra.Driver):
    name = "gpu.example.com"
    cdi_kind = "k8s.gpu.example.com/claim"
    config_type = ExampleConfig
    config_api_version = "gpu.example.com/v1alpha1"

    def __init__(self, count: int = 2, memory: str = "16Gi") -> None:
        self._configure(count, memory)

    def _configure(self, count: int, memory: str) -> None:
        if count < 0:
            raise ValueError(f"count must be >= 0, not {count}")
        self.count = count
        self.memory = memory
        self.memory_bytes = dra.quantity_to_int(memory)
        # prepare() checks names only; building the Device objects for that costs CPU per claim.
        self._names = frozenset(d.name for d in self.devices())

    def setup(self, ctx: dra.DriverContext) -> None:
        super().setup(ctx)
        try:
            count = int(ctx.setting("count", str(self.count)))
        except ValueError:
            raise ValueError(f"--set count={ctx.settings['count']!r}: expected a whole number") from None
        self._configure(count, ctx.setting("memory", self.memory))

    @staticmethod
    def uuid(index: int) -> str:
        return f"GPU-example-{index:04d}"

    def devices(self) -> Sequence[dra.Device]:
        return [
            dra.Device(
                name=f"gpu-{i}",
                attributes={
                    "index": i,
                    "uuid": self.uuid(i),
                    "model": "Example Accelerator",
                    "driverVersion": dra.Version("1.0.0"),
                },
                capacity={
                    "cores": dra.Capacity("100", dra.RequestPolicy(default="100", min="1", max="100", step="1")),
                    "memory": dra.Capacity(
                        self.memory, dra.RequestPolicy(default=self.memory, min="1Mi", max=self.memory, step="1Mi")
                    ),
                },
                allow_multiple_allocations=True,
            )
            for i in range(self.count)
        ]

    def prepare(self, claim: dra.ClaimRef, devices: Sequence[dra.AllocatedDevice]) -> Sequence[dra.PreparedDevice]:
        prepared = []
        for dev in devices:
            if dev.device not in self._names:
                raise dra.PrepareError(f"device {dev.device} is not on this node (known: {sorted(self._names)})")
            cfg = dev.config or ExampleConfig()
            memory = dev.consumed_capacity.get("memory", self.memory_bytes)
            env = {
                f"EXAMPLE_DEVICE_{dev.device.upper().replace('-', '_')}": dev.key,
                "EXAMPLE_MEMORY_LIMIT": str(memory),
                "EXAMPLE_CORES_LIMIT": str(dev.consumed_capacity.get("cores", 100)),
                "EXAMPLE_MODE": cfg.mode,
            }
            prepared.append(dra.PreparedDevice(dev, dra.ContainerEdits(env=env), state={"memory": memory}))
        return prepared

    def unprepare(self, claim: dra.ClaimRef, prepared: Sequence[dra.PreparedDevice]) -> None:
        return None  # fake devices hold nothing to release
