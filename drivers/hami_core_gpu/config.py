"""The driver's opaque config (a claim's or DeviceClass's ``config[].opaque.parameters``):

    apiVersion: hami-core-gpu.project-hami.io/v1alpha1
    kind: GpuConfig
    preload: env          # how hookcore is loaded: file (/etc/ld.so.preload, the default) or env
    computeLimit: false   # no compute share: the claim's processes time-slice the GPU freely
    computeMode: strict   # cores = a share of full-load throughput, not of GPU time (below 100 cores)
    fullLoadClockMhz: 1500  # strict: the GPU's sustained SM clock under full load (default: the daemon's)
    clockElasticity: 0.45  # strict: the GPU model's measured clock elasticity (default: the daemon's, else 1)
    sharing: mps          # the claim's processes are clients of the GPU's MPS server (`mps.py`):
                          # SMs capped at `cores` percent by MPS, pinned memory at `memory`
    priority: high        # HAMi's nvidia.com/priority 0: normal claims on the GPU wait while this
                          # claim has work (default normal; high from a DeviceClass, or loosening)

Decoded strictly by the framework (`dra.decode_config`): unknown fields, wrong types or a
wrong apiVersion/kind fail the claim (and, with the webhook, the `kubectl apply`) with a message
naming the field. The memory quota is always enforced; it is what the scheduler accounted.

Every field loosens enforcement when set weaker than the DeviceClass's config says (a higher
clock or a lower elasticity charges a boosted batch less: hookcore/core/meter.c; ``sharing: mps``
hands the SM cap to an environment variable the tenant sets itself), so a claim's own config may
do so only where the admin allowed it (`dra._runtime.loosening`, ``daemon.allowClaimLoosening``).

A claim's requests are merged by the same order (`claim_config`, `dra.device_share_configs`):
each GPU is held by the strictest mode, lowest full-load clock and highest clock elasticity of the
requests on it, and normal priority unless every request on it is high.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

import dra

API_VERSION = "hami-core-gpu.project-hami.io/v1alpha1"
MAX_MHZ = 99999  # what hookcore's parser takes
ELASTICITY_RULE = "a number from 0 to 1 with at most 3 decimals (H100: 0.5)"  # what hookcore's parser takes


def is_elasticity(value: object) -> bool:
    """A clock elasticity hookcore's parser takes (``HOOKCORE_COMPUTE_ELASTICITY_<i>``, x1000 exactly):
    0..1 with at most 3 decimals, so what the admin wrote is what is charged, never a rounding of it."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        return False  # NaN fails the comparison too
    return abs(value * 1000 - round(value * 1000)) < 1e-9


def _strict(cls_config: object) -> bool:
    return getattr(cls_config, "compute_mode", None) == "strict"


@dataclasses.dataclass(frozen=True)
class GpuConfig(dra.ShareConfig):
    """A GPU claim's config: `dra.ShareConfig`'s ``preload`` and ``computeLimit`` (``false`` is HAMi's
    ``CUDA_DISABLE_CONTROL`` for compute), and the compute mode."""

    compute_mode: Literal["share", "strict"] | None = dataclasses.field(
        default=None, metadata=dra.strength((None, "share"), "strict"))
    """``share`` (unset): ``cores`` percent of GPU time (an idle GPU boosts its clock, so a compute-bound
    loop gets more than that of full-load throughput); ``strict``: ``cores`` percent of full-load
    throughput (each batch charged at the full-load clock; bandwidth-bound work then gets less:
    hookcore/README.md, "Two meanings of 30%"). Applies to shares below 100 cores."""

    full_load_clock_mhz: int | None = dataclasses.field(default=None, metadata=dra.strength(
        weaker="higher", when=_strict))
    """Strict only: the GPU's sustained SM clock under full load in MHz (H200: ~1500); unset: the
    daemon's ``fullLoadClockMhz`` setting, else the hook's default (NVML's default application
    clock, which on some GPUs is the boost clock: then strict changes nothing)."""

    clock_elasticity: float | None = dataclasses.field(default=None, metadata=dra.strength(
        weaker="lower", when=_strict))
    """Strict only: the GPU model's clock elasticity (0: memory-bound, 1: compute-bound; at most 3
    decimals), measured for a power-bound matmul by ``bench/shares_h200.py`` (H100: ~0.5). The hook
    charges it where the claim's own batches cannot show it (the clock never moves under its load);
    unset: the daemon's ``clockElasticity`` setting, else the hook's 1 (the whole boost is charged,
    so a strict 30% of a bf16 matmul gets ~25% on an H100). Lower charges a boosted batch less."""

    sharing: Literal["mps"] | None = dataclasses.field(default=None, metadata=dra.strength("mps", None, claim_wide=True))
    """``mps``: run the claim's processes as MPS clients of the GPU's one MPS server (kernels of
    several claims run at once; SMs capped per process by MPS at ``cores`` percent); unset: the
    hook time-slices. One GPU per MPS claim (a process talks to one MPS server). Weaker than
    unset: MPS's SM cap is ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` in the container's environment,
    which the tenant controls, and the MPS server is shared with other tenants; so it is
    honoured from a DeviceClass's config, and from a claim's own only with allowClaimLoosening."""

    priority: Literal["high", "normal"] | None = dataclasses.field(
        default=None, metadata=dra.strength("high", (None, "normal")))
    """``high``: on a GPU where this claim has work, normal claims wait (they use the GPU when it has
    none); ``normal`` (unset): the claim waits for high ones. HAMi's ``nvidia.com/priority`` (0 high, 1
    low) maps to it. A loosening (it takes time from other tenants): honoured from a DeviceClass's
    config, from a claim's own only with allowClaimLoosening. Per GPU: normal unless every request on it
    says high. The hook holds it through the GPU's priority board (hookcore/core/priority.h)."""

    def validate(self) -> None:
        super().validate()
        if self.priority not in (None, "high", "normal"):
            raise ValueError(f"priority must be high or normal, not {self.priority!r}")
        if self.sharing not in (None, "mps"):
            raise ValueError(f"sharing must be mps or unset, not {self.sharing!r}")
        if self.sharing == "mps" and self.compute_mode == "strict":
            raise ValueError("computeMode: strict is the hook's compute limit; under sharing: mps the SM percentage"
                             " is the limit: drop one of them")
        if self.compute_mode not in (None, "share", "strict"):
            raise ValueError(f"computeMode must be share or strict, not {self.compute_mode!r}")
        if self.full_load_clock_mhz is not None:
            if self.compute_mode != "strict":
                raise ValueError("fullLoadClockMhz applies to computeMode: strict only")
            if not 1 <= self.full_load_clock_mhz <= MAX_MHZ:
                raise ValueError(f"fullLoadClockMhz must be 1..{MAX_MHZ} MHz, not {self.full_load_clock_mhz}")
        if self.clock_elasticity is not None:
            if self.compute_mode != "strict":
                raise ValueError("clockElasticity applies to computeMode: strict only")
            if not is_elasticity(self.clock_elasticity):
                raise ValueError(f"clockElasticity must be {ELASTICITY_RULE}, not {self.clock_elasticity}")


def claim_config(allocated: Sequence[dra.AllocatedDevice]) -> GpuConfig:
    """The claim's one config, the strictest of its requests' (`dra.claim_share_config`: a strict
    mode over share, the lowest full-load clock, the highest clock elasticity); every request must
    say the same ``sharing`` (a claim's containers are MPS clients or not; the strictest, unset,
    would silently drop a request's MPS)."""
    sharing = {dev.config.sharing if isinstance(dev.config, GpuConfig) else None for dev in allocated}
    if len(sharing) > 1:
        raise dra.PrepareError(f"the claim's requests ask for different sharing {sorted(map(str, sharing))}; one"
                               " claim's containers are MPS clients or not: give every request sharing: mps")
    return dra.claim_share_config(GpuConfig, allocated)
