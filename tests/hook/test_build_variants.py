"""libvgpu.so in every build variant: optimisation levels and sanitizers.

- `OPT=-O0 ... -Os`: the dlsym interposer keeps RTLD_NEXT's meaning (the trampoline does not
  depend on the compiler emitting a tail call) and the cuGetProcAddress/dlsym paths still work.
- `SAN=thread` and `SAN=address,undefined`: the library and a client built with the same sanitizer
  run the multi-threaded workload (dlsym, cuGetProcAddress, alloc/free, metered launches, contexts
  created and destroyed while other threads launch, NVML), the
  8-process quota stress and kill -9 mid-allocation; any sanitizer report fails the test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.hook.clients import SHIM_CLIENT_SOURCES, build_rtld_next, client_env
from tests.hook.conftest import BUILD, ROOT, make

if TYPE_CHECKING:
    from tests.hook.conftest import HookLibs

MiB = 1 << 20
STUB_UUID = "GPU-57554201-0000-4000-8000-0000000000{:02x}".format
SAN_ENV = {"TSAN_OPTIONS": "halt_on_error=1 exitcode=66 report_signal_unsafe=0",
           "ASAN_OPTIONS": "verify_asan_link_order=0 detect_leaks=0 halt_on_error=1 exitcode=66",
           "UBSAN_OPTIONS": "halt_on_error=1 exitcode=66 print_stacktrace=1"}


def variant_lib(name: str, *make_vars: str) -> Path:
    make(f"BUILD={BUILD / name}", *make_vars, "hooklibs")
    return BUILD / name / "libvgpu.so"


def compile_client(out: Path, *flags: str) -> Path:
    proc = subprocess.run(["cc", "-O1", "-g", "-Wall", "-Werror", *flags, "-o", str(out),
                           *SHIM_CLIENT_SOURCES, "-ldl", "-lpthread"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O3", "-Os"])
def test_rtld_next_and_resolution_at_every_optimisation_level(hookcore_libs: HookLibs, client: Path,
                                                              tmp_path: Path, opt: str) -> None:
    lib = variant_lib(f"opt{opt}", f"OPT={opt}")
    build_rtld_next(tmp_path, ROOT / "tests/hook/c/rtld_next.c")
    proc = subprocess.run([str(tmp_path / "next")], env={"LD_LIBRARY_PATH": str(tmp_path), "LD_PRELOAD": str(lib)},
                          capture_output=True, text=True)
    assert proc.stdout.strip() == "NEXT 2", proc.stdout + proc.stderr
    env = client_env(hookcore_libs, lib, CUDA_DEVICE_MEMORY_LIMIT="64Mi",
                     CUDA_DEVICE_MEMORY_SHARED_CACHE=str(tmp_path / "l"))
    proc = subprocess.run([str(client), "resolve"], env=env, capture_output=True, text=True, timeout=30)
    # owner() in the client compares library names: the variant is called libvgpu.so too
    assert proc.returncode == 0 and "OK dlsym path" in proc.stdout, proc.stdout + proc.stderr


SANITIZERS = {"tsan": ("thread", ["-fsanitize=thread"]),
              "asan": ("address,undefined", ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"])}


@pytest.fixture(scope="module", params=sorted(SANITIZERS))
def sanitized(request: pytest.FixtureRequest, hookcore_libs: HookLibs,
              tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, Path]:
    name = request.param
    san, flags = SANITIZERS[name]
    lib = variant_lib(f"san-{name}", f"SAN={san}")
    client = compile_client(tmp_path_factory.mktemp(name) / "shim_client", *flags)
    return name, lib, client


def no_reports(proc_out: str, proc_err: str) -> None:
    for marker in ("WARNING: ThreadSanitizer", "ERROR: AddressSanitizer", "runtime error:"):
        assert marker not in proc_err, proc_err[-4000:]


def test_threads_under_sanitizer(sanitized: tuple[str, Path, Path], hookcore_libs: HookLibs, tmp_path: Path) -> None:
    """8 threads through every path at once. The NVML queries name physical GPU 0, which a
    UUID-keyed claim calls index 1 (128 MiB): a thread that read the NVML cache before the index was
    published would report index 0's 64 MiB."""
    _, lib, client = sanitized
    env = client_env(hookcore_libs, lib, **SAN_ENV, STUB_CUDA_DEVICES="2", CUDA_VISIBLE_DEVICES="1,0",
                     HOOKCORE_DEVICE_UUID_0=STUB_UUID(1), HOOKCORE_MEMORY_LIMIT_0="64Mi",
                     HOOKCORE_DEVICE_UUID_1=STUB_UUID(0), HOOKCORE_MEMORY_LIMIT_1="128Mi",
                     HOOKCORE_COMPUTE_LIMIT_0="50", HOOKCORE_LEDGER=str(tmp_path / "l"), HOOKCORE_LOG="debug",
                     THREADS_NVML_INDEX="0", THREADS_NVML_TOTAL=str(128 * MiB))
    for _ in range(3):   # fresh processes: the NVML cache is filled under contention each time
        proc = subprocess.run([str(client), "threads", "8", "150"], env=env, capture_output=True, text=True,
                              timeout=240)
        no_reports(proc.stdout, proc.stderr)
        assert proc.returncode == 0 and "THREADS ok" in proc.stdout, proc.stdout + proc.stderr[-3000:]


def test_eight_processes_under_sanitizer(sanitized: tuple[str, Path, Path], hookcore_libs: HookLibs,
                                         tmp_path: Path) -> None:
    _, lib, client = sanitized
    env = client_env(hookcore_libs, lib, **SAN_ENV, CUDA_DEVICE_MEMORY_LIMIT="256Mi",
                     CUDA_DEVICE_MEMORY_SHARED_CACHE=str(tmp_path / "l"))
    procs = [subprocess.Popen([str(client), "grab", "4M"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(8)]
    got = []
    for p in procs:
        assert p.stdout is not None and p.stderr is not None
        line = p.stdout.readline()
        assert line.startswith("GOT "), line + p.stderr.read()
        got.append(int(line.split()[1]))
    for p in procs:
        assert p.stdin is not None and p.stdout is not None and p.stderr is not None
        p.stdin.close()
        out, err = p.stdout.read(), p.stderr.read()
        p.wait(timeout=60)
        no_reports(out, err)
        assert p.returncode == 0, err[-3000:]
    assert 256 - 8 * 4 <= sum(got) * 4 <= 256


def test_kill_9_under_sanitizer(sanitized: tuple[str, Path, Path], hookcore_libs: HookLibs, tmp_path: Path) -> None:
    _, lib, client = sanitized
    env = client_env(hookcore_libs, lib, **SAN_ENV, CUDA_DEVICE_MEMORY_LIMIT="256Mi",
                     CUDA_DEVICE_MEMORY_SHARED_CACHE=str(tmp_path / "l"))
    p = subprocess.Popen([str(client), "churn", "4M", "48"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    assert p.stdout is not None
    assert p.stdout.readline().strip() == "READY"
    time.sleep(0.5)
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=10)
    q = subprocess.run([str(client), "grab", "4M"], env=env, input="", capture_output=True, text=True, timeout=60)
    no_reports(q.stdout, q.stderr)
    assert q.stdout.strip() == "GOT 64", q.stdout + q.stderr[-3000:]
