"""Resolve CDI device IDs against a spec directory the way a container runtime does.

For end-to-end tests: `apply_cdi(spec_dir, ids)` returns the environment and mounts a container
would get. It follows the CDI rules a runtime applies: specs are ``*.json``/``*.yaml`` files;
an ID is ``vendor/class=name``; each spec's top-level edits apply once when any of its devices
is requested; device edits apply in request order; a later value of an env var wins; an
unknown ID or a device defined twice is an error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dra.driver import Mount


class CDIResolutionError(LookupError):
    """An ID the spec directory does not define (or defines twice)."""


def _load(path: Path) -> dict[str, Any]:
    text = path.read_text()
    if path.suffix == ".json":
        doc: dict[str, Any] = json.loads(text)
        return doc
    import yaml

    loaded: dict[str, Any] = yaml.safe_load(text)
    return loaded


def _apply(edits: dict[str, Any], env: dict[str, str], mounts: list[Mount]) -> None:
    for kv in edits.get("env") or ():
        k, sep, v = kv.partition("=")
        if not sep:
            raise ValueError(f"CDI env entry {kv!r} has no '='")
        env[k] = v
    for m in edits.get("mounts") or ():
        mounts.append(Mount(m["hostPath"], m["containerPath"], tuple(m.get("options") or ())))


def apply_cdi(spec_dir: Path | str, device_ids: Sequence[str]) -> tuple[dict[str, str], list[Mount]]:
    """(env, mounts) a runtime would give a container that requests `device_ids`."""
    devices: dict[str, tuple[Path, dict[str, Any], dict[str, Any]]] = {}
    for path in sorted(Path(spec_dir).iterdir()):
        if path.name.startswith(".") or path.suffix not in (".json", ".yaml", ".yml"):
            continue
        spec = _load(path)
        for dev in spec.get("devices") or ():
            qid = f"{spec['kind']}={dev['name']}"
            if qid in devices:
                raise CDIResolutionError(f"CDI device {qid} is defined in both {devices[qid][0]} and {path}")
            devices[qid] = (path, spec, dev)
    env: dict[str, str] = {}
    mounts: list[Mount] = []
    applied_specs: set[Path] = set()
    for qid in device_ids:
        if qid not in devices:
            raise CDIResolutionError(f"unresolvable CDI device {qid}: no spec in {spec_dir} defines it")
        path, spec, dev = devices[qid]
        if path not in applied_specs:
            applied_specs.add(path)
            _apply(spec.get("containerEdits") or {}, env, mounts)
        _apply(dev.get("containerEdits") or {}, env, mounts)
    return env, mounts


_SPEC_KEYS = {"cdiVersion", "kind", "annotations", "devices", "containerEdits"}
_DEVICE_KEYS = {"name", "annotations", "containerEdits"}
_EDIT_KEYS = {"env", "deviceNodes", "hooks", "mounts", "intelRdt", "additionalGids", "netDevices"}
_KNOWN_VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")


def validate_cdi_spec(spec: dict[str, Any], schema_dir: Path | str) -> None:
    """Check `spec` as a CDI loader would: the JSON schema (``schema.json`` + ``defs.json`` in
    `schema_dir`), plus what the schema leaves to code: no unknown fields, kind and device-name
    syntax, a known cdiVersion no lower than the fields need, non-empty device edits."""
    import jsonschema
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT7

    from dra._runtime.cdi import minimum_version

    schema_dir = Path(schema_dir)
    schema = json.loads((schema_dir / "schema.json").read_text())
    defs = json.loads((schema_dir / "defs.json").read_text())
    registry: Registry[Any] = Registry().with_resource(
        "defs.json", Resource.from_contents(defs, default_specification=DRAFT7))
    jsonschema.Draft7Validator(schema, registry=registry).validate(spec)

    def no_unknown(obj: dict[str, Any], allowed: set[str], where: str) -> None:
        extra = set(obj) - allowed
        if extra:
            raise ValueError(f"{where}: unknown fields {sorted(extra)} (CDI loaders reject them)")

    no_unknown(spec, _SPEC_KEYS, "spec")
    if spec["cdiVersion"] not in _KNOWN_VERSIONS:
        raise ValueError(f"cdiVersion {spec['cdiVersion']!r} is not a released CDI version")
    need = minimum_version(spec)
    if tuple(map(int, spec["cdiVersion"].split("."))) < tuple(map(int, need.split("."))):
        raise ValueError(f"cdiVersion {spec['cdiVersion']} is lower than the {need} the fields need")
    vendor, sep, cls = spec["kind"].partition("/")
    if not sep or not re.match(r"^[A-Za-z][A-Za-z0-9._-]*[A-Za-z0-9]$", vendor) or \
            not re.match(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$", cls):
        raise ValueError(f"kind {spec['kind']!r} is not vendor/class")
    if not spec["devices"]:
        raise ValueError("a spec needs at least one device")
    names = set()
    for edits in [spec.get("containerEdits") or {}] + [d["containerEdits"] for d in spec["devices"]]:
        no_unknown(edits, _EDIT_KEYS, "containerEdits")
        for kv in edits.get("env") or ():
            if "=" not in kv:
                raise ValueError(f"env entry {kv!r} has no '='")
    for d in spec["devices"]:
        no_unknown(d, _DEVICE_KEYS, f"device {d.get('name')!r}")
        if not re.match(r"^[A-Za-z0-9]([A-Za-z0-9._:-]*[A-Za-z0-9])?$", d["name"]):
            raise ValueError(f"device name {d['name']!r} is not valid")
        if d["name"] in names:
            raise ValueError(f"device name {d['name']!r} appears twice")
        names.add(d["name"])
        if not d["containerEdits"]:
            raise ValueError(f"device {d['name']!r} has empty containerEdits (CDI rejects it)")

