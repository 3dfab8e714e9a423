"""The preload layer: export lists generated from hooks.def, and two hookcore libraries in one process.

libvgpu.so (CUDA + NVML shims) and libvdemo.so (the demo shim of tests/hook/c/demo over a fake
vendor library) are built from the same core and preload sources by the same Makefile pattern; each
reads its own config file (/run/hookcore/<stem>/config, redirected by the test build) and stays
dormant when its claim does not configure it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.hook.clients import build_rtld_next, client_env

if TYPE_CHECKING:
    from tests.hook.conftest import DemoLibs, HookLibs

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20
GiB = 1 << 30
CUDA_ERROR_OUT_OF_MEMORY = 2
DEMO_OOM = 2


def hook_names(*defs: Path) -> set[str]:
    return {m.group(1) for d in defs for m in re.finditer(r"^HK_HOOK\((\w+)\)", d.read_text(), re.M)}


def exported(lib: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def test_libvgpu_exports_exactly_dlsym_and_the_hook_table(hookcore_libs: HookLibs, testing_lib: Path) -> None:
    want = {"dlsym", "dlvsym"} | hook_names(ROOT / "hookcore/cuda/hooks.def", ROOT / "hookcore/nvml/hooks.def")
    assert len(want) > 30
    assert exported(hookcore_libs.libvgpu) == want
    assert exported(testing_lib) == want


def test_every_other_hook_library_exports_exactly_its_shims_tables(hookcore_libs: HookLibs) -> None:
    """Libraries added by a <shim>/hooklib.mk (libvnpu.so for Ascend): same rule as libvgpu.so."""
    for mk in sorted((ROOT / "hookcore").glob("*/hooklib.mk")):
        for stem, dirs in re.findall(r"^SHIMS_(\w+)\s*:?=\s*(.+)$", mk.read_text(), re.M):
            lib = ROOT / "hookcore/build" / f"lib{stem}.so"
            assert lib.exists(), lib
            defs = [ROOT / "hookcore" / d / "hooks.def" for d in dirs.split()]
            assert exported(lib) == {"dlsym", "dlvsym"} | hook_names(*defs), lib


def test_second_library_exports_its_own_table(demo: DemoLibs) -> None:
    assert exported(demo.libvdemo) == {"dlsym", "dlvsym"} | hook_names(demo.shim_dir / "hooks.def")


# --------------------------------------------------------------------------------------------
# Two libraries preloaded into one process


def run_two(demo: DemoLibs, libs: HookLibs, testing_lib: Path, root: Path, preload: str, mib: int = 64,
            **env: str) -> dict[str, list[str]]:
    order = {"vgpu": str(testing_lib), "vdemo": str(demo.libvdemo)}
    e = client_env(libs, " ".join(order[p] for p in preload.split()), HOOKCORE_TESTING_CONFIG_ROOT=str(root),
                   **env)
    e["LD_LIBRARY_PATH"] = f"{libs.stub_dir}:{demo.driver_dir}"
    proc = subprocess.run([str(demo.client), str(mib)], env=e, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAIL" not in proc.stdout
    lines: dict[str, list[str]] = {}
    for ln in proc.stdout.splitlines():
        k, *rest = ln.split()
        lines[k + (" " + rest[0] if k == "OWNER" else "")] = rest
    return lines


def claim(root: Path, stem: str, text: str) -> None:
    (root / stem).mkdir(parents=True, exist_ok=True)
    (root / stem / "config").write_text(text)


@pytest.mark.parametrize("order", ["vgpu vdemo", "vdemo vgpu"])
def test_each_library_answers_its_own_lookups(demo: DemoLibs, hookcore_libs: HookLibs, testing_lib: Path,
                                             tmp_path: Path, order: str) -> None:
    out = run_two(demo, hookcore_libs, testing_lib, tmp_path, order)
    assert out["OWNER demoMalloc"][1] == "libvdemo.so"
    assert out["OWNER cuMemAlloc_v2"][1] == "libvgpu.so"
    assert out["OWNER cuGetProcAddress_v2"][1] == "libvgpu.so"


@pytest.mark.parametrize("order", ["vgpu vdemo", "vdemo vgpu"])
def test_both_dormant_without_configuration(demo: DemoLibs, hookcore_libs: HookLibs, testing_lib: Path,
                                            tmp_path: Path, order: str) -> None:
    out = run_two(demo, hookcore_libs, testing_lib, tmp_path, order, mib=512, STUB_CUDA_MEMORY="8Gi")
    assert out["CUDA"] == [str(8 * GiB), str(8 * GiB), "ALLOC", "0"]
    assert out["DEMO"] == [str(GiB), str(GiB), "ALLOC", "0"]
    assert not any(tmp_path.iterdir())   # no ledger created anywhere


@pytest.mark.parametrize("configured", ["vgpu", "vdemo", "both"])
def test_only_the_configured_library_enforces(demo: DemoLibs, hookcore_libs: HookLibs, testing_lib: Path,
                                              tmp_path: Path, configured: str) -> None:
    if configured in ("vgpu", "both"):
        claim(tmp_path, "vgpu", "HOOKCORE_MEMORY_LIMIT_0=32Mi\n")
    if configured in ("vdemo", "both"):
        claim(tmp_path, "vdemo", "HOOKCORE_MEMORY_LIMIT_0=48Mi\n")
    out = run_two(demo, hookcore_libs, testing_lib, tmp_path, "vgpu vdemo", mib=64, STUB_CUDA_MEMORY="8Gi")
    cuda_total = 32 * MiB if configured in ("vgpu", "both") else 8 * GiB
    demo_total = 48 * MiB if configured in ("vdemo", "both") else GiB
    assert out["CUDA"][1] == str(cuda_total) and out["DEMO"][1] == str(demo_total)
    assert out["CUDA"][3] == str(CUDA_ERROR_OUT_OF_MEMORY if configured in ("vgpu", "both") else 0)
    assert out["DEMO"][3] == str(DEMO_OOM if configured in ("vdemo", "both") else 0)
    # each library keeps its own ledger next to its own config
    for stem in ("vgpu", "vdemo"):
        assert (tmp_path / stem / "ledger").exists() == (configured in (stem, "both"))


def test_environment_keys_reach_both_libraries_but_hami_names_only_libvgpu(
        demo: DemoLibs, hookcore_libs: HookLibs, testing_lib: Path, tmp_path: Path) -> None:
    """HAMi's CUDA_* names are aliases of the CUDA shim: the demo library does not read them."""
    out = run_two(demo, hookcore_libs, testing_lib, tmp_path, "vgpu vdemo", mib=64, STUB_CUDA_MEMORY="8Gi",
                  CUDA_DEVICE_MEMORY_LIMIT="40Mi", CUDA_DEVICE_MEMORY_SHARED_CACHE=str(tmp_path / "l"))
    assert out["CUDA"][1] == str(40 * MiB) and out["DEMO"][1] == str(GiB)


def test_rtld_next_with_two_libraries(demo: DemoLibs, hookcore_libs: HookLibs, tmp_path: Path) -> None:
    build_rtld_next(tmp_path, ROOT / "tests/hook/c/rtld_next.c")
    env = {"LD_LIBRARY_PATH": str(tmp_path), "LD_PRELOAD": f"{hookcore_libs.libvgpu} {demo.libvdemo}"}
    proc = subprocess.run([str(tmp_path / "next")], env=env, capture_output=True, text=True)
    assert proc.stdout.strip() == "NEXT 2", proc.stdout + proc.stderr
