"""Who a host process is, from what the kernel says about it in /proc: pod, container, claim, hook.

The watchdog gets host PIDs from the device's management library and needs, for each:

- **pod and container**, from ``/proc/<pid>/cgroup``: kubelet puts every container in a cgroup
  named after its pod UID (``.../pod<uid>/<container-id>`` with the cgroupfs driver,
  ``.../kubepods-<qos>-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope`` with systemd).
  A process in no pod's cgroup is a host process.
- **claim**, from ``/proc/<pid>/mountinfo``: the framework bind-mounts each enforced claim's
  ``config`` and ``ledger`` from its hook dir ``<state-dir>/hooks/<claimUID>/`` into its
  containers; the kernel records each mount's source (root within its filesystem) and that
  filesystem's device. A mount whose root ends in ``hooks/<uid>/config`` or ``.../ledger`` (or
  ``hooks/<uid>``, the whole dir) on the device of this daemon's hooks root belongs to claim `uid`. The mount is
  per container (per mount namespace), so every process of the claim's containers has it,
  whatever it loaded; a nested container that unshares its mounts loses it (then the pod is
  still known from the cgroup).
- **hook loaded**: the hook registers every process that makes a CUDA call in its claim's
  ledger (a slot with its PID as the container sees it and its start time), so a live slot whose
  PID is the process's ``NSpid`` (``/proc/<pid>/status``) and whose start time is the process's
  is a held process (`dra._runtime.watchdog` reads the ledger). Where the daemon may (CAP_SYS_PTRACE),
  ``/proc/<pid>/maps`` also counts: the claim's hook library mapped executable, by device and
  inode (a file merely named like it does not count).

cgroup, mountinfo, stat and status are readable by any user; maps needs ptrace read access
(CAP_SYS_PTRACE, or the same user with no fewer capabilities). Every reader tolerates a process
that exits meanwhile (None) and treats the files as hostile text: a line that does not parse is
skipped, never trusted.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Collection
from pathlib import Path

_POD = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?$")
_CONTAINER = re.compile(r"^(?:cri-containerd-|crio-|docker-|containerd-)?([0-9a-f]{64})(?:\.scope)?$")
_CLAIM = re.compile(r"/hooks/([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})(?:/(?:config|ledger))?$")


@dataclasses.dataclass(frozen=True)
class Workload:
    """Where a process runs: its pod and container (None: not in a pod), its claims' hook dirs."""

    pod_uid: str | None
    container_id: str | None
    claims: frozenset[str]  # claim UIDs whose hook dir the process's mount namespace has


def start_time(proc: Path, pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (clock ticks after boot): with the PID, names a process
    uniquely over time (a recycled PID has another start time). None: gone."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:  # every process, every poll: no pathlib
            raw = f.read()
    except OSError:
        return None
    end = raw.rfind(b")")  # comm may hold spaces and parentheses
    fields = raw[end + 2:].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def pod_of(cgroup_text: str) -> tuple[str | None, str | None]:
    """(pod UID, container ID) from /proc/<pid>/cgroup's text; (None, None) outside a pod."""
    for line in cgroup_text.splitlines():
        path = line.split(":", 2)[-1]
        parts = [p for p in path.split("/") if p]
        for i, part in enumerate(parts):
            m = _POD.search(part)
            if m is None:
                continue
            uid = m.group(1).replace("_", "-")
            container = None
            if i + 1 < len(parts):
                c = _CONTAINER.match(parts[i + 1])
                container = c.group(1) if c else None
            return uid, container
    return None, None


def _unescape(field: str) -> str:
    """mountinfo's octal escapes (``\\040`` for a space)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def claims_of(mountinfo_text: str, hooks_dev: int) -> frozenset[str]:
    """Claim UIDs whose hook dir is mounted, per /proc/<pid>/mountinfo, from the filesystem of
    device `hooks_dev` (st_dev of the daemon's hooks root)."""
    major, minor = os.major(hooks_dev), os.minor(hooks_dev)
    want = f"{major}:{minor}"
    out = set()
    for line in mountinfo_text.splitlines():
        fields = line.split(" ")
        if len(fields) < 10 or fields[2] != want:
            continue
        m = _CLAIM.search(_unescape(fields[3]))
        if m:
            out.add(m.group(1))
    return frozenset(out)


def maps_file(maps_text: bytes, files: Collection[tuple[int, int]]) -> bool:
    """Whether /proc/<pid>/maps shows an executable mapping of one of `files` ((st_dev, st_ino))."""
    if not files:
        return False
    inodes = {str(ino).encode() for _dev, ino in files}
    for line in maps_text.splitlines():
        fields = line.split(None, 5)
        if len(fields) < 6 or fields[4] not in inodes or b"x" not in fields[1]:
            continue
        try:
            major_s, minor_s = fields[3].split(b":")
            dev = os.makedev(int(major_s, 16), int(minor_s, 16))
            ino = int(fields[4])
        except ValueError:
            continue
        if (dev, ino) in files:
            return True
    return False


def ns_pid(proc: Path, pid: int) -> int | None:
    """The PID the process has in its own (innermost) PID namespace, from /proc/<pid>/status's
    ``NSpid`` (what getpid() returns inside a container); None when gone or not told."""
    try:
        with open(f"{proc}/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def workload(proc: Path, pid: int, hooks_dev: int) -> Workload | None:
    """The pod, container and claims of host process `pid`; None when it is gone or unreadable."""
    base = proc / str(pid)
    try:
        pod, container = pod_of((base / "cgroup").read_text(errors="replace"))
        claims = claims_of((base / "mountinfo").read_text(errors="replace"), hooks_dev)
    except OSError:
        return None
    return Workload(pod, container, claims)


def loaded(proc: Path, pid: int, files: Collection[tuple[int, int]]) -> bool | None:
    """Whether `pid` maps one of `files` executable; None when its maps cannot be read."""
    try:
        return maps_file((proc / str(pid) / "maps").read_bytes(), files)
    except OSError:
        return None


def file_id(path: Path) -> tuple[int, int] | None:
    """(st_dev, st_ino) of `path`, as maps names a mapped file; None when it is missing."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino
