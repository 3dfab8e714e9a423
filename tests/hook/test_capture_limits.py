"""A stream capture held open is no way around the compute share, and the share's metering does not
break the application's capture.

Before (found 2026-12-06): while any capture was in progress anywhere in the process, the meter
stood aside for every stream (event queries are prohibited during a global-mode capture). A tenant
that began a capture on a side stream and never ended it ran unmetered on every other stream. Now
only the stream being captured is left alone (its work becomes a graph, charged when launched), and
the CUDA shim makes its event calls in the relaxed capture interaction mode, which the stub
(hookcore/stub/cuda_stub_engine.c) polices as CUDA does: a prohibited call fails and invalidates the
capture, whose end then returns CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (901).

Asserted on the limiter's books and the virtual clock (tests/limiter_books.py).
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

UUID0 = "GPU-57554201-0000-4000-8000-000000000000"
KERNEL_US = 1000
BATCH = 10  # the client never waits for its kernels; the meter's in-flight bound is a few batches of one


def hold(client: Path, libs: HookLibs, tmp: Path, mode: int, *extra: str,
         **env: str) -> tuple[int, Run, hookcore.LimiterUsage]:
    e = client_env(libs, virtual_preload(libs.libvgpu), HOOKCORE_DEVICE_UUID_0=UUID0,
                   HOOKCORE_LEDGER=str(tmp / "l"), **env)
    proc = subprocess.run([str(client), "holdcapture", str(mode), str(KERNEL_US), "1.5", *extra], env=e,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("CAPTURE "))
    with hookcore.Ledger(tmp / "l") as ledger:
        return int(line.split()[1]), ran(proc.stdout, KERNEL_US * 1000, BATCH), ledger.limiter(0)


@pytest.mark.parametrize(("mode", "who"), [(0, "other"), (1, "other"), (2, "other"), (0, "same"), (1, "same")],
                         ids=["global-other-thread", "thread-local-other-thread", "relaxed-other-thread",
                              "global-same-thread", "thread-local-same-thread"])
def test_a_held_capture_does_not_lift_the_share(client: Path, hookcore_libs: HookLibs, tmp_path: Path,
                                                mode: int, who: str) -> None:
    extra = ("same",) if who == "same" else ()
    end_rc, got, books = hold(client, hookcore_libs, tmp_path, mode, *extra, HOOKCORE_COMPUTE_LIMIT_0="30")
    assert end_rc == 0, "the meter's event calls broke the application's capture"
    assert_held(books, [got], 30)  # metered and throttled as if no capture were open


def test_the_stub_polices_what_the_meter_avoids(client: Path, hookcore_libs: HookLibs, tmp_path: Path) -> None:
    """The double is as strict as CUDA: an event query of the application's own, in the global
    interaction mode while another thread holds a global-mode capture, fails (900) and invalidates
    that capture (901); the same under a relaxed-mode capture is allowed. So the hostile runs above
    would end in 901 had the shim's calls not been relaxed."""
    e = client_env(hookcore_libs, None)
    for mode, query_rc, end_rc in ((0, 900, 901), (2, 0, 0)):
        proc = subprocess.run([str(client), "holdcapture", str(mode), "1", "0.02", "query"], env=e,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"QUERY {query_rc}" in proc.stdout and f"CAPTURE {end_rc}" in proc.stdout, (mode, proc.stdout)
