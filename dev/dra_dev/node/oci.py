"""Write a one-layer OCI image archive (`oci-layout`, `index.json`, blobs) from files on disk.

The node has no registry; containerd imports these archives (`ctr images import`). The format
is the OCI image layout 1.0: an uncompressed tar layer, an image config naming its diff ID, a
manifest, and an index whose manifest carries `io.containerd.image.name` (the full reference
containerd stores, e.g. `docker.io/library/dra-workload:local`) and
`org.opencontainers.image.ref.name`. Layer entries are sorted with mtime 0 and owner root, so the
same inputs give the same digests.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"


def normalize_reference(name: str) -> str:
    """The reference kubelet and containerd use for `name`: `pause:1` -> `docker.io/library/pause:1`."""
    if "/" not in name:
        name = f"library/{name}"
    first = name.split("/", 1)[0]
    if "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    if ":" not in name.rsplit("/", 1)[-1] and "@" not in name:
        name += ":latest"
    return name


@dataclass
class ImageSpec:
    """What goes into the image: `files` maps an absolute path in the image to a host file."""

    reference: str
    files: Mapping[str, Path]
    entrypoint: Sequence[str]
    env: Sequence[str] = ("PATH=/usr/local/bin:/usr/bin:/bin",)
    labels: Mapping[str, str] = field(default_factory=dict)


def _tar_info(name: str, kind: bytes, mode: int, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.size = size
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def layer_tar(files: Mapping[str, Path]) -> bytes:
    """An uncompressed layer holding `files` (regular files, symlinks followed) and their parent dirs."""
    entries: dict[str, Path | None] = {}
    for target, source in files.items():
        path = PurePosixPath(target)
        if not path.is_absolute() or ".." in path.parts:
            raise ValueError(f"image path {target!r} must be absolute and must not contain '..'")
        for parent in reversed(path.parents[:-1]):
            entries.setdefault(str(parent).lstrip("/"), None)
        entries[str(path).lstrip("/")] = source
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(entries):
            entry = entries[name]
            if entry is None:
                tar.addfile(_tar_info(name, tarfile.DIRTYPE, 0o755))
                continue
            data = entry.read_bytes()
            mode = 0o755 if entry.stat().st_mode & 0o111 else 0o644
            tar.addfile(_tar_info(name, tarfile.REGTYPE, mode, len(data)), io.BytesIO(data))
    return buf.getvalue()


def _blob(blobs: dict[str, bytes], data: bytes, media_type: str) -> dict[str, Any]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return {"mediaType": media_type, "digest": digest, "size": len(data)}


def _json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def write_archive(spec: ImageSpec, dest: Path) -> str:
    """Write `spec` as an OCI archive (tar) at `dest`; returns the manifest digest."""
    layer = layer_tar(spec.files)
    blobs: dict[str, bytes] = {}
    layer_desc = _blob(blobs, layer, MEDIA_LAYER)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": list(spec.entrypoint), "Env": list(spec.env), "Labels": dict(spec.labels)},
        "rootfs": {"type": "layers", "diff_ids": [layer_desc["digest"]]},
        "history": [{"created_by": "dra_dev.node.oci"}],
    }
    config_desc = _blob(blobs, _json(config), MEDIA_CONFIG)
    manifest = {"schemaVersion": 2, "mediaType": MEDIA_MANIFEST, "config": config_desc, "layers": [layer_desc]}
    manifest_desc = _blob(blobs, _json(manifest), MEDIA_MANIFEST)
    reference = normalize_reference(spec.reference)
    index = {
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [{
            **manifest_desc,
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {
                "io.containerd.image.name": reference,
                "org.opencontainers.image.ref.name": reference.rsplit(":", 1)[1],
            },
        }],
    }
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        members = {
            "oci-layout": _json({"imageLayoutVersion": "1.0.0"}),
            "index.json": _json(index),
            **{f"blobs/sha256/{d.split(':', 1)[1]}": data for d, data in blobs.items()},
        }
        for name in ("blobs", "blobs/sha256"):
            tar.addfile(_tar_info(name, tarfile.DIRTYPE, 0o755))
        for name, data in members.items():
            tar.addfile(_tar_info(name, tarfile.REGTYPE, 0o644, len(data)), io.BytesIO(data))
    tmp.replace(dest)
    return str(manifest_desc["digest"])
