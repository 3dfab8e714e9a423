"""Build glue for the C parts: the `hookcore._hookcore` extension and the hook libraries.

Project metadata lives in pyproject.toml. `pip install -e '.[dev]'` (the README's install step)
runs build_ext, which first runs `make -C hookcore` (libvgpu.so and the stub libcuda/libnvidia-ml)
and then compiles the Cython extension from hookcore/_hookcore.pyx plus the core's C sources.
A non-editable build also copies the libraries into the wheel under hookcore/build/.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
CORE_SOURCES = ["config.c", "config_file.c", "ledger.c", "track.c", "hookcore.c", "limiter.c", "meter.c"]
LIBRARIES = ["libvgpu.so", "libvnpu.so", "stub/libcuda.so.1", "stub/libnvidia-ml.so.1", "stub/libdcmi.so",
             "stub/libruntime.so", "stub/libascendcl.so", "workload/cuda_workload", "hk-ledger"]


class BuildHookcore(build_ext):
    """build_ext that first builds the C libraries with the hookcore Makefile."""

    def run(self) -> None:
        if os.environ.get("HOOKCORE_SKIP_MAKE") != "1":
            jobs = str(min(os.cpu_count() or 1, 4))
            subprocess.run(["make", "-C", str(ROOT / "hookcore"), f"-j{jobs}", "libs"], check=True)
        super().run()
        if not self.inplace:
            for rel in LIBRARIES:
                src = ROOT / "hookcore" / "build" / rel
                if src.exists():
                    dst = Path(self.build_lib) / "hookcore" / "build" / rel
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, dst)


extension = Extension(
    "hookcore._hookcore",
    # the core, plus the legacy environment names of the shims (parse_config accepts both)
    sources=["hookcore/_hookcore.pyx", *(f"hookcore/core/{name}" for name in CORE_SOURCES),
             "hookcore/cuda/hami_env.c"],
    include_dirs=["hookcore/core"],
    extra_compile_args=["-std=gnu11", "-D_GNU_SOURCE", "-O2", "-fvisibility=hidden", "-pthread"],
    extra_link_args=["-pthread"],
)

setup(
    ext_modules=cythonize([extension], language_level=3, quiet=True),
    cmdclass={"build_ext": BuildHookcore},
)
