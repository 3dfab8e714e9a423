"""A daemon's Prometheus exposition as the samples `dra top` reads."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping

# The series `dra top` reads (dra._runtime.ledger_metrics, dra._runtime.watchdog.metrics).
CLAIM_MEMORY_USED = "dra_claim_memory_used_bytes"
CLAIM_MEMORY_PEAK = "dra_claim_memory_peak_bytes"
CLAIM_MEMORY_LIMIT = "dra_claim_memory_limit_bytes"
CLAIM_COMPUTE_LIMIT = "dra_claim_compute_limit_percent"
CLAIM_PROCESSES = "dra_claim_processes"
CLAIM_COMPUTE_SECONDS = "dra_claim_compute_seconds_total"
CLAIM_OVER_QUOTA = "dra_claim_memory_over_quota_bytes"
CLAIM_OVER_SHARE = "dra_claim_compute_over_share_percent"
DEVICE_PROCESSES = "dra_device_processes"
DEVICE_UNHELD = "dra_device_processes_unheld"
DEVICE_UNVERIFIED = "dra_device_processes_unverified"
VERDICTS = "dra_watchdog_verdicts_total"
READ = frozenset({CLAIM_MEMORY_USED, CLAIM_MEMORY_PEAK, CLAIM_MEMORY_LIMIT, CLAIM_COMPUTE_LIMIT, CLAIM_PROCESSES,
                  CLAIM_COMPUTE_SECONDS, CLAIM_OVER_QUOTA, CLAIM_OVER_SHARE, DEVICE_PROCESSES, DEVICE_UNHELD,
                  DEVICE_UNVERIFIED, VERDICTS})


@dataclasses.dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


def parse(text: str) -> list[Sample]:
    """The samples of `text` (Prometheus text format) that `dra top` reads; ValueError when the
    text is not an exposition. NaN and infinite values are left out."""
    from prometheus_client.parser import text_string_to_metric_families

    out = []
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name in READ and math.isfinite(s.value):
                    out.append(Sample(s.name, dict(s.labels), float(s.value)))
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise ValueError(f"not a Prometheus exposition: {exc}") from exc
    return out


def by_name(samples: Iterable[Sample], name: str) -> list[Sample]:
    return [s for s in samples if s.name == name]
