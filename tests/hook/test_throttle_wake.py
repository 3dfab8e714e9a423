"""A thread the compute limiter stopped wakes to a burst, not to one batch (issue 26;
hookcore/core/limiter.h, ``HK_LIMITER_WAKE_NS``).

A host-paced loop pays for each wake inside the window it is charged (cold caches, an idle device's
first launches): woken once per batch at a 10% share on the H200 it was charged ~1.3x its steady
device time per step. So a thread in debt sleeps until the debt is repaid and the wake's credit is
there, and then runs several batches before it waits again. The share is the same; the waits are
fewer and longer.

On the stub (20 us kernels, 10 between two waits for them: 200 us batches) and the virtual clock,
asserted on the limiter's books: the share held (tests/limiter_books.py), and how many times the
claim's threads waited against the work charged between the waits.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import hookcore
from tests.hook.clients import client_env
from tests.limiter_books import assert_held, ran, virtual_preload

if TYPE_CHECKING:
    from tests.hook.conftest import HookLibs

US = 20
BATCH = 10


@pytest.mark.parametrize("share", [10, 50])
def test_a_throttled_thread_wakes_to_a_burst_and_the_share_holds(client: Path, hookcore_libs: HookLibs,
                                                                  tmp_path: Path, share: int) -> None:
    """Every wait buys the wake's credit of work before the next: at most one wait per 2 ms charged
    (woken at a repaid debt, the loop waited once per 200 us batch: 10x as often)."""
    ledger = tmp_path / "claim.ledger"
    e = client_env(hookcore_libs, virtual_preload(hookcore_libs.libvgpu), CUDA_DEVICE_MEMORY_SHARED_CACHE=str(ledger),
                   CUDA_DEVICE_SM_LIMIT=str(share))
    proc = subprocess.run([str(client), "launch", str(US), "0", "2", "0", "stream", "sync"], env=e,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = ran(proc.stdout, US * 1000, BATCH)
    with hookcore.Ledger(ledger) as books:
        usage = books.limiter(0)
    assert_held(usage, [got], share)
    assert usage.throttles >= 1, usage
    # between two waits the thread ran at least the wake's credit; the last wait may end the run
    assert (usage.throttles - 1) * hookcore.LIMITER_WAKE_NS <= usage.charged_ns, usage
    # and it did wait in bursts: fewer waits than a tenth of its batches
    assert usage.throttles * BATCH * 10 <= got.count, (usage, got)
