"""dra.fakes.stub_dir: a containerised daemon's fake stub libraries, copied where the host sees them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dra.fakes import STUB_DIR_ENV, FakeDevicesError, stub_dir


def _built(tmp_path: Path) -> Path:
    built = tmp_path / "stub"
    built.mkdir()
    (built / "libcuda.so.1").write_bytes(b"\x7fELF cuda")
    (built / "libnvidia-ml.so.1").write_bytes(b"\x7fELF nvml")
    return built


def test_without_the_variable_the_built_dir_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STUB_DIR_ENV, raising=False)
    built = _built(tmp_path)
    assert stub_dir(built) == built


def test_copies_into_a_dir_named_by_content_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built, host = _built(tmp_path), tmp_path / "host"
    monkeypatch.setenv(STUB_DIR_ENV, str(host))
    first = stub_dir(built)
    assert first.parent == host and sorted(p.name for p in first.iterdir()) == ["libcuda.so.1", "libnvidia-ml.so.1"]
    assert (first / "libcuda.so.1").read_bytes() == b"\x7fELF cuda"
    inode = os.stat(first / "libcuda.so.1").st_ino
    assert stub_dir(built) == first and os.stat(first / "libcuda.so.1").st_ino == inode, "never rewritten"
    (built / "libcuda.so.1").write_bytes(b"\x7fELF cuda v2")
    second = stub_dir(built)
    assert second != first and (first / "libcuda.so.1").read_bytes() == b"\x7fELF cuda", "a new version, the old kept"
    assert not [p for p in host.iterdir() if p.name.startswith(".")], "no scratch dir left"


def test_an_unwritable_target_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    monkeypatch.setenv(STUB_DIR_ENV, str(blocker))
    with pytest.raises(FakeDevicesError, match=rf"\${STUB_DIR_ENV}=.*writable host directory"):
        stub_dir(_built(tmp_path))
