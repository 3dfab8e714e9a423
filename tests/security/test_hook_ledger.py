"""Nothing a tenant can write decides its quota (issue 17, hook side).

The claim's container sees its config read-only and its ledger read-write (it must: every process
of the claim counts its usage there). These tests write what a hostile tenant would write, with
the real libvgpu.so in the processes of the claim, against the stub libcuda:

- a claim directory whose config is gone fails closed (it was dormant, i.e. unlimited);
- quota variables in the environment do not raise a config file's quota, nor lower the clock
  elasticity its strict cap charges;
  (these two for every hook library: libvgpu.so and libvhip.so, tests/security/hook_tenants.py)
- the ledger's limits raised and the process's own usage zeroed: the process is still refused past
  its quota (limits come from its own config; it counts its own usage and rewrites its slot);
- garbage, or another claim's ledger copied over, fails closed or is rebuilt from the config;
- the limiter's token balance written in a loop: the compute share still holds.
Each failed on 165651d (the ledger's limits were read at every admission, the bucket was only
the shared one, a missing config meant dormant).
"""

from __future__ import annotations

import mmap
import os
import struct
import subprocess
import threading
import time
from pathlib import Path

import pytest

import hookcore
from tests.hook.clients import client_env
from tests.hook.conftest import HookLibs, cc, client, hookcore_libs, testing_lib  # noqa: F401  (fixtures)
from tests.limiter_books import assert_at_most, assert_share, ran, virtual_preload
from tests.security.hook_tenants import REFUSED, Tenant, tenant  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20
OOM = 2
# core/internal.h: device records from 4096 (512 bytes each: mem_limit at 64, the limiter area at
# 256 with tokens at +8), process slots from 12288 (256 bytes each: used[] at 64, tag in bits 48+).
DEV0_MEM_LIMIT = 4096 + 64
DEV0_TOKENS = 4096 + 256 + 8
SLOTS, SLOT_SIZE, SLOT_USED = 12288, 256, 64
KERNEL_NS, BATCH = 1_000_000, 10   # hostile's 1 ms stub kernels, a sync every 10


@pytest.fixture(scope="module")
def hostile(hookcore_libs: HookLibs, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    return cc(tmp_path_factory.mktemp("hostile") / "hostile", str(ROOT / "tests/hook/c/hostile.c"), "-ldl")


def write_config(root: Path, text: str, stem: str = "vgpu") -> Path:
    d = root / stem
    d.mkdir(parents=True, exist_ok=True)
    (d / "config").write_text(text)
    return d


def test_claim_directory_without_config_fails_closed(tenant: Tenant, tmp_path: Path) -> None:  # noqa: F811
    (tmp_path / tenant.stem).mkdir()
    (tmp_path / tenant.stem / "ledger").write_bytes(b"")   # what a container keeps after deleting its config
    env = tenant.env(testing=True, HOOKCORE_TESTING_CONFIG_ROOT=str(tmp_path),
                     HOOKCORE_MEMORY_LIMIT_0="8Gi")   # an environment does not stand in for the claim
    proc = subprocess.run([str(tenant.program), "hold", "64M"], env=env, input="", capture_output=True, text=True,
                          timeout=30)
    assert f"HELD {REFUSED}" in proc.stdout, proc.stdout + proc.stderr   # not initialized: refused
    assert f"claim directory {tmp_path}/{tenant.stem} exists but has no config file" in proc.stderr
    assert "(fail closed)" in proc.stderr


def test_environment_cannot_raise_the_claims_quota(tenant: Tenant, tmp_path: Path) -> None:  # noqa: F811
    write_config(tmp_path, "HOOKCORE_MEMORY_LIMIT_0=256Mi\n", tenant.stem)
    legacy = tenant.legacy_memory   # HAMi's name for the quota, which this hook reads from an environment
    env = tenant.env(testing=True, HOOKCORE_TESTING_CONFIG_ROOT=str(tmp_path), HOOKCORE_MEMORY_LIMIT_0="8Gi",
                     HOOKCORE_MEMORY_LIMIT="8Gi", **{f"{legacy}_0": "8Gi", legacy: "8Gi"},
                     HOOKCORE_LEDGER=str(tmp_path / "mine"))
    proc = subprocess.run([str(tenant.program), "hold", "512M"], env=env, input="", capture_output=True, text=True,
                          timeout=30)
    assert f"HELD {OOM}" in proc.stdout, proc.stdout + proc.stderr
    assert not (tmp_path / "mine").exists()


@pytest.fixture(scope="module")
def nvml_clocks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tests' NVML double: it reports the stub's SM clock (STUB_SM_MHZ)."""
    d = tmp_path_factory.mktemp("nvml")
    cc(d / "libnvidia-ml.so.1", "-shared", "-fPIC", str(ROOT / "tests/hook/c/nvml_clocks.c"))
    return d


@pytest.mark.parametrize("file", [True, False], ids=["config-file", "environment-only"])
def test_environment_cannot_lower_the_strict_caps_clock_elasticity(
        client: Path, testing_lib: Path, hookcore_libs: HookLibs, nvml_clocks: Path,  # noqa: F811
        tmp_path: Path, file: bool) -> None:
    """A strict cap on a GPU whose clock never moves (1800 MHz, full load at 1200) charges the prior
    elasticity: the config file's 0.5 (factor 1 / (0.5 + 0.5 x 1200/1800) = 1.2). A tenant's
    HOOKCORE_COMPUTE_ELASTICITY_0=0 (charged its device time: the whole boost for free) is not read
    while the file exists; without a file the environment is the config, and its 0 is what is charged."""
    uuid = "GPU-57554201-0000-4000-8000-000000000000"
    quota = {"HOOKCORE_COMPUTE_LIMIT_0": "30", "HOOKCORE_COMPUTE_MODE_0": "strict", "HOOKCORE_COMPUTE_REF_MHZ_0": "1200",
             "HOOKCORE_DEVICE_UUID_0": uuid}
    if file:
        write_config(tmp_path, "".join(f"{k}={v}\n" for k, v in quota.items()) +
                     f"HOOKCORE_COMPUTE_ELASTICITY_0=0.5\nHOOKCORE_LEDGER={tmp_path / 'vgpu' / 'ledger'}\n")
        ledger = tmp_path / "vgpu" / "ledger"
    else:
        ledger = tmp_path / "mine"
    env = client_env(hookcore_libs, virtual_preload(testing_lib), HOOKCORE_TESTING_CONFIG_ROOT=str(tmp_path),
                     **quota, HOOKCORE_COMPUTE_ELASTICITY_0="0", HOOKCORE_LEDGER=str(tmp_path / "mine"),
                     STUB_SM_MHZ="1800", STUB_FULL_LOAD_MHZ="1200")
    env["LD_LIBRARY_PATH"] = f"{nvml_clocks}:{hookcore_libs.stub_dir}"
    proc = subprocess.run([str(client), "launch", "1000", "0", "0.5"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert file != (tmp_path / "mine").exists()  # the file's ledger, not the environment's
    with hookcore.Ledger(ledger) as led:
        books = led.limiter(0)
    assert not books.elastic_fit, books  # the clock never moved: nothing learned, the prior is charged
    assert (books.elastic_milli, books.factor_milli) == ((500, 1200) if file else (0, 1000)), books


def slot_of(ledger: Path, pid: int) -> int:
    data = ledger.read_bytes()
    for i in range(1024):
        off = SLOTS + i * SLOT_SIZE
        if struct.unpack_from("<i", data, off + 8)[0] == pid:
            return i
    raise AssertionError(f"no slot of pid {pid}")


def test_ledger_edits_grant_no_byte(hostile: Path, hookcore_libs: HookLibs, tmp_path: Path) -> None:  # noqa: F811
    ledger = tmp_path / "ledger"
    env = client_env(hookcore_libs, hookcore_libs.libvgpu, HOOKCORE_MEMORY_LIMIT_0="1Gi", HOOKCORE_LEDGER=str(ledger))
    p = subprocess.Popen([str(hostile), "hold", "768M"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdin is not None and p.stdout is not None
        assert p.stdout.readline().strip() == "SETUP 0"
        assert p.stdout.readline().strip() == "HELD 0"
        used_off = SLOTS + slot_of(ledger, p.pid) * SLOT_SIZE + SLOT_USED
        with ledger.open("r+b") as f, mmap.mmap(f.fileno(), 0) as m:
            struct.pack_into("<Q", m, DEV0_MEM_LIMIT, (1 << 64) - 1)       # the quota "raised" to unlimited
            word = struct.unpack_from("<Q", m, used_off)[0]
            assert word & ((1 << 48) - 1) == 768 * MiB
            struct.pack_into("<Q", m, used_off, word & ~((1 << 48) - 1))   # its usage zeroed, tag kept
        p.stdin.write("alloc 512M\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == f"RC {OOM}"                # 768 + 512 MiB > 1 GiB: refused
        word = struct.unpack_from("<Q", ledger.read_bytes(), used_off)[0]
        assert word & ((1 << 48) - 1) == 768 * MiB                       # and its slot rewritten from its count
        p.stdin.write("alloc 200M\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "RC 0"                     # what the quota holds still works
    finally:
        p.kill()
        p.wait(timeout=10)


def test_a_lowered_slot_mark_hides_no_process(hostile: Path, hookcore_libs: HookLibs,  # noqa: F811
                                              tmp_path: Path) -> None:
    """Two processes of the claim: the first holds 768 MiB in slot 0, the second (slot 1) is
    running; the slot high-water mark in the header is set to 0 so that admission would scan no
    slot. The second is still refused what the first holds (its own slot puts the mark back, and
    it keeps the highest mark it has read)."""
    ledger = tmp_path / "ledger"
    env = client_env(hookcore_libs, hookcore_libs.libvgpu, HOOKCORE_MEMORY_LIMIT_0="1Gi", HOOKCORE_LEDGER=str(ledger))
    procs = []
    try:
        for size in ("768M", "1M"):
            p = subprocess.Popen([str(hostile), "hold", size], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
            procs.append(p)
            assert p.stdin is not None and p.stdout is not None
            assert p.stdout.readline().strip() == "SETUP 0"
            assert p.stdout.readline().strip() == "HELD 0"
        with ledger.open("r+b") as f, mmap.mmap(f.fileno(), 0) as m:
            struct.pack_into("<I", m, 64, 0)   # hk__hdr.xslot_hwm
        second = procs[1]
        assert second.stdin is not None and second.stdout is not None
        second.stdin.write("alloc 512M\n")
        second.stdin.flush()
        assert second.stdout.readline().strip() == f"RC {OOM}"   # 768 + 1 + 512 MiB > 1 GiB
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=10)


def test_garbage_ledger_fails_closed(hostile: Path, hookcore_libs: HookLibs, tmp_path: Path) -> None:  # noqa: F811
    ledger = tmp_path / "ledger"
    ledger.write_bytes(os.urandom(268 * 1024))
    env = client_env(hookcore_libs, hookcore_libs.libvgpu, HOOKCORE_MEMORY_LIMIT_0="1Gi", HOOKCORE_LEDGER=str(ledger))
    proc = subprocess.run([str(hostile), "hold", "64M"], env=env, input="", capture_output=True, text=True,
                          timeout=30)
    assert "HELD 3" in proc.stdout and "(fail closed)" in proc.stderr, proc.stdout + proc.stderr


def test_another_claims_ledger_gives_its_limits_to_nobody(hostile: Path, hookcore_libs: HookLibs,  # noqa: F811
                                                          tmp_path: Path) -> None:
    """A copy of a generous claim's ledger over ours: our process still holds our own quota."""
    other, ours = tmp_path / "other", tmp_path / "ours"
    big = client_env(hookcore_libs, hookcore_libs.libvgpu, HOOKCORE_MEMORY_LIMIT_0="64Gi", HOOKCORE_LEDGER=str(other))
    setup = subprocess.run([str(hostile), "hold", "2G"], env=big, input="", capture_output=True, text=True, timeout=30)
    assert "HELD 0" in setup.stdout, setup.stdout + setup.stderr   # under the other claim's quota, 2 GiB is held
    copied = other.read_bytes()
    assert struct.unpack_from("<Q", copied, DEV0_MEM_LIMIT) == (64 << 30,)   # what the copy offers
    ours.write_bytes(copied)
    env = client_env(hookcore_libs, hookcore_libs.libvgpu, HOOKCORE_MEMORY_LIMIT_0="1Gi", HOOKCORE_LEDGER=str(ours))
    proc = subprocess.run([str(hostile), "hold", "2G"], env=env, input="", capture_output=True, text=True, timeout=30)
    assert f"HELD {OOM}" in proc.stdout, proc.stdout + proc.stderr


def test_written_tokens_do_not_lift_the_compute_share(hostile: Path, hookcore_libs: HookLibs,  # noqa: F811
                                                      tmp_path: Path) -> None:
    """On the host's clock (the writer is a thread of the test), so only bounds its load cannot
    break (issue 26): the process's own bucket, which no write reaches, let through no more than
    30% of the time it had, and held it back."""
    ledger = tmp_path / "ledger"
    env = client_env(hookcore_libs, hookcore_libs.libvgpu, HOOKCORE_MEMORY_LIMIT_0="1Gi",
                     HOOKCORE_COMPUTE_LIMIT_0="30", HOOKCORE_LEDGER=str(ledger))
    p = subprocess.Popen([str(hostile), "legacy", "async", "1000", "2"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    stop = threading.Event()
    writes = 0

    def tamper() -> None:   # a second process of the tenant: the bucket always full, and more
        nonlocal writes
        while not ledger.exists() or ledger.stat().st_size < DEV0_TOKENS + 8:
            if stop.wait(0.001):
                return
        with ledger.open("r+b") as f, mmap.mmap(f.fileno(), 0) as m:
            while not stop.is_set():
                struct.pack_into("<q", m, DEV0_TOKENS, 1 << 62)
                writes += 1
                time.sleep(0.0002)

    t = threading.Thread(target=tamper)
    t0 = time.monotonic_ns()
    t.start()
    try:
        out, err = p.communicate(timeout=60)
    finally:
        span = time.monotonic_ns() - t0
        stop.set()
        t.join()
    assert p.returncode == 0, out + err
    assert writes > 100
    assert_at_most([ran(out, KERNEL_NS, BATCH)], 30, span)
    with hookcore.Ledger(ledger) as led:
        assert led.limiter(0).throttled_ns > 0   # held back, the writes notwithstanding


def test_a_limiter_area_written_out_of_shape_still_limits(hostile: Path, hookcore_libs: HookLibs,  # noqa: F811
                                                          tmp_path: Path) -> None:
    """The limiter's version word overwritten before the claim's process starts: on 165651d the
    process took it for a foreign layout and ran without a limit."""
    ledger = tmp_path / "ledger"
    env = client_env(hookcore_libs, hookcore_libs.libvgpu, HOOKCORE_MEMORY_LIMIT_0="1Gi",
                     HOOKCORE_COMPUTE_LIMIT_0="30", HOOKCORE_LEDGER=str(ledger))
    hookcore.create_ledger(ledger, {k: v for k, v in env.items() if k.startswith("HOOKCORE_")})
    with ledger.open("r+b") as f:
        f.seek(DEV0_TOKENS - 8)   # the limiter area's version word
        f.write(b"\xde\xad\xbe\xef")
    env["LD_PRELOAD"] = virtual_preload(hookcore_libs.libvgpu)
    proc = subprocess.run([str(hostile), "legacy", "async", "1000", "1.5"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the limiter's books in the ledger are out of shape (a bucket of the process's own counts):
    # on the virtual clock the run itself shows its 30% (issue 26: no rate on the host's clock)
    assert_share([ran(proc.stdout, KERNEL_NS, BATCH)], 30)
