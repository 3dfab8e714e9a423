"""`make image`: the project's own Dockerfile built into an OCI archive, with no registry.

Why these tools: no registry is reachable here, but Debian's packages are. The base is made
from them with `mmdebstrap` (Debian bookworm, minbase plus python3 and python3-venv: Python 3.11,
as in the default `python:3.11-slim`) and the Dockerfile is built unchanged on top of it
(`--build-arg BASE=...`) by `buildah`: a daemonless builder from Debian's packages that runs
as root in this VM with `vfs` storage and `chroot` isolation (no overlay mounts inside
overlay, no user namespaces or daemon needed). docker.io's engine would need dockerd,
containerd and its own bridge and iptables rules running beside the tests' nodes.

Caches, under the binary cache (`~/.cache/dra-k8s/image/`): the base rootfs tarball, keyed by
suite and package list, and buildah's layer store, so a rebuild redoes only the layers whose
inputs changed. `vfs` stores every layer as a full copy of its root filesystem (one build is about
3.5 GB), so after each build the store keeps only the images that build used or made (recorded in
`storage/last-build-images`) and the tagged ones, and before a build it drops what the record does
not name: otherwise every source change leaves the layers from the source copy on behind (1.6 GB
by the images' sizes), until a long-lived CI machine's disk is full.

The archive is `dist/dra-hami-<version>.oci.tar`, with `dist/dra-hami-<version>.json` naming its
reference, manifest digest and size (what `dra node up` imports).
"""

from __future__ import annotations

import configparser
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from dra.errors import UserError
from dra_dev import checkout
from dra_dev.cluster.binaries import build_lock, cache_root
from dra_dev.node.images import BuiltImage

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
BASE_PACKAGES = ("python3", "python3-venv")
BASE_REFERENCE = f"localhost/dra-base:{SUITE}"
IMAGE_NAME = "localhost/dra-hami"
TOOLS_HINT = "install them with `make image-deps` (as root: apt-get install -y buildah mmdebstrap)."
# The host's CA bundle appears at this path during the build stage's RUN steps only (buildah -v).
_BUILD_CA = "/etc/dra-build-ca.pem"
# The base image's label naming the tarball it was made from.
_BASE_LABEL = "dev.dra.base.tarball"
BUILD_LOG_LIMIT = 4 << 20
"""Bytes of build.log kept before a build moves it to build.log.1 (one older log is kept)."""


@dataclass(frozen=True)
class ImageInfo:
    """What `make image` made; written beside the archive as JSON."""

    reference: str
    digest: str
    archive: str
    archive_bytes: int
    image_bytes: int
    build_seconds: float
    base: str

    @classmethod
    def load(cls, path: Path) -> ImageInfo:
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError) as exc:
            raise UserError(f"cannot read the image description {path}: {exc}; run `make image` again.") from exc


def project_root() -> Path:
    """The checkout holding the Dockerfile."""
    return checkout.path("Dockerfile").parent


def project_version(root: Path) -> str:
    import tomllib

    return str(tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"])


def default_info_path(root: Path | None = None) -> Path:
    root = root or project_root()
    return root / "dist" / f"dra-hami-{project_version(root)}.json"


def built_project_image() -> BuiltImage | None:
    """The archive `make image` wrote in this checkout (`$DRA_IMAGE_INFO` names another), if any:
    what `dra node up` imports."""
    env = os.environ.get("DRA_IMAGE_INFO")
    try:
        path = Path(env) if env else default_info_path()
    except UserError:
        return None
    if not path.is_file():
        return None
    info = ImageInfo.load(path)
    return BuiltImage(info.reference, Path(info.archive), info.digest)


def image_cache() -> Path:
    return cache_root() / "image"


def _tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")
    if not found:
        raise UserError(f"`{name}` is not installed; it builds the image: {TOOLS_HINT}")
    return found


def buildah_command(store: Path) -> list[str]:
    """buildah on the store under `store` (vfs, this module's own)."""
    return [_tool("buildah"), "--storage-driver", "vfs", "--root", str(store / "root"), "--runroot", str(store / "run")]


def _run(cmd: list[str], log: Path, what: str, stdout_to_log: bool = False) -> str:
    """Run `cmd`, its stderr (and with `stdout_to_log` its stdout) streamed into `log` as it goes
    (a build takes minutes); its stdout returned otherwise."""
    with log.open("ab") as out:
        out.write(f"\n$ {' '.join(cmd)}\n".encode())
        out.flush()
        proc = subprocess.run(cmd, stdout=out if stdout_to_log else subprocess.PIPE, stderr=out, text=True)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").strip().splitlines()[-15:])
        raise UserError(f"{what} failed (exit {proc.returncode}); full log {log}:\n{tail}")
    return proc.stdout


# What `buildah bud --layers` prints for each step: the image it committed (`--> 3c4a986124d`) or
# the cached one it reused (`--> Using cache <full ID>`).
_STEP_IMAGE = re.compile(r"^--> (?:Using cache )?([0-9a-f]{11,64})\s*$", re.MULTILINE)


def step_images(build_output: str) -> set[str]:
    """The image IDs (full or short) of a build's steps, from `buildah bud`'s output."""
    return set(_STEP_IMAGE.findall(build_output))


def stale_images(listed: list[dict[str, object]], used: set[str]) -> list[str]:
    """The untagged images of `buildah images --all --json --no-trunc` that no step in `used`
    names: what earlier builds left. Tagged images are the user's or the cache's keys; kept."""
    stale = []
    for image in listed:
        ident = str(image.get("id", "")).removeprefix("sha256:")
        if image.get("names") or not ident:
            continue
        if not any(ident.startswith(u) for u in used):
            stale.append(ident)
    return stale


def _remove_stale(buildah: list[str], keep: set[str], log: Path, progress: Callable[[str], None]) -> None:
    listed = json.loads(_run([*buildah, "images", "--all", "--json", "--no-trunc"], log, "buildah images") or "[]")
    stale = stale_images(listed or [], keep)
    if stale:
        _run([*buildah, "rmi", *stale], log, "buildah rmi (images earlier builds left)")
        progress(f"removed {len(stale)} image(s) earlier builds left in the store")


def rotate_log(log: Path, limit: int = BUILD_LOG_LIMIT) -> None:
    """Move a log of `limit` bytes or more to `<log>.1` (replacing the older one): every build
    appends to one log in the cache, which would otherwise grow for as long as the cache lives."""
    if log.exists() and log.stat().st_size >= limit:
        log.replace(log.with_name(log.name + ".1"))


def build_layers(store: Path, context: Path, reference: str, options: list[str], log: Path,
                 progress: Callable[[str], None]) -> None:
    """`buildah bud --layers` of `context`'s Dockerfile into `store`, tagged `reference`; the store
    keeps only this build's images and the tagged ones (see the module's docstring).

    Before the build, untagged images the last build did not use go too (all of them in a store
    with no record of its last build): on a full disk the build must find the room it needs."""
    buildah = buildah_command(store)
    record = store / "last-build-images"
    try:
        last = set(record.read_text().split())
    except OSError:
        last = set()
    _remove_stale(buildah, last, log, progress)
    # Working containers are a build's own (the store is this module's): any here are from a build
    # that was killed, each a full root filesystem under vfs. --force-rm: a failed step's goes too.
    _run([*buildah, "rm", "--all"], log, "buildah rm --all (containers a killed build left)")
    start = log.stat().st_size if log.exists() else 0
    _run([*buildah, "bud", "--isolation", "chroot", "--layers", "--force-rm", *options, "-t", reference, str(context)],
         log, "buildah bud (the Dockerfile)", stdout_to_log=True)
    with log.open("rb") as f:
        f.seek(start)
        used = step_images(f.read().decode(errors="replace"))
    if not used:  # a buildah that prints differently: disk over a broken cache
        progress(f"kept the image store as it is: the build's output named no step image (log: {log})")
        return
    _remove_stale(buildah, used, log, progress)
    tmp = record.with_name(record.name + ".tmp")
    tmp.write_text("\n".join(sorted(used)) + "\n")
    tmp.rename(record)


def base_tarball(progress: Callable[[str], None]) -> Path:
    """The base rootfs from Debian's packages, made once per suite and package list."""
    key = hashlib.sha256(f"{SUITE} {MIRROR} {' '.join(BASE_PACKAGES)}".encode()).hexdigest()[:12]
    target = image_cache() / f"base-{SUITE}-{key}.tar"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp.tar")
    progress(f"making the base rootfs from Debian {SUITE} ({', '.join(BASE_PACKAGES)}) with mmdebstrap")
    sources = [f"deb {MIRROR} {SUITE} main", f"deb {MIRROR} {SUITE}-updates main",
               f"deb {MIRROR.rsplit('/', 1)[0]}/debian-security {SUITE}-security main"]
    _run([_tool("mmdebstrap"), "--variant=minbase", "--include=" + ",".join(BASE_PACKAGES),
          "--aptopt=Acquire::Retries \"3\"",
          *(f"--dpkgopt=path-exclude=/usr/share/{d}/*" for d in ("doc", "man", "locale", "info")),
          SUITE, str(tmp), *sources], target.parent / "mmdebstrap.log", "mmdebstrap", stdout_to_log=True)
    tmp.rename(target)
    return target


def base_label(inspected: str) -> str | None:
    """The tarball a base image was made from: its label in `buildah inspect --type image`'s JSON."""
    try:
        labels = json.loads(inspected)["OCIv1"]["config"].get("Labels") or {}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    value = labels.get(_BASE_LABEL) if isinstance(labels, dict) else None
    return value if isinstance(value, str) else None


def import_base(buildah: list[str], tarball: Path, log: Path) -> None:
    """The tarball as the image `BASE_REFERENCE`, unless the store has it from this tarball.
    (A new base image would be a new parent for every step: no layer of the cache would match.)"""
    inspected = subprocess.run([*buildah, "inspect", "--type", "image", BASE_REFERENCE], capture_output=True, text=True)
    if inspected.returncode == 0 and base_label(inspected.stdout) == tarball.name:
        return
    ctr = _run([*buildah, "from", "scratch"], log, "buildah from scratch").strip()
    try:
        _run([*buildah, "add", ctr, str(tarball), "/"], log, "buildah add (the base rootfs)")
        _run([*buildah, "config", "--label", f"{_BASE_LABEL}={tarball.name}",
              "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
              "--cmd", "/bin/sh", ctr], log, "buildah config")
        _run([*buildah, "commit", "-q", ctr, BASE_REFERENCE], log, "buildah commit (the base)")
    finally:
        subprocess.run([*buildah, "rm", ctr], capture_output=True)


def host_pip_cert() -> str | None:
    """The CA bundle this machine's pip trusts (a TLS-inspecting proxy's), if one is configured."""
    for var in ("PIP_CERT", "REQUESTS_CA_BUNDLE"):
        if os.environ.get(var) and Path(os.environ[var]).is_file():
            return os.environ[var]
    for conf in (Path("/etc/pip.conf"), Path.home() / ".config" / "pip" / "pip.conf", Path.home() / ".pip" / "pip.conf"):
        parser = configparser.ConfigParser()
        try:
            parser.read(conf)
        except configparser.Error:
            continue
        cert = parser.get("global", "cert", fallback="")
        if cert and Path(cert).is_file():
            return cert
    return None


def _name_for_containerd(source: Path, reference: str, dest: Path) -> None:
    """`dest`: `source` with the full name in `io.containerd.image.name` on the index's manifest
    (buildah writes only `org.opencontainers.image.ref.name`, which containerd's importer may
    read as a tag); every other member byte for byte. Written to a temp name, then renamed."""
    tmp = dest.with_name(dest.name + ".named")
    with tarfile.open(source) as src, tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as out:
        for member in src:
            data = src.extractfile(member) if member.isfile() else None
            if member.name == "index.json" and data is not None:
                index = json.loads(data.read())
                for m in index["manifests"]:
                    m.setdefault("annotations", {})["io.containerd.image.name"] = reference
                raw = json.dumps(index, separators=(",", ":")).encode()
                member.size = len(raw)
                out.addfile(member, io.BytesIO(raw))
            else:
                out.addfile(member, data)
    tmp.rename(dest)


def _manifest_digest(archive: Path) -> tuple[str, int]:
    """The manifest digest the archive's index names, and the image's size unpacked (its layers' tars)."""
    with tarfile.open(archive) as tar:
        def member(name: str) -> bytes:
            f = tar.extractfile(name)
            if f is None:
                raise UserError(f"{archive} has no {name}")
            return f.read()

        index = json.loads(member("index.json"))
        digest = str(index["manifests"][0]["digest"])
        manifest = json.loads(member(f"blobs/sha256/{digest.split(':', 1)[1]}"))
        size = 0
        for layer in manifest["layers"]:
            blob = tar.extractfile(f"blobs/sha256/{layer['digest'].split(':', 1)[1]}")
            if blob is None:
                raise UserError(f"{archive} lacks the layer {layer['digest']}; run `make image` again.")
            unzip = zlib.decompressobj(wbits=47) if layer["mediaType"].endswith("gzip") else None
            while chunk := blob.read(1 << 20):
                size += len(unzip.decompress(chunk)) if unzip else len(chunk)
    return digest, size


def build_image(root: Path | None = None, dist: Path | None = None, base: str | None = None,
                progress: Callable[[str], None] = print) -> ImageInfo:
    """Build the Dockerfile into `dist/dra-hami-<version>.oci.tar`; `base` overrides the Debian base."""
    root = root or project_root()
    dist = (dist or root / "dist").resolve()
    version = project_version(root)
    reference = f"{IMAGE_NAME}:{version}"
    store = image_cache() / "storage"
    started = time.monotonic()
    with build_lock(image_cache(), progress):
        store.mkdir(parents=True, exist_ok=True)
        log = image_cache() / "build.log"
        rotate_log(log)
        buildah = buildah_command(store)
        if base is None:
            import_base(buildah, base_tarball(progress), log)
            base = BASE_REFERENCE
        args = ["--pull-never" if base == BASE_REFERENCE else "--pull", "--build-arg", f"BASE={base}"]
        cert = host_pip_cert()
        if cert:
            args += ["--volume", f"{cert}:{_BUILD_CA}:ro", "--build-arg", f"PIP_CERT={_BUILD_CA}"]
        if os.environ.get("PIP_INDEX_URL"):
            args += ["--build-arg", f"PIP_INDEX_URL={os.environ['PIP_INDEX_URL']}"]
        progress(f"building {reference} from {root / 'Dockerfile'} on {base} with buildah (log: {log})")
        build_layers(store, root, reference, args, log, progress)
        dist.mkdir(parents=True, exist_ok=True)
        archive = dist / f"dra-hami-{version}.oci.tar"
        tmp = archive.with_name(archive.name + ".tmp")
        tmp.unlink(missing_ok=True)
        _run([*buildah, "push", "-q", reference, f"oci-archive:{tmp}:{reference}"], log, "buildah push (the OCI archive)")
        _name_for_containerd(tmp, reference, archive)
        tmp.unlink()
    digest, image_bytes = _manifest_digest(archive)
    info = ImageInfo(reference=reference, digest=digest, archive=str(archive), archive_bytes=archive.stat().st_size,
                     image_bytes=image_bytes, build_seconds=round(time.monotonic() - started, 1), base=base)
    (dist / f"dra-hami-{version}.json").write_text(json.dumps(asdict(info), indent=2) + "\n")
    return info
