"""bench/hami_core_gpu_h200.py off the GPU: `--fake h200x1` runs discovery, the slice, the prepare
of the recorded 30-cores + 4Gi claim and the workload under the claim's CDI edits (stub CUDA)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dra.testing.runtime import runtime_unavailable

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "hami_core_gpu_h200.py"
WHY = runtime_unavailable()


@pytest.mark.skipif(bool(WHY) and os.environ.get("CI") != "true", reason=f"runtime-like runner: {WHY}")
def test_the_bench_pipeline_runs_on_fake_gpus(tmp_path: Path, stub_nvml: Path) -> None:
    proc = subprocess.run([sys.executable, str(BENCH), "--fake", "h200x1", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    (gpu,) = results["discovery"]["gpus"]
    assert gpu["product_name"] == "NVIDIA H200" and results["discovery"]["driver_version"] == "580.159.4"
    slice_ = json.loads((tmp_path / "h200-slice.json").read_text())
    (dev,) = slice_["spec"]["devices"]
    assert dev["attributes"]["uuid"]["string"] == gpu["uuid"]
    spec = json.loads((tmp_path / "cdi-spec.json").read_text())
    env = dict(e.split("=", 1) for e in spec["containerEdits"]["env"])
    assert env["CUDA_VISIBLE_DEVICES"] == gpu["uuid"]
    assert env["LD_PRELOAD"] == "/usr/lib/hookcore/libvgpu.so"  # the recorded claim's config: preload env
    out = dict(line.split("=", 1) for line in results["workload"]["stdout"].splitlines())
    assert out["quota_total_bytes"] == str(4 << 30) and out["over_quota_alloc"] == "refused"


@pytest.mark.skipif(bool(WHY) and os.environ.get("CI") != "true", reason=f"runtime-like runner: {WHY}")
def test_a_strict_claim_reaches_the_hook_config(tmp_path: Path, stub_nvml: Path) -> None:
    proc = subprocess.run([sys.executable, str(BENCH), "--fake", "h200x1", "--strict", "1500", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    prepared = json.loads((tmp_path / "results.json").read_text())["prepare"]
    assert prepared["config"]["computeMode"] == "strict"
    lines = set(prepared["hook_config"].splitlines())
    assert {"HOOKCORE_COMPUTE_LIMIT_0=30", "HOOKCORE_COMPUTE_MODE_0=strict", "HOOKCORE_COMPUTE_REF_MHZ_0=1500"} <= lines


def test_the_torch_workload_is_valid_python() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    import hami_core_gpu_h200

    compile(hami_core_gpu_h200.TORCH_WORKLOAD, "torch_workload.py", "exec")
