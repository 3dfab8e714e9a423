"""The mark of a claim no hook holds, in its containers: the watchdog's evidence of membership.

The watchdog puts a process in a claim only by file identity: a mount of one of the daemon's own
files under ``<state-dir>/hooks/<claimUID>/`` (`procinfo.HooksFs`). A hooked claim's containers
get its ``config`` and ``ledger`` from there. A claim whose devices hold their shares themselves
(a vendor's partition of a device: `Driver.enforcement` answers None) has no hook, so without this
its processes could not be told from a process that reached the device another way (a
privileged pod, a host path, a container outside Kubernetes).

So such a claim gets one file, ``hooks/<claimUID>/claim``, made by the daemon (0644, a line
naming the claim and the driver) before its CDI spec exists and mounted read-only at
``/run/dra-claims/<driver>/<claimUID>``: a mount point, which a container can neither change nor
remove, and nothing else of the daemon's dir is mounted. It goes with the claim's hook dir at
unprepare, and the start's sweep removes it with any dir of a claim that has no record.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat

from dra._runtime.enforcement import RO, ClaimHooks
from dra.driver import ContainerEdits, Mount

MARKER_FILE = "claim"
CONTAINER_ROOT = "/run/dra-claims"
_MAX_BYTES = 4096


def marker_text(uid: str, driver: str) -> str:
    return f"claim {uid} of driver {driver}: its devices hold its shares (no hook)\n"


def mark(hooks: ClaimHooks, uid: str, driver: str) -> ContainerEdits:
    """Make the claim's marker (kept as it is when it already says this) and return the edit that
    mounts it. Built in a temp dir and renamed into place, as a hook dir is: a crash leaves a temp
    dir the start's repair removes, never a half-written marker."""
    final = hooks.claim_dir(uid)
    text = marker_text(uid, driver)
    if not _holds(f"{final}/{MARKER_FILE}", text):
        hooks.root.mkdir(parents=True, exist_ok=True, mode=0o755)
        tmp = f"{hooks.root}/.{uid}.{secrets.token_hex(4)}.tmp"
        os.mkdir(tmp, 0o755)
        try:
            fd = os.open(f"{tmp}/{MARKER_FILE}", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, text.encode())
                os.fchmod(fd, 0o644)  # whatever the umask
            finally:
                os.close(fd)
            try:
                os.rename(tmp, final)
            except OSError:  # an interrupted earlier attempt (or another kind of dir) is there: replace it
                shutil.rmtree(final)
                os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return ContainerEdits(mounts=(Mount(f"{final}/{MARKER_FILE}", container_path(uid, driver), RO),))


def container_path(uid: str, driver: str) -> str:
    return f"{CONTAINER_ROOT}/{driver}/{uid}"


def _holds(path: str, text: str) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        return stat.S_ISREG(st.st_mode) and st.st_size <= _MAX_BYTES and os.read(fd, _MAX_BYTES + 1) == text.encode()
    finally:
        os.close(fd)
