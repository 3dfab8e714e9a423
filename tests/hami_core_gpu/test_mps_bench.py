"""bench/mps_h200.py without a GPU (--cpu-selftest: the fake MPS control daemon, a CPU loop): every
configuration reported, the MPS daemon stopped at the end and also when the run is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from kube_helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "mps_h200.py"
CONFIGS = ["native", "native 2 tenants", "hook 30+70", "mps 100 (default)", "mps 30", "mps 70", "mps 30+70",
           "mps memory 8G"]


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "TMPDIR": str(tmp)}


def test_selftest_reports_every_configuration_and_stops_the_daemon(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(BENCH), "--cpu-selftest", "--out", str(out), "--build",
                           str(tmp_path / "build")], capture_output=True, text=True, timeout=300, env=_env(tmp_path))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    r = json.loads((out / "mps-results.json").read_text())
    assert list(r["configs"]) == CONFIGS
    assert len(r["configs"]["mps 30+70"]["rates"]) == 2 and all(r["configs"]["mps 30+70"]["rates"])
    assert r["mps"]["stopped"] is True
    assert r["mps"]["control_log"].rstrip().endswith("quit")
    assert "MPS control daemon stopped: True" in (out / "mps-summary.md").read_text()


def test_a_killed_run_still_stops_the_daemon_and_writes_what_it_has(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, str(BENCH), "--cpu-selftest", "--out", str(out), "--build",
                             str(tmp_path / "build")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(tmp_path))

    def control_socket() -> list[Path]:
        sockets = list(tmp_path.glob("mpsbench-*/mps/pipe/control"))
        assert sockets or proc.poll() is None, "the bench exited before its MPS control daemon started"
        return sockets

    wait_for(control_socket, 240, 0.05, what="the MPS control daemon")
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    r = json.loads((out / "mps-results.json").read_text())
    assert r["mps"]["stopped"] is True and r["mps"]["control_log"].rstrip().endswith("quit")


def test_mps_mounts_selftest_reports_the_read_only_pipe_and_who_may_quit(tmp_path: Path) -> None:
    """bench/mps_mounts_h200.py on the fake control daemon (review 2026-12-04 #1, #11): the
    orchestration and the JSON the H200 run writes; the fake's clients connect() through the
    read-only view, nothing can be written there, and only root's quit is obeyed."""
    from ci_gate import skip_or_fail

    from dra.testing.runtime import runtime_unavailable

    skip_or_fail(runtime_unavailable())
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "mps_mounts_h200.py"), "--cpu-selftest", "--out",
                           str(out)], capture_output=True, text=True, timeout=120, env=_env(tmp_path))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    r = json.loads((out / "mps-mounts.json").read_text())["ro-pipe"]
    assert r["client uid 0"]["context"] and r["client uid 65534"]["context"]
    for who in ("tenant root", "tenant uid 65534"):
        assert all("refused" in line for line in r[who]["files"]), r[who]
    assert "Not enough privilege" in r["quit by uid 65534 through the view"][1] and r["alive after 65534's quit"]
    assert r["exited after root's quit"] and r["stopped"]
