"""A tenant's code against the hook (issue 17, hook side): every way past the quota that the review
of 165651d found, run under the real libvgpu.so against the stub libcuda, each refused now.

`tests/hook/c/hostile.c` is the tenant (the dlsym routes run under libvhip.so too, with
tests/hygon_dcu/c/hip_client.c: tests/security/hook_tenants.py): it reaches glibc's own dlsym (dlvsym with every version,
libc's handle, RTLD_NEXT), loops cuCtxCreate, raises the heap and stack limits, captures
allocations into graphs and adds graph memory nodes, keeps freed memory in pools, shares VMM
memory (export, import, retain), and launches through the legacy cuLaunch* entry points. On
165651d each of these got past the quota or the compute share (the stub lacked the entry points
the newer ones need; the dlvsym route returned libcuda's cuMemAlloc_v2 and allocated 2 GiB on 1 GiB).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import hookcore
from tests.hook.clients import client_env
from tests.hook.conftest import HookLibs, cc, hookcore_libs  # noqa: F401  (fixture)
from tests.limiter_books import assert_held, ran, virtual_preload
from tests.security.hook_tenants import Tenant, tenant  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[2]
OOM = 2


@pytest.fixture(scope="module")
def hostile(hookcore_libs: HookLibs, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    return cc(tmp_path_factory.mktemp("hostile") / "hostile", str(ROOT / "tests/hook/c/hostile.c"), "-ldl")


def run(hostile: Path, libs: HookLibs, tmp_path: Path, *args: str, **env: str) -> dict[str, list[str]]:
    """Run one command under the hook with a 1 GiB quota; its output lines by their first word."""
    e = client_env(libs, libs.libvgpu, HOOKCORE_MEMORY_LIMIT_0="1Gi", HOOKCORE_LEDGER=str(tmp_path / "ledger"), **env)
    proc = subprocess.run([str(hostile), *args], env=e, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out: dict[str, list[str]] = {}
    for line in proc.stdout.splitlines():
        word, _, rest = line.partition(" ")
        out.setdefault(word, []).append(rest)
    assert out["SETUP"] == ["0"], proc.stdout
    return out


def test_every_route_to_glibcs_dlsym_gives_the_hook(tenant: Tenant, tmp_path: Path) -> None:  # noqa: F811
    """For every hook library: whatever route a tenant takes to glibc's own dlsym, a lookup of a
    policed name in the runtime's handle gets the hook, and 2 GiB on a 1 GiB quota is refused. So
    does the runtime's own lookup by name (cuGetProcAddress, hipGetProcAddress), which the stubs
    answer from their tables, not through dlsym (before, hipGetProcAddress gave the runtime's
    hipMalloc: 2 GiB fit on 1 GiB)."""
    env = tenant.env(HOOKCORE_MEMORY_LIMIT_0="1Gi", HOOKCORE_LEDGER=str(tmp_path / "ledger"))
    proc = subprocess.run([str(tenant.program), "dlroutes", "2G"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "SETUP 0" in proc.stdout, proc.stdout + proc.stderr
    lines = [ln.split(" ", 1) for ln in proc.stdout.splitlines()]
    routes = dict(rest.split(" ", 1) for word, rest in lines if word == "ROUTE")
    assert len(routes) == 11, routes
    for how, lib in routes.items():
        if how == "libc-private":
            assert lib == "none", how          # glibc's private lookup entry points answer nothing
        else:
            assert lib == f"lib{tenant.stem}.so", (how, lib)
    allocs = dict(rest.split(" ") for word, rest in lines if word == "ALLOC")
    assert allocs and all(int(rc) == OOM for rc in allocs.values()), allocs   # 2 GiB on 1 GiB: refused


@pytest.mark.parametrize("which", ["launch", "grid", "async"])
def test_legacy_launches_are_held_to_the_share(hostile: Path, hookcore_libs: HookLibs, tmp_path: Path,  # noqa: F811
                                               which: str) -> None:
    """1 ms stub kernels through cuLaunch / cuLaunchGrid / cuLaunchGridAsync get the claim's 30%, on
    the limiter's books and the virtual clock (issue 26: no rate on the host's clock)."""
    out = run(hostile, hookcore_libs, tmp_path, "legacy", which, "1000", "1.5", HOOKCORE_COMPUTE_LIMIT_0="30",
              LD_PRELOAD=virtual_preload(hookcore_libs.libvgpu))
    got = ran("RAN " + out["RAN"][0], 1_000_000, 10)   # hostile syncs every 10 launches
    with hookcore.Ledger(tmp_path / "ledger") as ledger:
        assert_held(ledger.limiter(0), [got], 30)


def test_a_context_loop_ends_at_the_quota(hostile: Path, hookcore_libs: HookLibs, tmp_path: Path) -> None:  # noqa: F811
    # primary context 300 MiB + two created ones = 900 MiB; a third would pass 1 GiB
    out = run(hostile, hookcore_libs, tmp_path, "ctxloop", "64", HOOKCORE_CONTEXT_MEMORY_0="300Mi")
    assert out["CTX"] == [f"created=2 rc={OOM}"]


def test_the_context_is_charged_before_the_first_allocation(hostile: Path, hookcore_libs: HookLibs,  # noqa: F811
                                                            tmp_path: Path) -> None:
    assert run(hostile, hookcore_libs, tmp_path, "hold", "800M", HOOKCORE_CONTEXT_MEMORY_0="256Mi")["HELD"] == [
        str(OOM)]
    assert run(hostile, hookcore_libs, tmp_path, "hold", "700M", HOOKCORE_CONTEXT_MEMORY_0="256Mi")["HELD"] == ["0"]


def test_heap_and_stack_limits_are_charged(hostile: Path, hookcore_libs: HookLibs, tmp_path: Path) -> None:  # noqa: F811
    out = run(hostile, hookcore_libs, tmp_path, "heap", "2G")
    assert out["HEAP"] == [f"{OOM} STACK {OOM} ALLOC 0"]   # refused before the driver; quota intact


def test_captured_allocations_and_graph_nodes_stay_charged(hostile: Path, hookcore_libs: HookLibs,  # noqa: F811
                                                           tmp_path: Path) -> None:
    # the captured 600 MiB belongs to the graph's pool once launched: 600 more do not fit
    assert run(hostile, hookcore_libs, tmp_path, "graph", "600M")["CAPTURED"] == [f"0 AFTER {OOM}"]
    # the captured 300 MiB plus two 300 MiB nodes fill the quota; the third node is refused
    assert run(hostile, hookcore_libs, tmp_path, "graph", "300M")["NODES"] == [f"2 {OOM}"]


def test_memory_a_pool_keeps_stays_charged(hostile: Path, hookcore_libs: HookLibs, tmp_path: Path) -> None:  # noqa: F811
    out = run(hostile, hookcore_libs, tmp_path, "pools", "600M")
    assert out["POOL"] == ["0 0", f"1 {OOM}", f"2 {OOM}", f"3 {OOM}"]   # not 4 x 600 MiB resident
    assert out["TRIMMED"] == ["0"]                                       # trimming gives it back
    # a threshold set after the allocation still keeps it at the free (before: released, and the
    # second pool's 600 MiB fit beside the 600 the first kept)
    assert out["LATE"] == [str(OOM)]
    # pools 1-3 and the late one have books: 252 more of HK_MAX_POOLS (256); one past them is refused
    # rather than left keeping memory the books do not see
    assert out["OVERFLOW"] == [f"252 {OOM}"]


def test_shared_and_retained_vmm_memory_stays_charged(hostile: Path, hookcore_libs: HookLibs,  # noqa: F811
                                                      tmp_path: Path) -> None:
    out = run(hostile, hookcore_libs, tmp_path, "vmm", "400M")
    assert out["IMPORT"] == [f"0 AFTER {OOM}"]     # released original, live import: still charged
    assert out["RETAIN"] == [f"0 AFTER {OOM}"]     # retained and released twice, still mapped
    assert out["UNMAPPED"] == ["0"]                # unmapped: the charge is back


# --------------------------------------------------------------------------------------------
# The same tenant under ThreadSanitizer and ASan/UBSan: library and program built with the sanitizer.

CASES = [(("dlroutes", "2G"), {}), (("ctxloop", "8"), {"HOOKCORE_CONTEXT_MEMORY_0": "300Mi"}), (("heap", "2G"), {}),
         (("graph", "300M"), {}), (("pools", "600M"), {}), (("vmm", "400M"), {}),
         (("legacy", "grid", "200", "0.3"), {"HOOKCORE_COMPUTE_LIMIT_0": "30"})]


@pytest.fixture(scope="module", params=["asan", "tsan"])
def sanitized_hostile(request: pytest.FixtureRequest, hookcore_libs: HookLibs,  # noqa: F811
                      tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from tests.hook.test_build_variants import SANITIZERS, variant_lib

    san, flags = SANITIZERS[request.param]
    lib = variant_lib(f"san-{request.param}", f"SAN={san}")
    prog = cc(tmp_path_factory.mktemp(request.param) / "hostile", "-g", *flags, str(ROOT / "tests/hook/c/hostile.c"),
              "-ldl")
    return lib, prog


@pytest.mark.parametrize(("args", "env"), CASES, ids=[c[0][0] for c in CASES])
def test_the_tenant_under_sanitizers(sanitized_hostile: tuple[Path, Path], hookcore_libs: HookLibs,  # noqa: F811
                                     tmp_path: Path, args: tuple[str, ...], env: dict[str, str]) -> None:
    from tests.hook.test_build_variants import SAN_ENV, no_reports

    lib, prog = sanitized_hostile
    e = client_env(hookcore_libs, lib, HOOKCORE_MEMORY_LIMIT_0="1Gi", HOOKCORE_LEDGER=str(tmp_path / "ledger"),
                   **SAN_ENV, **env)
    proc = subprocess.run([str(prog), *args], env=e, capture_output=True, text=True, timeout=240)
    no_reports(proc.stdout, proc.stderr)
    assert proc.returncode == 0 and "SETUP 0" in proc.stdout, proc.stdout + proc.stderr[-3000:]
