"""The node's hook dir: content-addressed libraries, immutable sets, an atomic `current`, and
collection only of what no CDI spec mounts."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
from pathlib import Path

import pytest

from dra._runtime import faults
from dra._runtime.hookdir import CONTAINER_DIR, HookDir, HookDirError, checked_stem, set_id

ELF = b"\x7fELF"


def lib(tmp: Path, name: str, body: bytes) -> Path:
    d = tmp / "build" / body.hex()[:8]
    d.mkdir(parents=True, exist_ok=True)
    p = d / name
    p.write_bytes(ELF + body)
    return p


def test_library_names_follow_hookcore_s_one_stem_rule() -> None:
    # The rule itself is tested with hookcore (tests/hook); the hook dir must agree with it.
    assert checked_stem("/x/libvgpu.so") == "vgpu"
    assert checked_stem("libvnpu.so.1") == "vnpu"
    for bad in ("vgpu.so", "libVGPU.so", "lib.so", "libvgpu.sox"):
        with pytest.raises(HookDirError, match=r"lib<stem>\.so"):
            checked_stem(bad)


def test_a_versioned_name_replaces_the_member_of_the_same_stem(tmp_path: Path) -> None:
    hd = HookDir(tmp_path / "hd")
    hd.install(lib(tmp_path, "libvnpu.so", b"npu"))
    hd.install(lib(tmp_path, "libvgpu.so", b"v1"))
    s = hd.install(lib(tmp_path, "libvgpu.so.1", b"v2"))
    assert sorted(s.members) == ["libvgpu.so.1", "libvnpu.so"], "two libraries of one stem would share a config"
    fresh = HookDir(tmp_path / "hd").current()  # read back from disk, no cache
    assert fresh is not None and fresh.id == s.id and sorted(fresh.members) == sorted(s.members)


def test_a_missing_or_non_elf_library_is_a_clear_error(tmp_path: Path) -> None:
    hd = HookDir(tmp_path / "hd")
    with pytest.raises(HookDirError, match=r"does not exist.*make -C hookcore"):
        hd.install(tmp_path / "libnone.so")
    (tmp_path / "libtext.so").write_text("not a library")
    with pytest.raises(HookDirError, match="not an ELF"):
        hd.install(tmp_path / "libtext.so")


def test_install_is_content_addressed_idempotent_and_makes_a_set_current(tmp_path: Path) -> None:
    hd = HookDir(tmp_path / "hd")
    v1 = lib(tmp_path, "libvgpu.so", b"v1")
    s1 = hd.install(v1)
    assert hd.install(v1) == s1  # same bytes: nothing new
    assert os.readlink(hd.current_link) == f"sets/{s1.id}"
    assert s1.id == set_id({"libvgpu.so": s1.members["libvgpu.so"]})
    assert (s1.path / "libvgpu.so").read_bytes() == ELF + b"v1"
    assert (s1.path / "ld.so.preload").read_text() == f"{CONTAINER_DIR}/libvgpu.so\n"
    assert [p.name for p in hd.libs.iterdir()] == [s1.members["libvgpu.so"]]
    # The set's file is a hard link of the library version: one inode, never copied again.
    assert (s1.path / "libvgpu.so").stat().st_ino == (hd.libs / s1.members["libvgpu.so"] / "libvgpu.so").stat().st_ino


def test_a_new_version_never_overwrites_a_mapped_file_and_keeps_other_libraries(tmp_path: Path) -> None:
    hd = HookDir(tmp_path / "hd")
    s1 = hd.install(lib(tmp_path, "libvgpu.so", b"v1"))
    old_file = s1.path / "libvgpu.so"
    old_ino = old_file.stat().st_ino
    s2 = hd.install(lib(tmp_path, "libvnpu.so", b"n1"))  # another driver's library joins
    assert set(s2.members) == {"libvgpu.so", "libvnpu.so"}
    assert (s2.path / "ld.so.preload").read_text() == f"{CONTAINER_DIR}/libvgpu.so\n{CONTAINER_DIR}/libvnpu.so\n"
    s3 = hd.install(lib(tmp_path, "libvgpu.so", b"v2"))  # an upgrade of the first
    assert s3.members["libvnpu.so"] == s2.members["libvnpu.so"]
    assert s3.members["libvgpu.so"] != s1.members["libvgpu.so"]
    assert (s3.path / "libvgpu.so").read_bytes() == ELF + b"v2"
    # The old set, which running containers may have mapped, is untouched.
    assert old_file.read_bytes() == ELF + b"v1" and old_file.stat().st_ino == old_ino
    assert hd.current() == s3


def test_collect_keeps_current_and_every_set_a_cdi_spec_mounts(tmp_path: Path) -> None:
    hd = HookDir(tmp_path / "hd")
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    s1 = hd.install(lib(tmp_path, "libvgpu.so", b"v1"))
    (cdi / "k8s.other.com-claim_u1.json").write_text(json.dumps(
        {"containerEdits": {"mounts": [{"hostPath": str(s1.path), "containerPath": CONTAINER_DIR}]}}))
    s2 = hd.install(lib(tmp_path, "libvgpu.so", b"v2"))
    s3 = hd.install(lib(tmp_path, "libvgpu.so", b"v3"))
    removed = hd.collect([cdi])
    assert str(s2.path) in removed and not s2.path.exists()
    assert s1.path.is_dir() and s3.path.is_dir()
    assert sorted(p.name for p in hd.libs.iterdir()) == sorted([s1.members["libvgpu.so"], s3.members["libvgpu.so"]])
    (cdi / "k8s.other.com-claim_u1.json").unlink()  # the claim was unprepared
    hd.collect([cdi])
    assert hd.installed_sets() == [s3.id] and hd.current() == s3


def test_pinned_installs_once_and_returns_a_set_holding_exactly_that_version(tmp_path: Path) -> None:
    hd = HookDir(tmp_path / "hd")
    v1, n1 = lib(tmp_path, "libvgpu.so", b"v1"), lib(tmp_path, "libvnpu.so", b"n1")
    with hd.pinned(v1) as s:
        assert s.members["libvgpu.so"] == hd.digest(v1)
    with hd.pinned(n1) as s:
        assert set(s.members) == {"libvgpu.so", "libvnpu.so"}
    with hd.pinned(v1) as again:
        assert again == s  # the current set already holds v1: no new set
    assert len(hd.installed_sets()) == 2


def _install_in_child(root: str, library: str, point: str | None) -> None:
    faults.configure(point)
    HookDir(Path(root)).install(Path(library))
    os._exit(0)


def _killed_install(root: Path, library: Path, point: str) -> int | None:
    proc = multiprocessing.get_context("fork").Process(target=_install_in_child, args=(str(root), str(library), point))
    proc.start()
    proc.join(30)
    return proc.exitcode


@pytest.mark.parametrize("point", [p for p in faults.POINTS if p.startswith("hookdir.")])
def test_a_kill_at_each_install_step_leaves_current_complete_and_recover_cleans_up(tmp_path: Path, point: str) -> None:
    hd = HookDir(tmp_path / "hd")
    s1 = hd.install(lib(tmp_path, "libvgpu.so", b"v1"))
    v2 = lib(tmp_path, "libvgpu.so", b"v2")
    assert _killed_install(hd.root, v2, point) == -9
    cur = HookDir(hd.root).current()
    assert cur is not None and (cur == s1 or cur.members["libvgpu.so"] == hd.digest(v2))
    assert (cur.path / "libvgpu.so").is_file() and (cur.path / "ld.so.preload").is_file()
    fresh = HookDir(hd.root)
    fresh.recover()
    fresh.collect([])
    assert not list(hd.libs.glob(".tmp-*")) and not list(hd.sets.glob(".tmp-*")) and not list(hd.root.glob(".current.*"))
    with fresh.pinned(v2) as s:
        assert (s.path / "libvgpu.so").read_bytes() == ELF + b"v2"


def _race(root: str, library: str, n: int) -> None:
    hd = HookDir(Path(root))
    for _ in range(n):
        with hd.pinned(Path(library)) as s:
            assert (s.path / Path(library).name).is_file()
    os._exit(0)


def test_two_daemons_installing_different_libraries_concurrently_both_end_up_in_current(tmp_path: Path) -> None:
    root = tmp_path / "hd"
    libs = [lib(tmp_path, "libvgpu.so", b"g"), lib(tmp_path, "libvnpu.so", b"n")]
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_race, args=(str(root), str(p), 20)) for p in libs]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    cur = HookDir(root).current()
    assert cur is not None and set(cur.members) == {"libvgpu.so", "libvnpu.so"}


def test_a_libs_dir_with_the_same_bytes_under_another_name_gains_the_name(tmp_path: Path) -> None:
    hd = HookDir(tmp_path / "hd")
    a = lib(tmp_path, "liba.so", b"same")
    b = tmp_path / "libb.so"
    shutil.copy(a, b)
    hd.install(a)
    s = hd.install(b)
    assert set(s.members) == {"liba.so", "libb.so"}
