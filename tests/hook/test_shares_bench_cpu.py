"""The CPU-only parts of bench/shares_h200.py (issue 26's table; the GPU runs on the H200 only): the
plan of runs, the table from results of the shape the runs produce, and the orchestration end to
end with workers that fake the GPU (HK_BENCH_FAKE_GPU: no torch), which checks the processes' start
ahead, the common start of pairs and the claim settings each gets."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.hook.conftest import BUILD, ROOT

SCRIPT = ROOT / "bench/shares_h200.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("shares_bench", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_the_plan_covers_the_issues_table(bench: ModuleType) -> None:
    jobs = {j.key: j for j in bench.plan(["matmul", "memcpy"], [10, 30, 50, 70], []).jobs}
    assert {"native/matmul", "default/memcpy/10", "strict/matmul/70", "pair/native", "pair/30+70", "pair/50+50",
            "claim2/default-50", "claim2/strict-50", "priority/both"} <= set(jobs)
    a, b = jobs["claim2/strict-50"].procs
    assert a.claim == b.claim and a.strict and a.cores == 50        # one claim, two processes
    hi, lo = jobs["priority/both"].procs
    assert (hi.priority, hi.cores, lo.priority, lo.cores) == ("high", 100, "normal", 50)
    assert not any(k.startswith("priority/") for k in
                   (j.key for j in bench.plan(["matmul"], [30], ["priority"]).jobs))


def test_claim_settings(bench: ModuleType, tmp_path: Path) -> None:
    b = bench.Bench(tmp_path, ROOT, BUILD, "t", 0.1, 0.1)
    b.uuid, b.ref_mhz = "GPU-11111111-2222-3333-4444-555555555555", 1500
    e = b.env(bench.Proc("matmul", "c", 30, True))
    assert (e["HOOKCORE_COMPUTE_LIMIT_0"], e["HOOKCORE_COMPUTE_MODE_0"], e["HOOKCORE_COMPUTE_REF_MHZ_0"]) == \
        ("30", "strict", "1500")
    e = b.env(bench.Proc("matmul", "hi", 100, priority="high"))
    assert "HOOKCORE_COMPUTE_LIMIT_0" not in e and e["HOOKCORE_PRIORITY_0"] == "high"
    board = Path(e["HOOKCORE_PRIORITY_BOARD"]) / b.uuid
    assert board.read_bytes() == bytes(4096)
    assert "LD_PRELOAD" not in b.env(bench.Proc("matmul", None))
    assert "HOOKCORE_COMPUTE_ELASTICITY_0" not in b.env(bench.Proc("matmul", "c", 30, True))  # not measured yet
    b.elasticity = 0.45
    assert b.env(bench.Proc("matmul", "c", 30, True))["HOOKCORE_COMPUTE_ELASTICITY_0"] == "0.45"
    b.elasticity = 1.0
    assert b.env(bench.Proc("matmul", "c", 30, True))["HOOKCORE_COMPUTE_ELASTICITY_0"] == "1"


def test_the_elasticity_prior_is_measured_from_the_default_runs(bench: ModuleType) -> None:
    """The H100's numbers of 2026-12-05 (bench/results/h100-2026-12-05-shares): a native matmul at
    1410 MHz, the default 30% share 35.5% of it at a steady 1980 MHz: speedup 1.183 at x = 1410/1980,
    phi 0.538 in the hook's model, the value whose strict charge is exactly that speedup. A boost that
    did not hold steady, or no boost, teaches nothing."""
    def runs(pct: float, mhz: tuple[int, int, int]) -> dict[str, Any]:
        return {"native/matmul": {"results": [{"rate": 1000.0}]},
                "default/matmul/30": {"results": [{"rate": pct * 10}],
                                      "clock": dict(zip(("sm_mhz", "sm_mhz_p10", "sm_mhz_p90"), mhz, strict=True))}}
    phi = bench.calibrated_elasticity(runs(35.5, (1980, 1980, 1980)), 1410)
    assert phi == pytest.approx(0.538, abs=0.002)
    x = 1410 / 1980  # the strict charge per ns of device time (hookcore/core/elastic.c hk_elastic_factor_milli)
    assert 1 / (1 - phi + phi * x) == pytest.approx(35.5 / 30, rel=0.002)  # charges the boost it saw, exactly
    assert bench.calibrated_elasticity(runs(29.0, (1980, 1980, 1980)), 1410) == 0.0   # slower than native: clamped
    assert bench.calibrated_elasticity(runs(35.5, (1800, 1500, 1980)), 1410) is None  # the clock moved
    assert bench.calibrated_elasticity(runs(35.5, (1420, 1420, 1420)), 1410) is None  # no boost
    assert bench.calibrated_elasticity(runs(35.5, (1980, 1980, 1980)), None) is None


def synthetic() -> dict[str, Any]:
    def run(w: str, *rates: float, mhz: float = 1500) -> dict[str, Any]:
        return {"procs": [{"workload": w}] * len(rates), "results": [{"rate": r} for r in rates],
                "clock": {"sm_mhz": mhz}}
    runs = {"native/matmul": run("matmul", 100.0), "default/matmul/30": run("matmul", 35.3, mhz=1980),
            "strict/matmul/30": run("matmul", 30.4, mhz=1980), "pair/native": run("matmul", 47.3, 47.4),
            "pair/50+50": run("matmul", 46.5, 46.9), "claim2/strict-50": run("matmul", 25.1, 24.7),
            "priority/high-alone": run("matmul", 100.0), "priority/normal-alone": run("matmul", 58.0),
            "priority/both": run("matmul", 95.0, 3.0), "strict/memcpy/30": {"skipped": "time budget spent"}}
    return {"env": {"gpu": "NVIDIA H200", "label": "after", "hookcore": "abc", "ref_mhz": 1500}, "runs": runs}


def test_table(bench: ModuleType) -> None:
    res = synthetic()
    bench.derive(res)
    text = bench.table(res)
    assert "| default share, torch matmul | - | 35.3 (1980) | - | - |" in text
    assert "| strict cap, torch matmul | - | 30.4 (1980) | - | - |" in text
    assert "two claims 50 + 50 at once (native pair: 47.3 + 47.4) | | | 46.5 + 46.9 |" in text
    assert "| two processes of ONE 50% claim, strict | | | 25.1 + 24.7 = 49.8 | |" in text
    assert "| both at once | 95.0 (95.0 % of its own alone) | 3.0 |" in text
    assert "Not measured (time budget): strict/memcpy/30" in text


def test_orchestration_with_faked_workers(tmp_path: Path) -> None:
    env = {**os.environ, "HK_BENCH_FAKE_GPU": "1"}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--build", str(BUILD), "--workloads",
                           "matmul", "--caps", "30", "--warm", "0.05", "--secs", "0.1", "--label", "cpu"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads((tmp_path / "shares-cpu.json").read_text())
    assert all("error" not in g for r in res["runs"].values() for g in r.get("results", [])), res["runs"]
    both = res["runs"]["priority/both"]["results"]
    assert len(both) == 2 and all(g["rate"] > 0 for g in both)
    a, b = res["runs"]["pair/50+50"]["results"]
    assert abs(a["window"][0] - b["window"][0]) < 1.0   # a common start
    assert "two claims 30 + 70 at once" in (tmp_path / "shares-cpu.md").read_text()


def test_nothing_starts_beside_a_host_bound_run(bench: ModuleType) -> None:
    """A launch-bound run is its CPU's: the next job's processes start after it, not beside it."""
    jobs = bench.plan(["matmul", "launch"], [30], ["pairs", "priority"]).jobs
    beside = {job.key: bench.starts_next_beside(job) for job in jobs}
    assert beside["native/matmul"] and beside["default/matmul/30"]
    assert not beside["native/launch"] and not beside["strict/launch/30"]


def test_shares_are_of_the_mean_of_the_native_before_and_after(bench: ModuleType) -> None:
    """A workload's native runs once before its capped runs and once after them; its shares are of
    the mean, and the table shows both rates, so a native that moved is seen, not hidden."""
    keys = [j.key for j in bench.plan(["matmul", "launch"], [30], ["pairs", "priority"]).jobs]
    assert keys.index("native-again/launch") > keys.index("strict/launch/30") > keys.index("native/launch")
    res = synthetic()
    res["runs"]["native-again/matmul"] = {"procs": [{"workload": "matmul"}], "results": [{"rate": 140.0}]}
    bench.derive(res)
    assert res["runs"]["default/matmul/30"]["pct"] == [pytest.approx(100 * 35.3 / 120)]
    text = bench.table(res)
    assert "torch matmul 100.0 / 140.0" in text
    del res["runs"]["native-again/matmul"]
    bench.derive(res)
    assert res["runs"]["default/matmul/30"]["pct"] == [pytest.approx(35.3)]   # only the one measured


def test_a_host_bound_run_is_a_share_of_the_natives_beside_it(bench: ModuleType) -> None:
    """A launch-bound loop's native drifts with its CPU within a sitting: each of its capped runs is
    followed by a native of its own and is a share of the mean of the natives just before and after
    it, not of the first and last."""
    keys = [j.key for j in bench.plan(["launch"], [30, 50], ["pairs", "priority"]).jobs]
    assert keys[:4] == ["native/launch", "default/launch/30", "native-after/launch/default/30", "default/launch/50"]
    assert keys[-1] == "native-again/launch"

    def proc(rate: float) -> dict[str, Any]:
        return {"procs": [{"workload": "launch"}], "results": [{"rate": rate}]}

    rates = {"native/launch": 100.0, "default/launch/30": 33.0, "native-after/launch/default/30": 120.0,
             "default/launch/50": 70.0, "native-after/launch/default/50": 160.0, "native-again/launch": 200.0}
    res = {"env": {}, "runs": {k: proc(r) for k, r in rates.items()}}
    bench.derive(res)
    assert res["runs"]["default/launch/30"]["pct"] == [pytest.approx(30.0)]   # of (100 + 120) / 2
    assert res["runs"]["default/launch/50"]["pct"] == [pytest.approx(50.0)]   # of (120 + 160) / 2
