"""The capacities of a shared device, as the framework's quotas read them: ``cores`` (percent of
the device's compute time) and ``memory`` (bytes), both consumable by several claims.

Every share costs at least 1 core and 1Mi; a request without capacity gets the whole device.
Also what every quota-enforcing driver does with a claim's share the same way: sum its results
per device (`device_shares`) and agree on one `ShareConfig` (`claim_share_config`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Literal, TypeVar

from dra._runtime.loosening import strength
from dra.driver import AllocatedDevice, Capacity, PrepareError, RequestPolicy

MiB = 1 << 20
CORES = "100"


def whole_mib(memory: int) -> int:
    """`memory` bytes rounded down to whole MiB, so the 1Mi step divides the published range."""
    return memory - memory % MiB


def share_capacity(memory: int) -> dict[str, Capacity]:
    """``cores`` 1..100 in steps of 1 and ``memory`` 1Mi..`memory` (bytes, whole MiB) in steps of
    1Mi, each defaulting to all of it."""
    mib = f"{whole_mib(memory) // MiB}Mi"
    return {
        "cores": Capacity(CORES, RequestPolicy(default=CORES, min="1", max=CORES, step="1")),
        "memory": Capacity(mib, RequestPolicy(default=mib, min="1Mi", max=mib, step="1Mi")),
    }


PRELOAD_MODES = ("file", "env")


@dataclasses.dataclass(frozen=True)
class ShareConfig:
    """The opaque-config fields of a shared device (subclass it as a driver's `config_type`).

    Each loosens enforcement when set weaker (`dra.strength`): a claim's own config may set it
    weaker than its DeviceClass's only where the admin allowed it (`dra._runtime.loosening`)."""

    preload: Literal["file", "env"] | None = dataclasses.field(default=None, metadata=strength("env", None, "file"))
    """``file``: a read-only /etc/ld.so.preload (every process, also ones started with a clean
    environment); ``env``: LD_PRELOAD (for images whose /etc cannot take a mount, at the cost of
    processes that reset their environment); unset: the daemon's ``--preload`` default."""

    compute_limit: bool = dataclasses.field(default=True, metadata=strength(False, True))
    """False: no compute share on the claim's devices; the claim's ``cores`` are still what the
    scheduler reserved."""

    watchdog_action: Literal["report", "kill", "taint"] | None = dataclasses.field(
        default=None, metadata=strength("report", None, "taint", "kill"))
    """What the node daemon's watchdog does about this claim's unheld, over-quota or over-share
    processes (`dra._runtime.watchdog`); unset: the daemon's ``--watchdog`` action. A tenant's own claim
    cannot weaken it below its DeviceClass's (``report`` where the class says ``kill``)."""

    def validate(self) -> None:
        if self.preload is not None and self.preload not in PRELOAD_MODES:
            raise ValueError(f"preload must be one of {list(PRELOAD_MODES)} or unset, not {self.preload!r}")
        if self.watchdog_action not in (None, "report", "kill", "taint"):
            raise ValueError(f"watchdogAction must be report, kill or taint, not {self.watchdog_action!r}")


ConfigT = TypeVar("ConfigT", bound=ShareConfig)


def claim_share_config(config_type: type[ConfigT], allocated: Sequence[AllocatedDevice]) -> ConfigT:
    """The claim's one config: requests may carry their own, but the preload is per container
    (two modes refuse the claim) and any request without a compute limit lifts it for all."""
    configs = {dev.config for dev in allocated if dev.config is not None}
    preloads = {c.preload for c in configs if c.preload is not None}
    if len(preloads) > 1:
        raise PrepareError(f"the claim's configs ask for different preload modes {sorted(preloads)}; "
                           "one claim's containers load hookcore one way: use one preload value")
    return config_type(preload=next(iter(preloads), None),
                       compute_limit=all(c.compute_limit for c in configs) if configs else True)


@dataclasses.dataclass(frozen=True)
class DeviceShare:
    """One device's share in one claim: its results on that device summed."""

    device: str
    memory: int
    """Bytes the scheduler reserved."""
    cores: int
    """Percent of the device's compute, at most 100 (100: no compute limit)."""


def device_shares(allocated: Sequence[AllocatedDevice], usable_memory: Callable[[str], int],
                  noun: str = "device") -> list[DeviceShare]:
    """The claim's shares per device in allocation order (two requests can land on one device).

    A result without consumedCapacity (admin access, an old scheduler) holds the whole device:
    `usable_memory(name)` bytes and 100 cores; more memory than that refuses the claim, naming
    the device (`noun` says what it is: "GPU", "NPU").
    """
    memory: dict[str, int] = {}
    cores: dict[str, int] = {}
    for dev in allocated:
        memory[dev.device] = memory.get(dev.device, 0) + dev.consumed_capacity.get("memory", usable_memory(dev.device))
        cores[dev.device] = cores.get(dev.device, 0) + dev.consumed_capacity.get("cores", 100)
    for name, held in memory.items():
        if held > (limit := usable_memory(name)):
            raise PrepareError(f"device {name}: the claim holds {held} bytes, more than the {noun}'s {limit}")
    return [DeviceShare(name, memory[name], min(cores[name], 100)) for name in memory]
