"""What the compute limiter's stub tests assert (issue 26): the limiter's own books in the claim's
ledger (:class:`hookcore.LimiterUsage`: credit granted, device time charged, time throttled) against
the device time the stub ran -- not a rate on the host's clock, which a busy machine moves (a
preempted client submits less; CI once read 29.1% for a 34.9% expectation).

Two clocks:

- virtual (:func:`virtual_preload`: ``hookcore/stub/fake_clock.c`` preloaded before the hook): the
  client, the meter, the limiter and the stub engine read a clock that only waits move, so a run
  is the same sequence of submissions, charges and throttle waits on any machine. Every bound
  below holds, in both directions.
- the host's (``virtual=False``): only the bounds that load cannot break -- it can only make the
  client submit less, and make a batch look longer than its work, which charges more.

The slack of each bound comes from the limiter's parameters, not from tuning:

- the burst (``hookcore.LIMITER_BURST_NS``, 10 ms): credit a bucket may bank;
- a batch (:attr:`Run.batch_ns`): the device time a client submits between two waits for its
  work (10 or 16 submissions, below the meter's cap of 32 per batch; a synchronous call waits
  every time and its batch closes after 2 ms, hookcore/core/meter.h). The limiter admits a batch on
  a non-negative balance and charges it when it is done, so per process at most one batch runs on
  credit not yet charged, one more is admitted on the last balance, and the last one is never
  charged (it is still open when the process exits).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import hookcore


def fake_clock() -> Path:
    """build/stub/libfakeclock.so (``make -C hookcore libs`` builds it with the stubs)."""
    return hookcore.stub_dir() / "libfakeclock.so"


def virtual_preload(*libs: Path | str) -> str:
    """LD_PRELOAD for a client on the virtual clock: the clock first, so it is what the hook,
    the stub and the client resolve."""
    return " ".join([str(fake_clock()), *(str(lib) for lib in libs)])


@dataclass(frozen=True)
class Run:
    """One client's run as it reports it ("RAN <completed> <ns>") and the stub's cost of its work."""

    count: int  # submissions completed
    elapsed_ns: int  # on the client's clock
    work_ns: int  # device time of one submission, as the stub engine runs it
    batch: int  # submissions between two waits for their completion: at most one meter batch

    @property
    def device_ns(self) -> int:
        return self.count * self.work_ns

    @property
    def batch_ns(self) -> int:
        return self.batch * self.work_ns


def ran(out: str, work_ns: int, batch: int) -> Run:
    """The client's "RAN" line (shim_client, acl_client, hostile) as a :class:`Run`."""
    line = next((ln for ln in out.splitlines() if ln.startswith("RAN ")), None)
    assert line is not None, f"no RAN line in the client's output:\n{out}"
    count, ns = line.split()[1:3]
    return Run(int(count), int(float(ns)), work_ns, batch)


def assert_held(usage: hookcore.LimiterUsage, runs: Sequence[Run], share: int, *, charge: float = 1.0,
                span_ns: int | None = None, virtual: bool = True) -> float:
    """Assert that the claim's limiter (`usage`, read after `runs` ended) held them to `share`
    percent and return the percent of device time they got over the span.

    `charge`: what the limiter charges per ns of device time (a strict cap's clock ratio; 1 else).
    `span_ns`: the time the runs had, on the clock the limiter read; default the longest run's
    (one virtual clock); on the host's clock, the test's own measure around them (longer than
    the limiter's window, which only loosens the bounds).
    """
    span = span_ns if span_ns is not None else max(r.elapsed_ns for r in runs)
    device = sum(r.device_ns for r in runs)
    batches = sum(r.batch_ns for r in runs)
    rounding = device // 1_000_000 + 1_000  # the event API reports float milliseconds
    books = (usage, [(r.count, r.elapsed_ns) for r in runs], span)
    assert usage.active and usage.share == share, books
    # the refills granted at most the share of the time (each refill rounds down)
    assert usage.granted_ns <= share * span // 100, books
    # every batch the stub ran was charged, each process's last (open at its exit) aside
    assert usage.charged_ns >= charge * (device - batches) - rounding, books
    # the limiter admitted no device time past its grant, but the batches in flight
    assert device <= usage.granted_ns / charge + 2 * batches + rounding, books
    # and it held the claim back: it asked for more than its share, and waited
    assert usage.throttled_ns > 0, books
    if virtual:
        # no host time hides between a batch's events: the charge is the device time, exactly
        assert usage.charged_ns <= charge * device + rounding, books
        return assert_share(runs, share, charge=charge)
    return 100 * device / span


def assert_share(runs: Sequence[Run], share: int, *, charge: float = 1.0) -> float:
    """On the virtual clock, where no credit goes unused: the runs got `share` / `charge` percent
    of the device's time, within two batches and the burst (for a limiter whose books are out of
    the test's reach: a bucket of the process's own). Returns the percent."""
    span = max(r.elapsed_ns for r in runs)
    got = 100 * sum(r.device_ns for r in runs) / span
    slack = 100 * (2 * sum(r.batch_ns for r in runs) + hookcore.LIMITER_BURST_NS) / span
    assert abs(got - share / charge) <= slack, (got, share / charge, slack, runs)
    return got


def assert_at_most(runs: Sequence[Run], share: int, span_ns: int) -> float:
    """On the host's clock, the bound its load cannot break: a bucket that starts empty and grants
    `share` percent of the `span_ns` the runs had let through no more than that, but the batches
    in flight (admitted on the last balance, charged after). Returns the percent."""
    device = sum(r.device_ns for r in runs)
    assert device <= share * span_ns // 100 + 2 * sum(r.batch_ns for r in runs), (device, share, span_ns, runs)
    return 100 * device / span_ns
