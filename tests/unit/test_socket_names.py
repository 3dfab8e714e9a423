"""Rolling-update socket names fall back to hashed forms that fit a unix socket address."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from dra._runtime.kubelet.paths import MAX_SOCKET_PATH_BYTES, KubeletPaths
from dra.errors import UserError

UID = "0f8a7c34-1b6e-4d2a-9c3e-5b7d9e1f2a3c"


def test_a_short_driver_keeps_the_plain_rolling_update_names() -> None:
    p = KubeletPaths().resolve("gpu.example.com", UID)
    assert p.registration_socket.name == f"gpu.example.com-{UID}-reg.sock"
    assert p.dra_socket.name == f"dra-{UID}.sock"


def test_the_gpu_drivers_name_gets_the_uid_hash_form_that_fits() -> None:
    driver = "hami-core-gpu.project-hami.io"
    assert len(os.fsencode(f"/var/lib/kubelet/plugins_registry/{driver}-{UID}-reg.sock")) > MAX_SOCKET_PATH_BYTES
    p = KubeletPaths().resolve(driver, UID)
    assert p.registration_socket.name == f"{driver}-{hashlib.sha256(UID.encode()).hexdigest()[:16]}-reg.sock"
    p.check_socket_lengths()


def test_a_very_long_driver_name_gets_the_driver_and_uid_hash() -> None:
    driver = "a-very-long-driver-name.with.parts.example-vendor.io"  # 52 bytes
    p = KubeletPaths().resolve(driver, UID)
    want = hashlib.sha256(f"{driver}\0{UID}".encode()).hexdigest()[:32]
    assert p.registration_socket.name == f"dra-{want}-reg.sock"
    p.check_socket_lengths()


def test_two_pods_of_one_driver_never_share_a_name() -> None:
    driver = "hami-core-gpu.project-hami.io"
    a = KubeletPaths().resolve(driver, UID)
    b = KubeletPaths().resolve(driver, UID.replace("0f8a", "1f8a"))
    assert a.registration_socket != b.registration_socket and a.dra_socket != b.dra_socket


def test_roots_too_long_for_any_form_are_a_user_error() -> None:
    p = KubeletPaths(registrar_dir=Path("/" + "r" * 90), plugins_dir=Path("/p")).resolve("gpu.example.com", UID)
    with pytest.raises(UserError, match="at most 107 bytes"):
        p.check_socket_lengths()
