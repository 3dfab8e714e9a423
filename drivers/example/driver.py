"""`gpu.example.com`: fake shareable accelerators, the smallest complete DRA driver.

Copy this file to start a driver. It shows every part of the vendor interface: set-up from the
driver context, devices with attributes and consumable capacities, opaque config decoded and
validated by the framework, container edits per share, enforcement of each share's quota by
the hook library (the framework does the work), and unprepare. No gRPC, API calls or file
writes: the framework owns those. It imports only `dra` and `dra.fakes.stub` (the stub grammar), never `dra.testing`.

Its devices are fakes served by the stub CUDA library (hookcore/stub): each claim's containers
get the stub libcuda.so.1 / libnvidia-ml.so.1 (mounted in /usr/lib, as a vendor toolkit mounts
the real ones), ``HOOKCORE_STUB_DEVICES`` describing the node's devices, ``CUDA_VISIBLE_DEVICES``
selecting the claim's, and the hook (libvgpu.so) holding every process to the claim's memory
and cores.

Settings (``dra run example --set key=value``):
  count    number of fake devices (default 2)
  memory   memory per device as a Kubernetes quantity (default 16Gi)
  enforce  "true" (default) or "false": quota enforcement by the hook library
  library  the hook library to preload (default: the libvgpu.so built with the framework)
``--fake`` (or DRA_FAKE_DEVICES): a file holding, or an inline, ``HOOKCORE_STUB_DEVICES``
description (``uuid=GPU-...,memory=8Gi;uuid=...``) instead of count/memory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import dra
from dra.fakes.stub import STUB_DEVICES_ENV, parse_stub_devices, stub_devices, stub_library_mounts

STUB_UUID = "GPU-57554201-0000-4000-8000-{:012x}"
"""UUID of fake device i: the stub libcuda's own numbering, so its default devices match too."""


@dataclasses.dataclass(frozen=True)
class ExampleConfig:
    """Opaque config: `{"apiVersion": "gpu.example.com/v1alpha1", "kind": "ExampleConfig", ...}`."""

    mode: str = "shared"  # "shared" or "exclusive"
    log_level: str = "info"

    def validate(self) -> None:
        if self.mode not in ("shared", "exclusive"):
            raise ValueError(f"mode must be 'shared' or 'exclusive', not {self.mode!r}")


@dataclasses.dataclass(frozen=True)
class FakeDevice:
    uuid: str
    memory: str  # a quantity, as published


class ExampleDriver(dra.Driver):
    name = "gpu.example.com"
    cdi_kind = "k8s.gpu.example.com/claim"
    config_type = ExampleConfig
    config_api_version = "gpu.example.com/v1alpha1"

    def __init__(self, count: int = 2, memory: str = "16Gi", enforce: bool = True) -> None:
        self.enforce = enforce
        self.library: Path | None = None
        self._configure([FakeDevice(STUB_UUID.format(i), memory) for i in range(count)])

    def _configure(self, fakes: Sequence[FakeDevice]) -> None:
        self.fakes = list(fakes)
        self.count = len(self.fakes)
        self.memory = self.fakes[0].memory if self.fakes else "16Gi"
        self.memory_bytes = dra.quantity_to_int(self.memory)
        self._bytes = [dra.quantity_to_int(f.memory) for f in self.fakes]
        # prepare() checks names only; building the Device objects for that costs CPU per claim.
        self._index = {f"gpu-{i}": i for i in range(self.count)}
        self._stub_env = stub_devices([{"uuid": f.uuid, "memory": b, "name": "Example-Accelerator"}
                                       for f, b in zip(self.fakes, self._bytes, strict=True)])

    def setup(self, ctx: dra.DriverContext) -> None:
        super().setup(ctx)
        if ctx.fake:
            self._configure(self._read_fake(ctx.fake))
        else:
            try:
                count = int(ctx.setting("count", str(self.count)))
            except ValueError:
                raise ValueError(f"--set count={ctx.settings['count']!r}: expected a whole number") from None
            if count < 0:
                raise ValueError(f"--set count={count}: expected 0 or more")
            memory = ctx.setting("memory", self.memory)
            self._configure([FakeDevice(STUB_UUID.format(i), memory) for i in range(count)])
        enforce = ctx.setting("enforce", "true").lower()
        if enforce not in ("true", "false"):
            raise ValueError(f"--set enforce={enforce!r}: expected true or false")
        self.enforce = enforce == "true"
        if "library" in ctx.settings:
            self.library = Path(ctx.settings["library"])

    @staticmethod
    def _read_fake(fake: str) -> list[FakeDevice]:
        text = fake if "uuid=" in fake else Path(fake).read_text()
        devices = parse_stub_devices(text)
        return [FakeDevice(d["uuid"], d.get("memory", "16Gi")) for d in devices]

    def uuid(self, index: int) -> str:
        return self.fakes[index].uuid

    def devices(self) -> Sequence[dra.Device]:
        return [
            dra.Device(
                name=f"gpu-{i}",
                attributes={
                    "index": i,
                    "uuid": f.uuid,
                    "model": "Example Accelerator",
                    "driverVersion": dra.Version("1.0.0"),
                },
                capacity={
                    "cores": dra.Capacity("100", dra.RequestPolicy(default="100", min="1", max="100", step="1")),
                    "memory": dra.Capacity(f.memory, dra.RequestPolicy(default=f.memory, min="1Mi", max=f.memory,
                                                                       step="1Mi")),
                },
                allow_multiple_allocations=True,
            )
            for i, f in enumerate(self.fakes)
        ]

    def prepare(self, claim: dra.ClaimRef, devices: Sequence[dra.AllocatedDevice]) -> Sequence[dra.PreparedDevice]:
        prepared = []
        for dev in devices:
            index = self._index.get(dev.device)
            if index is None:
                raise dra.PrepareError(f"device {dev.device} is not on this node (known: {sorted(self._index)})")
            cfg = dev.config or ExampleConfig()
            memory = dev.consumed_capacity.get("memory", self._bytes[index])
            env = {
                f"EXAMPLE_DEVICE_{dev.device.upper().replace('-', '_')}": dev.key.name,
                "EXAMPLE_MEMORY_LIMIT": str(memory),
                "EXAMPLE_CORES_LIMIT": str(dev.consumed_capacity.get("cores", 100)),
                "EXAMPLE_MODE": cfg.mode,
            }
            prepared.append(dra.PreparedDevice(dev, dra.ContainerEdits(env=env), state={"memory": memory}))
        return prepared

    def _visible(self, prepared: Sequence[dra.PreparedDevice]) -> list[int]:
        """The claim's physical device indices, each once, in allocation order."""
        return list(dict.fromkeys(self._index[p.device.device] for p in prepared))

    def claim_edits(self, claim: dra.ClaimRef, prepared: Sequence[dra.PreparedDevice]) -> dra.ContainerEdits:
        return dra.ContainerEdits(
            env={
                STUB_DEVICES_ENV: self._stub_env,
                "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in self._visible(prepared)),
            },
            mounts=tuple(dra.Mount(host, target) for host, target in stub_library_mounts()),
        )

    def enforcement(self, claim: dra.ClaimRef, prepared: Sequence[dra.PreparedDevice]) -> dra.Enforcement | None:
        """One quota per visible device: the shares of it this claim holds, added up."""
        if not self.enforce:
            return None
        memory: dict[int, int] = {}
        cores: dict[int, int] = {}
        for p in prepared:
            i = self._index[p.device.device]
            memory[i] = memory.get(i, 0) + int(p.state.get("memory", self._bytes[i]))
            cores[i] = min(100, cores.get(i, 0) + p.device.consumed_capacity.get("cores", 100))
        quotas = [dra.Quota(self.uuid(i), memory=min(memory[i], self._bytes[i]), cores=cores[i])
                  for i in self._visible(prepared)]
        return dra.Enforcement(self.library or dra.hook_library("vgpu"), quotas)

    def hook_libraries(self) -> Sequence[Path]:
        return [self.library or dra.hook_library("vgpu")] if self.enforce else []

    def unprepare(self, claim: dra.ClaimRef, prepared: Sequence[dra.PreparedDevice]) -> None:
        return None  # fake devices hold nothing to release
