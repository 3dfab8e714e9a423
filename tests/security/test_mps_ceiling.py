"""The hook's compute limit under MPS is a ceiling on SM x time that a tenant cannot lift, and that
does not limit an honest client twice (review 2026-12-04 #5, runtime half).

Under MPS the claim's cores go to CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (the tenant's environment: it
may raise it) and to the hook's read-only config (tests/security/test_mps_sharing.py). On the H200
the two limits stacked: MPS 30% alone gave 39.2% of native matmul throughput, MPS 30% + hook 30
gave 11.7%, and a tenant that raised its percentage to 100 got 35.5% (bench/results/
h200-2026-12-04-mps-mounts): an honest client did worse than a cheating one. Now each batch of
kernels costs its device time x the share of the device's SMs its context may use: the SMs the
driver gives the context (cuCtxGetExecAffinity) over the device's SM count in the claim's read-only
config (HOOKCORE_DEVICE_SMS_<i>, the daemon's NVML reading). Not over CUDA's MULTIPROCESSOR_COUNT:
inside an MPS client the H200's driver answers the client's provisioned count there too (38 of 132
at 30%, bench/results/h200-2026-12-04-round2/mps-mounts.md), the fraction is 1 and the honest
client is throttled twice (11.5% of native); the stub libcuda answers so too, and
`test_without_the_device_sm_count_an_honest_mps_client_is_throttled_twice` records it. With the
count, the honest client is charged 0.3 x its time and runs as MPS lets it, and every way a tenant
has to change that share ends in a full charge:

- raise the percentage in its environment: the driver gives it every SM, and it is charged so;
- start honest, raise the percentage and reset (or release) its primary context: the new context
  reads the environment again under the same handle; the hook forgets the share it cached;
- launch onto a stream of a context with every SM while a context of few SMs is current: work on
  another context's stream is charged in full;
- claim the device has more SMs (HOOKCORE_DEVICE_SMS_0 in its environment): the config file is
  authoritative, the environment's keys are ignored; a count in the file below the context's SMs
  (a stale or wrong reading) charges in full, and a malformed one fails closed;
- make its copies cheap by asking for 1% of the SMs, or by interleaving them with kernels on one
  stream: copies and memsets are charged in full (the copy engines are not the SMs), in batches of
  their own.

On the stub libcuda acting as an MPS client (hookcore/stub/README.md), on the virtual clock and the
limiter's books (tests/limiter_books.py); the honest and the fail-safe cases of the charge are in
tests/hook/test_shim_stub.py and tests/hook/test_strict_cap.py.
"""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import pytest

import hookcore
from tests.hook.clients import client_env
from tests.hook.conftest import HookLibs, cc, client, hookcore_libs, testing_lib  # noqa: F401  (fixtures)
from tests.limiter_books import Run, assert_held, assert_share, ran, virtual_preload

ROOT = Path(__file__).resolve().parents[2]
UUID0 = "GPU-57554201-0000-4000-8000-000000000000"
US = 300  # a 0.3 ms stub kernel on all 100 SMs; 1 ms on 30 of them
ON_30 = 1_000_000
ON_ALL = US * 1000
BATCH = 10  # the clients sync every 10 launches
DEV0_LIMITER = 4096 + 256  # device 0's limiter area in the ledger (hookcore/INTERFACE-NOTES.md)


@pytest.fixture(scope="module")
def hostile(hookcore_libs: HookLibs, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    return cc(tmp_path_factory.mktemp("hostile") / "hostile", str(ROOT / "tests/hook/c/hostile.c"), "-ldl")


def claim_config(root: Path, ledger: Path, device_sms: int | None) -> Path:
    """The claim's config as the daemon writes it (hookcore's writer): 30 cores on device 0 and, when
    given, the device's SM count (the NVIDIA driver's NVML reading)."""
    text = hookcore.config_file_text(hookcore.claim_env(
        [hookcore.DeviceQuota(0, None, 30, None, device_sms=device_sms)], str(ledger)))
    (root / "vgpu").mkdir(parents=True, exist_ok=True)
    (root / "vgpu" / "config").write_text(text)
    return root / "vgpu" / "config"


def tenant(program: Path, libs: HookLibs, tmp_path: Path, *args: str, percent: int | None = 30,
           device_sms: int | None = 100, lib: Path | None = None,
           **env: str) -> tuple[dict[str, list[str]], hookcore.LimiterUsage]:
    """`program args` as a claim's process at 30 cores on a 100-SM stub GPU, an MPS client at
    `percent` (None: no MPS), on the virtual clock: its output lines by first word, the claim's books.
    The claim's config is a file, as the daemon mounts it, giving the device's SMs (`device_sms`,
    None: not given); `lib` is the test build that reads it (None: the production build, with the
    limit in the environment, as before the daemon gave the count)."""
    mps = {} if percent is None else {"CUDA_MPS_PIPE_DIRECTORY": "/nonexistent/mps-pipe",
                                      "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(percent)}
    ledger = tmp_path / "ledger"
    if lib is None:
        config = {"HOOKCORE_COMPUTE_LIMIT_0": "30", "HOOKCORE_LEDGER": str(ledger)}
    else:
        claim_config(tmp_path / "root", ledger, device_sms)
        config = {"HOOKCORE_TESTING_CONFIG_ROOT": str(tmp_path / "root")}
    e = client_env(libs, virtual_preload(lib or libs.libvgpu), HOOKCORE_STUB_DEVICES=f"uuid={UUID0},sms=100",
                   **config, **mps, **env)
    proc = subprocess.run([str(program), *args], env=e, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "FAIL" not in proc.stdout, proc.stdout + proc.stderr
    out: dict[str, list[str]] = {}
    for line in proc.stdout.splitlines():
        word, _, rest = line.partition(" ")
        out.setdefault(word, []).append(rest)
    with hookcore.Ledger(tmp_path / "ledger") as ledger:
        return out, ledger.limiter(0)


def phase(line: str, work_ns: int) -> Run:
    _, count, ns = line.split()
    return Run(int(count), int(ns), work_ns, BATCH)


def test_a_tenant_that_raised_its_mps_percentage_is_held_to_the_claims_share(hostile: Path, hookcore_libs: HookLibs, testing_lib: Path,  # noqa: F811
                                                                            tmp_path: Path) -> None:
    """MPS at 100% (the tenant's environment) under the claim's 30 cores: every SM, charged in full,
    30% of the device's time: 30% of its SM x time, what the hook alone gives."""
    out, books = tenant(hostile, hookcore_libs, tmp_path, "kernels", str(US), "1.5", percent=100, lib=testing_lib)
    assert books.sm_ppm == hookcore.SM_PPM_FULL, books
    assert_held(books, [ran("RAN " + out["RAN"][0], ON_ALL, BATCH)], 30)


def test_an_honest_mps_client_beside_it_runs_as_mps_lets_it(hostile: Path, hookcore_libs: HookLibs, testing_lib: Path,  # noqa: F811
                                                            tmp_path: Path) -> None:
    """The happy case of the one above: at its claim's 30% it is charged 0.3 x its time and never waits."""
    out, books = tenant(hostile, hookcore_libs, tmp_path, "kernels", str(US), "1.5", percent=30, lib=testing_lib)
    got = ran("RAN " + out["RAN"][0], ON_30, BATCH)
    assert got.device_ns == got.elapsed_ns and books.throttled_ns == 0 and books.sm_ppm == 300_000, (got, books)


def test_a_primary_context_reset_after_raising_the_percentage_is_charged_in_full(
        hostile: Path, hookcore_libs: HookLibs, testing_lib: Path, tmp_path: Path) -> None:  # noqa: F811
    """Honest at 30% first (the share is cached for the primary context), then the percentage raised
    to 100 and the primary context reset: the same handle, a new context with every SM. The reset
    makes the hook ask the driver again: the second half is held to 30% of the time."""
    out, books = tenant(hostile, hookcore_libs, tmp_path, "mpsreset", str(US), "1.0", "100", percent=30, lib=testing_lib)
    assert out["RESET"] == ["0"], out
    first, second = phase(out["PHASE"][0], ON_30), phase(out["PHASE"][1], ON_ALL)
    assert first.device_ns == first.elapsed_ns, first  # honest: never waited
    assert books.sm_ppm == hookcore.SM_PPM_FULL, books  # the last batches: every SM
    assert_share([second], 30)  # within two batches and the burst: 30% of the device's time
    rounding = (first.device_ns + second.device_ns) // 1_000_000 + 1_000
    assert books.charged_ns >= 0.3 * first.device_ns + second.device_ns - second.batch_ns - rounding, books


@pytest.mark.parametrize("stream", ["own", "foreign"])
def test_work_on_another_contexts_stream_is_charged_in_full(hostile: Path, hookcore_libs: HookLibs, testing_lib: Path, tmp_path: Path,  # noqa: F811
                                                            stream: str) -> None:
    """A context limited to 30 SMs (cuCtxCreate_v3 with an SM count) is current. Launching onto its own
    stream, the work runs on its 30 SMs and is charged 0.3 x its time (happy: never waits). Launching
    onto a stream of the primary context, the work runs on every SM: charged in full, held to 30%."""
    out, books = tenant(hostile, hookcore_libs, tmp_path, "affinity", "30", str(US), "1.5", stream, percent=None,
                        lib=testing_lib)
    assert out["CTX"] == ["0"], out
    if stream == "own":
        got = ran("RAN " + out["RAN"][0], ON_30, BATCH)
        assert got.device_ns == got.elapsed_ns and books.throttled_ns == 0 and books.sm_ppm == 300_000, (got, books)
    else:
        assert books.sm_ppm == hookcore.SM_PPM_FULL, books
        assert_held(books, [ran("RAN " + out["RAN"][0], ON_ALL, BATCH)], 30)


@pytest.mark.parametrize("percent", [1, 30])
def test_copies_are_charged_in_full_whatever_the_mps_share(client: Path, hookcore_libs: HookLibs, testing_lib: Path,  # noqa: F811
                                                           tmp_path: Path, percent: int) -> None:
    """An MPS client that asks for 1% of the SMs (or its honest 30%) to make its copies cheap: a copy
    is charged its whole device time (the copy engines are not partitioned), so 1 MB device-to-device
    copies get 30% of the device's time, as without MPS (tests/hook/test_copies.py)."""
    out, books = tenant(client, hookcore_libs, tmp_path, "copy", "dtod-async", "1000000", "1.5", percent=percent,
                        lib=testing_lib, STUB_COPY_MBPS="1000")
    assert books.sm_ppm == hookcore.SM_PPM_FULL and books.charged_ns == books.device_ns, books
    assert_held(books, [ran("RAN " + out["RAN"][0], 1_000_000, BATCH)], 30)


def test_copies_interleaved_with_kernels_are_charged_in_full(hostile: Path, hookcore_libs: HookLibs, testing_lib: Path,  # noqa: F811
                                                             tmp_path: Path) -> None:
    """A kernel (1 ms on its 30 SMs) then a 1 MB copy (1 ms), on one stream, at MPS 30%: the kernel
    is charged 0.3 ms, the copy 1 ms (a batch of its own), so 1.3 ms per 2 ms of device time and the
    pair gets 30 / 0.65 = 46% of the device's time; in one batch the copy would have cost 0.3 ms."""
    out, books = tenant(hostile, hookcore_libs, tmp_path, "mixed", str(US), "1000000", "1.5", lib=testing_lib,
                        STUB_COPY_MBPS="1000")
    got = ran("RAN " + out["RAN"][0], 1_000_000, 2 * BATCH)  # every submission takes 1 ms
    assert abs(books.charged_ns / books.device_ns - 0.65) < 0.01, books
    assert_share([got], 30, charge=0.65)


def test_the_sm_fraction_in_the_ledger_is_statistics_never_read_back(hostile: Path, hookcore_libs: HookLibs, testing_lib: Path,  # noqa: F811
                                                                     tmp_path: Path) -> None:
    """The ledger is the tenant's to write. Its limiter area shows the SM fraction of the last charge
    and the device time charged (offsets 56 and 48), but the hook charges from the driver's answer
    only: a ledger made with 1 millionth planted there holds a client on every SM to 30%."""
    ledger = tmp_path / "ledger"
    hookcore.create_ledger(ledger, {"HOOKCORE_COMPUTE_LIMIT_0": "30", "HOOKCORE_LEDGER": str(ledger)})
    with ledger.open("r+b") as f:
        f.seek(DEV0_LIMITER + 48)
        f.write(struct.pack("<qI", 1 << 40, 1))
    out, books = tenant(hostile, hookcore_libs, tmp_path, "kernels", str(US), "1.5", percent=100, lib=testing_lib)
    assert books.sm_ppm == hookcore.SM_PPM_FULL, books  # overwritten by the first charge
    assert books.device_ns > 1 << 40, books  # the planted figure was there all along (added to)
    assert_held(books, [ran("RAN " + out["RAN"][0], ON_ALL, BATCH)], 30)



def test_without_the_device_sm_count_an_honest_mps_client_is_throttled_twice(
        hostile: Path, hookcore_libs: HookLibs, testing_lib: Path, tmp_path: Path) -> None:  # noqa: F811
    """The H200's measured behaviour, reproduced (bench/results/h200-2026-12-04-round2/mps-mounts.md:
    11.5% of native at MPS 30% + hook 30, against ~38% with MPS alone): a config without
    HOOKCORE_DEVICE_SMS_0 leaves the hook CUDA's MULTIPROCESSOR_COUNT, which inside an MPS client
    answers the client's own 30 SMs, the same as cuCtxGetExecAffinity. The fraction is 1: the
    honest client's every microsecond is charged, on top of MPS's 30 SMs it is held to 30% of the
    time. Fail safe (a full charge), never a loosened one; the count in the config is the fix."""
    out, books = tenant(hostile, hookcore_libs, tmp_path, "kernels", str(US), "1.5", percent=30, device_sms=None,
                        lib=testing_lib)
    assert books.sm_ppm == hookcore.SM_PPM_FULL and books.throttled_ns > 0, books
    assert_held(books, [ran("RAN " + out["RAN"][0], ON_30, BATCH)], 30)


def test_a_device_sm_count_below_the_contexts_charges_in_full(
        hostile: Path, hookcore_libs: HookLibs, testing_lib: Path, tmp_path: Path) -> None:  # noqa: F811
    """A count in the config below the SMs the driver gives the context (a wrong or stale reading: 20,
    with the MPS client's 30 SMs): the fraction would exceed the whole, so the charge is the full
    device time, as for any answer the hook cannot make sense of."""
    out, books = tenant(hostile, hookcore_libs, tmp_path, "kernels", str(US), "1.5", percent=30, device_sms=20,
                        lib=testing_lib)
    assert books.sm_ppm == hookcore.SM_PPM_FULL, books
    assert_held(books, [ran("RAN " + out["RAN"][0], ON_30, BATCH)], 30)


def test_a_tenant_cannot_enlarge_the_device_through_its_environment(
        hostile: Path, hookcore_libs: HookLibs, testing_lib: Path, tmp_path: Path) -> None:  # noqa: F811
    """A tenant at MPS 100% that sets HOOKCORE_DEVICE_SMS_0=1000 (its 100 SMs would be charged at a
    tenth): the claim's config file exists, so the environment's keys are ignored and it is charged
    every SM against the file's 100, held to 30% of the device's time."""
    out, books = tenant(hostile, hookcore_libs, tmp_path, "kernels", str(US), "1.5", percent=100, lib=testing_lib,
                        HOOKCORE_DEVICE_SMS_0="1000", HOOKCORE_COMPUTE_LIMIT_0="100")
    assert books.sm_ppm == hookcore.SM_PPM_FULL, books
    assert_held(books, [ran("RAN " + out["RAN"][0], ON_ALL, BATCH)], 30)


@pytest.mark.parametrize("value", ["0", "4097", "0132", "132 ", "-1", "1e2", "0x84", ""])
def test_a_malformed_device_sm_count_fails_closed(client: Path, hookcore_libs: HookLibs, testing_lib: Path,  # noqa: F811
                                                  tmp_path: Path, value: str) -> None:
    """Garbage in HOOKCORE_DEVICE_SMS_0 (the daemon's file, never the tenant's) fails closed like any bad
    key of the config file: nothing initialises, one line names the key, and no default is guessed."""
    root = tmp_path / "root"
    config = claim_config(root, tmp_path / "ledger", 100)
    config.write_text(config.read_text().replace("HOOKCORE_DEVICE_SMS_0=100", f"HOOKCORE_DEVICE_SMS_0={value}"))
    env = client_env(hookcore_libs, testing_lib, HOOKCORE_TESTING_CONFIG_ROOT=str(root),
                     HOOKCORE_STUB_DEVICES=f"uuid={UUID0},sms=100")
    proc = subprocess.run([str(client), "init"], env=env, capture_output=True, text=True, timeout=30)
    assert "INIT 3 ALLOC 3" in proc.stdout, proc.stdout + proc.stderr
    assert f'HOOKCORE_DEVICE_SMS_0="{value}"' in proc.stderr and "(fail closed)" in proc.stderr, proc.stderr
