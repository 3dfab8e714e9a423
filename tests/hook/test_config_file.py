"""The container contract: `/run/hookcore/<stem>/config`, authoritative over the environment.

The library is run here as a workload would be: `shim_client` under LD_PRELOAD against the stub
driver. The config root is redirected with HOOKCORE_TESTING_CONFIG_ROOT, which only the test build
(`make testing`) honours; one test checks that the production build ignores it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import pytest

from tests.hook.clients import client_env

if TYPE_CHECKING:
    from tests.hook.conftest import HookLibs

MiB = 1 << 20
GiB = 1 << 30
CUDA_ERROR_NOT_INITIALIZED = 3


def write_config(root: Path, stem: str, text: str) -> Path:
    d = root / stem
    d.mkdir(parents=True, exist_ok=True)
    (d / "config").write_text(text)
    return d


def meminfo(client: Path, env: dict[str, str]) -> tuple[int, int]:
    proc = subprocess.run([str(client), "meminfo"], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("MEM "))
    free, total, _ = map(int, line.split()[1:])
    return free, total


# --------------------------------------------------------------------------------------------
# Python side: what the framework writes


def test_claim_env_and_config_file_text_round_trip(hookcore_ext: ModuleType) -> None:
    hc = hookcore_ext
    devices = [hc.DeviceQuota(0, 2 * GiB, 30, "GPU-11111111-2222-3333-4444-555555555555"),
               hc.DeviceQuota(1, None, 100, "GPU-66666666-7777-8888-9999-000000000000")]
    env = hc.claim_env(devices, "/run/hookcore/vgpu/ledger")
    assert all(k.startswith("HOOKCORE_") for k in env)  # neutral keys only
    text = hc.config_file_text(env)
    assert text.startswith("# ") and text.endswith("\n")
    assert "HOOKCORE_MEMORY_LIMIT_0=2147483648\n" in text and "HOOKCORE_COMPUTE_LIMIT_0=30\n" in text
    cfg = hc.parse_config({"HOOKCORE_MEMORY_LIMIT_0": "1"}, file_text=text, file_path="/run/hookcore/vgpu/config")
    assert cfg.origin == "file" and cfg.uuid_keyed and cfg.ledger_path == "/run/hookcore/vgpu/ledger"
    assert list(cfg.configured()) == devices


def test_the_device_sm_count_round_trips_and_the_file_ignores_the_environments(hookcore_ext: ModuleType) -> None:
    """DeviceQuota.device_sms -> HOOKCORE_DEVICE_SMS_<i> -> the library's parser; with the file there,
    a tenant's HOOKCORE_DEVICE_SMS_0 in the environment is not read (review 2026-12-04 #5)."""
    hc = hookcore_ext
    devices = [hc.DeviceQuota(0, None, 30, "GPU-11111111-2222-3333-4444-555555555555", device_sms=132),
               hc.DeviceQuota(1, None, 30, "GPU-66666666-7777-8888-9999-000000000000")]
    text = hc.config_file_text(hc.claim_env(devices, "/run/hookcore/vgpu/ledger"))
    assert "HOOKCORE_DEVICE_SMS_0=132\n" in text and "HOOKCORE_DEVICE_SMS_1" not in text
    cfg = hc.parse_config({"HOOKCORE_DEVICE_SMS_0": "4096", "HOOKCORE_DEVICE_SMS_1": "4096"}, file_text=text)
    assert [d.device_sms for d in cfg.configured()] == [132, None]
    assert hc.parse_config({"HOOKCORE_DEVICE_SMS_0": "78"}).devices[0].device_sms == 78  # no file: the environment's
    for bad in ("0", "4097", "013", "1.5", "x"):
        with pytest.raises(hc.HookConfigError, match=f'HOOKCORE_DEVICE_SMS_0="{re.escape(bad)}": expected the device'):
            hc.parse_config(file_text=f"HOOKCORE_DEVICE_SMS_0={bad}\n")
    with pytest.raises(hc.HookConfigError, match="set twice"):
        hc.parse_config(file_text="HOOKCORE_DEVICE_SMS_0=132\nHOOKCORE_DEVICE_SMS_0=132\n")


def test_the_clock_elasticity_round_trips_and_the_file_ignores_the_environments(hookcore_ext: ModuleType) -> None:
    """DeviceQuota.clock_elasticity -> HOOKCORE_COMPUTE_ELASTICITY_<i> (as the parser spells it: no
    exponent, at most 3 decimals) -> the library's parser -> the same value; with the file there, a
    tenant's lower HOOKCORE_COMPUTE_ELASTICITY_0 in the environment is not read."""
    hc = hookcore_ext
    uuids = [f"GPU-{i}1111111-2222-3333-4444-555555555555" for i in range(5)]
    values = [0.45, 1.0, 0.0, 0.005, 0.1 + 0.2]  # the last: a computed 0.30000000000000004, written 0.3
    devices = [hc.DeviceQuota(i, None, 30, u, strict=True, full_load_mhz=1500, clock_elasticity=v)
               for i, (u, v) in enumerate(zip(uuids, values, strict=True))]
    env = hc.claim_env(devices, "/run/hookcore/vgpu/ledger")
    assert [env[f"HOOKCORE_COMPUTE_ELASTICITY_{i}"] for i in range(5)] == ["0.45", "1", "0", "0.005", "0.3"]
    got = hc.claim_config(devices, "/run/hookcore/vgpu/ledger")  # its own check: parsed back as asked
    assert [d.clock_elasticity for d in got.config.configured()] == [0.45, 1.0, 0.0, 0.005, 0.3]
    assert [d.clock_elasticity for d in got.config.configured()] == \
        [hc.DeviceQuota.of(i, d).clock_elasticity for i, d in enumerate(devices)]
    cfg = hc.parse_config({"HOOKCORE_COMPUTE_ELASTICITY_0": "0", "HOOKCORE_COMPUTE_ELASTICITY_1": "0"},
                          file_text=got.text)
    assert [d.clock_elasticity for d in cfg.configured()][:2] == [0.45, 1.0]
    env0 = {"HOOKCORE_COMPUTE_LIMIT_0": "30", "HOOKCORE_COMPUTE_MODE_0": "strict", "HOOKCORE_COMPUTE_ELASTICITY_0": "0.2"}
    assert hc.parse_config(env0).devices[0].clock_elasticity == 0.2  # no file: the environment's
    assert hc.parse_config(file_text="HOOKCORE_COMPUTE_LIMIT_0=30\n").devices[0].clock_elasticity is None
    for garbage in ("0.4567", "1.5", "1.001", "2", ".5", "0.", "-0", "+0.5", "4.5e-1", "0,45", " 0.45", "nan", ""):
        with pytest.raises(hc.HookConfigError, match=f'HOOKCORE_COMPUTE_ELASTICITY_0="{re.escape(garbage)}": expected a'
                                                     " clock elasticity"):
            hc.parse_config(file_text=f"HOOKCORE_COMPUTE_LIMIT_0=30\nHOOKCORE_COMPUTE_ELASTICITY_0={garbage}\n")
    for bad in (1.5, -0.1, 0.4567, float("nan"), float("inf")):
        with pytest.raises(hc.HookConfigError, match=r"clock elasticity .*: expected a number from 0 to 1 with at most 3"):
            hc.claim_env([hc.DeviceQuota(0, None, 30, None, strict=True, clock_elasticity=bad)], "/x/ledger")


def test_config_file_text_refuses_what_the_library_would(hookcore_ext: ModuleType) -> None:
    hc = hookcore_ext
    with pytest.raises(hc.HookConfigError, match="unknown key CUDA_DEVICE_MEMORY_LIMIT_0"):
        hc.config_file_text({"CUDA_DEVICE_MEMORY_LIMIT_0": "1Gi"})   # the file takes neutral keys only
    with pytest.raises(hc.HookConfigError, match="line breaks"):
        hc.config_file_text({"HOOKCORE_LEDGER": "/x\nHOOKCORE_MEMORY_LIMIT_0=1"})
    with pytest.raises(hc.HookConfigError, match=r'line 2: HOOKCORE_MEMORY_LIMIT_0="lots"'):
        hc.config_file_text({"HOOKCORE_MEMORY_LIMIT_0": "lots"})


@pytest.mark.parametrize("text,needle", [
    ("HOOKCORE_MEMORY_LIMIT_0=1Gi\nHOOKCORE_MEMORY_LIMIT_0=2Gi\n", "line 2: HOOKCORE_MEMORY_LIMIT_0=\"2Gi\": set twice"),
    ("HOOKCORE_MEMORY_LIMIT_0 =1Gi\n", "no spaces around '='"),
    ("HOOKCORE_MEMORY_LIMIT_0=1Gi\ngarbage\n", "line 2: \"garbage\" is not a KEY=VALUE line"),
    ("HOOKCORE_MEMORY_LIMITS_0=1Gi\n", "unknown key HOOKCORE_MEMORY_LIMITS_0"),
    ("HOOKCORE_COMPUTE_LIMIT_0=0\n", "0 is not a valid compute share"),
    ("HOOKCORE_DEVICE_UUID_0=GPU-a\nHOOKCORE_DEVICE_UUID_1=gpu-A\n", "same device as HOOKCORE_DEVICE_UUID_0"),
])
def test_parse_config_file_errors(hookcore_ext: ModuleType, text: str, needle: str) -> None:
    with pytest.raises(hookcore_ext.HookConfigError) as exc:
        hookcore_ext.parse_config(file_text=text, file_path="/run/hookcore/vgpu/config")
    msg = str(exc.value)
    assert msg.startswith("config file /run/hookcore/vgpu/config") and needle in msg and "\n" not in msg


def test_comments_blank_lines_and_crlf(hookcore_ext: ModuleType) -> None:
    cfg = hookcore_ext.parse_config(file_text="# a claim\r\n\r\nHOOKCORE_MEMORY_LIMIT_0=1Gi\r\n",
                                    file_path="/d/config")
    assert cfg.devices[0].memory == GiB and cfg.ledger_path == "/d/ledger"


def test_library_stem_and_container_path(hookcore_ext: ModuleType) -> None:
    hc = hookcore_ext
    assert hc.library_stem("/usr/lib/hookcore/libvgpu.so") == "vgpu"
    assert hc.library_stem("libvnpu.so.1") == "vnpu"
    assert str(hc.container_config_path("libvgpu.so")) == "/run/hookcore/vgpu/config"
    for bad in ("vgpu.so", "libVGPU.so", "lib.so", "libvgpu.sox", "libvgpu"):
        with pytest.raises(hc.HookConfigError, match="not a hook library name"):
            hc.library_stem(bad)


# --------------------------------------------------------------------------------------------
# The library in a process


def test_file_is_authoritative_over_the_environment(client: Path, hookcore_libs: HookLibs, testing_lib: Path,
                                                    tmp_path: Path) -> None:
    write_config(tmp_path, "vgpu", "HOOKCORE_MEMORY_LIMIT_0=128Mi\n")
    env = client_env(hookcore_libs, testing_lib, HOOKCORE_TESTING_CONFIG_ROOT=str(tmp_path),
                     CUDA_DEVICE_MEMORY_LIMIT="64Mi", HOOKCORE_MEMORY_LIMIT_0="1Gi",
                     CUDA_DEVICE_MEMORY_SHARED_CACHE=str(tmp_path / "tenant.ledger"))
    assert meminfo(client, env) == (128 * MiB, 128 * MiB)
    assert (tmp_path / "vgpu" / "ledger").exists()          # the default ledger: next to the config
    assert not (tmp_path / "tenant.ledger").exists()        # the environment's ledger path is ignored too


def test_clean_environment_child_still_gets_the_claim(client: Path, hookcore_libs: HookLibs, testing_lib: Path,
                                                      tmp_path: Path) -> None:
    """What su/ssh/env -i do: no quota variable survives, the file still applies."""
    write_config(tmp_path, "vgpu", "HOOKCORE_MEMORY_LIMIT_0=96Mi\n")
    env = {"LD_PRELOAD": str(testing_lib), "LD_LIBRARY_PATH": str(hookcore_libs.stub_dir),
           "HOOKCORE_TESTING_CONFIG_ROOT": str(tmp_path)}
    assert meminfo(client, env) == (96 * MiB, 96 * MiB)


@pytest.mark.parametrize("text", ["HOOKCORE_MEMORY_LIMIT_0=12x\n", "NOT A LINE\n", "HOOKCORE_LEDGER=rel\n",
                                  "HOOKCORE_MEMORY_LIMIT_0=1Gi\x00\n", "HOOKCORE_DEVICE_SMS_0=0\n"])
def test_garbage_in_the_file_fails_closed_with_one_line(client: Path, hookcore_libs: HookLibs,
                                                        testing_lib: Path, tmp_path: Path, text: str) -> None:
    write_config(tmp_path, "vgpu", text)
    env = client_env(hookcore_libs, testing_lib, HOOKCORE_TESTING_CONFIG_ROOT=str(tmp_path),
                     CUDA_DEVICE_MEMORY_LIMIT="1Gi")   # a good environment does not rescue a bad file
    proc = subprocess.run([str(client), "init"], env=env, capture_output=True, text=True, timeout=30)
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("INIT"))
    assert line == f"INIT {CUDA_ERROR_NOT_INITIALIZED} ALLOC {CUDA_ERROR_NOT_INITIALIZED} LAUNCH 3"
    messages = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(messages) == 1, proc.stderr
    assert messages[0].startswith(f"hookcore: config file {tmp_path}/vgpu/config")
    assert "(fail closed)" in messages[0]


def test_unreadable_file_fails_closed(client: Path, hookcore_libs: HookLibs, testing_lib: Path,
                                      tmp_path: Path) -> None:
    (tmp_path / "vgpu" / "config").mkdir(parents=True)   # exists, but is no file
    env = client_env(hookcore_libs, testing_lib, HOOKCORE_TESTING_CONFIG_ROOT=str(tmp_path))
    proc = subprocess.run([str(client), "init"], env=env, capture_output=True, text=True, timeout=30)
    assert "INIT 3 ALLOC 3" in proc.stdout and "is not a regular file" in proc.stderr


def test_no_configuration_is_dormant(client: Path, hookcore_libs: HookLibs, testing_lib: Path,
                                     tmp_path: Path) -> None:
    env = client_env(hookcore_libs, testing_lib, HOOKCORE_TESTING_CONFIG_ROOT=str(tmp_path),
                     STUB_CUDA_MEMORY="8Gi", HOOKCORE_LOG="debug")
    proc = subprocess.run([str(client), "quota", "1024M"], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OK meminfo total=8589934592" in proc.stdout     # the driver's own figures
    assert "dormant" in proc.stderr
    assert not any(tmp_path.iterdir())                      # no ledger anywhere
    assert "configured from" not in proc.stderr and "ledger index" not in proc.stderr  # no device mapping either


def test_environment_is_used_without_a_file(client: Path, hookcore_libs: HookLibs, testing_lib: Path,
                                            tmp_path: Path) -> None:
    base = dict(HOOKCORE_TESTING_CONFIG_ROOT=str(tmp_path), HOOKCORE_LEDGER=str(tmp_path / "l"))
    assert meminfo(client, client_env(hookcore_libs, testing_lib, HOOKCORE_MEMORY_LIMIT_0="48Mi", **base)) == \
        (48 * MiB, 48 * MiB)
    assert meminfo(client, client_env(hookcore_libs, testing_lib, CUDA_DEVICE_MEMORY_LIMIT_0="48Mi", **base)) == \
        (48 * MiB, 48 * MiB)


def test_production_build_has_no_test_knob(client: Path, hookcore_libs: HookLibs, tmp_path: Path) -> None:
    write_config(tmp_path, "vgpu", "HOOKCORE_MEMORY_LIMIT_0=128Mi\n")
    env = client_env(hookcore_libs, hookcore_libs.libvgpu, HOOKCORE_TESTING_CONFIG_ROOT=str(tmp_path),
                     STUB_CUDA_MEMORY="8Gi")
    assert meminfo(client, env) == (8 * GiB, 8 * GiB)       # /run/hookcore/vgpu/config does not exist here
    assert b"HOOKCORE_TESTING_CONFIG_ROOT" not in hookcore_libs.libvgpu.read_bytes()


def test_stem_comes_from_the_file_name(client: Path, hookcore_libs: HookLibs, testing_lib: Path,
                                       tmp_path: Path) -> None:
    """A copy named libfoo.so reads foo/config and not vgpu/config."""
    renamed = tmp_path / "libs" / "libfoo.so"
    renamed.parent.mkdir()
    shutil.copy(testing_lib, renamed)
    write_config(tmp_path, "vgpu", "HOOKCORE_MEMORY_LIMIT_0=32Mi\n")
    write_config(tmp_path, "foo", "HOOKCORE_MEMORY_LIMIT_0=80Mi\n")
    env = client_env(hookcore_libs, renamed, HOOKCORE_TESTING_CONFIG_ROOT=str(tmp_path))
    assert meminfo(client, env) == (80 * MiB, 80 * MiB)


def test_claim_config_parses_once_and_refuses_a_file_that_enforces_other_quotas(
        hookcore_ext: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`claim_config` is `claim_env` + `config_file_text` with one parse (of the file, as the
    library reads it); a file the library would read as other quotas than asked is refused."""
    hc = hookcore_ext
    quotas = [hc.DeviceQuota(0, 2 * GiB, 30, "GPU-11111111-2222-3333-4444-555555555555", strict=True, full_load_mhz=1500,
                             context_memory=300 * MiB, device_sms=132)]
    before = hc.parse_count()
    got = hc.claim_config(quotas, "/run/hookcore/vgpu/ledger", file_path="/run/hookcore/vgpu/config")
    assert hc.parse_count() - before == 1
    assert got.settings == hc.claim_env(quotas, "/run/hookcore/vgpu/ledger")
    assert got.text == hc.config_file_text(got.settings)
    assert got.config.origin == "file" and list(got.config.configured()) == quotas
    before = hc.parse_count()
    hc.create_ledger(tmp_path / "ledger", got.config)   # from the parse: none more
    assert hc.parse_count() == before
    with hc.Ledger(tmp_path / "ledger") as ledger:
        assert (ledger.device(0).memory_limit, ledger.device(0).sm_limit) == (2 * GiB, 30)
    dropped = hc._file_text
    monkeypatch.setattr(hc, "_file_text", lambda env: dropped({k: v for k, v in env.items() if "MEMORY_LIMIT" not in k}))
    with pytest.raises(hc.HookConfigError, match=r"quota 0 .* would be enforced as .*memory=None"):
        hc.claim_config(quotas, "/run/hookcore/vgpu/ledger")
