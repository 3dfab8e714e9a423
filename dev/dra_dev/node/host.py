"""What the node leaves on the host besides its network, and its clean-up: the cgroup root its
pods live under, the mounts kubelet and containerd make under the node dir, containerd's shims."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from pathlib import Path

from dra._runtime.wait import WaitTimeout, until
from dra.errors import UserError


def cgroup_hierarchies() -> list[Path]:
    """Mount points of the cgroup hierarchies (v1: one per controller set; v2: one)."""
    base = Path("/sys/fs/cgroup")
    if (base / "cgroup.controllers").exists():
        return [base]
    return [p for p in sorted(base.iterdir()) if p.is_dir() and not p.is_symlink()] if base.is_dir() else []


def make_cgroup_root(root: str) -> None:
    """kubelet refuses a cgroupRoot that does not exist in every hierarchy."""
    for hierarchy in cgroup_hierarchies():
        path = hierarchy / root.lstrip("/")
        try:
            path.mkdir(exist_ok=True)
        except OSError as exc:
            raise UserError(f"cannot create the node's cgroup {path}: {exc}") from exc


def kill_cgroup_members(root: str) -> None:
    """SIGKILL every process in the node's own cgroups (only pods of this node live there)."""
    for hierarchy in cgroup_hierarchies():
        top = hierarchy / root.lstrip("/")
        for procs in top.rglob("cgroup.procs") if top.is_dir() else []:
            with contextlib.suppress(OSError, ValueError):
                for pid in procs.read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)


def remove_cgroup_root(root: str) -> None:
    """Remove the node's cgroups bottom-up (only empty ones can go; a process left keeps its own)."""
    tops = [hierarchy / root.lstrip("/") for hierarchy in cgroup_hierarchies()]

    def removed() -> bool:
        for top in tops:
            for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: len(w[0]), reverse=True):
                with contextlib.suppress(OSError):
                    os.rmdir(dirpath)
        return not any(top.is_dir() for top in tops)

    # Killed processes leave their cgroups a moment later; what is still busy after that stays.
    with contextlib.suppress(WaitTimeout):
        until(removed, timeout=5, interval=0.1, what=f"the cgroups under {root} to empty")


def unmount_under(prefix: Path) -> None:
    """Unmount what kubelet and containerd left under `prefix` (deepest first)."""
    top = str(prefix)
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return
    points = {_unescape(line.split()[4]) for line in lines}
    for point in sorted((p for p in points if p == top or p.startswith(top + "/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)


def kill_shims(shim: Path, address: Path) -> None:
    """containerd's shims outlive it; SIGKILL those of binary `shim` that serve the containerd at
    `address` (by PID)."""
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            argv = (pid_dir / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].decode(errors="replace") == str(shim) and str(address).encode() in argv:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_dir.name), signal.SIGKILL)


def _unescape(path: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)
