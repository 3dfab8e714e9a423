"""The capacities of a shared device, as the framework's quotas read them: ``cores`` (percent of
the device's compute time) and ``memory`` (bytes), both consumable by several claims.

Every share costs at least 1 core and 1Mi; a request without capacity gets the whole device.
Also what every quota-enforcing driver does with a claim's share the same way: sum its results
per device (`device_shares`) and hold each device by the strictest of its requests' configs
(`claim_share_config`, `device_share_configs`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

from dra._runtime.loosening import Conflict, strength, strictest
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
    weaker than its DeviceClass's only where the admin allowed it (`dra._runtime.loosening`).
    The same order merges a claim's requests (`claim_share_config`, `device_share_configs`)."""

    preload: Literal["file", "env"] | None = dataclasses.field(
        default=None, metadata=strength("env", None, "file", claim_wide=True))
    """``file``: a read-only /etc/ld.so.preload (every process, also ones started with a clean
    environment); ``env``: LD_PRELOAD (for images whose /etc cannot take a mount, at the cost of
    processes that reset their environment); unset: the daemon's ``--preload`` default. One per
    claim (its containers load the hook one way): the strongest of its requests'."""

    compute_limit: bool = dataclasses.field(default=True, metadata=strength(False, True))
    """False: no compute share on the claim's devices; the claim's ``cores`` are still what the
    scheduler reserved. Per device: lifted only where every request on the device says false."""

    watchdog_action: Literal["report", "kill", "taint"] | None = dataclasses.field(
        default=None, metadata=strength("report", None, "taint", "kill", claim_wide=True, admin_only=("taint",)))
    """What the node daemon's watchdog does about this claim's unheld, over-quota or over-share
    processes (`dra._runtime.watchdog`); unset: the daemon's ``--watchdog`` action. A tenant's own
    claim cannot weaken it below its DeviceClass's (``report`` where the class says ``kill``), and
    cannot choose ``taint`` at all (a taint keeps every tenant off a shared device): that comes
    from a DeviceClass's config or the daemon's flag only. ``kill`` acts on the claim's own
    processes, so a claim may always choose it. Claim-wide: the strongest of its requests'
    (report < taint < kill)."""

    def validate(self) -> None:
        if self.preload is not None and self.preload not in PRELOAD_MODES:
            raise ValueError(f"preload must be one of {list(PRELOAD_MODES)} or unset, not {self.preload!r}")
        if self.watchdog_action not in (None, "report", "kill", "taint"):
            raise ValueError(f"watchdogAction must be report, kill or taint, not {self.watchdog_action!r}")


ConfigT = TypeVar("ConfigT", bound=ShareConfig)


def _labelled(config_type: type[ConfigT], allocated: Sequence[AllocatedDevice]) -> list[tuple[str, ConfigT]]:
    """(request on device, config) per result; a result without config holds the defaults."""
    return [(f"request {dev.request!r} on {dev.device}", dev.config if dev.config is not None else config_type())
            for dev in allocated]


def _merged(config_type: type[ConfigT], values: dict[str, Any], where: str) -> ConfigT:
    config = config_type(**values)
    try:
        config.validate()
    except ValueError as e:
        raise PrepareError(f"{where}: the strictest of its requests' configs is not a valid config: {e}; give the"
                           " requests configs that agree") from None
    return config


def _shown(v: Any) -> str:
    return "unset" if v is None else str(v)


def _strictest(labelled: Sequence[tuple[str, ConfigT]], scope: Literal["device", "claim"] | None,
               where: str) -> dict[str, Any]:
    try:
        return strictest(labelled, scope)
    except Conflict as e:
        raise PrepareError(f"{where}: its requests' configs have no strictest {e.field} ("
                           f"{'; '.join(f'{label}: {_shown(v)}' for label, v in e.values)}): set the same {e.field} in every"
                           " request's config (unset means the daemon's value, which cannot be compared)") from None


def claim_share_config(config_type: type[ConfigT], allocated: Sequence[AllocatedDevice]) -> ConfigT:
    """The claim's one config: the strictest of every request's config, field by field (`dra.strength`
    orders them; `dra._runtime.loosening.strictest`). A request without config counts as the
    defaults, so no request loosens another: each request's config is at least its DeviceClass's
    (prepare's loosening rule), and the merge is at least each of them. Two preload modes give
    ``file`` (the strongest: a request whose image needs ``env`` fails at its container's start,
    never silently unhooked). Claim-wide fields (``preload``, ``watchdogAction``) are this
    config's; what holds each device is `device_share_configs`'s."""
    if not allocated:
        return config_type()
    return _merged(config_type, _strictest(_labelled(config_type, allocated), None, "the claim"), "the claim")


def device_share_configs(config_type: type[ConfigT], allocated: Sequence[AllocatedDevice]) -> dict[str, ConfigT]:
    """Per device (allocation order), the config that holds it: for each per-device field the
    strictest value of every request on that device, for each claim-wide one the claim's
    (`claim_share_config`). A device's compute limit is lifted only where every request on it
    lifts it; otherwise the hook caps the device at the summed cores of all its requests
    (`device_shares`): that is what the scheduler reserved for the claim there, so no other
    tenant's share shrinks, and a request whose class said ``computeLimit: false`` does not
    lift the limit of a request whose class did not."""
    labelled = _labelled(config_type, allocated)
    wide = _strictest(labelled, "claim", "the claim") if labelled else {}
    out: dict[str, ConfigT] = {}
    for name in dict.fromkeys(dev.device for dev in allocated):
        mine = [lc for dev, lc in zip(allocated, labelled, strict=True) if dev.device == name]
        where = f"device {name}"
        out[name] = _merged(config_type, {**_strictest(mine, "device", where), **wide}, where)
    return out


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
