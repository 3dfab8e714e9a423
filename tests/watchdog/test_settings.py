"""How the watchdog is configured: the claim's config (`watchdogAction`), the daemon's flags; bad
values are refused with the field and the fix named."""

from __future__ import annotations

import subprocess
import sys

import pytest

import dra
from dra._runtime.watchdog.model import WatchdogSettings
from drivers.hami_core_gpu.config import API_VERSION, GpuConfig
from drivers.hami_core_gpu.driver import HamiCoreGpuDriver


def params(**kw: object) -> dict[str, object]:
    return {"apiVersion": API_VERSION, "kind": "GpuConfig", **kw}


def test_the_claims_config_names_the_action() -> None:
    got = dra.decode_config(HamiCoreGpuDriver, params(watchdogAction="kill"))
    assert got == GpuConfig(watchdog_action="kill")
    assert dra.encode_config(HamiCoreGpuDriver, got)["watchdogAction"] == "kill"  # what the checkpoint keeps


@pytest.mark.parametrize("bad", ["explode", "KILL", "", 1, None, ["kill"]])
def test_a_bad_action_in_the_config_is_refused_naming_it(bad: object) -> None:
    if bad is None:  # null is "unset"
        assert dra.decode_config(HamiCoreGpuDriver, params(watchdogAction=None)) == GpuConfig()
        return
    with pytest.raises(dra.ConfigError, match="watchdogAction"):
        dra.decode_config(HamiCoreGpuDriver, params(watchdogAction=bad))


def test_daemon_settings_are_checked() -> None:
    for bad in ({"action": "nuke"}, {"interval": 0.0}, {"interval": 600.0}, {"memory_tolerance": -1},
                {"share_window": 0.5, "interval": 1.0}):
        with pytest.raises(ValueError, match="watchdog"):
            WatchdogSettings(**bad)  # type: ignore[arg-type]


def test_dra_run_refuses_a_bad_watchdog_flag() -> None:
    for args in (["--watchdog", "nuke"], ["--watchdog-memory-tolerance", "lots"], ["--watchdog-interval", "0"]):
        proc = subprocess.run([sys.executable, "-m", "dra.cli", "run", "hami-core-gpu", "--node-name", "n", *args],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and "--watchdog" in proc.stderr, (args, proc.stderr)


def test_a_tenants_claim_cannot_weaken_its_classs_action() -> None:
    """watchdogAction is marked with dra.strength: report < unset < taint < kill."""
    from dra._runtime.loosening import loosened

    kill = GpuConfig(watchdog_action="kill")
    assert [x.field for x in loosened(GpuConfig(watchdog_action="report"), kill)] == ["watchdogAction"]
    assert [x.field for x in loosened(GpuConfig(watchdog_action="taint"), kill)] == ["watchdogAction"]
    assert [x.field for x in loosened(GpuConfig(watchdog_action="report"), None)] == ["watchdogAction"]
    assert loosened(GpuConfig(watchdog_action="kill"), GpuConfig()) == []  # stricter: fine
    assert loosened(GpuConfig(watchdog_action="kill"), kill) == []
