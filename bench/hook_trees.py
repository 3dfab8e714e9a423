"""What the benches that measure hookcore builds side by side share: the `--tree` option (another
checkout's hookcore beside this one's) and building a tree's libraries into a work directory."""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path


def add_tree_option(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--out", required=True)
    ap.add_argument("--tree", action="append", default=[], help="another checkout's hookcore (repeatable)")


def build_hook(tree: Path, work: Path, name: str) -> Path:
    """`make libs` of TREE/hookcore into WORK/lib-NAME; returns the directory (libvgpu.so, hk-ledger...)."""
    lib_dir = work / f"lib-{name}"
    subprocess.run(["make", "-s", "-C", str(tree / "hookcore"), f"-j{min(os.cpu_count() or 1, 16)}",
                    f"BUILD={lib_dir}", "libs"], check=True)
    return lib_dir
