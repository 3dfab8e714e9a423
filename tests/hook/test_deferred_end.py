"""Deferred end events (issue 26): launches record their batch's end event only where it must be,
not after every launch; a tenant who pauses without waiting pays for the pause, never less than
its work; a stream another thread destroys gets its listed ends recorded first
(hookcore/core/meter.h, "Deferred end events").

On the stub (20 us kernels: ten fit in one batch's 0.5 ms of device time; shim_client's `launch`
with 10 launches between waits) and the
virtual clock: asserted on the limiter's books in the ledger (tests/limiter_books.py) and on how
many events the stub's libcuda recorded (its test-only counter), never on host-clock rates.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import hookcore
from tests.hook.clients import client_env
from tests.limiter_books import Run, assert_held, ran, virtual_preload

if TYPE_CHECKING:
    from tests.hook.conftest import HookLibs

US = 20  # 20 us kernels
BATCH = 10  # launches between two waits (or pauses)


def launch(client: Path, libs: HookLibs, tmp_path: Path, *args: str, share: int = 30, seconds: float = 1.5,
           **env: str) -> tuple[Run, hookcore.LimiterUsage, int]:
    """shim_client `launch US 0 SECONDS 0 *args` on the virtual clock: its run, the claim's limiter,
    the events the stub recorded."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    ledger = tmp_path / "claim.ledger"
    e = client_env(libs, virtual_preload(libs.libvgpu), CUDA_DEVICE_MEMORY_SHARED_CACHE=str(ledger),
                   CUDA_DEVICE_SM_LIMIT=str(share), **env)
    proc = subprocess.run([str(client), "launch", str(US), "0", str(seconds), "0", *args], env=e,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = next(int(ln.split()[1]) for ln in proc.stdout.splitlines() if ln.startswith("RECORDS "))
    with hookcore.Ledger(ledger) as books:
        return ran(proc.stdout, US * 1000, BATCH), books.limiter(0), records


@pytest.mark.parametrize("wait", ["sync", "ctxsync"])
def test_a_default_stream_loop_records_two_events_per_batch_and_is_charged_its_work(
        client: Path, hookcore_libs: HookLibs, tmp_path: Path, wait: str) -> None:
    """A loop on the legacy stream that waits for the device every 10 launches: the end event is
    recorded at the wait (not after each launch), so a batch costs two records, and the limiter
    charges exactly the device time, holding the share as on a created stream."""
    got, books, records = launch(client, hookcore_libs, tmp_path, "null", wait)
    assert_held(books, [got], 30)
    batches = -(-got.count // BATCH)
    assert records <= 2 * batches + 2, (records, got)


def test_a_created_stream_loop_records_two_events_per_batch_too(client: Path, hookcore_libs: HookLibs,
                                                                tmp_path: Path) -> None:
    """A stream the application made defers its end event like a default stream: its batch is
    listed, so that another thread's destroy or capture of the stream records the end first."""
    got, books, records = launch(client, hookcore_libs, tmp_path, "stream", "sync")
    assert_held(books, [got], 30)
    batches = -(-got.count // BATCH)
    assert records <= 2 * batches + 2, (records, got)


def test_a_stream_destroyed_by_another_thread_is_charged_its_work(client: Path, hookcore_libs: HookLibs,
                                                                  tmp_path: Path) -> None:
    """Hostile: a thread launches 10 kernels onto a stream it made and does not wait; another thread
    destroys the stream (a late record on it is refused here, and undefined on a real driver); the
    first thread pauses, then launches elsewhere. The destroy records the listed batch's end on the
    stream first, so the batch is charged its work, exactly; without that its close could not
    record on the stream and would charge its host span, the pause included (15 kernels' time)."""
    ledger = tmp_path / "claim.ledger"
    e = client_env(hookcore_libs, virtual_preload(hookcore_libs.libvgpu), CUDA_DEVICE_MEMORY_SHARED_CACHE=str(ledger),
                   CUDA_DEVICE_SM_LIMIT="50", HOOKCORE_LIMITER_CHARGE="elapsed")
    proc = subprocess.run([str(client), "streamgone", str(US)], env=e, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with hookcore.Ledger(ledger) as books:
        usage = books.limiter(0)
    # the stream's 10 kernels, exactly, and the two launches after it, at most (the last batch may stay open)
    assert 10 * US * 1000 <= usage.charged_ns <= 12 * US * 1000 + 1_000, usage


def test_a_pause_without_a_wait_is_charged_not_given_away(client: Path, hookcore_libs: HookLibs,
                                                          tmp_path: Path) -> None:
    """Hostile: 10 launches, then a host pause with no synchronize or query, again and again (the
    end event of every batch is still unrecorded when it closes). Each such batch is timed to its
    close: its window holds its work and the pause. After three of them the process records every
    end event after its launch again, and the rest is timed to its work. (The contention estimate,
    off here, would charge a late window no less than the lowest cost its work was ever seen at.)"""
    pause_ns = 20_000_000  # 20 ms after each 0.2 ms of work
    got, books, records = launch(client, hookcore_libs, tmp_path, "null", f"pause:{pause_ns // 1000}", seconds=2.0,
                                 HOOKCORE_LIMITER_CHARGE="elapsed")
    rounding = got.device_ns // 1_000_000 + 1_000
    late = 3  # HK_METER_LATE_MAX
    assert books.charged_ns == books.elapsed_ns, books
    # never less than the work (the last batch, open at exit, aside) and the three pauses ...
    assert books.charged_ns >= got.device_ns - got.batch_ns + late * (pause_ns - got.batch_ns), (books, got)
    # ... and no more than that
    assert books.charged_ns <= got.device_ns + late * pause_ns + rounding, (books, got)
    # from the third on, an end event after every launch
    assert records >= got.count - late * BATCH, (records, got)


def test_a_thread_that_exits_without_a_wait_is_charged_its_work(client: Path, hookcore_libs: HookLibs,
                                                                tmp_path: Path) -> None:
    """Hostile: a thread launches 10 kernels onto the legacy stream (its end event deferred) and exits
    without waiting for them. Its batch closes as the thread exits, with the end recorded then, and
    is charged its work when another thread of the process next launches."""
    ledger = tmp_path / "claim.ledger"
    e = client_env(hookcore_libs, virtual_preload(hookcore_libs.libvgpu), CUDA_DEVICE_MEMORY_SHARED_CACHE=str(ledger),
                   CUDA_DEVICE_SM_LIMIT="50")
    proc = subprocess.run([str(client), "exitlaunch", str(US), str(BATCH)], env=e, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with hookcore.Ledger(ledger) as books:
        usage = books.limiter(0)
    work = BATCH * US * 1000
    assert work <= usage.charged_ns <= work + 1_000, usage
