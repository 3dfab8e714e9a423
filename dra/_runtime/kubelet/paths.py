"""Where the kubelet plugin's sockets and lock live (upstream defaults, configurable roots).

Layout (``<driver>`` is the DRA driver name, ``<uid>`` the pod UID with rolling updates)::

    <registrar_dir>/<driver>-reg.sock            registration socket (kubelet watches this dir)
    <registrar_dir>/<driver>-<uid>-reg.sock      ... with rolling updates (shorter forms below)
    <plugins_dir>/<driver>/dra.sock              DRA service socket (announced in GetInfo)
    <plugins_dir>/<driver>/dra-<uid>.sock        ... with rolling updates (shorter forms below)

A rolling-update name that does not fit in a unix socket address (107 bytes) falls back, as
upstream's kubelet-plugin helper does, to ``<driver>-<h8>-reg.sock`` with ``h8`` the hex of the
first 8 bytes of sha256(uid), then to ``dra-<h16>-reg.sock`` with the first 16 bytes of
sha256(driver NUL uid); the DRA socket likewise to ``dra-<h8>.sock``. kubelet finds the
registration socket by watching the directory, so the name itself is free.
    <plugins_dir>/<driver>/serialize.lock        cross-process lock (dra._runtime.kubelet.lock)
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

from dra.errors import UserError

DEFAULT_REGISTRAR_DIR = Path("/var/lib/kubelet/plugins_registry")
DEFAULT_PLUGINS_DIR = Path("/var/lib/kubelet/plugins")

MAX_SOCKET_PATH_BYTES = 107
"""AF_UNIX `sun_path` holds 108 bytes on Linux, one of them the terminating NUL."""

LOCK_FILE_NAME = "serialize.lock"


@dataclasses.dataclass(frozen=True)
class KubeletPaths:
    """The configurable roots; defaults are kubelet's.

    `plugin_data_dir` overrides ``<plugins_dir>/<driver>`` (it must not be shared with another
    driver, and kubelet must reach the DRA socket in it under the same path).
    """

    registrar_dir: Path = DEFAULT_REGISTRAR_DIR
    plugins_dir: Path = DEFAULT_PLUGINS_DIR
    plugin_data_dir: Path | None = None

    def resolve(self, driver_name: str, pod_uid: str | None = None) -> PluginPaths:
        """Absolute paths for one plugin instance (`pod_uid` set: rolling-update names)."""
        data_dir = self.plugin_data_dir or self.plugins_dir / driver_name
        data_dir = Path(os.path.abspath(data_dir))
        registrar_dir = Path(os.path.abspath(self.registrar_dir))
        if pod_uid:
            uid_hash = hashlib.sha256(pod_uid.encode()).hexdigest()
            both_hash = hashlib.sha256(f"{driver_name}\0{pod_uid}".encode()).hexdigest()
            reg_name = _first_fitting(registrar_dir, [f"{driver_name}-{pod_uid}-reg.sock",
                                                      f"{driver_name}-{uid_hash[:16]}-reg.sock",
                                                      f"dra-{both_hash[:32]}-reg.sock"])
            dra_name = _first_fitting(data_dir, [f"dra-{pod_uid}.sock", f"dra-{uid_hash[:16]}.sock"])
        else:
            reg_name, dra_name = f"{driver_name}-reg.sock", "dra.sock"
        return PluginPaths(
            registrar_dir=registrar_dir,
            plugin_dir=data_dir,
            registration_socket=registrar_dir / reg_name,
            dra_socket=data_dir / dra_name,
            lock_file=data_dir / LOCK_FILE_NAME,
        )


def _first_fitting(directory: Path, names: list[str]) -> str:
    """The first name whose path in `directory` fits a unix socket address (else the last one,
    which `check_socket_lengths` then reports)."""
    for name in names:
        if len(os.fsencode(directory / name)) <= MAX_SOCKET_PATH_BYTES:
            return name
    return names[-1]


@dataclasses.dataclass(frozen=True)
class PluginPaths:
    """The resolved, absolute paths of one plugin instance."""

    registrar_dir: Path
    plugin_dir: Path
    registration_socket: Path
    dra_socket: Path
    lock_file: Path

    def check_socket_lengths(self) -> None:
        """Raise UserError when a socket path does not fit in a unix socket address."""
        for what, path in (("registration", self.registration_socket), ("DRA", self.dra_socket)):
            check_socket_path(path, what)


def check_socket_path(path: Path, what: str = "unix") -> None:
    """Raise UserError naming the path, its length and the fix when it exceeds 107 bytes."""
    length = len(os.fsencode(path))
    if length > MAX_SOCKET_PATH_BYTES:
        raise UserError(
            f"The {what} socket path {str(path)!r} is {length} bytes long; unix socket paths may be "
            f"at most {MAX_SOCKET_PATH_BYTES} bytes. Use a shorter driver name or shorter registrar/plugin "
            "directory roots (with rolling updates the pod UID adds 37 bytes to each name)."
        )
