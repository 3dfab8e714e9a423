"""The image build's layer store stays one build big.

Under buildah's `vfs` driver every layer is a full copy of its root filesystem, so each source
change used to leave the previous build's layers behind (about 1.6 GB per build of the project's
Dockerfile) until a long-lived CI machine's disk filled up: kubelet evicted the real node's pods
for DiskPressure and the next image build failed with "no space left on device". These tests
build tiny `FROM scratch` images (no root filesystem, seconds) in a store of their own with the
same code `make image` runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from ci_gate import skip_or_fail

from dra.errors import UserError
from dra_dev.node.project_image import (
    BASE_REFERENCE,
    ImageInfo,
    base_label,
    build_layers,
    buildah_command,
    import_base,
    rotate_log,
    stale_images,
    step_images,
)

ROOT = Path(__file__).resolve().parents[2]

# What buildah 1.28 printed for the project's Dockerfile (abridged): new steps' short IDs, a
# cached step's full ID, the final commit's full ID on a line of its own.
BUD_OUTPUT = """\
[1/2] STEP 2/9: ARG PIP_INDEX_URL=https://pypi.org/simple
--> ce821037ec1
[1/2] STEP 4/9: RUN apt-get update
--> Using cache 2a29dc427f0bd1e4c0a1a7c1c7f4a9d1f0e5b6c7d8e9f0011223344556677889
--> 2a29dc427f0
[2/2] STEP 5/5: CMD ["--help"]
[2/2] COMMIT localhost/dra-hami:0.1.0
--> 04385917314
Successfully tagged localhost/dra-hami:0.1.0
04385917314001d54cf588199b15fcec145e63ac7410f4de710c842f5caafb40
"""


def test_the_steps_of_a_build_are_read_from_buildahs_output() -> None:
    assert step_images(BUD_OUTPUT) == {
        "ce821037ec1", "2a29dc427f0", "04385917314",
        "2a29dc427f0bd1e4c0a1a7c1c7f4a9d1f0e5b6c7d8e9f0011223344556677889",
    }
    # A step's output that happens to start with the arrow is no image: only hex IDs count.
    assert step_images("--> Using cache of pip\n--> done\n") == set()


def test_only_untagged_images_no_step_named_are_stale() -> None:
    listed: list[dict[str, object]] = [
        {"id": "sha256:ce821037ec1" + "0" * 53, "names": None},   # this build's step (--no-trunc)
        {"id": "aaaaaaaaaaaa" + "0" * 52, "names": None},         # an earlier build's step
        {"id": "bbbbbbbbbbbb" + "0" * 52, "names": ["localhost/dra-base:bookworm"]},  # tagged
        {"id": "", "names": None},                                 # garbage: never removed
    ]
    assert stale_images(listed, {"ce821037ec1"}) == ["aaaaaaaaaaaa" + "0" * 52]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    reason = None
    if not (shutil.which("buildah") or shutil.which("buildah", path="/usr/sbin:/usr/bin")):
        reason = "buildah is not installed (make image-deps, or apt-get install -y buildah)"
    elif os.geteuid() != 0:
        reason = "buildah's vfs store here needs root"
    skip_or_fail(reason)
    return tmp_path / "store"


def _images(store: Path) -> dict[str, list[str]]:
    out = subprocess.run([*buildah_command(store), "images", "--all", "--json", "--no-trunc"], capture_output=True, text=True, check=True)
    return {i["id"]: i["names"] or [] for i in json.loads(out.stdout or "[]") or []}


def _layers_dir_bytes(root: Path) -> int:
    return sum(f.stat().st_size for f in (root / "root" / "vfs").rglob("*") if f.is_file() and not f.is_symlink())


def test_the_build_log_is_rotated_once_it_reaches_its_limit(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    rotate_log(log, limit=10)  # no log yet: nothing to do
    assert not log.exists()
    log.write_bytes(b"x" * 9)
    rotate_log(log, limit=10)
    assert log.read_bytes() == b"x" * 9 and not (tmp_path / "build.log.1").exists()
    log.write_bytes(b"a" * 10)
    rotate_log(log, limit=10)
    assert not log.exists() and (tmp_path / "build.log.1").read_bytes() == b"a" * 10
    log.write_bytes(b"b" * 12)
    rotate_log(log, limit=10)  # the older one is replaced: two logs at most
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build.log.1"]
    assert (tmp_path / "build.log.1").read_bytes() == b"b" * 12


def test_a_rebuild_after_a_change_leaves_one_builds_images(store: Path, tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text("FROM scratch\nCOPY stable /stable\nCOPY changes /changes\nCMD [\"/x\"]\n")
    (ctx / "stable").write_bytes(b"s" * (1 << 20))
    log = tmp_path / "build.log"
    said: list[str] = []
    for n in range(3):
        (ctx / "changes").write_bytes(bytes([n]) * (2 << 20))
        build_layers(store, ctx, "localhost/store-test:1", [], log, said.append)
        if n == 0:
            first = _images(store)
    after = _images(store)
    # One build's images: the same count as the first build had, the cached prefix (`COPY stable`)
    # reused, and nothing of the first two builds' `COPY changes` left. Under vfs each layer is a
    # full copy: one build holds 1 MiB (`stable`) + 3 MiB (`stable` and `changes`), three 10 MiB.
    assert len(after) == len(first), (first, after)
    assert [i for i in first if i in after and not after[i]], "the cached step of the first build went"
    assert sum(1 for names in after.values() if "localhost/store-test:1" in names) == 1
    held = _layers_dir_bytes(store)
    assert (1 + 2) << 20 <= held < (1 + 2 + 2 + 1) << 20, held
    assert any("earlier builds left" in m for m in said), said


def _context(tmp_path: Path, name: str, dockerfile: str, **files: bytes) -> Path:
    ctx = tmp_path / name
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(dockerfile)
    for file, data in files.items():
        (ctx / file).write_bytes(data)
    return ctx


def test_a_failed_build_leaves_no_container_and_keeps_the_last_builds_cache(store: Path, tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    good = _context(tmp_path, "good", "FROM scratch\nCOPY stable /stable\nCOPY changes /changes\n",
                    stable=b"s" * 1024, changes=b"c")
    build_layers(store, good, "localhost/store-test:1", [], log, lambda _m: None)
    cached = {i for i, names in _images(store).items() if not names}
    assert cached
    # What a killed build leaves: a working container.
    subprocess.run([*buildah_command(store), "from", "scratch"], capture_output=True, check=True)
    bad = _context(tmp_path, "bad", "FROM scratch\nCOPY stable /stable\nCOPY missing /missing\n", stable=b"s" * 1024)
    with pytest.raises(UserError, match="buildah bud"):
        build_layers(store, bad, "localhost/store-test:1", [], log, lambda _m: None)
    containers = subprocess.run([*buildah_command(store), "containers", "--all", "--quiet"],
                                capture_output=True, text=True, check=True)
    assert containers.stdout.strip() == ""
    assert cached <= set(_images(store)), "the last good build's images are the next build's cache"


def test_a_store_from_before_the_record_is_pruned_before_the_build(store: Path, tmp_path: Path) -> None:
    """A store older builds filled (no record of the last build): its untagged images go before the
    build, so a build on a full disk finds room even when it fails."""
    junk = _context(tmp_path, "junk", "FROM scratch\nCOPY a /a\nCOPY b /b\n", a=b"a" * 4096, b=b"b" * 4096)
    subprocess.run([*buildah_command(store), "bud", "--layers", "--isolation", "chroot", str(junk)],
                   capture_output=True, check=True)
    assert any(not names for names in _images(store).values())
    bad = _context(tmp_path, "bad", "FROM scratch\nCOPY missing /missing\n")
    said: list[str] = []
    with pytest.raises(UserError, match="buildah bud"):
        build_layers(store, bad, "localhost/store-test:1", [], tmp_path / "build.log", said.append)
    assert _images(store) == {}, "nothing of the old builds is left"
    assert any("earlier builds left" in m for m in said), said


def test_the_base_is_imported_once_per_tarball(store: Path, tmp_path: Path) -> None:
    """A base imported again is a new image: a new parent for every step, so no cached layer
    matches and the whole previous build is left behind (what buildah 1.28's missing `json`
    template function did to the old label check, every build)."""
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "os-release").write_text("ID=test\n")
    tarball = tmp_path / "base-test-1.tar"
    subprocess.run(["tar", "-C", str(root), "-cf", str(tarball), "."], check=True)
    log = tmp_path / "build.log"

    def base_id() -> str:
        ids = [i for i, names in _images(store).items() if BASE_REFERENCE in names]
        assert len(ids) == 1, _images(store)
        return ids[0]

    import_base(buildah_command(store), tarball, log)
    first = base_id()
    import_base(buildah_command(store), tarball, log)
    assert base_id() == first
    other = tarball.with_name("base-test-2.tar")
    shutil.copy(tarball, other)
    import_base(buildah_command(store), other, log)
    assert base_id() != first, "a new tarball is a new base"


def test_the_base_label_is_read_from_buildahs_inspect_json() -> None:
    inspected = json.dumps({"OCIv1": {"config": {"Labels": {"dev.dra.base.tarball": "base-x.tar", "io.buildah.version": "1"}}}})
    assert base_label(inspected) == "base-x.tar"
    assert base_label(json.dumps({"OCIv1": {"config": {}}})) is None
    assert base_label("Error: Template parsing error") is None
    assert base_label("[]") is None


def _image_file(archive: Path, path: str) -> bytes | None:
    """`path` as the image's top-most layer holding it has it (no whiteouts to follow here)."""
    with tarfile.open(archive) as tar:
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        digest = index["manifests"][0]["digest"].split(":", 1)[1]
        manifest = json.load(tar.extractfile(f"blobs/sha256/{digest}"))  # type: ignore[arg-type]
        found = None
        for layer in manifest["layers"]:
            blob = tar.extractfile(f"blobs/sha256/{layer['digest'].split(':', 1)[1]}")
            with tarfile.open(fileobj=blob, mode="r:*") as members:
                for member in members:
                    if member.isfile() and member.name.lstrip("./") == path:
                        data = members.extractfile(member)
                        found = data.read() if data else None
        return found


def test_the_image_holds_this_checkouts_code(image: ImageInfo) -> None:
    """A rebuild after a source change carries the change: the cache of the install stage must
    follow the wheels (it kept the old venv while a bind mount brought them in)."""
    source = ROOT / "dra" / "_runtime" / "registry.py"
    site = "opt/dra/lib/python3.11/site-packages/dra/_runtime/registry.py"
    assert _image_file(Path(image.archive), site) == source.read_bytes()
