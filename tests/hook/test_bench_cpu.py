"""The CPU-only parts of bench/hookcore_gpu.py (the GPU parts run on the H200 only).

- the build step it runs on a fresh machine (make + the C client) and the ledger reader it uses
  (build/hk-ledger, the core's own reader: no hard-coded offsets), checked against the wrapper;
- the summary table writer on results of the shape the GPU sections produce (targets met or not);
- the command line end to end with a zero time budget (every section skipped and reported).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest

from tests.hook.clients import client_env
from tests.hook.conftest import BUILD, ROOT
from tests.limiter_books import assert_held, ran, virtual_preload

if TYPE_CHECKING:
    from tests.hook.conftest import HookLibs

SCRIPT = ROOT / "bench/hookcore_gpu.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hookcore_gpu_bench", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_build_and_ledger_reader(bench: ModuleType, hookcore_libs: HookLibs, hookcore_ext: ModuleType,
                                 tmp_path: Path) -> None:
    b = bench.Bench(tmp_path, BUILD)
    b.build_libs()
    assert b.lib.exists() and b.tool.exists() and b.client.exists()
    ledger = tmp_path / "claim.ledger"
    env = client_env(hookcore_libs, virtual_preload(b.lib), CUDA_DEVICE_SM_LIMIT="50",
                     CUDA_DEVICE_MEMORY_SHARED_CACHE=str(ledger))
    proc = subprocess.run([str(b.client), "launch", "1000", "0", "0.5"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    charged = bench.ledger_charged(str(b.tool), str(ledger))
    with hookcore_ext.Ledger(ledger) as led:   # the tool reads what the wrapper reads: ~0.25 s at 50% of 0.5 s
        assert charged is not None and led.limiter(0).charged_ns == charged
        assert_held(led.limiter(0), [ran(proc.stdout, 1_000_000, 10)], 50)   # on the virtual clock (issue 26)
    assert bench.ledger_charged(str(b.tool), str(tmp_path / "missing")) is None


def synthetic() -> dict[str, Any]:
    return {
        "env": {"gpu": "NVIDIA H200, 580.159.04, 143771 MiB, 1980 MHz, 700.00 W", "torch": "2.11", "date": "d",
                "hookcore": "abc"},
        "total_s": 431.0,
        "sections": {
            "compute": {"native": {"plain": 4800.0, "graph": 4850.0, "sm_mhz": 1510.0},
                        "30": {"share_plain": 36.0, "share_graph": 36.1}},
            "strict": {"ref_mhz": 1510.0, "native_plain": 4800.0,
                       "strict-30": {"share_plain": 30.8, "default_share_plain": 36.0},
                       "strict-50-default-ref": {"share_plain": 58.0, "default_share_plain": 60.0}},
            "copy": {"native": {"rate": 2100.0}, "99": {"share": 98.0, "charged_duty": 97.0},
                     "50": {"share": 51.2, "charged_duty": 49.0}, "30": {"share": 34.0, "charged_duty": 30.5}},
            "infer": {"native": {"rate": 9000.0}, "99": {"share": 90.0, "charged_duty": 41.0},
                      "50": {"share": 88.0, "charged_duty": 40.0}, "30": {"share": 70.0, "charged_duty": 29.0}},
            "tenants": {"30+70": {"shares": [29.1, 66.1]}},
            "start": {"skipped": "time budget of 510 s spent"},
        },
    }


def test_summary_table(bench: ModuleType, tmp_path: Path) -> None:
    b = bench.Bench(tmp_path, BUILD)
    b.results = synthetic()
    text = b.summary()
    rows = {ln.split(" | ")[0].lstrip("| "): ln for ln in text.splitlines() if ln.startswith("| ")}
    assert "NVIDIA H200" in text and "hookcore abc" in text and "431.0 s in all" in text
    assert "Not measured: start (time budget of 510 s spent)" in text

    def met(prefix: str) -> str:
        line = next(v for k, v in rows.items() if k.startswith(prefix))
        return line.rstrip(" |").rsplit("| ", 1)[1]

    assert met("copy-bound loop (1 GiB D2D copy_, memcpy) at 50%") == "yes"     # 51.2 within 50 +- 3
    assert met("copy-bound loop (1 GiB D2D copy_, memcpy) at 30%") == "NO"      # 34.0 is 4 points off
    assert met("launch-bound inference loop (16 x Linear 512, batch 1) at 30%") == "yes"   # charged 29.0
    assert met("strict cap 30%, matmul loop (full-load clock 1510 MHz)") == "yes"
    assert met("strict cap 50%, matmul loop (library's default reference)") == "NO"
    assert met("compute share 30%, matmul loop") == "NO"                         # the boost: 36%
    assert met("two tenants 30+70") == "yes"


def test_command_line_with_no_time_left(tmp_path: Path, hookcore_libs: HookLibs) -> None:
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--build", str(BUILD), "--budget", "0"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((out / "results.json").read_text())
    assert set(results["sections"]) == {"probe", "memory", "compute", "strict", "copy", "infer", "tenants",
                                        "launch", "alloc", "start"}
    assert all("skipped" in v for v in results["sections"].values())
    assert "Not measured: probe" in (out / "summary.md").read_text()


def test_context_rows(bench: ModuleType, tmp_path: Path) -> None:
    """The context section's rows (issue 17): met only when the claim's processes together stay
    within 4096 MiB in nvidia-smi and torch saw a 4 GiB device."""
    b = bench.Bench(tmp_path, BUILD)
    four = 4 * bench.GiB

    def run(smi: list[int], free: float) -> dict[str, Any]:
        return {"workers": [{"start_total": four, "start_free": free, "held_mib": 3072}] * len(smi), "smi_mib": smi,
                "smi_total_mib": sum(smi), "errors": []}

    b.results = {"env": {}, "sections": {"context": {
        "native_context_mib": 508, "charged": "508Mi", "native-4GiB": {"smi_total_mib": 4604},
        "1p-uncharged": run([4604], four), "1p-charged": run([4090], four - 508 * bench.MiB),
        "4p-uncharged": run([1500, 1500, 1500, 1628], four), "4p-charged": run([1020, 1020, 1020, 1100], 0),
    }}}
    rows = [ln for ln in b.summary().splitlines() if ln.startswith("| 4 GiB claim")]
    assert len(rows) == 4
    verdict = {ln.split(",")[1].strip() + " " + ln.split("context ")[1].split(":")[0]: ln.rstrip(" |").rsplit("| ", 1)[1]
               for ln in rows}
    assert verdict == {"1 process(es) charged": "yes", "1 process(es) uncharged": "?",
                       "4 process(es) charged": "NO", "4 process(es) uncharged": "?"}   # 4160 MiB > 4096


def test_limiter_stub_bench_runs(hookcore_libs: HookLibs, tmp_path: Path) -> None:
    """bench/limiter_stub_cpu.py (the host-clock rates the limiter's tests no longer assert, issue
    26) runs end to end and writes its cases; its figures are the bench's, not checked here."""
    out = tmp_path / "limiter.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench/limiter_stub_cpu.py"), "--seconds", "0.05", "--shares",
                           "50", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = json.loads(out.read_text())
    assert {c["workload"] for c in got["cases"]} == {"cuda launch", "cuda graph", "cuda copy async", "cuda copy sync",
                                                     "acl kernel", "acl model sync"}
    assert all(c["share"] == 50 and c["rate"] > 0 and c["charged_duty"] is not None for c in got["cases"])
    assert len(got["overhead"]) == 4 and all(o["hooked_rate"] > 0 for o in got["overhead"])


def test_mps_mounts_bench_reads_the_hooks_sm_fraction(hookcore_libs: HookLibs, client: Path, hookcore_ext: ModuleType,
                                                      testing_lib: Path, tmp_path: Path) -> None:
    """bench/mps_mounts_h200.py's hook-ceiling reader (review 2026-12-04 #5) on the stub acting as an
    MPS client at 30% of 132 SMs, under the claim config the bench writes (the device's SMs from the
    stub NVML, read as the bench reads the GPU's): the SM fraction and charge per device ns from
    build/hk-ledger agree with the wrapper, and the hook's debug line names both counts."""
    spec = importlib.util.spec_from_file_location("mps_mounts_bench", ROOT / "bench/mps_mounts_h200.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    probe = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[3]]; import mps_mounts_h200 as m; "
             "print(m.nvml_sms(0, sys.argv[2]))")
    stub_nvml = str(hookcore_libs.stub_dir / "libnvidia-ml.so.1")
    got = subprocess.run([sys.executable, "-c", probe, str(ROOT / "bench"), stub_nvml, str(ROOT)],
                         env=client_env(hookcore_libs, None), capture_output=True, text=True, timeout=60)
    assert got.stdout.strip() == "(132, '')", got.stdout + got.stderr
    ledger = tmp_path / "claim.ledger"
    text = mod.hook_config_text(30, ledger, 132)
    assert [(d.cores, d.device_sms) for d in hookcore_ext.parse_config(file_text=text).configured()] == [(30, 132)]
    (tmp_path / "root" / "vgpu").mkdir(parents=True)
    (tmp_path / "root" / "vgpu" / "config").write_text(text)
    env = client_env(hookcore_libs, virtual_preload(testing_lib), HOOKCORE_LOG="debug",
                     HOOKCORE_TESTING_CONFIG_ROOT=str(tmp_path / "root"),
                     CUDA_MPS_PIPE_DIRECTORY="/nonexistent/mps-pipe", CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="30")
    proc = subprocess.run([str(client), "launch", "1000", "0", "0.5"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    books = mod.hook_books(BUILD / "hk-ledger", ledger, proc.stderr)
    with hookcore_ext.Ledger(ledger) as led:
        lim = led.limiter(0)
    assert books["sm_fraction"] == lim.sm_ppm / 1e6 == 303031 / 1e6, books   # 40 of 132 SMs, rounded up
    assert books["charged_per_device_ns"] == round(lim.charged_ns / lim.device_ns, 4), (books, lim)
    assert books["driver said"] and "(40 SMs), device 0 (132 SMs, the claim's config)" in books["driver said"][0], books
    text = mod.summary({"env": {"date": "d"}, "hook-ceiling": {
        "device SMs": {"nvml": 132, "config": 132, "source": "nvml"}, "mps 30": {"share_pct": 39.2},
        "mps 30 + hook 30": {"share_pct": 38.8, "hook": {**books, "config device SMs": 132}}}})
    assert "## ro-pipe" not in text and "sm_fraction=0.303031" in text and "mps 30 + hook 30 / mps 30: 0.99" in text
    assert "HOOKCORE_DEVICE_SMS_0): 132 from nvml; NVML said 132" in text and "config SMs=132" in text
