"""Test doubles for the kubelet seam: a `ClaimHandler` that records every call, and a short
temporary dir for unix sockets."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from dra._runtime.kubelet.handler import ClaimOutcome, PreparedResult
from dra.driver import ClaimRef


@contextlib.contextmanager
def short_tmpdir(prefix: str = "dra") -> Iterator[Path]:
    """A temporary dir under /tmp with a short path, so socket paths stay under 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class RecordingHandler:
    """A `ClaimHandler` at the kubelet seam for tests of the gRPC layer: records every call.

    By default each claim gets one device (pool "pool", device ``dev-<uid>``, request "req",
    CDI ID ``example.com/claim=<uid>``, share ID ``share-<uid>``); `outcomes` overrides per UID,
    `unprepare_errors` sets unprepare answers per UID (others succeed), `delay` sleeps per call,
    `barrier` makes each prepare wait there for as many other calls as it has parties (proof that
    calls are served at once, on a machine of any speed), `fail` makes every call raise it.
    """

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.outcomes: dict[str, ClaimOutcome] = {}
        self.unprepare_errors: dict[str, str] = {}
        self.omit: set[str] = set()  # UIDs left out of answers (a buggy handler)
        self.fail: Exception | None = None
        self.barrier: threading.Barrier | None = None
        self.prepare_calls: list[list[ClaimRef]] = []
        self.unprepare_calls: list[list[ClaimRef]] = []
        self._lock = threading.Lock()

    @staticmethod
    def default_outcome(uid: str) -> ClaimOutcome:
        return ClaimOutcome(
            devices=(
                PreparedResult(
                    request_names=("req",),
                    pool="pool",
                    device=f"dev-{uid}",
                    cdi_device_ids=(f"example.com/claim={uid}",),
                    share_id=f"share-{uid}",
                ),
            )
        )

    def prepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, ClaimOutcome]:
        with self._lock:
            self.prepare_calls.append(list(claims))
        if self.barrier is not None:
            self.barrier.wait()
        if self.delay:
            time.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        return {
            c.uid: self.outcomes.get(c.uid) or self.default_outcome(c.uid) for c in claims if c.uid not in self.omit
        }

    def unprepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        with self._lock:
            self.unprepare_calls.append(list(claims))
        if self.delay:
            time.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        return {c.uid: self.unprepare_errors.get(c.uid, "") for c in claims if c.uid not in self.omit}
