"""The seam between the gRPC servers and the claim path.

The servers translate wire messages (v1 or v1beta1) to these types and call one `ClaimHandler`;
the prepare path (`dra._runtime.prepare`) implements it. Both sides are version-free.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Protocol

from dra._runtime.checkpoint import DeviceRecord
from dra.driver import ClaimRef, main_request


@dataclasses.dataclass(frozen=True)
class PreparedResult:
    """One device of a prepared claim as kubelet sees it (the wire `Device`)."""

    request_names: tuple[str, ...]
    pool: str
    device: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None

    @classmethod
    def of(cls, record: DeviceRecord) -> PreparedResult:
        """A prepared device's answer to kubelet, from its checkpoint record."""
        return cls((main_request(record.request),), record.pool, record.device, record.cdi_ids, record.share_id)


@dataclasses.dataclass(frozen=True)
class ClaimOutcome:
    """Per-claim answer: devices on success, a non-empty `error` on failure (devices then ignored)."""

    devices: tuple[PreparedResult, ...] = ()
    error: str = ""


class ClaimHandler(Protocol):
    """Thread-safe; called concurrently from gRPC worker threads and possibly other processes."""

    def prepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, ClaimOutcome]:
        """One entry per claim UID in `claims`; one bad claim never fails the others."""
        ...

    def unprepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        """Claim UID -> error message ("" on success); unknown UIDs succeed."""
        ...
