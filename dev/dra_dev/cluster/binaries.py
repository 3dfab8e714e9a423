"""Build pinned Kubernetes and etcd binaries from the Go module proxy into a version-keyed cache.

Why from source: the test rig and the demo need the real kube-apiserver, kube-scheduler and
kube-controller-manager, and this machine (like CI) reaches only package registries. The Go
module proxy serves `k8s.io/kubernetes`; its go.mod points the k8s.io staging modules at
`./staging/...`, which a dependant cannot use, so the build module replaces each of them with the
published `k8s.io/<name> v0.<minor>.<patch>` release of the same Kubernetes version.

etcd is built from its own Go module (`go.etcd.io/etcd/server/v3`), in a separate build module so
its dependency graph never mixes with Kubernetes'. That is the only source of a real etcd server
reachable here (no release tarballs), and it is the same code the upstream releases ship.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from dra._runtime.fsutil import LockTimeout, lock_file, unlock_file
from dra.errors import UserError

DEFAULT_K8S_VERSION = "v1.34.4"
# etcd minor used by Kubernetes 1.34 is 3.6; the newest 3.6 patch the proxy serves.
DEFAULT_ETCD_VERSION = "v3.6.16"
ETCD_FOR_MINOR = {"1.34": "v3.6.16", "1.35": "v3.6.16", "1.36": "v3.6.16", "1.37": "v3.6.16"}

K8S_COMMANDS = ("kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl")
ALL_BINARIES = (*K8S_COMMANDS, "etcd")

_VERSION_RE = re.compile(r"^v1\.(\d+)\.(\d+)$")
_REPLACE_RE = re.compile(r"^\s*(k8s\.io/[\w.-]+)\s*=>\s*\./staging/src/\S+\s*$", re.M)


def cache_root() -> Path:
    """Where built binaries live: `$DRA_K8S_CACHE` or `~/.cache/dra-k8s`."""
    env = os.environ.get("DRA_K8S_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "dra-k8s"


@dataclass(frozen=True)
class BinarySet:
    """The binaries of one Kubernetes version, ready to run."""

    k8s_version: str
    etcd_version: str
    directory: Path

    def path(self, name: str) -> Path:
        return self.directory / name

    def complete(self) -> bool:
        return all(self.path(n).is_file() and os.access(self.path(n), os.X_OK) for n in ALL_BINARIES)


def parse_version(version: str) -> tuple[int, int]:
    m = _VERSION_RE.match(version)
    if not m:
        raise UserError(
            f"unknown Kubernetes version {version!r}: expected the form v1.MINOR.PATCH "
            f"(for example {DEFAULT_K8S_VERSION})."
        )
    return int(m.group(1)), int(m.group(2))


MATRIX_FROM_MINOR = 34
"""The oldest Kubernetes minor the project supports: the version matrix starts there."""


def newest_patches(versions: list[str], from_minor: int = MATRIX_FROM_MINOR) -> list[str]:
    """The newest release (no pre-release) of each 1.x minor from `from_minor`, oldest minor first."""
    newest: dict[int, tuple[int, str]] = {}
    for v in versions:
        m = _VERSION_RE.match(v)
        if m and int(m.group(1)) >= from_minor:
            minor, patch = int(m.group(1)), int(m.group(2))
            if minor not in newest or patch > newest[minor][0]:
                newest[minor] = (patch, v)
    return [newest[minor][1] for minor in sorted(newest)]


def served_versions(from_minor: int = MATRIX_FROM_MINOR) -> list[str]:
    """What the version matrix runs on: the newest patch of every minor from `from_minor` that
    the Go module proxy serves as k8s.io/kubernetes (one `go list -m -versions` query)."""
    go = _go()
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GO111MODULE": "on"}
    proc = subprocess.run([go, "list", "-m", "-versions", "k8s.io/kubernetes"], capture_output=True, text=True,
                          env=env, cwd=cache_root() if cache_root().is_dir() else None, timeout=120)
    if proc.returncode != 0:
        raise UserError(f"the Go module proxy did not list k8s.io/kubernetes: {proc.stderr.strip()[-300:]}")
    return newest_patches(proc.stdout.split()[1:], from_minor)


def binary_set(version: str = DEFAULT_K8S_VERSION, root: Path | None = None) -> BinarySet:
    minor, _ = parse_version(version)
    etcd = ETCD_FOR_MINOR.get(f"1.{minor}", DEFAULT_ETCD_VERSION)
    return BinarySet(version, etcd, (root or cache_root()) / version)


def _go() -> str:
    go = shutil.which("go")
    if not go:
        raise UserError(
            "the Go toolchain ('go') is not on PATH; it is needed once to build the pinned "
            "Kubernetes and etcd binaries from the Go module proxy. Install Go >= 1.24 "
            "(for example from your distribution's packages) and run the command again, or point "
            "DRA_K8S_CACHE at a cache that already holds the binaries."
        )
    return go


def _run(cmd: list[str], cwd: Path, log: Path, env: dict[str, str]) -> None:
    with log.open("ab") as out:
        out.write(f"\n$ {' '.join(cmd)}\n".encode())
        out.flush()
        rc = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
    if rc != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise UserError(
            f"building Kubernetes binaries failed: `{' '.join(cmd)}` exited {rc} in {cwd}. "
            f"Last lines of {log}:\n" + "\n".join(tail)
        )


def _go_env(workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("GOFLAGS", "-mod=mod")
    env["CGO_ENABLED"] = "0"
    env["GOTOOLCHAIN"] = env.get("GOTOOLCHAIN", "local")
    env.setdefault("GOCACHE", str(workdir.parent / "go-build-cache"))
    return env


def _module_file(go: str, module: str, version: str, workdir: Path, log: Path, env: dict[str, str]) -> str:
    """Download `module@version` and return its go.mod text; a clear error if the proxy lacks it."""
    proc = subprocess.run(
        [go, "mod", "download", "-json", f"{module}@{version}"],
        cwd=workdir, capture_output=True, text=True, env=env,
    )
    with log.open("a") as out:
        out.write(proc.stdout + proc.stderr)
    info = {}
    try:
        info = json.loads(proc.stdout or "{}")
    except json.JSONDecodeError:
        pass
    if proc.returncode != 0 or "GoMod" not in info:
        reason = info.get("Error") or proc.stderr.strip().splitlines()[-1:] or ["no answer"]
        raise UserError(
            f"unknown Kubernetes version {version}: the Go module proxy does not serve "
            f"{module}@{version} ({reason if isinstance(reason, str) else reason[0]}). "
            f"Pick a released version such as {DEFAULT_K8S_VERSION}."
        )
    return Path(info["GoMod"]).read_text()


def _k8s_go_mod(version: str, upstream_mod: str) -> str:
    minor, patch = parse_version(version)
    staging = sorted(set(_REPLACE_RE.findall(upstream_mod)))
    lines = [
        "module dra.local/k8s-binaries",
        "",
        "go 1.24.0",
        "",
        f"require k8s.io/kubernetes {version}",
        "",
        "replace (",
        *[f"\t{name} => {name} v0.{minor}.{patch}" for name in staging],
        ")",
        "",
    ]
    return "\n".join(lines)


def _ldflags(version: str) -> str:
    minor, _ = parse_version(version)
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor=1",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    return " ".join(flags)


@contextlib.contextmanager
def build_lock(root: Path | None = None, progress: Callable[[str], None] = print) -> Iterator[None]:
    """Hold the cache's build lock: one builder at a time per cache root.

    Builds share the Go module dirs and write binaries into the cache; two at once (two `make
    test` runs, a test session and `dra node build`) would race on go.mod and on the files.
    An flock is released by the kernel when its holder dies, so a killed build never blocks
    the next one; a builder re-checks what exists once it holds the lock.
    """
    directory = root or cache_root()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / ".build.lock"
    try:
        fd = lock_file(path, timeout=0, mode=0o644)
    except LockTimeout:
        progress(f"waiting for another build in {directory} to finish (it holds {path})")
        fd = lock_file(path, mode=0o644)
    try:
        yield
    finally:
        unlock_file(fd)


def build(version: str = DEFAULT_K8S_VERSION, root: Path | None = None,
          progress: Callable[[str], None] = print) -> BinarySet:
    """Build (or reuse) the binaries for `version`; returns where they are."""
    bins = binary_set(version, root)
    if bins.complete():
        return bins
    with build_lock(root, progress):
        if bins.complete():  # built by the holder we waited for
            return bins
        return _build_locked(bins, progress)


def _build_locked(bins: BinarySet, progress: Callable[[str], None]) -> BinarySet:
    version = bins.k8s_version
    go = _go()
    bins.directory.mkdir(parents=True, exist_ok=True)
    work = bins.directory.parent / f"src-{version}"
    work.mkdir(parents=True, exist_ok=True)
    log = bins.directory / "build.log"
    env = _go_env(work)
    started = time.monotonic()

    k8s_dir = work / "kubernetes"
    k8s_dir.mkdir(exist_ok=True)
    upstream_mod = _module_file(go, "k8s.io/kubernetes", version, work, log, env)
    (k8s_dir / "go.mod").write_text(_k8s_go_mod(version, upstream_mod))
    pkgs = [f"k8s.io/kubernetes/cmd/{c}" for c in K8S_COMMANDS]
    progress(f"resolving k8s.io/kubernetes {version} modules (log: {log})")
    _run([go, "get", *[f"{p}@{version}" for p in pkgs]], k8s_dir, log, env)
    for cmd, pkg in zip(K8S_COMMANDS, pkgs, strict=False):
        if bins.path(cmd).is_file():
            continue
        progress(f"building {cmd} {version}")
        tmp = bins.path(cmd).with_suffix(".tmp")
        _run([go, "build", "-trimpath", "-ldflags", _ldflags(version), "-o", str(tmp), pkg], k8s_dir, log, env)
        tmp.rename(bins.path(cmd))

    if not bins.path("etcd").is_file():
        etcd_dir = work / "etcd"
        etcd_dir.mkdir(exist_ok=True)
        (etcd_dir / "go.mod").write_text("module dra.local/etcd-binary\n\ngo 1.24.0\n")
        progress(f"building etcd {bins.etcd_version}")
        _run([go, "get", f"go.etcd.io/etcd/server/v3@{bins.etcd_version}"], etcd_dir, log, env)
        tmp = bins.path("etcd").with_suffix(".tmp")
        _run([go, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(tmp), "go.etcd.io/etcd/server/v3"],
             etcd_dir, log, env)
        tmp.rename(bins.path("etcd"))

    manifest = {
        "kubernetes": version,
        "etcd": bins.etcd_version,
        "go": subprocess.run([go, "version"], capture_output=True, text=True).stdout.strip(),
        "build_seconds": round(time.monotonic() - started, 1),
    }
    (bins.directory / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return bins


# --- Helm, for the chart tests -------------------------------------------------------------
# Helm 4 (not 3): it is the maintained line (Helm 3 gets security fixes only since Helm 4.0), it
# installs and upgrades with server-side apply by default, which is how the charts must behave
# against a 1.34+ API server, and its client-go (v0.37) knows every resource.k8s.io version the
# charts use. The binary's default `.Capabilities.KubeVersion` comes from that client-go.
HELM_VERSION = "v4.3.2"
_HELM_MODULE = "helm.sh/helm/v4"


def helm_binary(version: str = HELM_VERSION, root: Path | None = None) -> Path:
    """Where `build_helm` puts the helm binary of `version`."""
    return (root or cache_root()) / f"helm-{version}" / "helm"


def build_helm(version: str = HELM_VERSION, root: Path | None = None, progress: Callable[[str], None] = print) -> Path:
    """Build (or reuse) helm `version` from the Go module proxy; returns the binary's path.

    `go install module/cmd/helm@version` builds exactly the module's own go.mod (no build module
    to keep in step), with the version stamped as Helm's Makefile does. The binary is installed
    under a temporary directory and renamed into place, under the cache's build lock, so a killed
    or concurrent build leaves no half file.
    """
    target = helm_binary(version, root)
    if target.is_file() and os.access(target, os.X_OK):
        return target
    with build_lock(root, progress):
        if target.is_file() and os.access(target, os.X_OK):  # built by the holder we waited for
            return target
        return _build_helm_locked(version, target, progress)


def _build_helm_locked(version: str, target: Path, progress: Callable[[str], None]) -> Path:
    go = _go()
    target.parent.mkdir(parents=True, exist_ok=True)
    log = target.parent / "build.log"
    env = _go_env(target.parent)
    env.pop("GOFLAGS", None)  # `go install pkg@version` refuses -mod=mod
    staging = target.parent / ".gobin"
    shutil.rmtree(staging, ignore_errors=True)
    env["GOBIN"] = str(staging)
    progress(f"building helm {version} (log: {log})")
    started = time.monotonic()
    ldflags = f"-s -w -X {_HELM_MODULE}/internal/version.version={version} -X {_HELM_MODULE}/internal/version.gitTreeState=clean"
    _run([go, "install", "-trimpath", "-ldflags", ldflags, f"{_HELM_MODULE}/cmd/helm@{version}"], target.parent, log, env)
    (staging / "helm").rename(target)
    shutil.rmtree(staging, ignore_errors=True)
    manifest = {"helm": version, "build_seconds": round(time.monotonic() - started, 1)}
    (target.parent / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return target
