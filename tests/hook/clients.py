"""Helpers for the tests that run programs under a hook library against the stub drivers."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Protocol

# The shim tests' CUDA client: shim_client.c and its parts (tests/hook/c/shim_client*.c, one program).
SHIM_CLIENT_SOURCES = tuple(str(p) for p in sorted((Path(__file__).resolve().parent / "c").glob("shim_client*.c")))


class _Libs(Protocol):
    @property
    def stub_dir(self) -> Path: ...


def client_env(libs: _Libs, preload: Path | str | None, **env: str) -> dict[str, str]:
    """The environment of a test process: this one's, minus every hook/CUDA/stub variable, with the
    stub drivers first on LD_LIBRARY_PATH, `preload` (if any) in LD_PRELOAD, plus `env`."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("CUDA_", "HOOKCORE_", "STUB_")) and k != "LD_PRELOAD"}
    e["LD_LIBRARY_PATH"] = str(libs.stub_dir)
    if preload:
        e["LD_PRELOAD"] = str(preload)
    e.update(env)
    return e


def build_rtld_next(out_dir: Path, src: Path) -> Path:
    """tests/hook/c/rtld_next.c as liba.so, libb.so and the program `next` linked with both: it prints
    "NEXT 2" when dlsym(RTLD_NEXT, ...) from liba finds libb's symbol (run with LD_LIBRARY_PATH=out_dir)."""
    for part, lib in (("PART_A", "liba.so"), ("PART_B", "libb.so")):
        subprocess.run(["cc", "-shared", "-fPIC", f"-D{part}", "-o", str(out_dir / lib), str(src), "-ldl"], check=True)
    subprocess.run(["cc", "-DPART_MAIN", "-o", str(out_dir / "next"), str(src), f"-L{out_dir}", "-Wl,--no-as-needed",
                    "-la", "-lb", "-ldl"], check=True)
    return out_dir / "next"
