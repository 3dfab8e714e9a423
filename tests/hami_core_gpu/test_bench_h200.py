"""bench/hami_core_gpu_h200.py off the GPU: `--fake h200x1` runs discovery, the slice, the prepare
of the recorded 30-cores + 4Gi claim and the workload under the claim's CDI edits (stub CUDA)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ci_gate import skip_or_fail

from dra.testing.runtime import runtime_unavailable

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "hami_core_gpu_h200.py"
WHY = runtime_unavailable()


def test_the_bench_pipeline_runs_on_fake_gpus(tmp_path: Path, stub_nvml: Path) -> None:
    skip_or_fail(WHY and f"runtime-like runner: {WHY}")
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


def test_a_strict_claim_reaches_the_hook_config(tmp_path: Path, stub_nvml: Path) -> None:
    skip_or_fail(WHY and f"runtime-like runner: {WHY}")
    proc = subprocess.run([sys.executable, str(BENCH), "--fake", "h200x1", "--strict", "1500", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    prepared = json.loads((tmp_path / "results.json").read_text())["prepare"]
    assert prepared["config"]["computeMode"] == "strict"
    lines = set(prepared["hook_config"].splitlines())
    assert {"HOOKCORE_COMPUTE_LIMIT_0=30", "HOOKCORE_COMPUTE_MODE_0=strict", "HOOKCORE_COMPUTE_REF_MHZ_0=1500"} <= lines


FAKE_TORCH = """
class OutOfMemoryError(RuntimeError):
    pass

uint8 = bfloat16 = object()
_held = [0]

class _Tensor:
    def __matmul__(self, other):
        return self

class cuda:
    TOTAL = 4 << 30

    @staticmethod
    def mem_get_info():
        return cuda.TOTAL - _held[0], cuda.TOTAL

    @staticmethod
    def get_device_name(index):
        return "NVIDIA H200"

    @staticmethod
    def synchronize():
        pass

    @staticmethod
    def empty_cache():
        _held[0] = 0

def empty(n, dtype=None, device=None):
    if _held[0] + n > cuda.TOTAL:
        raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    _held[0] += n
    return _Tensor()

def randn(*shape, device=None, dtype=None):
    return _Tensor()
"""


def test_the_torch_workload_reports_what_the_bench_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The workload runs on the GPU only; here it runs against a torch stand-in with a 4 GiB
    device, and its RESULT line must carry the fields the bench judges the claim by."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import hami_core_gpu_h200 as bench

    (tmp_path / "torch.py").write_text(FAKE_TORCH)
    script = tmp_path / "workload.py"
    script.write_text(bench.TORCH_WORKLOAD)
    proc = subprocess.run([sys.executable, str(script), "quota", "0.05"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(tmp_path), "CUDA_VISIBLE_DEVICES": "GPU-x"})
    assert proc.returncode == 0, proc.stderr
    got = bench.parse_result(proc.stdout)
    assert got["mem_get_info"] == [4 << 30, 4 << 30] and got["device_name"] == "NVIDIA H200"
    assert got["alloc_3GiB"] == "ok" and got["alloc_2GiB_more"].startswith("OutOfMemoryError: CUDA out of memory")
    assert got["matmul_per_s"] > 0 and got["cuda_visible_devices"] == "GPU-x"
