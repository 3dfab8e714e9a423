"""The capacities of a shared device, as the framework's quotas read them: ``cores`` (percent of
the device's compute time) and ``memory`` (bytes), both consumable by several claims.

Every share costs at least 1 core and 1Mi; a request without capacity gets the whole device.
"""

from __future__ import annotations

from dra.driver import Capacity, RequestPolicy

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
