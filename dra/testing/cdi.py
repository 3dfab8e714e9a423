"""Resolve CDI device IDs against a spec directory the way a container runtime does.

For end-to-end tests: `apply_cdi(spec_dir, ids)` returns the environment and mounts a container
would get. It follows the CDI rules a runtime applies: specs are ``*.json``/``*.yaml`` files;
an ID is ``vendor/class=name``; each spec's top-level edits apply once when any of its devices
is requested; device edits apply in request order; a later value of an env var wins; an
unknown ID or a device defined twice is an error.
"""

from __future__ import annotations

import json
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
