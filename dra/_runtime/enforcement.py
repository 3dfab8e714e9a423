"""Quota enforcement of one claim, carried out by the framework for the driver.

A driver answers `Driver.enforcement(claim, prepared)` with an `Enforcement` (hook library and
one `Quota` per visible device). For that claim the framework then

1. turns the quotas into the hook's settings and config file with hookcore's own writer and
   parses the file once with hookcore's own parser (`hookcore.claim_config`, which also checks
   that the library would enforce exactly the quotas asked): a share the library would reject is
   refused here, at prepare, with the claim and the fix in the message;
2. creates the claim's hook dir ``<state-dir>/hooks/<claimUID>/`` holding ``config`` (that file)
   and ``ledger`` (created by `hookcore.create_ledger` from that one parse), built in a temp dir
   and renamed into place, *before* the CDI spec exists;
3. adds to the claim's CDI edits: the hook set at ``/usr/lib/hookcore`` (read-only), the preload
   (``/etc/ld.so.preload`` from the set, or ``LD_PRELOAD``) and two files of the claim's hook dir
   at ``/run/hookcore/<stem>/``: ``config`` read-only, ``ledger`` read-write (the dir itself is
   not mounted); no quota variables (the file is authoritative, and two hooks in one container
   would clash on them);
4. keeps an existing hook dir with the same config at a re-prepare (running containers charge
   its ledger); removes the claim's hook dir at unprepare, after the CDI spec; sweeps dirs of
   claims that have no checkpoint record at start; `LedgerGuard` cuts a ledger that a tenant
   grew back to its size;
5. for quotas with a priority (`dra.Quota.priority`): keeps one priority board per device,
   ``<state-dir>/boards/<uuid>`` (a 4 KiB file, made by the first claim on the device that has a
   priority, removed when the last such claim is unprepared), and mounts it into the claim's
   containers at ``/run/hookcore/<stem>/priority/<uuid>``: read-write for a high claim (its hook
   marks its work there), read-only for a normal one (its hook reads it and waits); `LedgerGuard`
   cuts a board grown past its size back too.

The config file is what makes every process of the container limited, also children started by
``su``, ``ssh`` or a shell with a clean environment (HAMi #2125): the preload file loads the
library into them and the library reads its limits from the file, not from their environment.
The framework never spells a vendor's variable: the keys are hookcore's.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import logging
import os
import re
import secrets
import select
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import hookcore
from dra._runtime.fsutil import UID_RE, flocked
from dra._runtime.hookdir import CONTAINER_DIR, HookDir, HookDirError, HookSet, checked_stem
from dra.driver import ContainerEdits, Enforcement, Mount, Preload
from dra.errors import DRAError
from dra.health import Processed

log = logging.getLogger(__name__)

CONFIG_FILE = "config"
LEDGER_FILE = "ledger"
BOARD_DIR = "priority"  # in the container, beside config and ledger: the devices' priority boards
BOARD_BYTES = 4096  # HK_BOARD_BYTES (hookcore/core/priority.h)
_BOARD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,62}")
RO = ("ro", "nosuid", "nodev", "bind")
RW = ("rw", "nosuid", "nodev", "noexec", "bind")
MAX_CONFIG_BYTES = 64 << 10  # hookcore refuses larger config files


DEVICE_SMS_MAX = 4096
"""The largest SM count the hook's config accepts (HK_SMS_MAX)."""


class EnforcementError(DRAError):
    """The driver's enforcement settings cannot be carried out (the message says why and what to do)."""


@dataclasses.dataclass(frozen=True)
class ClaimHookPlan:
    """A claim's enforcement, validated, before any file exists."""

    library: Path
    stem: str
    preload: Preload
    settings: Mapping[str, str]  # the hook's KEY=VALUE settings (container paths)
    config_text: str  # the config file, exactly as hookcore writes and parsed back by it
    config_dir: str  # where the library looks for it in the container: /run/hookcore/<stem>
    config: hookcore.Config = dataclasses.field(repr=False, compare=False)  # config_text parsed (the ledger's)
    boards: tuple[tuple[str, bool], ...] = ()  # (device UUID, high) per device with a priority

    def to_json(self) -> dict[str, Any]:
        return {"library": str(self.library), "stem": self.stem, "preload": self.preload.value,
                "settings": dict(self.settings), "configDir": self.config_dir}


class ClaimHooks:
    """Per-claim hook dirs under ``<state_dir>/hooks`` and the node's `HookDir`."""

    def __init__(self, state_dir: Path, hook_dir: HookDir, default_preload: Preload = Preload.FILE) -> None:
        self.root = Path(state_dir) / "hooks"
        self.boards_root = Path(state_dir) / "boards"
        self.hook_dir = hook_dir
        self.default_preload = default_preload
        self._plans: dict[tuple[Any, ...], ClaimHookPlan] = {}
        self._root_made = False

    def claim_dir(self, uid: str) -> Path:
        if not UID_RE.match(uid):
            raise ValueError(f"claim UID {uid!r} is not a valid UID")
        return self.root / uid

    # -- prepare ---------------------------------------------------------------------------------

    def plan(self, enforcement: Enforcement) -> ClaimHookPlan:
        """Validate the driver's enforcement with hookcore's writer and parser; EnforcementError.

        Deterministic in its inputs, so a verdict is remembered per (library version, quotas,
        preload): claims of the same shape, the common case, pay for the parse once."""
        try:
            checked_stem(enforcement.library)
            digest = self.hook_dir.digest(Path(enforcement.library))  # exists, is ELF
        except HookDirError as e:
            raise EnforcementError(str(e)) from None
        key = (str(enforcement.library), digest, tuple(enforcement.quotas), enforcement.preload)
        got = self._plans.get(key)
        if got is None:
            got = self._plan(enforcement)
            if len(self._plans) >= 1024:
                self._plans.clear()
            self._plans[key] = got
        return got

    def _plan(self, enforcement: Enforcement) -> ClaimHookPlan:
        stem = checked_stem(enforcement.library)
        quotas = list(enforcement.quotas)
        if not quotas:
            raise EnforcementError("the enforcement lists no device quota; return None from enforcement() to leave"
                                   " a claim unenforced")
        for i, q in enumerate(quotas):
            if q.memory is not None and q.memory <= 0:
                raise EnforcementError(f"quota {i} (device {q.uuid}): memory must be a positive number of bytes,"
                                       f" not {q.memory}")
            if not 1 <= q.cores <= 100:
                raise EnforcementError(f"quota {i} (device {q.uuid}): cores must be a percentage in 1..100,"
                                       f" not {q.cores}")
            if q.strict and q.cores >= 100:
                raise EnforcementError(f"quota {i} (device {q.uuid}): a strict cap needs cores below 100, not"
                                       f" {q.cores}; drop strict for a claim without a compute limit")
            if q.full_load_mhz is not None and not (q.strict and q.full_load_mhz > 0):
                raise EnforcementError(f"quota {i} (device {q.uuid}): full_load_mhz={q.full_load_mhz} needs a strict"
                                       " cap and a positive clock in MHz")
            if q.clock_elasticity is not None and not (q.strict and hookcore.is_elasticity(q.clock_elasticity)):
                raise EnforcementError(f"quota {i} (device {q.uuid}): clock_elasticity={q.clock_elasticity} needs a"
                                       " strict cap and a number from 0 to 1 with at most 3 decimals (0.45); leave it"
                                       " None for the hook's prior (1)")
            if q.priority is not None and (q.priority not in ("high", "normal") or not _BOARD_NAME.fullmatch(q.uuid)):
                raise EnforcementError(f"quota {i} (device {q.uuid}): priority={q.priority!r} needs high or normal and a"
                                       " device UUID of [A-Za-z0-9._:-] (its board is named by it)")
            if q.device_sms is not None and not 1 <= q.device_sms <= DEVICE_SMS_MAX:
                raise EnforcementError(f"quota {i} (device {q.uuid}): device_sms must be the device's SM count,"
                                       f" 1..{DEVICE_SMS_MAX}, not {q.device_sms}; leave it None when unknown")
        try:
            config_path = str(hookcore.container_config_path(enforcement.library))
            config_dir = os.path.dirname(config_path)
            boards = any(q.priority is not None for q in quotas)
            # The library's own parser, once, on exactly the file it will read.
            claim = hookcore.claim_config(quotas, f"{config_dir}/{LEDGER_FILE}", file_path=config_path, stem=stem,
                                          board_dir=f"{config_dir}/{BOARD_DIR}" if boards else None)
        except hookcore.HookConfigError as e:
            raise EnforcementError(f"the hook library rejects these settings: {e}") from None
        return ClaimHookPlan(Path(enforcement.library), stem, enforcement.preload or self.default_preload,
                             claim.settings, claim.text, config_dir, claim.config,
                             tuple((q.uuid, q.priority == "high") for q in quotas if q.priority))

    def create(self, uid: str, plan: ClaimHookPlan) -> Path:
        """The claim's hook dir with ``config`` and ``ledger``, built aside and renamed into place.

        An existing dir with exactly this config is kept as it is: a re-prepare of a claim whose
        containers run (its CDI spec was lost, its hook set collected) must not give new
        containers a fresh ledger beside the one the running ones charge (the claim-wide quota
        would count twice). Any other existing dir (an interrupted earlier attempt, a changed
        config) is replaced."""
        if not plan.boards:
            return self._create(uid, plan)
        # Boards and the dir that names them appear together, under the boards' lock: a concurrent
        # unprepare (this daemon's pool or another instance's in a rolling update) that sweeps
        # unused boards sees either neither or both.
        with self.boards_lock():
            for uuid, _high in plan.boards:
                self.board(uuid)
            return self._create(uid, plan)

    def _create(self, uid: str, plan: ClaimHookPlan) -> Path:
        final = self.claim_dir(uid)
        if not self._root_made:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o755)
            self._root_made = True
        if self._reusable(final, plan):
            log.info("claim hook dir kept (same config): its ledger stays the one running containers charge",
                     extra={"claim": uid, "path": str(final)})
            return final
        # Hot path (every enforced prepare): os calls on strings rather than pathlib.
        tmp = f"{self.root}/.{uid}.{secrets.token_hex(4)}.tmp"
        os.mkdir(tmp, 0o755)
        try:
            fd = os.open(f"{tmp}/{CONFIG_FILE}", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, plan.config_text.encode())
                os.fchmod(fd, 0o644)  # whatever the umask
            finally:
                os.close(fd)
            try:
                # Any user of the claim's containers may charge the ledger: the dir is the claim's alone.
                hookcore.create_ledger(f"{tmp}/{LEDGER_FILE}", plan.config, mode=0o666)
            except Exception as e:
                raise EnforcementError(f"cannot create the claim's ledger in {tmp}: {e}") from e
            try:
                os.rename(tmp, final)
            except OSError:  # an interrupted earlier attempt left the dir: replace it
                shutil.rmtree(final)
                os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return final

    @contextlib.contextmanager
    def boards_lock(self) -> Iterator[None]:
        """Exclusive hold on the boards (``flock`` on their directory: no lock file is left behind)."""
        self.boards_root.mkdir(parents=True, exist_ok=True, mode=0o755)
        with flocked(self.boards_root):
            yield

    def boards_in_use(self) -> set[str] | None:
        """The device UUIDs whose board some claim's hook dir names (its config, the daemon's own
        file, parsed by the library's parser); None when a config cannot be read or parsed (then
        no board may be judged unused)."""
        used: set[str] = set()
        for uid in self.uids():
            path = f"{self.claim_dir(uid)}/{CONFIG_FILE}"
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            except FileNotFoundError:
                continue  # removed meanwhile (an unprepare outside the lock)
            except OSError:
                return None
            try:
                text = os.read(fd, MAX_CONFIG_BYTES + 1).decode()
            except (OSError, UnicodeDecodeError):
                return None
            finally:
                os.close(fd)
            if "HOOKCORE_PRIORITY_BOARD" not in text:
                continue  # a claim without priorities names no board
            try:
                config = hookcore.parse_config(file_text=text, file_path=path)
            except hookcore.HookConfigError:
                return None
            used |= {d.uuid for d in config.devices if d.priority is not None and d.uuid}
        return used

    def sweep_boards(self) -> list[str]:
        """Remove the boards no claim names any more (the last claim with a priority on the device
        was unprepared); returns the paths removed. A board a claim names is kept, so a running
        high claim's marks and a normal claim's reads stay on the same file."""
        if not self.boards_root.is_dir():
            return []
        removed = []
        with self.boards_lock():
            used = self.boards_in_use()
            if used is None:
                log.warning("priority boards kept: a claim's hook config could not be read",
                            extra={"path": str(self.boards_root)})
                return []
            for entry in os.scandir(self.boards_root):
                if _BOARD_NAME.fullmatch(entry.name) and entry.name not in used and entry.is_file(follow_symlinks=False):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.path)
                        removed.append(entry.path)
        return removed

    def board_path(self, uuid: str) -> str:
        return f"{self.boards_root}/{uuid}"

    def board(self, uuid: str) -> str:
        """The device's priority board, made if missing: a regular file of BOARD_BYTES zero bytes (no
        high claim at work), writable by any user of a high claim's containers (the mount decides who
        may write: read-only for normal claims). One per device, shared by its claims, kept while a
        claim names it (`sweep_boards`)."""
        self.boards_root.mkdir(parents=True, exist_ok=True, mode=0o755)
        path = self.board_path(uuid)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        except FileExistsError:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                raise EnforcementError(f"the priority board {path} is not a regular file: remove it") from None
            return path
        try:
            os.ftruncate(fd, BOARD_BYTES)
            os.fchmod(fd, 0o666)  # whatever the umask
        finally:
            os.close(fd)
        return path

    @staticmethod
    def _reusable(final: Path, plan: ClaimHookPlan) -> bool:
        """`final` holds this plan's config and a regular ledger file (nothing followed, nothing opened
        but the daemon's own config file)."""
        try:
            if not stat.S_ISREG(os.lstat(f"{final}/{LEDGER_FILE}").st_mode):
                return False
            fd = os.open(f"{final}/{CONFIG_FILE}", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_CONFIG_BYTES:
                return False
            return os.read(fd, MAX_CONFIG_BYTES + 1) == plan.config_text.encode()
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def pinned_edits(self, uid: str, plan: ClaimHookPlan) -> Iterator[tuple[ContainerEdits, HookSet]]:
        """The claim's CDI edits for its hook, with the set kept from collection (write the CDI
        spec inside the block)."""
        try:
            with self.hook_dir.pinned(plan.library) as hset:
                yield self.edits(uid, plan, hset), hset
        except HookDirError as e:
            raise EnforcementError(str(e)) from None

    def edits(self, uid: str, plan: ClaimHookPlan, hset: HookSet) -> ContainerEdits:
        # No quota variables: the config file is authoritative, and two hooks' claims in one
        # container (a GPU and an NPU claim) would clash on the neutral names.
        env: dict[str, str] = {}
        mounts = [Mount(str(hset.path), CONTAINER_DIR, RO)]
        if plan.preload is Preload.FILE:
            mounts.append(Mount(str(hset.preload_file), "/etc/ld.so.preload", RO))
        else:
            env["LD_PRELOAD"] = ":".join(hset.container_paths())
        # Two files, not the dir: the config read-only (it cannot be edited, replaced or removed:
        # a mount point), the ledger the one writable thing, and nothing else can be created in
        # the daemon's dir (kubelet's disk) from the container.
        claim_dir = self.claim_dir(uid)
        mounts.append(Mount(f"{claim_dir}/{CONFIG_FILE}", f"{plan.config_dir}/{CONFIG_FILE}", RO))
        mounts.append(Mount(f"{claim_dir}/{LEDGER_FILE}", f"{plan.config_dir}/{LEDGER_FILE}", RW))
        # The devices' priority boards: a high claim marks its work (writable), a normal claim only reads.
        mounts += [Mount(self.board_path(uuid), f"{plan.config_dir}/{BOARD_DIR}/{uuid}", RW if high else RO)
                   for uuid, high in plan.boards]
        return ContainerEdits(env=env, mounts=tuple(mounts))

    # -- unprepare and repair --------------------------------------------------------------------

    def remove(self, uid: str) -> bool:
        path = self.claim_dir(uid)
        if not path.exists():
            return False
        shutil.rmtree(path)
        self.sweep_boards()
        return True

    def uids(self) -> set[str]:
        if not self.root.is_dir():
            return set()
        return {p.name for p in self.root.iterdir() if UID_RE.match(p.name) and not p.name.startswith(".")}

    def temp_dirs(self) -> list[tuple[Path, str]]:
        """(path, claim UID) of dirs that an interrupted `create` left."""
        if not self.root.is_dir():
            return []
        out = []
        for p in self.root.glob(".*.tmp"):
            uid = p.name[1:].rsplit(".", 2)[0]
            if UID_RE.match(uid):
                out.append((p, uid))
        return out

    def sweep_orphans(self, known_uids: Iterable[str]) -> list[Path]:
        """Remove hook dirs of claims with no checkpoint record (the record outlives its dir)."""
        known = set(known_uids)
        removed = []
        for uid in sorted(self.uids() - known):
            path = self.claim_dir(uid)
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
            log.warning("removed orphaned claim hook dir (no checkpoint record)", extra={"claim": uid, "path": str(path)})
        return removed + [Path(p) for p in self.sweep_boards()]


class LedgerGuard:
    """Holds every claim's ledger to its size: the one file a claim's containers can write lives on
    kubelet's disk, where a ``write()`` past its end (or a ``fallocate``) would grow it unbounded.

    Each ledger is checked with ``lstat`` (``st_size`` and ``st_blocks``) when it is written to
    (inotify ``IN_MODIFY``, 50 ms to let a burst coalesce) and every `interval` seconds anyway;
    one larger than a fresh ledger is cut back to that size (``ftruncate``: the bytes the hook maps
    are kept, what was appended goes) and reported to `on_oversized` (the daemon's
    ``dra_ledger_oversized_total``). So a tenant holds at most what it writes in about 50 ms
    (without inotify: in one interval)."""

    def __init__(self, hooks: ClaimHooks, on_oversized: Callable[[str], None] = lambda uid: None,
                 interval: float = 1.0) -> None:
        self.hooks = hooks
        self.on_oversized = on_oversized
        self.interval = interval
        self._size: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._wake = (-1, -1)
        self._logged: dict[str, float] = {}
        self.passes = Processed()  # checks done (the files of a claim present then are watched from the first)
        self.woken = Processed()  # checks started by a write to a watched file, not by the interval

    def ledger_bytes(self) -> int:
        """The size of a ledger as hookcore creates it (measured once on a scratch ledger)."""
        if self._size is None:
            with tempfile.TemporaryDirectory(prefix="dra-ledger-probe-") as tmp:
                path = f"{tmp}/{LEDGER_FILE}"
                hookcore.create_ledger(path, {"HOOKCORE_LEDGER": path, "HOOKCORE_MEMORY_LIMIT_0": str(1 << 20)})
                self._size = os.stat(path).st_size
        return self._size

    def boards(self) -> list[str]:
        """The devices' priority boards (high claims' containers write them)."""
        root = self.hooks.boards_root
        return [f"{root}/{p.name}" for p in root.iterdir() if _BOARD_NAME.fullmatch(p.name)] if root.is_dir() else []

    def check(self) -> list[str]:
        """One pass; returns the UIDs of the claims whose ledger was cut back, and ``board:<uuid>`` for
        each priority board cut back."""
        uids = sorted(self.hooks.uids())
        boards = self.boards()
        if not uids and not boards:
            return []
        ledger = self.ledger_bytes() if uids else 0
        cut = []
        items = [(uid, f"{self.hooks.claim_dir(uid)}/{LEDGER_FILE}", ledger) for uid in uids]
        items += [(f"board:{os.path.basename(b)}", b, BOARD_BYTES) for b in boards]
        for uid, path, size in items:
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue  # the daemon made a regular file and the container cannot replace it: not ours
            if st.st_size <= size and st.st_blocks * 512 <= size + (64 << 10):
                continue
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
                try:
                    os.ftruncate(fd, size)
                finally:
                    os.close(fd)
            except OSError as e:
                log.error("oversized claim ledger could not be cut back", extra={"claim": uid, "path": path,
                                                                                 "bytes": st.st_size, "error": str(e)})
                continue
            now = time.monotonic()
            if now - self._logged.get(uid, -60.0) >= 60:  # a tenant writing in a loop: one line a minute, every cut counted
                self._logged[uid] = now
                log.warning("claim ledger grew past its size (written from the claim's container); cut back",
                            extra={"claim": uid, "path": path, "bytes": st.st_size, "allocated": st.st_blocks * 512,
                                   "size": size})
            cut.append(uid)
            self.on_oversized(uid)
        return cut

    def start(self) -> None:
        self._wake = os.pipe()
        self._thread = threading.Thread(target=self._run, name="dra-ledger-guard", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            notify: _Modified | None = _Modified()
        except OSError as e:  # no inotify (or out of instances): the interval alone
            log.warning("ledger guard polls only (no inotify)", extra={"error": str(e)})
            notify = None
        woken = False
        try:
            while not self._stop.is_set():
                try:
                    if notify is not None:
                        notify.watch([*(f"{self.hooks.claim_dir(uid)}/{LEDGER_FILE}" for uid in self.hooks.uids()),
                                      *self.boards()])
                    self.check()
                except Exception:
                    log.exception("ledger size check failed; retrying")
                self.passes.add()
                if woken:
                    self.woken.add()
                woken = notify is not None and notify.wait(self.interval, self._wake[0])
                if not woken:
                    self._stop.wait(0 if notify is not None else self.interval)
                else:
                    self._stop.wait(0.05)  # a write() to a ledger: let the burst coalesce, then check
        finally:
            if notify is not None:
                notify.close()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            os.write(self._wake[1], b"x")
            self._thread.join(5)
            for fd in self._wake:
                os.close(fd)
            self._thread = None


class _Modified:
    """inotify ``IN_MODIFY`` on the claims' ledger files: a ``write()`` or ``truncate`` wakes the
    guard at once (the hook updates its ledger through a shared mapping, which raises no event).

    A watch is on an inode, not a path: a claim's dir replaced at a re-prepare (another config) puts
    a new ledger at the same path while running containers keep the old one mapped, so its watch
    lives on and sees none of the new file's writes. Each pass therefore compares the path's inode
    with the watched one and moves the watch to a new file."""

    IN_MODIFY = 0x2
    IN_DONT_FOLLOW = 0x02000000  # as the guard's lstat: a link is not the daemon's file

    def __init__(self) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self._watched: dict[str, tuple[tuple[int, int], int]] = {}  # path -> ((st_dev, st_ino), watch descriptor)

    def watch(self, paths: Iterable[str]) -> None:
        """Watch the files now at these paths (one missing, or past the watch limit: the interval
        still checks it); drop the watches of files no longer there."""
        now: dict[str, tuple[tuple[int, int], int]] = {}
        for path in paths:
            try:
                st = os.lstat(path)
            except OSError:
                continue  # no ledger there (a claim without a hook has only its marker)
            have = self._watched.pop(path, None)
            if have is not None and have[0] == (st.st_dev, st.st_ino):
                now[path] = have
                continue
            if have is not None:
                self._libc.inotify_rm_watch(self.fd, have[1])
            wd = self._libc.inotify_add_watch(self.fd, os.fsencode(path), self.IN_MODIFY | self.IN_DONT_FOLLOW)
            if wd >= 0:
                now[path] = ((st.st_dev, st.st_ino), wd)
        for _inode, wd in self._watched.values():  # claims gone (the kernel may have dropped it already)
            self._libc.inotify_rm_watch(self.fd, wd)
        self._watched = now

    def wait(self, timeout: float, wake: int) -> bool:
        """True when a watched file was modified within `timeout` seconds (the events are drained);
        False at the timeout or once `wake` (a pipe's read end) is readable."""
        ready, _, _ = select.select([self.fd, wake], [], [], timeout)
        if self.fd not in ready:
            return False
        with contextlib.suppress(BlockingIOError):
            while os.read(self.fd, 65536):
                pass
        return True

    def close(self) -> None:
        os.close(self.fd)


def merge_edits(a: ContainerEdits, b: ContainerEdits) -> ContainerEdits:
    """`a` then `b` (b's environment wins on a clash)."""
    return ContainerEdits(env={**a.env, **b.env}, mounts=(*a.mounts, *b.mounts),
                          device_nodes=(*a.device_nodes, *b.device_nodes))
