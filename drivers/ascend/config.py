"""The driver's opaque config (a claim's or DeviceClass's ``config[].opaque.parameters``):

    apiVersion: ascend.project-hami.io/v1alpha1
    kind: NpuConfig
    preload: env          # how hookcore's libvnpu.so is loaded: file (/etc/ld.so.preload, the default) or env
    computeLimit: false   # no compute share: the claim's processes time-slice the NPU freely

Decoded strictly by the framework (`dra.decode_config`): unknown fields, wrong types or a wrong
apiVersion/kind fail the claim (and, with the webhook, the ``kubectl apply``) with a message
naming the field. HAMi's ``NpuConfig`` fields ``sharing`` and ``vnpuSpec`` (hardware vNPU
templates, TimeSlicing/SpacePartitioning strategies) are not supported and are refused by name,
so a claim written for HAMi's traditional mode fails loudly instead of running unshared. The
memory quota is always enforced; it is what the scheduler accounted.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

API_VERSION = "ascend.project-hami.io/v1alpha1"
PRELOAD_MODES = ("file", "env")


@dataclasses.dataclass(frozen=True)
class NpuConfig:
    preload: Literal["file", "env"] | None = None
    """``file``: a read-only /etc/ld.so.preload (every process, also ones started with a clean
    environment); ``env``: LD_PRELOAD (for images whose /etc cannot take a mount, at the cost of
    processes that reset their environment); unset: the daemon's ``--preload`` default."""

    compute_limit: bool = True
    """False: no compute share on the claim's NPUs; the claim's ``cores`` are still what the
    scheduler reserved."""

    def validate(self) -> None:
        if self.preload is not None and self.preload not in PRELOAD_MODES:
            raise ValueError(f"preload must be one of {list(PRELOAD_MODES)} or unset, not {self.preload!r}")
