"""Helpers for the tests that run programs under a hook library against the stub drivers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol


class _Libs(Protocol):
    stub_dir: Path


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
