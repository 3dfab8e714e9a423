"""The Cython wrapper (`hookcore`) and `dra hook inspect`, on ledgers written by the C core.

Ledgers are populated by `test_core populate PATH DEV:BYTES ... --hold`, a real separate process
that holds its slot until its stdin closes, so "live" and "dead" are what the kernel says.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

if TYPE_CHECKING:
    from tests.hook.conftest import CoreTests

GiB = 1 << 30
MiB = 1 << 20


@contextmanager
def holder(core: CoreTests, path: Path, env: dict[str, str], *charges: str) -> Iterator[int]:
    """A process that charged `charges` ("dev:bytes") to the ledger and stays alive; yields its pid."""
    proc = subprocess.Popen([str(core.test_core), "populate", str(path), *charges, "--hold"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={"PATH": os.environ.get("PATH", ""), **env})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("ready"), (line, proc.stderr.read() if proc.stderr else "")
        yield proc.pid
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=10)


ENV = {"HOOKCORE_MEMORY_LIMIT_0": "1Gi", "HOOKCORE_MEMORY_LIMIT_1": "3000m",
       "HOOKCORE_COMPUTE_LIMIT_1": "30", "HOOKCORE_DEVICE_UUID_0": "GPU-aaaa",
       "HOOKCORE_DEVICE_UUID_1": "GPU-bbbb"}
# The same claim in HAMi's names (accepted from the environment by libvgpu.so and parse_config).
HAMI_ENV = {"CUDA_DEVICE_MEMORY_LIMIT_0": "1Gi", "CUDA_DEVICE_MEMORY_LIMIT_1": "3000m",
            "CUDA_DEVICE_SM_LIMIT_1": "30", "HOOKCORE_DEVICE_UUID_0": "GPU-aaaa",
            "HOOKCORE_DEVICE_UUID_1": "GPU-bbbb"}


def test_parse_memory_and_sm(hookcore_ext: ModuleType) -> None:
    hc = hookcore_ext
    assert hc.parse_memory("3000m") == 3000 * MiB
    assert hc.parse_memory("10Gi") == 10 * GiB
    assert hc.parse_memory("1G") == 10**9
    assert hc.parse_memory("1073741824") == GiB
    assert hc.parse_sm("30") == 30
    with pytest.raises(hc.HookConfigError, match=r'^CUDA_DEVICE_MEMORY_LIMIT_2="1gb": unknown unit "gb"'):
        hc.parse_memory("1gb", "CUDA_DEVICE_MEMORY_LIMIT_2")
    with pytest.raises(hc.HookConfigError, match=r'HOOKCORE_COMPUTE_LIMIT="0": 0 is not a valid compute share'):
        hc.parse_sm("0")
    with pytest.raises(hc.HookConfigError, match="NUL character"):
        hc.parse_memory("1\x00Gi")
    assert issubclass(hc.HookConfigError, ValueError) and issubclass(hc.LedgerError, OSError)


@pytest.mark.parametrize("names", ["neutral", "hami"])
def test_parse_config(hookcore_ext: ModuleType, names: str) -> None:
    env = ENV if names == "neutral" else HAMI_ENV
    ledger = {"neutral": "HOOKCORE_LEDGER", "hami": "CUDA_DEVICE_MEMORY_SHARED_CACHE"}[names]
    cfg = hookcore_ext.parse_config({**env, "UNRELATED": "x", ledger: "/run/l"})
    assert cfg.device_count == 2 and cfg.uuid_keyed and cfg.ledger_path == "/run/l" and cfg.origin == "env"
    d0, d1 = cfg.configured()
    assert (d0.memory, d0.cores, d0.uuid) == (GiB, 100, "GPU-aaaa")
    assert (d1.memory, d1.cores, d1.uuid) == (3000 * MiB, 30, "GPU-bbbb")
    assert cfg.devices[5].memory is None
    empty = hookcore_ext.parse_config({})
    assert empty.ledger_path is None and empty.configured()[0].memory is None
    with pytest.raises(hookcore_ext.HookConfigError, match=r'CUDA_DEVICE_MEMORY_LIMIT_x="1g": bad device index'):
        hookcore_ext.parse_config({"CUDA_DEVICE_MEMORY_LIMIT_x": "1g"})
    with pytest.raises(hookcore_ext.HookConfigError, match="HOOKCORE_DEVICE_UUID_3 is not"):
        hookcore_ext.parse_config({"HOOKCORE_DEVICE_UUID_0": "GPU-a", "CUDA_DEVICE_MEMORY_LIMIT_3": "1g"})


def test_ledger_live_then_dead(hookcore_ext: ModuleType, core_tests: CoreTests, tmp_path: Path) -> None:
    path = tmp_path / "claim.ledger"
    env = {**ENV, "HOOKCORE_LEDGER": str(path)}
    with holder(core_tests, path, env, f"0:{512 * MiB}", f"1:{100 * MiB}") as pid_a, \
         holder(core_tests, path, env, f"0:{256 * MiB}") as pid_b:
        with hookcore_ext.Ledger(path) as ledger:
            assert ledger.version == 2 and ledger.device_count == 2
            d0, d1 = ledger.devices()
            assert (d0.uuid, d0.memory_limit, d0.used, d0.free, d0.live_processes) == \
                ("GPU-aaaa", GiB, 768 * MiB, 256 * MiB, 2)
            assert (d1.memory_limit, d1.sm_limit, d1.used, d1.peak) == (3000 * MiB, 30, 100 * MiB, 100 * MiB)
            procs = {p.pid: p for p in ledger.processes()}
            assert set(procs) == {pid_a, pid_b}
            assert procs[pid_a].state == "live" and procs[pid_a].used == {0: 512 * MiB, 1: 100 * MiB}
            assert procs[pid_a].start_time == hookcore_ext._hookcore.proc_start_time(pid_a) > 0
            assert procs[pid_b].total == 256 * MiB
    # Both holders exited without giving anything back: the ledger shows them dead (reclaimable).
    with hookcore_ext.Ledger(path) as ledger:
        assert {p.state for p in ledger.processes()} == {"dead"}
        assert ledger.device(0).live_processes == 0
    # A new process reclaims them as soon as it needs the quota.
    with holder(core_tests, path, env, f"0:{GiB}") as pid_c, hookcore_ext.Ledger(path) as ledger:
        live = [p for p in ledger.processes() if p.state == "live"]
        assert [p.pid for p in live] == [pid_c] and ledger.device(0).used == GiB


def test_ledger_errors(hookcore_ext: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(hookcore_ext.LedgerError, match="No such file"):
        hookcore_ext.Ledger(tmp_path / "missing")
    junk = tmp_path / "junk"
    junk.write_bytes(b"x" * 100)
    with pytest.raises(hookcore_ext.LedgerError, match="not a hookcore ledger"):
        hookcore_ext.Ledger(junk)
    # a foreign file of exactly the ledger's size: the magic check names the file
    foreign = tmp_path / "foreign"
    foreign.write_bytes(b"\x01" * 274432)
    with pytest.raises(hookcore_ext.LedgerError, match=f"{foreign} is not a hookcore ledger"):
        hookcore_ext.Ledger(foreign)


def test_ledger_closed_and_bounds(hookcore_ext: ModuleType, core_tests: CoreTests, tmp_path: Path) -> None:
    path = tmp_path / "l"
    env = {"HOOKCORE_MEMORY_LIMIT": "1Gi", "HOOKCORE_LEDGER": str(path)}
    with holder(core_tests, path, env, "0:1"):
        ledger = hookcore_ext.Ledger(path)
        with pytest.raises(IndexError):
            ledger.device(16)
        ledger.close()
        with pytest.raises(hookcore_ext.LedgerError, match="closed"):
            ledger.devices()


def test_dra_hook_inspect(hookcore_ext: ModuleType, core_tests: CoreTests, tmp_path: Path) -> None:
    from dra.cli import app

    path = tmp_path / "claim.ledger"
    env = {**ENV, "HOOKCORE_LEDGER": str(path)}
    runner = CliRunner()
    with holder(core_tests, path, env, f"0:{768 * MiB}", f"1:{2 * GiB}") as pid:
        result = runner.invoke(app, ["hook", "inspect", str(path)], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        out = result.output
        assert "GPU-aaaa" in out and "1.00 GiB" in out and "768.00 MiB" in out and "256.00 MiB" in out
        assert "2.93 GiB" in out and "30%" in out  # 3000m quota, SM limit of device 1
        assert str(pid) in out and "live" in out
        result = runner.invoke(app, ["hook", "inspect", "--json", str(path)])
        assert result.exit_code == 0, result.output
        doc = json.loads(result.output)
        assert doc["devices"][0]["used"] == 768 * MiB and doc["devices"][0]["free"] == 256 * MiB
        assert doc["processes"][0]["pid"] == pid and doc["processes"][0]["used"] == {"0": 768 * MiB, "1": 2 * GiB}
    result = runner.invoke(app, ["hook", "inspect", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "dead" in result.output
    result = runner.invoke(app, ["hook", "inspect", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "cannot open ledger" in result.output


def test_dra_hook_config(hookcore_ext: ModuleType) -> None:
    from dra.cli import app

    runner = CliRunner()
    result = runner.invoke(app, ["hook", "config", "CUDA_DEVICE_MEMORY_LIMIT_1=3000m", "CUDA_DEVICE_SM_LIMIT=40"],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "2.93 GiB" in result.output and "40%" in result.output and "/tmp/hookcore-vgpu.ledger" in result.output
    result = runner.invoke(app, ["hook", "config", "CUDA_DEVICE_MEMORY_LIMIT=lots"])
    assert result.exit_code == 2 and 'CUDA_DEVICE_MEMORY_LIMIT="lots"' in result.output


def test_dra_hook_config_file(hookcore_ext: ModuleType, tmp_path: Path) -> None:
    from dra.cli import app

    runner = CliRunner()
    good = tmp_path / "vgpu" / "config"
    good.parent.mkdir()
    good.write_text("HOOKCORE_MEMORY_LIMIT_0=3000m\n")
    result = runner.invoke(app, ["hook", "config", "--file", str(good)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    flat = "".join(result.output.split())   # the title wraps at the terminal width
    assert "2.93GiB" in flat and "fromfile" in flat and f"{tmp_path}/vgpu/ledger" in flat
    good.write_text("CUDA_DEVICE_SM_LIMIT=40\n")
    result = runner.invoke(app, ["hook", "config", "--file", str(good)])
    assert result.exit_code == 2 and "line 1: unknown key CUDA_DEVICE_SM_LIMIT" in result.output
    result = runner.invoke(app, ["hook", "config", "--file", str(tmp_path / "none")])
    assert result.exit_code == 2 and "cannot read" in result.output


def test_claim_env_and_create_ledger(hookcore_ext: ModuleType, core_tests: CoreTests, tmp_path: Path) -> None:
    hc = hookcore_ext
    path = tmp_path / "claim.ledger"
    devices = [hc.DeviceQuota(0, 2 * GiB, 50, "GPU-one"), hc.DeviceQuota(1, None, 100, "GPU-two")]
    env = hc.claim_env(devices, str(path))
    assert env == {"HOOKCORE_LEDGER": str(path), "HOOKCORE_MEMORY_LIMIT_0": str(2 * GiB),
                   "HOOKCORE_COMPUTE_LIMIT_0": "50", "HOOKCORE_DEVICE_UUID_0": "GPU-one",
                   "HOOKCORE_DEVICE_UUID_1": "GPU-two"}
    with pytest.raises(hc.HookConfigError, match="every device has a UUID"):
        hc.claim_env([devices[0], hc.DeviceQuota(1, None, 100, None)], str(path))
    with pytest.raises(hc.HookConfigError, match="HOOKCORE_COMPUTE_LIMIT_0"):
        hc.claim_env([hc.DeviceQuota(0, GiB, 0, None)], str(path))
    hc.create_ledger(path, env, mode=0o666)
    assert path.stat().st_mode & 0o777 == 0o666
    with hc.Ledger(path) as ledger:
        assert ledger.processes() == [] and ledger.device(0).memory_limit == 2 * GiB
    hc.create_ledger(path, env)  # idempotent
    # a process of the claim opens it with the same environment; another config is refused while it lives
    with holder(core_tests, path, env, f"0:{GiB}"):
        other = {**env, "HOOKCORE_MEMORY_LIMIT_0": str(GiB)}
        with pytest.raises(hc.LedgerError, match="device 0 memory quota differs"):
            hc.create_ledger(path, other)
