"""The OCI image archives the node imports: layout, digests, determinism, and the image contents."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from ci_gate import skip_or_fail

from dra_dev.node import images
from dra_dev.node.oci import ImageSpec, layer_tar, normalize_reference, write_archive


def members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


@pytest.mark.parametrize(("name", "full"), [
    ("dra-workload:local", "docker.io/library/dra-workload:local"),
    ("team/app:1", "docker.io/team/app:1"),
    ("localhost/dra-pause:local", "localhost/dra-pause:local"),
    ("registry.example:5000/x/y", "registry.example:5000/x/y:latest"),
])
def test_references_are_normalized_as_kubelet_does(name: str, full: str) -> None:
    assert normalize_reference(name) == full


def test_archive_is_a_valid_layout_with_matching_digests(tmp_path: Path) -> None:
    prog = tmp_path / "prog"
    prog.write_bytes(b"\x7fELF-not-really")
    prog.chmod(0o755)
    digest = write_archive(ImageSpec("dra-workload:local", {"/usr/local/bin/prog": prog}, ["/usr/local/bin/prog"]),
                           tmp_path / "img.tar")
    files = members(tmp_path / "img.tar")
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    for name, data in files.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(data).hexdigest() == name.rsplit("/", 1)[1]
    (entry,) = json.loads(files["index.json"])["manifests"]
    assert entry["digest"] == digest
    assert entry["annotations"]["io.containerd.image.name"] == "docker.io/library/dra-workload:local"
    manifest = json.loads(files[f"blobs/sha256/{digest.split(':')[1]}"])
    config = json.loads(files[f"blobs/sha256/{manifest['config']['digest'].split(':')[1]}"])
    assert config["config"]["Entrypoint"] == ["/usr/local/bin/prog"]
    layer = files[f"blobs/sha256/{manifest['layers'][0]['digest'].split(':')[1]}"]
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        names = {m.name: m for m in tar.getmembers()}
    assert {"usr", "usr/local", "usr/local/bin", "usr/local/bin/prog"} <= set(names)
    assert names["usr/local/bin/prog"].mode == 0o755 and names["usr/local/bin/prog"].mtime == 0


def test_same_inputs_give_the_same_digest(tmp_path: Path) -> None:
    src = tmp_path / "f"
    src.write_text("x")
    spec = ImageSpec("a:b", {"/f": src}, ["/f"])
    assert write_archive(spec, tmp_path / "1.tar") == write_archive(spec, tmp_path / "2.tar")


@pytest.mark.parametrize("bad", ["relative/path", "/a/../etc/passwd"])
def test_layer_paths_must_be_absolute_and_plain(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="absolute"):
        layer_tar({bad: tmp_path})


def test_workload_image_carries_program_stub_driver_and_their_libraries(tmp_path: Path) -> None:
    skip_or_fail(None if shutil.which("cc") else "no C compiler")
    built = images.build_workload(tmp_path)
    assert built.reference == "docker.io/library/dra-workload:local"
    files = members(built.archive)
    index = json.loads(files["index.json"])
    manifest = json.loads(files[f"blobs/sha256/{index['manifests'][0]['digest'].split(':')[1]}"])
    layer = files[f"blobs/sha256/{manifest['layers'][0]['digest'].split(':')[1]}"]
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        names = set(tar.getnames())
    assert images.WORKLOAD_BINARY.lstrip("/") in names and images.STUB_LIBCUDA.lstrip("/") in names
    assert {f"usr/local/bin/{n}" for n in images.OTHER_WORKLOADS} <= names  # the DCU's and MLU's programs
    needed = images.shared_libraries([tmp_path / "cuda_workload"])
    assert {p.lstrip("/") for p in needed} <= names  # the loader and libc the program links
    assert not any(n.endswith("libvgpu.so") for n in names)  # the hook comes from the claim's CDI mounts


def test_pause_is_static(tmp_path: Path) -> None:
    skip_or_fail(None if shutil.which("cc") else "no C compiler")
    images.build_pause(tmp_path)
    out = subprocess.run(["ldd", str(tmp_path / "pause")], capture_output=True, text=True)
    assert "not a dynamic executable" in out.stdout + out.stderr
