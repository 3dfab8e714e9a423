"""bench/context_gap_h200.py off the GPU: its plumbing against the stub NVML and stub CUDA
(`--fake h200x1`), so the one command the GPU run needs works before it gets there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ci_gate import skip_or_fail

from dra.testing.runtime import runtime_unavailable

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20
GiB = 1 << 30


def test_the_gap_script_reads_each_process_from_nvml_and_its_ledger(tmp_path: Path) -> None:
    skip_or_fail(runtime_unavailable())
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "context_gap_h200.py"), "--fake", "h200x1",
                           "--out", str(tmp_path), "--procs", "3", "--quota", "8Gi", "--context-memory", "100Mi",
                           "--samples", "2", "--interval", "0.1", "--seconds", "60"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = json.loads((tmp_path / "context-gap-h200.json").read_text())
    assert got["context_memory_bytes"] == 100 * MiB and len(got["samples"]) == 2
    procs = got["processes"]
    assert len({p["pid"] for p in procs}) == 3
    # The stub workload holds half its 8 GiB quota; the hook charged its context on top: the
    # ledger's figure, not the script's. The stub NVML was told the charge plus 2 MiB x index.
    assert [p["charged_bytes"] for p in procs] == [4 * GiB + 100 * MiB] * 3
    assert [p["gap_bytes"] for p in procs] == [0, 2 * MiB, 4 * MiB]
    assert [p["nvml_bytes"] - p["charged_bytes"] for p in procs] == [0, 2 * MiB, 4 * MiB]
    summary = got["summary"]
    assert summary["gap_bytes"] == {"max": 4 * MiB, "min": 0} and summary["processes_measured"] == 3
    assert summary["within_default_tolerance"] and summary["needed_tolerance_bytes"] == 4 * MiB
