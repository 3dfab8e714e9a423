"""bench/watchdog_h200.py off the GPU: its plumbing against the stub NVML (`--fake h200x1`), so the
one command the GPU run needs works before it gets there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ci_gate import skip_or_fail

from dra.testing.runtime import runtime_unavailable

ROOT = Path(__file__).resolve().parents[2]


def test_the_h200_script_gives_every_verdict_on_the_stub(tmp_path: Path) -> None:
    skip_or_fail(runtime_unavailable())
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "watchdog_h200.py"), "--fake", "h200x1", "--out",
                           str(tmp_path), "--seconds", "30", "--share-window", "2"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = json.loads((tmp_path / "watchdog-h200.json").read_text())
    assert got["expected_seen"] == {"unheld(unhooked)": True, "over-quota(contexts)": True,
                                    "over-share(unhooked)": True, "unheld(leaderless)": True, "nothing for within": True}
    unheld = next(v for v in got["verdicts"] if v["verdict"] == "unheld")
    assert 0 <= unheld["seconds_after_ctx"] < 2.0
    share = next(v for v in got["verdicts"] if v["verdict"] == "over-share")
    assert share["seconds_after_loop"] >= 2.0  # not before the window is full
    assert got["processes"]["contexts"]["nvml_memory_bytes"] == int(7.5 * (1 << 30))
