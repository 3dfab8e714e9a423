"""Hook libraries on the host: content-addressed, immutable, switched atomically.

Layout under the hook dir (``dra run --hook-dir``, default ``/var/lib/dra-hookcore``), shared by
every driver's daemon on the node:

    libs/<sha256>/<file>        one version of one library; written into a temp dir that is then
                                renamed into place; never written again
    sets/<set-id>/<file>        hard links of one version of every library name on the node
    sets/<set-id>/ld.so.preload ``/usr/lib/hookcore/<file>`` per member, one a line
    current -> sets/<set-id>    the set new claims mount; switched by renaming a new symlink over it
    .lock                       flock: exclusive to install, switch and collect; shared while a
                                prepare picks a set and writes the CDI spec that mounts it

``<set-id>`` is the SHA-256 of the set's sorted ``<file> <sha256>`` lines, so equal sets share
one directory. A container mounts a set at ``/usr/lib/hookcore`` and maps its files; because no
file is ever overwritten and a set is deleted only when no CDI spec in the CDI dir mounts it, an
upgrade never changes a library under a running process (HAMi #727/#753). Every daemon that
shares a hook dir must share the CDI dir too (the charts do): collection reads the specs there.

Crash safety: a kill leaves at most a temp dir (``.tmp-*``) or a temp symlink (``.current.*``),
removed by `recover`; `current` always names a complete set.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import re
import secrets
import shutil
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import hookcore
from dra._runtime.faults import fault
from dra._runtime.fsutil import flocked, fsync_dir
from dra.errors import DRAError

log = logging.getLogger(__name__)

DEFAULT_HOOK_DIR = Path("/var/lib/dra-hookcore")
CONTAINER_DIR = "/usr/lib/hookcore"
"""Where a claim's containers see the set (read-only)."""
PRELOAD_FILE = "ld.so.preload"

_DIGEST = re.compile(r"^[0-9a-f]{64}$")


class HookDirError(DRAError):
    """A hook library that cannot be installed (missing, not ELF, badly named) or a broken hook dir."""


def checked_stem(library: Path | str) -> str:
    """The library's stem by hookcore's one rule (the name the library derives its config from);
    HookDirError for a name the library would not recognise as its own."""
    try:
        return hookcore.library_stem(library)
    except ValueError as e:
        raise HookDirError(f"hook library {library}: {e} (e.g. libvgpu.so)") from None


def _is_library(name: str) -> bool:
    try:
        hookcore.library_stem(name)
    except ValueError:
        return False
    return True


@dataclasses.dataclass(frozen=True)
class HookSet:
    """One installed set: its directory and members (file name -> SHA-256)."""

    path: Path
    members: Mapping[str, str]

    @property
    def id(self) -> str:
        return self.path.name

    @property
    def preload_file(self) -> Path:
        return self.path / PRELOAD_FILE

    def container_paths(self) -> list[str]:
        """The members as the container sees them, in preload order."""
        return [f"{CONTAINER_DIR}/{name}" for name in sorted(self.members)]


def set_id(members: Mapping[str, str]) -> str:
    return hashlib.sha256("".join(f"{n} {d}\n" for n, d in sorted(members.items())).encode()).hexdigest()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class HookDir:
    """The hook dir of this node; safe across threads and processes (flock on ``.lock``)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.libs = self.root / "libs"
        self.sets = self.root / "sets"
        self.current_link = self.root / "current"
        self._lock_path = self.root / ".lock"
        self._digests: dict[tuple[str, int, int, int, int], str] = {}  # (path, dev, ino, size, mtime) -> sha
        self._members: dict[str, dict[str, str]] = {}  # set id -> members (sets are immutable)
        self._mu = threading.Lock()
        self._dirs_made = False

    def ensure_dirs(self) -> None:
        if self._dirs_made and self.root.is_dir():
            return
        for d in (self.root, self.libs, self.sets):
            d.mkdir(parents=True, exist_ok=True, mode=0o755)
        self._dirs_made = True

    # -- locking ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def lock(self, shared: bool = False) -> Iterator[None]:
        """The hook dir's flock: shared while a set is being referenced, exclusive to change sets."""
        self.ensure_dirs()
        with flocked(self._lock_path, shared=shared, mode=0o644):
            yield

    # -- reading ---------------------------------------------------------------------------------

    def digest(self, library: Path) -> str:
        """SHA-256 of a library file, cached while the file is unchanged."""
        try:
            st = library.stat()
        except FileNotFoundError:
            raise HookDirError(f"hook library {library} does not exist; build it (make -C hookcore) or fix the"
                               " driver's Enforcement.library") from None
        key = (str(library), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        got = self._digests.get(key)
        if got is None:
            with library.open("rb") as f:
                if f.read(4) != b"\x7fELF":
                    raise HookDirError(f"hook library {library} is not an ELF shared object")
            got = self._digests[key] = _sha256(library)
        return got

    def current(self) -> HookSet | None:
        """The set `current` names, or None (nothing installed yet)."""
        try:
            target = os.readlink(self.current_link)
        except (FileNotFoundError, OSError):
            return None
        sid = os.path.basename(target)
        return self._set(sid)

    def _set(self, sid: str) -> HookSet | None:
        path = self.sets / sid
        members = self._members.get(sid)
        if members is None:
            if not _DIGEST.match(sid) or not path.is_dir():
                return None
            members = {p.name: _sha256(p) for p in path.iterdir() if _is_library(p.name)}
            with self._mu:
                self._members[sid] = members
        return HookSet(path, members)

    def installed_sets(self) -> list[str]:
        return sorted(p.name for p in self.sets.glob("*") if _DIGEST.match(p.name)) if self.sets.is_dir() else []

    # -- installing ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def pinned(self, library: Path) -> Iterator[HookSet]:
        """A set holding exactly this version of `library`, kept from collection while the caller
        writes the CDI spec that mounts it (a shared flock). Installs and switches when needed."""
        name = library.name
        checked_stem(library)
        want = self.digest(library)
        for _ in range(10):
            with self.lock(shared=True):
                cur = self.current()
                if cur is not None and cur.members.get(name) == want:
                    yield cur
                    return
            self.install(library)
        raise HookDirError(f"hook dir {self.root}: library {name} keeps being replaced by another daemon; is an"
                           " older and a newer driver version fighting over it? Finish the rolling update.")

    def install(self, library: Path) -> HookSet:
        """Install `library` (if this version is new), build the set of it plus the current version
        of every other library name, and make that set `current`. Idempotent."""
        name = library.name
        stem = checked_stem(library)
        digest = self.digest(library)
        with self.lock():
            cur = self.current()
            if cur is not None and cur.members.get(name) == digest:
                return cur
            self._install_lib(library, digest)
            fault("hookdir.after_lib")
            # One member per stem: the stem names the library's config, so libvgpu.so.1 replaces libvgpu.so.
            kept = {n: d for n, d in (cur.members if cur is not None else {}).items() if checked_stem(n) != stem}
            members = {**kept, name: digest}
            new = self._make_set(members)
            fault("hookdir.after_set")
            self._switch(new.id)
            fault("hookdir.after_switch")
            log.info("hook library installed", extra={"library": name, "sha256": digest, "set": new.id,
                                                       "previous": cur.id if cur else None})
            return new

    def _install_lib(self, library: Path, digest: str) -> None:
        final = self.libs / digest
        if (final / library.name).is_file():
            return
        tmp = self.libs / f".tmp-{secrets.token_hex(6)}"
        tmp.mkdir(mode=0o755)
        try:
            dst = tmp / library.name
            with library.open("rb") as src, dst.open("wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(dst, 0o755)
            if _sha256(dst) != digest:
                raise HookDirError(f"hook library {library} changed while it was being installed; retry")
            fsync_dir(tmp)
            if final.is_dir():  # the same bytes under another file name: add this name beside it
                os.link(dst, final / library.name)
                shutil.rmtree(tmp)
            else:
                os.rename(tmp, final)
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            if not (final / library.name).is_file():
                raise HookDirError(f"cannot install hook library {library} into {self.libs}: {e}") from e
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        fsync_dir(self.libs)

    def _make_set(self, members: Mapping[str, str]) -> HookSet:
        sid = set_id(members)
        final = self.sets / sid
        if not final.is_dir():
            tmp = self.sets / f".tmp-{secrets.token_hex(6)}"
            tmp.mkdir(mode=0o755)
            try:
                for n, d in sorted(members.items()):
                    os.link(self.libs / d / n, tmp / n)
                preload = "".join(f"{CONTAINER_DIR}/{n}\n" for n in sorted(members))
                with (tmp / PRELOAD_FILE).open("w") as f:
                    f.write(preload)
                    f.flush()
                    os.fsync(f.fileno())
                os.chmod(tmp / PRELOAD_FILE, 0o644)
                fsync_dir(tmp)
                os.rename(tmp, final)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            fsync_dir(self.sets)
        with self._mu:
            self._members[sid] = dict(members)
        return HookSet(final, dict(members))

    def _switch(self, sid: str) -> None:
        tmp = self.root / f".current.{secrets.token_hex(6)}"
        os.symlink(f"sets/{sid}", tmp)
        try:
            os.replace(tmp, self.current_link)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        fsync_dir(self.root)

    # -- repair and collection -------------------------------------------------------------------

    def recover(self) -> list[str]:
        """Remove what interrupted installs left (temp dirs, temp symlinks); returns their paths."""
        if not self.root.is_dir():
            return []
        removed = []
        with self.lock():
            for p in [*self.libs.glob(".tmp-*"), *self.sets.glob(".tmp-*")]:
                shutil.rmtree(p, ignore_errors=True)
                removed.append(str(p))
            for p in self.root.glob(".current.*"):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
                    removed.append(str(p))
        return removed

    def referenced_sets(self, spec_dirs: Iterable[Path]) -> set[str]:
        """Set IDs that a CDI spec in `spec_dirs` mounts (any driver's spec, any file)."""
        # Any spelling of the hook dir (a symlink, another daemon's --hook-dir form) counts: keeping
        # a set too many is harmless, deleting a mounted one is not.
        pattern = re.compile(rb"/sets/([0-9a-f]{64})")
        found: set[str] = set()
        for d in spec_dirs:
            if not d.is_dir():
                continue
            for p in d.iterdir():
                if p.suffix not in (".json", ".yaml", ".yml") and not p.name.endswith(".tmp"):
                    continue
                try:
                    data = p.read_bytes()
                except (FileNotFoundError, IsADirectoryError):
                    continue
                found |= {m.decode() for m in pattern.findall(data)}
        return found

    def collect(self, spec_dirs: Iterable[Path]) -> list[str]:
        """Delete sets no CDI spec mounts (never `current`), then library versions no set holds."""
        if not self.sets.is_dir():
            return []
        removed = []
        with self.lock():
            cur = self.current()
            keep = self.referenced_sets(spec_dirs) | ({cur.id} if cur else set())
            for sid in self.installed_sets():
                if sid not in keep:
                    shutil.rmtree(self.sets / sid, ignore_errors=True)
                    with self._mu:
                        self._members.pop(sid, None)
                    removed.append(str(self.sets / sid))
            for lib in self.libs.glob("*"):
                if not _DIGEST.match(lib.name):
                    continue
                files = list(lib.iterdir())
                if all(f.stat().st_nlink <= 1 for f in files):  # no set links it
                    shutil.rmtree(lib, ignore_errors=True)
                    removed.append(str(lib))
        if removed:
            log.info("hook sets and libraries no claim mounts removed", extra={"paths": removed})
        return removed
