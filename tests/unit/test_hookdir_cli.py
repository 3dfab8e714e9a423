"""`dra hookdir install`, as the charts' init container runs it: the daemon's installer, safe to rerun."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dra


def hookdir(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dra.cli", "hookdir", *args], capture_output=True, text=True, timeout=60)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def current_lib(root: Path, name: str = "libvgpu.so") -> Path:
    return root / "current" / name


def test_install_by_stem_makes_the_built_library_current_and_rerunning_changes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "hooks"
    first = hookdir("install", f"--hook-dir={root}", "vgpu")
    assert first.returncode == 0, first.stderr
    built = dra.hook_library("vgpu")
    assert sha(current_lib(root)) == sha(built)
    assert (root / "current" / "ld.so.preload").read_text() == "/usr/lib/hookcore/libvgpu.so\n"
    target = os.readlink(root / "current")
    again = hookdir("install", f"--hook-dir={root}", "vgpu")
    assert again.returncode == 0, again.stderr
    assert os.readlink(root / "current") == target and len(list((root / "sets").iterdir())) == 1
    assert "current set" in again.stdout and "libvgpu.so" in again.stdout


def test_a_new_version_switches_current_and_never_rewrites_the_mapped_file(tmp_path: Path) -> None:
    """An upgrade: the old set's file (mapped by running workloads) keeps its inode and bytes."""
    root = tmp_path / "hooks"
    assert hookdir("install", f"--hook-dir={root}", "vgpu").returncode == 0
    old = current_lib(root).resolve()
    old_stat, old_sha = old.stat(), sha(old)
    newer = tmp_path / "v2" / "libvgpu.so"
    newer.parent.mkdir()
    shutil.copyfile(dra.hook_library("vgpu"), newer)
    with newer.open("ab") as f:
        f.write(b"\0v2")  # still an ELF file (the header is intact), other bytes
    proc = hookdir("install", f"--hook-dir={root}", str(newer))
    assert proc.returncode == 0, proc.stderr
    assert sha(current_lib(root)) == sha(newer)
    assert old.stat().st_ino == old_stat.st_ino and sha(old) == old_sha
    assert len(list((root / "sets").iterdir())) == 2, "the old set stays until no CDI spec mounts it"


def test_leftovers_of_an_interrupted_install_are_removed(tmp_path: Path) -> None:
    root = tmp_path / "hooks"
    (root / "libs" / ".tmp-dead").mkdir(parents=True)
    (root / "sets").mkdir()
    os.symlink("sets/none", root / ".current.dead")
    proc = hookdir("install", f"--hook-dir={root}", "vgpu")
    assert proc.returncode == 0, proc.stderr
    assert not (root / "libs" / ".tmp-dead").exists() and not os.path.lexists(root / ".current.dead")
    assert "removed leftover of an interrupted install" in proc.stdout


def test_bad_libraries_are_one_paragraph_errors_and_install_nothing(tmp_path: Path) -> None:
    root = tmp_path / "hooks"
    not_elf = tmp_path / "libfake.so"
    not_elf.write_text("not a library")
    for arg, message in (("nosuch", "libnosuch.so is not built"),
                         (str(not_elf), "is not an ELF shared object"),
                         ("/etc/hostname", "expected lib<stem>.so with a stem of 1 to 32 characters of [a-z0-9_-]")):
        proc = hookdir("install", f"--hook-dir={root}", arg)
        assert proc.returncode == 2, (arg, proc.stdout, proc.stderr)
        assert message in " ".join(proc.stderr.split()) and "Traceback" not in proc.stderr
    assert not os.path.lexists(root / "current")
    show = hookdir("show", f"--hook-dir={root}")
    assert show.returncode == 1 and "nothing installed" in show.stdout
