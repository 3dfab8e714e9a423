"""Fault points: parsing of DRA_FAULT_POINT, zero effect when disarmed, SIGKILL at the chosen hit."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dra._runtime import faults


def _hits(spec: str | None, names: list[str], done: object) -> None:
    faults.configure(spec)
    for i, name in enumerate(names):
        faults.fault(name)
        done.value = i + 1  # type: ignore[attr-defined]
    os._exit(0)


def run(spec: str | None, names: list[str]) -> tuple[int | None, int]:
    """(exit code, how many fault() calls returned) in a forked child armed with `spec`."""
    ctx = multiprocessing.get_context("fork")
    done = ctx.Value("i", 0)
    p = ctx.Process(target=_hits, args=(spec, names, done))
    p.start()
    p.join(10)
    return p.exitcode, done.value


A, B = "prepare.after_preparing", "prepare.after_cdi"


@pytest.mark.parametrize(("spec", "names", "code", "passed"), [
    (None, [A, B, A], 0, 3),
    (A, [B, A, A], -signal.SIGKILL, 1),
    (f"{A}@2", [A, B, A, A], -signal.SIGKILL, 2),
    ("*@3", [A, B, A, A], -signal.SIGKILL, 2),
    (f"{B}@5", [A, B, A], 0, 3),
    ("random:1", [A], -signal.SIGKILL, 0),
])
def test_kills_at_the_chosen_hit(spec: str | None, names: list[str], code: int, passed: int) -> None:
    assert run(spec, names) == (code, passed)


def test_random_mode_is_reproducible_with_a_seed() -> None:
    names = [A] * 200
    first = run("random:0.05:seed-1", names)
    assert first[0] == -signal.SIGKILL
    assert run("random:0.05:seed-1", names) == first


@pytest.mark.parametrize("bad", ["no.such.point", f"{A}@0", f"{A}@x", "random:0", "random:2"])
def test_bad_specs_fail_loudly(bad: str) -> None:
    with pytest.raises(ValueError):
        faults.configure(bad)
    faults.configure(None)


def test_environment_variable_arms_a_fresh_process() -> None:
    code = f"from dra._runtime.faults import fault\nfault('{B}')\nfault('{A}')\nprint('survived')"
    root = str(Path(faults.__file__).resolve().parents[1])
    env = {**os.environ, "DRA_FAULT_POINT": A, "PYTHONPATH": root}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL and "survived" not in proc.stdout
    env["DRA_FAULT_POINT"] = ""
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0 and "survived" in proc.stdout


def test_disarmed_by_default_in_this_process() -> None:
    assert os.environ.get(faults.ENV) in (None, "")
    for name in faults.POINTS:
        faults.fault(name)  # returns: nothing armed
