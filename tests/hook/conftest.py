"""Fixtures for the hook tests: build the C parts once per session with the hookcore Makefile.

- `core_tests`: the core's C test programs (`test_core`, and under ASan/UBSan `test_core_asan`,
  `fuzz_config`);
- `hookcore_ext`: the `hookcore` package with its Cython extension built in place if stale;
- `hookcore_libs`: `libvgpu.so` and the stub `libcuda.so.1` / `libnvidia-ml.so.1`;
- `testing_lib`: the test build of libvgpu.so (`make testing`), which also honours
  HOOKCORE_TESTING_CONFIG_ROOT so config-file tests need no root;
- `client`: `tests/hook/c/shim_client*.c` compiled (`tests/hook/clients.py` builds its environment);
- `demo`: a second hook library, libvdemo.so (test build), from the same core and preload layer
  with the demo shim of `tests/hook/c/demo/`, its fake vendor library and the `two_libs` client.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from tests.hook.clients import SHIM_CLIENT_SOURCES

ROOT = Path(__file__).resolve().parents[2]
# Every build of hookcore's C code during the test session (ours, other suites' fixtures, setup.py)
# is a CI build: warnings are errors. Exported so that all of them agree and nothing rebuilds twice.
os.environ.setdefault("WERROR", "-Werror")
HOOKCORE = ROOT / "hookcore"
BUILD = HOOKCORE / "build"


def make(*targets: str) -> None:
    """Run `make -C hookcore TARGETS` (WERROR from the environment); a failure fails the test with the
    compiler's output."""
    proc = subprocess.run(["make", "-C", str(HOOKCORE), "-s", "-j2", *targets], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"make {' '.join(targets)} failed:\n{proc.stdout}\n{proc.stderr}", pytrace=False)


@dataclass(frozen=True)
class CoreTests:
    test_core: Path
    test_core_asan: Path  # the same tests built with ASan + UBSan
    test_core_tsan: Path  # and with ThreadSanitizer
    fuzz_config: Path


@dataclass(frozen=True)
class HookLibs:
    libvgpu: Path
    stub_dir: Path


@pytest.fixture(scope="session")
def core_tests() -> CoreTests:
    make("core-tests")
    tests = BUILD / "tests"
    return CoreTests(tests / "test_core", tests / "test_core_asan", tests / "test_core_tsan", tests / "fuzz_config")


def _extension_stale() -> bool:
    built = sorted(HOOKCORE.glob("_hookcore*.so"))
    if not built:
        return True
    sources = [HOOKCORE / "_hookcore.pyx", HOOKCORE / "_hookcore.pxd", *HOOKCORE.glob("core/*.[ch]"),
               *HOOKCORE.glob("*/env_aliases.def")]
    return max(p.stat().st_mtime for p in sources) > built[-1].stat().st_mtime


@pytest.fixture(scope="session")
def hookcore_ext() -> ModuleType:
    if _extension_stale():
        env = {**os.environ, "HOOKCORE_SKIP_MAKE": "1"}
        proc = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=ROOT,
                              env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.fail(f"building hookcore._hookcore failed:\n{proc.stdout}\n{proc.stderr}", pytrace=False)
    import hookcore._hookcore  # fails here, not in every test, if the build is broken

    return hookcore


@pytest.fixture(scope="session")
def hookcore_libs() -> HookLibs:
    make("libs")
    return HookLibs(BUILD / "libvgpu.so", BUILD / "stub")


@pytest.fixture(scope="session")
def testing_lib(hookcore_libs: HookLibs) -> Path:
    make("testing")
    return BUILD / "testing" / "libvgpu.so"


@pytest.fixture(scope="session")
def client(hookcore_libs: HookLibs, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("shim") / "shim_client"
    proc = subprocess.run(["cc", "-O1", "-Wall", "-Werror", "-o", str(out), *SHIM_CLIENT_SOURCES, "-ldl"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out



@dataclass(frozen=True)
class DemoLibs:
    libvdemo: Path      # test build (honours HOOKCORE_TESTING_CONFIG_ROOT)
    driver_dir: Path    # holds libdemodrv.so.1
    client: Path        # tests/hook/c/two_libs.c
    shim_dir: Path


def cc(out: Path, *args: str) -> Path:
    proc = subprocess.run(["cc", "-O1", "-Wall", "-Werror", "-o", str(out), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"cc {' '.join(args)} failed:\n{proc.stderr}", pytrace=False)
    return out


@pytest.fixture(scope="session")
def demo(hookcore_libs: HookLibs, tmp_path_factory: pytest.TempPathFactory) -> DemoLibs:
    shim = ROOT / "tests/hook/c/demo"
    make(f"BUILD={BUILD / 'demo'}", "HOOK_LIBS=vdemo", f"SHIMS_vdemo={shim}", "DEFS=-DHK_TESTING", "hooklibs")
    d = tmp_path_factory.mktemp("demo")
    cc(d / "libdemodrv.so.1", "-shared", "-fPIC", str(ROOT / "tests/hook/c/demodrv.c"))
    client = cc(d / "two_libs", str(ROOT / "tests/hook/c/two_libs.c"), "-ldl")
    return DemoLibs(BUILD / "demo" / "libvdemo.so", d, client, shim)
