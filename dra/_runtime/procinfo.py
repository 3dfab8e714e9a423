"""Who a host process is, from what the kernel says about it in /proc: pod, container, claim, hook.

The watchdog gets host PIDs from the device's management library and needs, for each:

- **pod and container**, from ``/proc/<pid>/cgroup``: kubelet puts every container in a cgroup
  named after its pod UID (``.../pod<uid>/<container-id>`` with the cgroupfs driver,
  ``.../kubepods-<qos>-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope`` with systemd).
  A process in no pod's cgroup is a host process. A container cannot leave its pod's cgroup.
- **claim**, from ``/proc/<pid>/mountinfo``, by file identity: the framework bind-mounts each
  enforced claim's ``config`` and ``ledger`` *files* from its hook dir ``<state-dir>/hooks/<uid>/``
  into its containers, and the kernel records each mount's root (its path from the root of its
  filesystem) and that filesystem's device. A mount names claim `uid` only when its device is the
  hooks filesystem's and its root is exactly the hooks root's own path on that filesystem
  (`HooksFs`, from the daemon's ``/proc/self/mountinfo``) plus ``/<uid>/config`` or
  ``/<uid>/ledger``: files only the daemon creates, in a directory no container can write. A
  directory mount never counts, nor a file elsewhere whose path merely ends the same way (an
  emptyDir ``subPath: hooks/<uid>`` is on kubelet's disk too, under another path). Every process
  of the claim's containers has the mounts, whatever it loaded; a nested container that unshares
  its mounts keeps them (it cannot drop mounts it inherited; it can only cover them).
- **hook loaded**, from ``/proc/<pid>/maps`` (needs CAP_SYS_PTRACE): the claim's hook library
  mapped executable, by device and inode (a file merely named like it does not count). This is the
  kernel's word. A claim's ledger slot is the tenant's (the file is writable in its containers):
  `dra._runtime.watchdog` records it as "registered (unverified)" and gives it no authority.

Bounded reads: every file is streamed line by line under a cap (`MOUNTINFO_MAX`, `MAPS_MAX`,
`SMALL_MAX`; `LINE_MAX` per line), since a tenant decides how long its maps and mountinfo are (65000
mappings of a 4 KiB path make a 250 MiB maps). Past a cap the read stops: the claims found so far
stand (each line is the kernel's), and the process counts as not fully read, which the watchdog
judges unheld. Nothing here raises for a hostile file; a line that does not parse is skipped.

A process whose thread-group leader has exited while another thread runs (a zombie leader) has
no mount namespace, root or memory map at ``/proc/<pid>`` (mountinfo fails with EINVAL, maps is
empty); its live threads' ``/proc/<pid>/task/<tid>`` have them (`task_dir`).

cgroup, mountinfo, stat and status are readable by any user; maps and root need ptrace read
access (CAP_SYS_PTRACE, or the same user with no fewer capabilities). Every reader tolerates a
process that exits meanwhile.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import stat as stat_mod
from collections.abc import Collection, Generator, Iterable
from pathlib import Path

_POD = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?$")
_CONTAINER = re.compile(r"^(?:cri-containerd-|crio-|docker-|containerd-)?([0-9a-f]{64})(?:\.scope)?$")
_CLAIM_FILE = re.compile(r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})/(?:config|ledger|claim)")

MOUNTINFO_MAX = 1 << 20
"""Bytes of a process's mountinfo read (a container has a few dozen lines of ~150 bytes)."""
MAPS_MAX = 4 << 20
"""Bytes of a process's maps read (a large CUDA process maps a few thousand ranges, ~300 KiB)."""
SMALL_MAX = 64 << 10
"""Bytes of cgroup, status or stat read."""
LINE_MAX = 16 << 10
"""Bytes of one line kept (a path is at most 4096 bytes, escaped up to 4 times that); the rest of
a longer line is read past, counted against the file's cap, and the line skipped."""
TASKS_MAX = 64
"""Threads of a process tried for a live one when its leader has exited."""
CAP_SYS_PTRACE = 19


class Overflow(Exception):
    """A /proc file longer than its cap (the reader stopped there)."""


@dataclasses.dataclass(frozen=True)
class HooksFs:
    """Where the daemon's hooks root is: its filesystem's device as mountinfo writes it
    (``major:minor``) and its path from that filesystem's root, which is the root field of any
    mount made from a file under it."""

    dev: str
    path: str

    def claim_of(self, dev: str, root: str) -> str | None:
        """The claim UID whose ``config``, ``ledger`` or ``claim`` (`claim_marker`) file a mount of
        (`dev`, `root`) is; None for anything else."""
        if dev != self.dev:
            return None
        prefix = self.path.rstrip("/") + "/"
        if not root.startswith(prefix):
            return None
        m = _CLAIM_FILE.fullmatch(root[len(prefix):])
        return m.group(1) if m else None


@dataclasses.dataclass(frozen=True)
class Workload:
    """Where a process runs: its pod and container (None: not in a pod), its claims' hook files."""

    pod_uid: str | None
    container_id: str | None
    claims: frozenset[str]  # claim UIDs whose hook files the process's mount namespace has
    complete: bool = True
    """False: its mountinfo could not be read in full (unreadable, or past `MOUNTINFO_MAX`): the
    claims are those found before it stopped, and the process is judged unheld."""


def lines(path: str, cap: int) -> Generator[bytes, None, None]:
    """The lines of `path` (with their newline), streamed: raises Overflow once more than `cap`
    bytes were read, OSError when unreadable; an overlong line (over `LINE_MAX`) is skipped."""
    total = 0
    with open(path, "rb") as f:
        while True:
            line = f.readline(LINE_MAX)
            if not line:
                return
            total += len(line)
            if total > cap:
                raise Overflow(path)
            if line.endswith(b"\n") or len(line) < LINE_MAX:
                yield line
                continue
            while not line.endswith(b"\n"):  # the rest of an overlong line: read past, not kept
                line = f.readline(LINE_MAX)
                if not line:
                    return
                total += len(line)
                if total > cap:
                    raise Overflow(path)


def _read_small(path: str) -> bytes:
    """A small /proc file whole, at most `SMALL_MAX` bytes (a longer one is cut there)."""
    with open(path, "rb") as f:
        return f.read(SMALL_MAX)


def _stat_fields(path: str) -> list[bytes] | None:
    """The fields of a stat file after ``comm`` (field 3, the state, first); None: gone."""
    try:
        raw = _read_small(path)
    except OSError:
        return None
    end = raw.rfind(b")")  # comm may hold spaces and parentheses
    return raw[end + 2:].split() if end >= 0 else None


def start_time(proc: Path, pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (clock ticks after boot): with the PID, names a process
    uniquely over time (a recycled PID has another start time). None: gone."""
    fields = _stat_fields(f"{proc}/{pid}/stat")
    try:
        return int(fields[19]) if fields else None
    except (IndexError, ValueError):
        return None


def _dead(stat_path: str) -> bool:
    fields = _stat_fields(stat_path)
    return not fields or fields[0] in (b"Z", b"X")


def task_dir(proc: Path, pid: int) -> str | None:
    """The directory to read `pid`'s mounts, memory map, root and cgroup from: ``/proc/<pid>``, or,
    when its thread-group leader has exited but a thread runs on, that thread's
    ``/proc/<pid>/task/<tid>``. None when no thread runs any more (the process has exited and its
    device memory is freed). When none of the first `TASKS_MAX` threads is alive (zombie threads
    that a tracer keeps), the leader's dir: its reads fail and the process is judged unreadable."""
    base = f"{proc}/{pid}"
    if not _dead(f"{base}/stat"):
        return base
    try:
        with os.scandir(f"{base}/task") as it:
            for n, entry in enumerate(it):
                if n >= TASKS_MAX:
                    return base
                if entry.name != str(pid) and entry.name.isdigit() and not _dead(f"{base}/task/{entry.name}/stat"):
                    return f"{base}/task/{entry.name}"
    except OSError:
        return None
    return None


def exited(proc: Path, pid: int) -> bool:
    """Whether no thread of `pid` runs any more (or it is gone)."""
    return task_dir(proc, pid) is None


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


def _claims_in(text_lines: Iterable[bytes | str], hooks: HooksFs) -> set[str]:
    out = set()
    for raw in text_lines:
        line = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
        fields = line.rstrip("\n").split(" ")
        if len(fields) < 10:
            continue
        uid = hooks.claim_of(fields[2], _unescape(fields[3]))
        if uid is not None:
            out.add(uid)
    return out


def claims_of(mountinfo_text: str, hooks: HooksFs) -> frozenset[str]:
    """Claim UIDs whose ``config`` or ``ledger`` file is mounted, per a mountinfo's text."""
    return frozenset(_claims_in(mountinfo_text.splitlines(), hooks))


def hooks_fs(proc: Path, hooks_root: Path) -> HooksFs | None:
    """`hooks_root`'s filesystem and path on it, from this process's own mountinfo: the mount
    that holds it (the longest mount point above it, the last such line when mounts are stacked),
    its root field and the rest of the path. None when the mountinfo cannot be read."""
    real = os.path.realpath(hooks_root)
    best: tuple[int, str, str] | None = None  # (mount point length, dev, root + rest)
    try:
        with contextlib.closing(lines(f"{proc}/self/mountinfo", MOUNTINFO_MAX)) as it:
            for raw in it:
                fields = raw.decode(errors="replace").rstrip("\n").split(" ")
                if len(fields) < 10:
                    continue
                point = _unescape(fields[4])
                if point == "/":
                    rest = real.lstrip("/")
                elif real == point or real.startswith(point.rstrip("/") + "/"):
                    rest = real[len(point.rstrip("/")):].lstrip("/")
                else:
                    continue
                if best is None or len(point) >= best[0]:
                    root = _unescape(fields[3]).rstrip("/")
                    best = (len(point), fields[2], f"{root}/{rest}".rstrip("/") or "/")
    except (OSError, Overflow):
        return None
    return HooksFs(best[1], best[2]) if best else None


def workload(proc: Path, pid: int, hooks: HooksFs) -> Workload | None:
    """The pod, container and claims of host process `pid`; None when it is gone."""
    base = task_dir(proc, pid)
    if base is None:
        return None
    pod: str | None = None
    container: str | None = None
    for where in dict.fromkeys((base, f"{proc}/{pid}")):
        try:
            pod, container = pod_of(_read_small(f"{where}/cgroup").decode(errors="replace"))
            break
        except OSError:
            continue
    found: set[str] = set()
    complete = True
    try:
        with contextlib.closing(lines(f"{base}/mountinfo", MOUNTINFO_MAX)) as it:
            for raw in it:
                found |= _claims_in((raw,), hooks)
    except Overflow:
        complete = False
    except OSError:
        complete = False
        if start_time(proc, pid) is None:  # exited meanwhile
            return None
    return Workload(pod, container, frozenset(found), complete)


def maps_file(maps_text: bytes, files: Collection[tuple[int, int]]) -> bool:
    """Whether /proc/<pid>/maps text shows an executable mapping of one of `files` ((st_dev, st_ino))."""
    return _maps_lines(maps_text.splitlines(), files) is True


def _maps_lines(text_lines: Iterable[bytes], files: Collection[tuple[int, int]]) -> bool | None:
    """True: mapped; False: not; None: no line at all (no memory map: the process is exiting)."""
    inodes = {str(ino).encode() for _dev, ino in files}
    empty = True
    for line in text_lines:
        empty = False
        fields = line.split(None, 5)
        if len(fields) < 5 or fields[4] not in inodes or b"x" not in fields[1]:
            continue
        try:
            major_s, minor_s = fields[3].split(b":")
            dev = os.makedev(int(major_s, 16), int(minor_s, 16))
            ino = int(fields[4])
        except ValueError:
            continue
        if (dev, ino) in files:
            return True
    return None if empty else False


MAPPED, ABSENT, UNREADABLE, OVERSIZED, EMPTY = "mapped", "absent", "unreadable", "oversized", "empty"


def hook_mapping(proc: Path, pid: int, files: Collection[tuple[int, int]]) -> str:
    """Whether `pid` maps one of `files` executable: `MAPPED`, `ABSENT`, `UNREADABLE` (no ptrace
    access, or gone), `OVERSIZED` (no such mapping within `MAPS_MAX` bytes of maps) or `EMPTY` (no
    memory map at all: it is exiting, its memory map released before its device files)."""
    base = task_dir(proc, pid)
    if base is None:
        return UNREADABLE
    try:
        with contextlib.closing(lines(f"{base}/maps", MAPS_MAX)) as it:
            return {True: MAPPED, False: ABSENT, None: EMPTY}[_maps_lines(it, files)]
    except Overflow:
        return OVERSIZED
    except OSError:
        return UNREADABLE


def ns_tgid(proc: Path, pid: int) -> int | None:
    """The process's ID in its own (innermost) PID namespace (what getpid() returns inside a
    container), from /proc/<pid>/status's ``NStgid`` (``NSpid`` on kernels before 4.1); None
    when gone or not told."""
    try:
        found: dict[bytes, int] = {}
        with contextlib.closing(lines(f"{proc}/{pid}/status", SMALL_MAX)) as it:
            for line in it:
                key = line.split(b":", 1)[0]
                if key in (b"NStgid", b"NSpid"):
                    found[key] = int(line.split()[-1])
        return found.get(b"NStgid", found.get(b"NSpid"))
    except (OSError, Overflow, ValueError, IndexError):
        return None


def file_in_root(proc: Path, pid: int, path: str) -> tuple[int, int] | None:
    """(st_dev, st_ino) of the regular file at absolute `path` as `pid` sees it, through its
    /proc root with no symlink followed (a tenant's symlink never sends the daemon to one of its
    own files); None when unreadable (no ptrace access), missing or not a regular file."""
    parts = [p for p in path.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        return None
    base = task_dir(proc, pid)
    if base is None:
        return None
    fds: list[int] = []
    try:
        fds.append(os.open(f"{base}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
        for i, part in enumerate(parts):
            flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_DIRECTORY if i < len(parts) - 1 else 0)
            fds.append(os.open(part, flags, dir_fd=fds[-1]))
        st = os.fstat(fds[-1])
    except OSError:
        return None
    finally:
        for fd in fds:
            os.close(fd)
    return (st.st_dev, st.st_ino) if stat_mod.S_ISREG(st.st_mode) else None


def capable(proc: Path, cap: int) -> bool:
    """Whether this process has capability `cap` in effect (``CapEff`` of its own status)."""
    try:
        with contextlib.closing(lines(f"{proc}/self/status", SMALL_MAX)) as it:
            for line in it:
                if line.startswith(b"CapEff:"):
                    return bool(int(line.split()[1], 16) >> cap & 1)
    except (OSError, Overflow, ValueError, IndexError):
        pass
    return False


def file_id(path: Path) -> tuple[int, int] | None:
    """(st_dev, st_ino) of `path`, as maps names a mapped file; None when it is missing."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino
