"""Per-claim ledger metrics read while a stub CUDA workload holds memory under the real hook."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import hookcore
from dra._runtime.ledger_metrics import LedgerCollector

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = ROOT / "tests" / "hami_core_gpu" / "stub_workload.py"
MiB = 1 << 20
UUID = "GPU-57554201-0000-4000-8000-000000000000"


@dataclasses.dataclass(frozen=True)
class Claim:
    uid: str
    namespace: str
    name: str


@pytest.fixture(scope="module")
def built() -> None:
    proc = subprocess.run(["make", "-C", str(ROOT / "hookcore"), "-s", "libs"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def samples(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    out = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in fam.samples:
            out[(s.name, s.labels.get("claim_uid", ""))] = s.value
    return out


def enforced_claim(tmp_path: Path, claim: Claim) -> tuple[CollectorRegistry, dict[str, str]]:
    """The claim's ledger (256 MiB and 30% of the stub's device 0), a registry collecting it, and
    the environment a workload of the claim runs with (the hook preloaded, the stub driver)."""
    ledger = tmp_path / "hooks" / claim.uid / "ledger"
    ledger.parent.mkdir(parents=True)
    env = hookcore.claim_env([hookcore.DeviceQuota(0, 256 * MiB, 30, UUID)], str(ledger))
    hookcore.create_ledger(ledger, env)
    registry = CollectorRegistry()
    registry.register(LedgerCollector("gpu.test", tmp_path / "hooks", lambda: [claim], lambda: {UUID: "gpu-0"}))
    run_env = {**{k: v for k, v in os.environ.items() if not k.startswith(("HOOKCORE_", "STUB_"))}, **env,
               "LD_PRELOAD": str(hookcore.library_path()), "HOOKCORE_STUB_DEVICES": f"uuid={UUID},memory=16Gi",
               "LD_LIBRARY_PATH": str(hookcore.stub_dir())}
    return registry, run_env


def test_quota_and_usage_of_a_running_workload(built: None, tmp_path: Path) -> None:
    claim = Claim("5f0e8d0e-0000-4000-8000-00000000aaaa", "team-a", "train")
    registry, run_env = enforced_claim(tmp_path, claim)

    before = samples(registry)
    assert before[("dra_claim_memory_limit_bytes", claim.uid)] == 256 * MiB
    assert before[("dra_claim_memory_used_bytes", claim.uid)] == 0
    assert before[("dra_claim_compute_limit_percent", claim.uid)] == 30

    proc = subprocess.Popen([sys.executable, str(WORKLOAD), str(64 * MiB), str(300 * MiB)], env=run_env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        lines = [proc.stdout.readline().split() for _ in range(4)]
        assert lines[0] == ["INFO", str(256 * MiB), str(256 * MiB)]
        assert lines[1] == ["ALLOC", str(64 * MiB), "0"] and lines[2] == ["ALLOC", str(300 * MiB), "2"]  # past the quota
        held = samples(registry)
        assert held[("dra_claim_memory_used_bytes", claim.uid)] == 64 * MiB
        assert held[("dra_claim_memory_peak_bytes", claim.uid)] == 64 * MiB
        assert held[("dra_claim_processes", claim.uid)] == 1
        text = generate_latest(registry).decode()
        assert 'device="gpu-0"' in text and f'uuid="{UUID}"' in text and 'namespace="team-a"' in text
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    after = samples(registry)
    assert after[("dra_claim_memory_used_bytes", claim.uid)] == 0 and after[("dra_claim_processes", claim.uid)] == 0


def test_unreadable_ledgers_are_counted_not_fatal(tmp_path: Path) -> None:
    claim = Claim("5f0e8d0e-0000-4000-8000-00000000bbbb", "ns", "c")
    bad = tmp_path / "hooks" / claim.uid / "ledger"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"not a ledger" * 100)
    registry = CollectorRegistry()
    registry.register(LedgerCollector("gpu.test", tmp_path / "hooks", lambda: [claim, Claim("x", "ns", "unenforced")]))
    got = samples(registry)
    assert got[("dra_ledger_read_errors_total", "")] == 1
    assert not any(name.startswith("dra_claim_") for name, _ in got)


def test_compute_time_charged_under_a_share(built: None, tmp_path: Path) -> None:
    claim = Claim("5f0e8d0e-0000-4000-8000-00000000cccc", "team-b", "infer")
    registry, run_env = enforced_claim(tmp_path, claim)
    assert ("dra_claim_compute_seconds_total", claim.uid) not in samples(registry)  # no process set a limit yet
    proc = subprocess.run([sys.executable, str(WORKLOAD), "--launch", "1.0"], env=run_env, input="",
                          capture_output=True, text=True, timeout=60)
    assert "LAUNCHED" in proc.stdout, proc.stdout + proc.stderr
    got = samples(registry)
    charged = got[("dra_claim_compute_seconds_total", claim.uid)]
    assert 0.15 <= charged <= 0.45, charged  # about 30% of the one second it ran
    assert got[("dra_claim_compute_throttled_seconds_total", claim.uid)] > 0.3  # it waited for the rest
    assert got[("dra_claim_compute_throttles_total", claim.uid)] >= 1  # in waits it counted
