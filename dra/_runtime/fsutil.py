"""File-system helpers with crash semantics: atomic replace, grouped directory fsync, temp files,
and the one flock primitive (every lock of the framework is built on `lock_file`).

Used by the checkpoint, the CDI specs and the hook directory. `atomic_write` leaves readers the
old or the new content, never a mix; with ``durable`` the new content also survives power loss.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path

from dra._runtime.faults import fault
from dra._runtime.wait import until

__all__ = ["UID_RE", "LockTimeout", "atomic_write", "dir_syncer", "flocked", "fsync_dir", "lock_file", "temp_files",
           "unlock_file"]

UID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def atomic_write(path: Path | str, data: bytes, mode: int = 0o600, durable: bool = True) -> None:
    """Write `data` to `path` so that readers see the old or the new content, never a mix.

    Temp file in the same directory, then rename over `path`. With `durable` the data is
    fdatasync'ed before the rename and the directory fsync'ed after it (concurrent writers in
    one directory share that fsync: group commit), so the new content survives power loss.
    Temp files are named ``.<name>.<random>.tmp`` (a crash may leave one; `remove_temp_files`).
    """
    # Hot path of every prepare (three calls per claim): plain strings and os calls rather than
    # pathlib and tempfile.mkstemp, which cost more CPU than the system calls themselves here.
    path = os.fspath(path)
    directory, name = os.path.split(path)
    fd, tmp = _create_temp(directory, name)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode)  # exact mode whatever the umask (the file was created 0600)
            if durable:
                os.fdatasync(fd)
        finally:
            os.close(fd)
        fault("atomic.before_rename")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fault("atomic.after_rename")
    if durable:
        dir_syncer(directory or ".").sync()


def _create_temp(directory: str, name: str) -> tuple[int, str]:
    """A new file ``<directory>/.<name>.<random>.tmp`` opened for writing (mode 0600), as mkstemp."""
    for _ in range(100):
        tmp = os.path.join(directory, f".{name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary file name", os.path.join(directory, f".{name}.*.tmp"))


def fsync_dir(path: Path | str) -> None:
    dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class _DirSync:
    """Group commit of directory fsyncs: a caller returns once an fsync that started after its
    call has finished; callers arriving while one runs share the next one."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._cv = threading.Condition()
        self._requested = 0
        self._done = 0
        self._running = False

    def sync(self) -> None:
        with self._cv:
            self._requested += 1
            ticket = self._requested
            while self._done < ticket:
                if self._running:
                    self._cv.wait()
                    continue
                self._running = True
                covers = self._requested
                self._cv.release()
                try:
                    fsync_dir(self.path)
                finally:
                    self._cv.acquire()
                    self._running = False
                    self._cv.notify_all()
                self._done = max(self._done, covers)


_dir_syncers: dict[str, _DirSync] = {}
_dir_syncers_lock = threading.Lock()


def dir_syncer(path: Path | str) -> _DirSync:
    """The one group-commit syncer of a directory (keyed by the path as given: callers of one
    directory spell it the same way; two spellings would only mean two syncers, never a lost fsync)."""
    key = os.fspath(path)
    syncer = _dir_syncers.get(key)  # no lock for the common case: dict reads are atomic
    if syncer is None:
        with _dir_syncers_lock:
            syncer = _dir_syncers.get(key)
            if syncer is None:
                syncer = _dir_syncers[key] = _DirSync(key)
    return syncer


def temp_files(directory: Path, prefix: str = "") -> list[tuple[Path, str]]:
    """Leftovers of interrupted `atomic_write` calls for ``<prefix><claimUID>.json`` targets,
    with the claim UID each belongs to (writers hold that claim's lock while a temp file exists)."""
    out = []
    for p in directory.glob(f".{prefix}*.json.*.tmp"):
        uid = p.name[1 + len(prefix):].rsplit(".json.", 1)[0]
        if UID_RE.match(uid):
            out.append((p, uid))
    return out


class LockTimeout(TimeoutError):
    """A lock was not acquired within the timeout."""


def lock_file(path: Path | str, *, shared: bool = False, timeout: float | None = None, mode: int = 0o600) -> int:
    """Open `path` (created when missing) and flock it; returns the fd that holds the lock.

    Each call locks its own open file description, so the lock excludes other processes AND
    other threads of this process; it is not reentrant. The kernel drops it when the holder dies
    (SIGKILL included). `timeout` None waits forever (without the GIL); else LockTimeout. A
    directory is locked as it is (opened read-only): no lock file is left behind in it."""
    if os.path.isdir(path):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    else:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, mode)
    op = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    try:
        if timeout is None:
            fcntl.flock(fd, op)
            return fd

        def taken() -> bool:
            try:
                fcntl.flock(fd, op | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

        until(taken, timeout=timeout, interval=0.01, what=f"lock {path}", error=LockTimeout)
        return fd
    except BaseException:
        os.close(fd)
        raise


def unlock_file(fd: int) -> None:
    """Release a lock taken by `lock_file` (closing the fd releases it)."""
    os.close(fd)


@contextlib.contextmanager
def flocked(path: Path | str, *, shared: bool = False, timeout: float | None = None, mode: int = 0o600) -> Iterator[int]:
    """`lock_file` for a ``with`` block."""
    fd = lock_file(path, shared=shared, timeout=timeout, mode=mode)
    try:
        yield fd
    finally:
        unlock_file(fd)
