"""CDI spec files: one transient spec per claim, written atomically, removed on unprepare.

File: ``<spec_dir>/<vendor>-<class>_<claimUID>.json`` (the CDI library's transient-spec name).
Kind: the driver's ``cdi_kind`` (``vendor/class``). Devices: ``<claimUID>-<device key>``, so two
shares of one device (key includes the shareID) and two claims never collide. Claim-wide edits
go in the spec's top-level ``containerEdits`` (applied once when any device of it is used).

``cdiVersion`` is the lowest version that supports the fields used, because runtimes reject
specs that declare a version newer than the CDI library they vendor:
0.3.0 base; 0.4.0 mount ``type``; 0.5.0 device-node ``hostPath`` or a device name starting with
a digit (claim UIDs often do); 0.6.0 annotations or a ``.`` in the class.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dra._runtime.fsutil import atomic_write, temp_files
from dra.driver import ContainerEdits
from dra.errors import UserError

log = logging.getLogger(__name__)

DEFAULT_SPEC_DIR = Path("/var/run/cdi")

_VENDOR_RE = re.compile(r"^[A-Za-z][A-Za-z0-9._-]*[A-Za-z0-9]$")
_CLASS_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._:-]*[A-Za-z0-9])?$")
_INVALID_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def minimum_version(spec: Mapping[str, Any]) -> str:
    """The lowest cdiVersion that supports every field `spec` uses (mirrors the CDI library's rules)."""
    need = "0.3.0"

    def bump(v: str) -> None:
        nonlocal need
        if _version_tuple(v) > _version_tuple(need):
            need = v

    def edits(e: Mapping[str, Any] | None) -> None:
        if not e:
            return
        if any("type" in m for m in e.get("mounts") or ()):
            bump("0.4.0")
        if any(n.get("hostPath") for n in e.get("deviceNodes") or ()):
            bump("0.5.0")
        if e.get("intelRdt") or e.get("additionalGids"):
            bump("0.7.0")
        if e.get("netDevices"):
            bump("1.1.0")

    _, _, cls = str(spec.get("kind", "")).partition("/")
    if "." in cls or spec.get("annotations"):
        bump("0.6.0")
    edits(spec.get("containerEdits"))
    for d in spec.get("devices") or ():
        if str(d.get("name", ""))[:1].isdigit():
            bump("0.5.0")
        if d.get("annotations"):
            bump("0.6.0")
        edits(d.get("containerEdits"))
    return need


def edits_to_cdi(e: ContainerEdits) -> dict[str, Any]:
    """ContainerEdits in CDI's containerEdits form; empty lists are left out."""
    out: dict[str, Any] = {}
    if e.env:
        for k in e.env:
            if not _ENV_NAME_RE.match(k):
                raise ValueError(f"environment variable name {k!r} is not valid")
        out["env"] = [f"{k}={v}" for k, v in sorted(e.env.items())]
    if e.device_nodes:
        nodes = []
        for n in e.device_nodes:
            node: dict[str, Any] = {"path": n.path}
            if n.host_path:
                node["hostPath"] = n.host_path
            if n.permissions:
                node["permissions"] = n.permissions
            nodes.append(node)
        out["deviceNodes"] = nodes
    if e.mounts:
        out["mounts"] = [
            {"hostPath": m.host_path, "containerPath": m.container_path, **({"options": list(m.options)} if m.options else {})}
            for m in e.mounts
        ]
    return out


def check_qualified(cdi_id: str) -> None:
    """Raise ValueError unless `cdi_id` is a fully qualified CDI device ID ``vendor/class=name``."""
    kind, sep, name = cdi_id.partition("=")
    vendor, slash, cls = kind.partition("/")
    if not (sep and slash and _VENDOR_RE.match(vendor) and _CLASS_RE.match(cls) and _NAME_RE.match(name)):
        raise ValueError(f"{cdi_id!r} is not a fully qualified CDI device ID (vendor/class=name, e.g. nvidia.com/gpu=0)")


def device_name(claim_uid: str, key: str) -> str:
    """The CDI device name of one prepared device (share) of a claim."""
    name = _INVALID_NAME_CHARS.sub("-", f"{claim_uid}-{key}").strip("-._")
    if not _NAME_RE.match(name):
        raise ValueError(f"cannot form a CDI device name from claim {claim_uid!r} and key {key!r}")
    return name


class CDISpecs:
    """The claim specs of one driver kind in one CDI directory."""

    def __init__(self, kind: str, spec_dir: Path = DEFAULT_SPEC_DIR) -> None:
        vendor, sep, cls = kind.partition("/")
        if not sep or not _VENDOR_RE.match(vendor) or len(vendor) > 253 or not _CLASS_RE.match(cls):
            raise UserError(
                f"CDI kind {kind!r} is not valid: it must be 'vendor/class' with a DNS-like vendor"
                " (e.g. 'k8s.gpu.example.com') and an alphanumeric class of at most 63 characters"
                " (e.g. 'claim'). Fix the driver's cdi_kind."
            )
        self.kind = kind
        self.vendor = vendor
        self.cls = cls
        self.spec_dir = Path(spec_dir)
        self._prefix = f"{vendor}-{cls}_"
        self._dir = os.fspath(self.spec_dir)  # for the per-claim hot path: strings, not pathlib

    def ensure_dir(self) -> None:
        self.spec_dir.mkdir(parents=True, exist_ok=True)

    def spec_path(self, claim_uid: str) -> Path:
        return Path(self._spec_file(claim_uid))

    def _spec_file(self, claim_uid: str) -> str:
        return f"{self._dir}/{self._prefix}{claim_uid.replace('/', '_')}.json"

    def qualified(self, name: str) -> str:
        return f"{self.kind}={name}"

    def build_spec(
        self, devices: Sequence[tuple[str, ContainerEdits]], claim_edits: ContainerEdits | None = None
    ) -> dict[str, Any]:
        """A spec document for device (name, edits) pairs; version set to the minimum required."""
        if not devices:
            raise ValueError("a CDI spec needs at least one device")
        names = [n for n, _ in devices]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate CDI device names: {sorted(names)}")
        spec: dict[str, Any] = {"cdiVersion": "", "kind": self.kind, "devices": []}
        common = edits_to_cdi(claim_edits or ContainerEdits())
        if common:
            spec["containerEdits"] = common
        for name, edits in devices:
            if not _NAME_RE.match(name):
                raise ValueError(f"CDI device name {name!r} is not valid")
            cdi_edits = edits_to_cdi(edits)
            if not cdi_edits:
                # CDI rejects devices without edits; mark the device so it still resolves.
                var = "DRA_DEVICE_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper()
                cdi_edits = {"env": [f"{var}={name}"]}
            spec["devices"].append({"name": name, "containerEdits": cdi_edits})
        spec["cdiVersion"] = minimum_version(spec)
        return spec

    def write_claim(
        self, claim_uid: str, devices: Sequence[tuple[str, ContainerEdits]], claim_edits: ContainerEdits | None = None
    ) -> list[str]:
        """Write (or replace) the claim's spec atomically; returns the qualified CDI IDs in order."""
        spec = self.build_spec(devices, claim_edits)
        data = json.dumps(spec).encode()
        path = self._spec_file(claim_uid)
        # Not fsync'ed: the CDI dir is volatile (/var/run) by design, a claim prepared before a
        # reboot is prepared again (boot ID), and the rename alone survives a daemon crash.
        try:
            atomic_write(path, data, mode=0o644, durable=False)
        except FileNotFoundError:  # the directory is gone (someone cleaned /var/run): create it once
            self.ensure_dir()
            atomic_write(path, data, mode=0o644, durable=False)
        return [self.qualified(n) for n, _ in devices]

    def read_claim(self, claim_uid: str) -> dict[str, Any] | None:
        try:
            doc: dict[str, Any] = json.loads(self.spec_path(claim_uid).read_bytes())
        except FileNotFoundError:
            return None
        except ValueError:
            return None
        return doc

    def remove_claim(self, claim_uid: str) -> bool:
        """Remove the claim's spec; False when there was none."""
        try:
            os.unlink(self._spec_file(claim_uid))
        except FileNotFoundError:
            return False
        return True  # no fsync: the directory is volatile by design (see write_claim)

    def claim_uids(self) -> set[str]:
        """Claim UIDs that have a spec file of this kind in the directory."""
        if not self.spec_dir.is_dir():
            return set()
        n = len(self._prefix)
        return {p.name[n:-len(".json")] for p in self.spec_dir.glob(f"{self._prefix}*.json")}

    def temp_files(self) -> list[tuple[Path, str]]:
        """(path, claim UID) of this kind's temp files left by interrupted spec writes."""
        return temp_files(self.spec_dir, self._prefix) if self.spec_dir.is_dir() else []

    def sweep_orphans(self, known_uids: Iterable[str]) -> list[Path]:
        """Remove this kind's claim specs whose claim is not in `known_uids`.

        Only files named ``<vendor>-<class>_<uid>.json`` are touched: other drivers' specs and
        static specs in the same directory stay. A spec never exists without its claim's
        checkpoint record (the record is written first and deleted last), so no live prepare or
        unprepare is disturbed.
        """
        known = set(known_uids)
        removed = []
        for uid in sorted(self.claim_uids() - known):
            path = self.spec_path(uid)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path)
                log.warning("removed orphaned CDI spec (no checkpoint record)", extra={"claim": uid, "path": str(path)})
        return removed
