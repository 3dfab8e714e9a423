"""The strict cap's measured defaults per GPU model: its full-load clock and clock elasticity.

A strict claim is charged each batch's cost at the GPU's full-load clock, scaled by how much of the
clock's boost its work turns into speed, the clock elasticity (hookcore/README.md, *Strict cap*).
Both belong to the GPU model at its power limit, and ``bench/shares_h200.py`` measures them. Where
neither a claim's config nor the daemon's settings give one, a GPU of a model listed here that runs
at the power limit it was measured at gets the measured value, so a strict claim is right out of the
box. A GPU whose power limit is different (an admin's ``nvidia-smi -pl``) or unknown gets none:
its full-load clock is not the table's, and the hook falls back to its own defaults.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the table itself needs no NVML: bench/shares_h200.py reads it on the GPU machine
    from drivers.hami_core_gpu import nvml

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Measured:
    """One GPU model's strict-cap constants, measured with a bf16 4096^3 matmul at `power_limit_w`."""

    full_load_mhz: int  # the SM clock the matmul settles at when it runs without pause
    clock_elasticity: float  # the matmul's time's elasticity to the SM clock (hookcore's model)
    power_limit_w: int  # the power limit in force when measured
    source: str  # where the numbers are


MEASURED: dict[str, Measured] = {
    # Two sittings on two machines: 2026-12-01, 204 us per matmul at 1500 MHz / 690 W and 181 us at
    # 1980 MHz (181 / 204 = 1 - e (1 - 1500 / 1980): 0.466); 2026-12-06, native 212 us at 1515 MHz,
    # the default 30% and 50% shares 177 us at 1980 MHz (0.70), and strict at 0.47 ran +2.8 / +4.9
    # over 50 / 70. Between them: 0.58 puts each sitting's strict runs within 3 points (arithmetic).
    "NVIDIA H200": Measured(1500, 0.58, 700, "bench/results/h200-2026-12-0[16]*"),
    # Native matmul medians 1395, 1410 and 1380 MHz in three sittings; elasticity in the hook's model
    # 0.46, 0.54 and 0.455 (the first two were read as 0.374 and 0.45 by the bench's old formula, and
    # 0.4 was this table's value: strict then ran +0.9..+3.6 points over caps where the clock boosts).
    "NVIDIA H100 80GB HBM3": Measured(1400, 0.5, 700, "bench/results/h100-2026-12-0[56]-shares*"),
}

_logged: set[str] = set()


def for_gpu(gpu: nvml.Gpu) -> Measured | None:
    """The measured defaults for `gpu`, or None: its model is not listed, or it runs at another (or an
    unknown) power limit than the one measured (said once per GPU, with the settings that fix it)."""
    measured = MEASURED.get(gpu.product_name)
    if measured is None:
        return None
    if gpu.power_limit_w == measured.power_limit_w:
        return measured
    if gpu.uuid not in _logged:
        _logged.add(gpu.uuid)
        log.warning("strict-cap defaults of this GPU model not used: its power limit is unknown or not the one"
                    " measured at", extra={
            "gpu": gpu.uuid, "model": gpu.product_name, "power_limit_w": gpu.power_limit_w,
            "measured_at_w": measured.power_limit_w,
            "fix": "measure with bench/shares_h200.py and set daemon.settings.fullLoadClockMhz and clockElasticity"})
    return None
