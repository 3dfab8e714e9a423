"""Start a real process with a claim's CDI edits, as a container runtime would (for tests, demo).

`run_with_cdi(spec_dir, ids, argv)` resolves the CDI device IDs (`dra.testing.cdi.apply_cdi`),
then runs `argv` in a private mount namespace (``unshare --mount``, needs root) where every
mount of the edits is applied: a bind mount onto its container path (created when missing),
remounted read-only when its options say ``ro``. The process gets exactly the edits'
environment (plus `base_env`, e.g. PATH, as an image would give), nothing of the caller's.

A missing mount target is created inside an overlay of its nearest existing parent directory
(upper layer on a tmpfs private to the namespace), so nothing is created on the host: after the
process ends, ``/etc/ld.so.preload``, ``/usr/lib/hookcore`` and ``/run/hookcore`` exist only if
they existed before. No image, no cgroups, no PID namespace: this is the part of a runtime that
decides what a process loads and reads, which is what quota enforcement depends on.
`start_with_cdi` starts such a process and leaves it running (a workload the watchdog watches).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from dra.driver import Mount
from dra.testing.cdi import apply_cdi

DEFAULT_BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin"}


def runtime_unavailable() -> str:
    """Why `run_with_cdi` cannot work here ("" when it can): root, unshare, mount, overlayfs."""
    if os.geteuid() != 0:
        return "needs root (mount namespaces and bind mounts)"
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "needs unshare and mount (util-linux)"
    with tempfile.TemporaryDirectory(prefix="dra-rt-") as tmp:
        probe = (f"mount -t tmpfs dra-probe {tmp} && mkdir {tmp}/l {tmp}/u {tmp}/w {tmp}/m && "
                 f"mount -t overlay dra-probe -o lowerdir={tmp}/l,upperdir={tmp}/u,workdir={tmp}/w {tmp}/m")
        proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", probe],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            return f"a private mount namespace with tmpfs and overlayfs is not allowed here: {proc.stderr.strip()}"
    return ""


def _nearest_existing(path: str) -> str:
    p = Path(path)
    while not p.exists():
        p = p.parent
    return str(p)


def mount_script(mounts: Sequence[Mount], scratch: str) -> list[str]:
    """Shell lines that apply `mounts` in a fresh private mount namespace (scratch: an empty dir)."""
    q = shlex.quote
    lines = ["set -eu", "mount --make-rprivate /", f"mount -t tmpfs dra-runtime {q(scratch)}"]
    overlaid: list[str] = []
    for m in mounts:
        target = os.path.normpath(m.container_path)
        if os.path.lexists(target):
            continue
        parent = _nearest_existing(target)
        if parent == "/":
            raise ValueError(f"mount target {target}: its top-level directory does not exist; cannot create it"
                             " without changing the host's root")
        if parent not in overlaid and not any(parent.startswith(o + "/") for o in overlaid):
            overlaid.append(parent)
    for n, parent in enumerate(sorted(overlaid, key=len)):
        up, work = f"{scratch}/u{n}", f"{scratch}/w{n}"
        lines.append(f"mkdir {q(up)} {q(work)}")
        lines.append(f"mount -t overlay dra-runtime -o lowerdir={parent},upperdir={up},workdir={work} {q(parent)}")
    for m in mounts:
        target = os.path.normpath(m.container_path)
        if os.path.isdir(m.host_path):
            lines.append(f"[ -d {q(target)} ] || mkdir -p {q(target)}")
        else:
            lines.append(f"[ -e {q(target)} ] || {{ mkdir -p {q(os.path.dirname(target))}; : > {q(target)}; }}")
        lines.append(f"mount --bind {q(m.host_path)} {q(target)}")
        flags = [o for o in m.options if o in ("ro", "nosuid", "nodev", "noexec")]
        if flags:
            lines.append(f"mount -o remount,bind,{','.join(flags)} {q(target)}")
    return lines


def _cdi_command(spec_dir: Path | str, device_ids: Sequence[str], argv: Sequence[str], scratch: str,
                 base_env: Mapping[str, str], drop_capabilities: Sequence[str]) -> list[str]:
    """The ``unshare ... sh -c`` command that applies the edits in a private mount namespace and
    execs `argv` (`scratch`: an empty directory, kept while the process runs)."""
    env, mounts = apply_cdi(spec_dir, device_ids)
    lines = mount_script(mounts, scratch)
    assignments = " ".join(shlex.quote(f"{k}={v}") for k, v in {**base_env, **env}.items())
    drop = ""
    if drop_capabilities:
        caps = ",".join(f"-{c.lower().removeprefix('cap_')}" for c in drop_capabilities)
        drop = f"setpriv --bounding-set={caps} --inh-caps={caps} -- "
    lines.append(f"exec {drop}env -i {assignments} {' '.join(shlex.quote(a) for a in argv)}")
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(lines)]


def run_with_cdi(
    spec_dir: Path | str,
    device_ids: Sequence[str],
    argv: Sequence[str],
    *,
    base_env: Mapping[str, str] = DEFAULT_BASE_ENV,
    timeout: float = 60,
    drop_capabilities: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """Run `argv` with the CDI edits of `device_ids` applied; returns the finished process
    (stdout and stderr captured as text). Raises CDIResolutionError for an unknown ID.

    `drop_capabilities` (e.g. ``["sys_admin"]``, as runc's default set lacks it): removed from the
    process's bounding and inheritable sets (``setpriv``), so root in it cannot undo a mount."""
    with tempfile.TemporaryDirectory(prefix="dra-rt-") as scratch:
        return subprocess.run(_cdi_command(spec_dir, device_ids, argv, scratch, base_env, drop_capabilities),
                              capture_output=True, text=True, timeout=timeout, env=dict(DEFAULT_BASE_ENV))


def start_with_cdi(
    spec_dir: Path | str,
    device_ids: Sequence[str],
    argv: Sequence[str],
    scratch: Path | str,
    *,
    base_env: Mapping[str, str] = DEFAULT_BASE_ENV,
    drop_capabilities: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    """`run_with_cdi` for a long-running process: started, not waited for (its output discarded).
    `scratch`: an empty directory the caller keeps until the process has exited."""
    return subprocess.Popen(_cdi_command(spec_dir, device_ids, argv, str(scratch), base_env, drop_capabilities),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                            env=dict(DEFAULT_BASE_ENV))
