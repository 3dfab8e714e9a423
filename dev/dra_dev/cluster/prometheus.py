"""A real Prometheus and promtool, built from their Go module into the binary cache.

The charts' alert rules and dashboard are proven against the real thing (tests/monitoring):
promtool checks the rendered PrometheusRule's rules, and a Prometheus scrapes running daemons and
evaluates the rules. Like Helm (`dra_dev.cluster.binaries.build_helm`), it is built once per
machine with `go install module/cmd/...@version` (the module's own go.mod, no build module), under
the cache's build lock, into ``<cache>/prometheus-<version>/``.

- The module is ``github.com/prometheus/prometheus``; its Go versions are ``v0.<minor>.<patch>``
  for Prometheus ``3.<minor>.<patch>`` (the module cannot be v3 without renaming its imports).
- ``-tags remove_all_sd``: every service-discovery plugin (cloud SDKs, Kubernetes, Consul...) is
  left out; static and file configs, which the tests use, stay. It roughly halves the build.
- No web UI assets (the ``builtinassets`` tag is off): the HTTP API, which is all the tests and
  `dra` read, is served either way.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from dra_dev.cluster.binaries import _go, _go_env, _run, build_lock, cache_root

PROMETHEUS_VERSION = "v0.316.0"
"""The Go module version (Prometheus 3.16.0)."""
_MODULE = "github.com/prometheus/prometheus"
COMMANDS = ("prometheus", "promtool")
BUILD_TAGS = "remove_all_sd"


def release(version: str = PROMETHEUS_VERSION) -> str:
    """The Prometheus release of a module version: v0.316.0 -> 3.16.0."""
    _, minor, patch = version.lstrip("v").split(".")
    return f"{int(minor) // 100}.{int(minor) % 100}.{patch}"


def prometheus_dir(version: str = PROMETHEUS_VERSION, root: Path | None = None) -> Path:
    """Where `build_prometheus` puts prometheus and promtool of `version`."""
    return (root or cache_root()) / f"prometheus-{version}"


def _complete(directory: Path) -> bool:
    return all((directory / c).is_file() and os.access(directory / c, os.X_OK) for c in COMMANDS)


def build_prometheus(version: str = PROMETHEUS_VERSION, root: Path | None = None,
                     progress: Callable[[str], None] = print) -> Path:
    """Build (or reuse) prometheus and promtool `version`; returns their directory."""
    target = prometheus_dir(version, root)
    if _complete(target):
        return target
    with build_lock(root, progress):
        if _complete(target):  # built by the holder we waited for
            return target
        return _build_locked(version, target, progress)


def _build_locked(version: str, target: Path, progress: Callable[[str], None]) -> Path:
    go = _go()
    target.mkdir(parents=True, exist_ok=True)
    log = target / "build.log"
    env = _go_env(target)
    env.pop("GOFLAGS", None)  # `go install pkg@version` refuses -mod=mod
    staging = target / ".gobin"
    shutil.rmtree(staging, ignore_errors=True)
    env["GOBIN"] = str(staging)
    progress(f"building prometheus and promtool {release(version)} (module {version}; log: {log})")
    started = time.monotonic()
    stamp = "github.com/prometheus/common/version"
    ldflags = (f"-s -w -X {stamp}.Version={release(version)} -X {stamp}.Revision={version} "
               f"-X {stamp}.Branch=module -X {stamp}.BuildUser=dra-dev -X {stamp}.BuildDate=19700101-00:00:00")
    _run([go, "install", "-trimpath", "-tags", BUILD_TAGS, "-ldflags", ldflags,
          *[f"{_MODULE}/cmd/{c}@{version}" for c in COMMANDS]], target, log, env)
    for c in COMMANDS:
        (staging / c).rename(target / c)
    shutil.rmtree(staging, ignore_errors=True)
    manifest = {
        "prometheus": release(version), "module": f"{_MODULE}@{version}", "tags": BUILD_TAGS,
        "go": subprocess.run([go, "version"], capture_output=True, text=True).stdout.strip(),
        "build_seconds": round(time.monotonic() - started, 1),
    }
    (target / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return target
