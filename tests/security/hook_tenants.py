"""The tenants of the hook-side hostile tests, one per hook library: a program that speaks the
hostile protocol (`hold BYTES`: "SETUP 0", "HELD <rc>", then "RC <rc>" per stdin line
"alloc N"; `dlroutes BYTES`: "ROUTE <how> <library>", "ALLOC <how> <rc>") under its hook against
its stub runtime. Tests that hold for every hook take the `tenant` fixture, parametrised by stem.

- vgpu: tests/hook/c/hostile.c under libvgpu.so, stub libcuda;
- vhip: tests/hygon_dcu/c/hip_client.c under libvhip.so, stub libamdhip64.

Both runtimes answer over quota with 2 (CUDA_ERROR_OUT_OF_MEMORY, hipErrorOutOfMemory) and a
library that refuses everything with 3 (CUDA_ERROR_NOT_INITIALIZED, hipErrorNotInitialized).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import hookcore
from tests.hook.clients import client_env
from tests.hook.conftest import HookLibs, cc, make

ROOT = Path(__file__).resolve().parents[2]
OOM, REFUSED = 2, 3


@dataclasses.dataclass(frozen=True)
class Tenant:
    stem: str
    program: Path
    libs: HookLibs
    legacy_memory: str  # the HAMi name of the memory quota this hook reads from the environment
    stub_env: dict[str, str]

    @property
    def library(self) -> Path:
        return self.libs.stub_dir.parent / f"lib{self.stem}.so"

    @property
    def testing_library(self) -> Path:
        return self.libs.stub_dir.parent / "testing" / f"lib{self.stem}.so"

    def env(self, testing: bool = False, **env: str) -> dict[str, str]:
        e = client_env(self.libs, self.testing_library if testing else self.library, **self.stub_env, **env)
        for k in [k for k in e if k.startswith(("HIP_", "ROCR_"))]:
            del e[k]
        e.update(env)
        return e


@pytest.fixture(scope="module", params=["vgpu", "vhip"])
def tenant(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Tenant:
    make("libs")
    make("testing")
    libs = HookLibs(hookcore.BUILD_DIR / "libvgpu.so", hookcore.stub_dir())
    d = tmp_path_factory.mktemp(request.param)
    if request.param == "vgpu":
        program = cc(d / "hostile", str(ROOT / "tests/hook/c/hostile.c"), "-ldl")
        return Tenant("vgpu", program, libs, "CUDA_DEVICE_MEMORY_LIMIT", {})
    program = cc(d / "hip_client", str(ROOT / "tests/hygon_dcu/c/hip_client.c"), f"-L{libs.stub_dir}", "-lamdhip64",
                 "-ldl", f"-Wl,-rpath,{libs.stub_dir}")
    return Tenant("vhip", program, libs, "HIP_DEVICE_MEMORY_LIMIT",
                  {"HOOKCORE_STUB_HIP_DEVICES": "pci=0000:c1:00.0,memory=16Gi"})
