"""The virtual clock the limiter's tests run on (hookcore/stub/fake_clock.c, issue 26): waits move
it by exactly what they ask and nothing else does, alone or shared by processes as a
discrete-event simulation. Python's time.monotonic and time.sleep reach the interposed
clock_gettime and clock_nanosleep, so plain Python processes are the clients here."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.limiter_books import fake_clock

pytestmark = pytest.mark.usefixtures("hookcore_libs")   # make -C hookcore libs builds the clock with the stubs

SLEEPER = """
import sys, time
name, step, n, log = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
t0 = time.monotonic()
for _ in range(n):
    time.sleep(step)
    with open(log, "a") as f:
        f.write(f"{name} {time.monotonic() - t0:.6f}\\n")
"""


def env(**extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("HOOKCORE_")}
    return {**e, "LD_PRELOAD": str(fake_clock()), **extra}


def test_a_wait_moves_the_clock_by_what_it_asks_and_the_wall_clock_is_left_alone() -> None:
    code = "import time; t = time.monotonic(); time.sleep(5); print(time.monotonic() - t, time.time())"
    before = time.time()
    proc = subprocess.run([sys.executable, "-c", code], env=env(), capture_output=True, text=True, timeout=60)
    after = time.time()
    assert proc.returncode == 0, proc.stderr
    slept, wall = map(float, proc.stdout.split())
    assert slept == 5.0 and before <= wall <= after   # five virtual seconds; CLOCK_REALTIME is the kernel's


def test_parties_share_the_clock_and_it_waits_for_all_of_them(tmp_path: Path) -> None:
    """A sleeps 1 s three times, B 0.4 s five times, B started after A has run for a while of real
    time: the clock did not move meanwhile, and their wakes interleave in virtual time."""
    (tmp_path / "clock").touch()
    log = tmp_path / "log"
    e = env(HOOKCORE_STUB_CLOCK_FILE=str(tmp_path / "clock"), HOOKCORE_STUB_CLOCK_PARTIES="2")
    a = subprocess.Popen([sys.executable, "-c", SLEEPER, "A", "1.0", "3", str(log)], env=e)
    time.sleep(0.3)   # real time that must not show on the virtual clock
    b = subprocess.Popen([sys.executable, "-c", SLEEPER, "B", "0.4", "5", str(log)], env=e)
    assert a.wait(timeout=60) == 0 and b.wait(timeout=60) == 0
    lines = [ln.split() for ln in log.read_text().splitlines()]
    wakes = {p: [float(t) for n, t in lines if n == p] for p in "AB"}
    assert wakes == {"A": [1.0, 2.0, 3.0], "B": [0.4, 0.8, 1.2, 1.6, 2.0]}, lines
    order = [float(t) for _, t in lines]
    assert order == sorted(order), lines   # one clock: the log is in virtual-time order
