"""Evidence that a thread is blocked on a flock, instead of a sleep: the kernel lists every
waiting flock request in /proc/locks (a ``->`` line with the file's device and inode)."""

from __future__ import annotations

import os
from pathlib import Path

from dra._runtime.wait import until


def _waited_on() -> set[tuple[int, int, int]]:
    """(major, minor, inode) of each file a flock request is waiting for."""
    found = set()
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) > 5 and fields[1] == "->":
            major, minor, inode = fields[6].split(":")
            found.add((int(major, 16), int(minor, 16), int(inode)))
    return found


def wait_until_blocked_under(root: Path, timeout: float = 5.0) -> None:
    """Return once some flock request on a file under `root` is waiting (AssertionError else)."""

    def blocked() -> bool:
        files = set()
        for p in root.rglob("*"):
            try:
                st = os.stat(p)
            except FileNotFoundError:
                continue
            files.add((os.major(st.st_dev), os.minor(st.st_dev), st.st_ino))
        return bool(files & _waited_on())

    until(blocked, timeout=timeout, interval=0.01, what=f"a flock waiter on a file under {root}", error=AssertionError)
