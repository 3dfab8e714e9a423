"""The node's binaries: kubelet, containerd, crictl and the CNI plugins, pinned and cached.

Same builder, cache and lock as the control plane's (`dra_dev.cluster.binaries`):

- kubelet and kube-proxy: `k8s.io/kubernetes/cmd/{kubelet,kube-proxy}`, built in the control
  plane's own build module: the same version and replaces, and the Go build cache is already warm
  from the control plane. kube-proxy (iptables mode) gives the node the Service network.
- containerd, containerd-shim-runc-v2, ctr: `go install github.com/containerd/containerd/v2/cmd/...`
  (containerd 2.x applies CDI by default; `go install` builds exactly the module's own go.mod).
- crictl: `go install sigs.k8s.io/cri-tools/cmd/crictl` at the Kubernetes minor, for debugging.
- CNI plugins (bridge, host-local, loopback): `go install github.com/containernetworking/plugins/...`:
  pure Go and pinned; these three are all a loopback bridge network needs.
- runc: the distribution's package (Debian's `runc`), not built. The CRI asks for a seccomp
  profile on every sandbox, so runc must be built with libseccomp (cgo plus `libseccomp-dev`);
  the packaged one is, and gets the distribution's security fixes. `make node-deps` installs it.

Each Go-built part lives in a version-keyed directory of the cache (`containerd-v2.4.2/`, ...),
kubelet beside the control plane in `<k8s-version>/`. Every binary is written to a temporary
name and renamed, under the cache's build lock, so a killed build leaves no half file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dra.errors import UserError
from dra_dev.cluster.binaries import (
    DEFAULT_K8S_VERSION,
    _go,
    _go_env,
    _k8s_go_mod,
    _ldflags,
    _module_file,
    _run,
    binary_set,
    build_lock,
    cache_root,
    parse_version,
)

CONTAINERD_VERSION = "v2.4.2"
CNI_PLUGINS_VERSION = "v1.9.1"
# cri-tools follows the Kubernetes minor; the newest release the proxy serves for each.
CRICTL_FOR_MINOR = {"1.34": "v1.34.0", "1.35": "v1.34.0", "1.36": "v1.34.0", "1.37": "v1.37.0"}
DEFAULT_CRICTL_VERSION = "v1.34.0"

CONTAINERD_COMMANDS = ("containerd", "containerd-shim-runc-v2", "ctr")
CNI_PLUGINS = ("bridge", "host-local", "loopback")
_CONTAINERD_MODULE = "github.com/containerd/containerd/v2"
_CNI_MODULE = "github.com/containernetworking/plugins"
_CRICTL_MODULE = "sigs.k8s.io/cri-tools"

RUNC_HINT = (
    "runc comes from the distribution (it must be built with seccomp): on Debian or Ubuntu run "
    "`make node-deps` or `apt-get install -y runc`, or put a runc >= 1.1 on PATH."
)


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_runc() -> Path | None:
    """The runc the node uses: `$DRA_RUNC`, else the one on PATH, else /usr/sbin/runc."""
    env = os.environ.get("DRA_RUNC")
    if env:
        return Path(env) if _executable(Path(env)) else None
    found = shutil.which("runc") or shutil.which("runc", path="/usr/sbin:/usr/bin:/sbin")
    return Path(found) if found else None


@dataclass(frozen=True)
class NodeBinaries:
    """Where each binary of a node lives in the cache, for one Kubernetes version."""

    k8s_version: str
    root: Path
    containerd_version: str = CONTAINERD_VERSION
    cni_version: str = CNI_PLUGINS_VERSION
    crictl_version: str = DEFAULT_CRICTL_VERSION

    @property
    def kubelet(self) -> Path:
        return binary_set(self.k8s_version, self.root).path("kubelet")

    @property
    def kube_proxy(self) -> Path:
        return binary_set(self.k8s_version, self.root).path("kube-proxy")

    @property
    def containerd_dir(self) -> Path:
        return self.root / f"containerd-{self.containerd_version}"

    @property
    def cni_dir(self) -> Path:
        return self.root / f"cni-plugins-{self.cni_version}"

    @property
    def crictl_dir(self) -> Path:
        return self.root / f"cri-tools-{self.crictl_version}"

    def containerd(self, name: str = "containerd") -> Path:
        return self.containerd_dir / name

    @property
    def crictl(self) -> Path:
        return self.crictl_dir / "crictl"

    def missing(self) -> list[str]:
        """Names of the Go-built binaries not yet in the cache (runc is checked separately)."""
        want = {
            "kubelet": self.kubelet,
            "kube-proxy": self.kube_proxy,
            **{c: self.containerd(c) for c in CONTAINERD_COMMANDS},
            "crictl": self.crictl,
            **{f"cni/{p}": self.cni_dir / p for p in CNI_PLUGINS},
        }
        return [name for name, path in want.items() if not _executable(path)]

    def complete(self) -> bool:
        return not self.missing()


def node_binaries(version: str = DEFAULT_K8S_VERSION, root: Path | None = None) -> NodeBinaries:
    minor, _ = parse_version(version)
    crictl = CRICTL_FOR_MINOR.get(f"1.{minor}", DEFAULT_CRICTL_VERSION)
    return NodeBinaries(version, (root or cache_root()), crictl_version=crictl)


def build_node(version: str = DEFAULT_K8S_VERSION, root: Path | None = None,
               progress: Callable[[str], None] = print) -> NodeBinaries:
    """Build (or reuse) kubelet, containerd, crictl and the CNI plugins for `version`."""
    bins = node_binaries(version, root)
    if bins.complete():
        return bins
    with build_lock(root, progress):
        missing = bins.missing()
        if not missing:
            return bins
        go = _go()
        log = bins.root / f"node-build-{version}.log"
        started = time.monotonic()
        seconds: dict[str, float] = {}
        for command, path in (("kubelet", bins.kubelet), ("kube-proxy", bins.kube_proxy)):
            if command in missing:
                t = time.monotonic()
                _build_k8s_command(go, bins, command, path, log, progress)
                seconds[command] = round(time.monotonic() - t, 1)
        if any(c in missing for c in CONTAINERD_COMMANDS):
            t = time.monotonic()
            progress(f"building containerd {bins.containerd_version} (containerd, shim, ctr)")
            _go_install(go, bins.containerd_dir, log, [
                f"{_CONTAINERD_MODULE}/cmd/{c}@{bins.containerd_version}" for c in CONTAINERD_COMMANDS],
                tags="no_btrfs", ldflags=f"-s -w -X {_CONTAINERD_MODULE}/version.Version={bins.containerd_version}")
            seconds["containerd"] = round(time.monotonic() - t, 1)
        if "crictl" in missing:
            t = time.monotonic()
            progress(f"building crictl {bins.crictl_version}")
            _go_install(go, bins.crictl_dir, log, [f"{_CRICTL_MODULE}/cmd/crictl@{bins.crictl_version}"],
                        ldflags=f"-s -w -X {_CRICTL_MODULE}/pkg/version.Version={bins.crictl_version}")
            seconds["crictl"] = round(time.monotonic() - t, 1)
        if any(m.startswith("cni/") for m in missing):
            t = time.monotonic()
            progress(f"building CNI plugins {bins.cni_version} ({', '.join(CNI_PLUGINS)})")
            _go_install(go, bins.cni_dir, log, [
                f"{_CNI_MODULE}/plugins/{kind}/{p}@{bins.cni_version}"
                for kind, p in (("main", "bridge"), ("ipam", "host-local"), ("main", "loopback"))],
                ldflags="-s -w")
            seconds["cni"] = round(time.monotonic() - t, 1)
        manifest = {
            "kubernetes": version, "containerd": bins.containerd_version, "crictl": bins.crictl_version,
            "cni_plugins": bins.cni_version,
            "go": subprocess.run([go, "version"], capture_output=True, text=True).stdout.strip(),
            "build_seconds": {**seconds, "total": round(time.monotonic() - started, 1)},
        }
        (bins.root / f"node-manifest-{version}.json").write_text(json.dumps(manifest, indent=2) + "\n")
    left = bins.missing()
    if left:
        raise UserError(f"the node build finished but {', '.join(left)} are still missing; read {log}.")
    return bins


def _build_k8s_command(go: str, bins: NodeBinaries, command: str, dest: Path, log: Path,
                       progress: Callable[[str], None]) -> None:
    """kubelet or kube-proxy from the control plane's build module (written here too if that build never ran)."""
    version = bins.k8s_version
    work = bins.root / f"src-{version}"
    k8s_dir = work / "kubernetes"
    k8s_dir.mkdir(parents=True, exist_ok=True)
    env = _go_env(work)
    if not (k8s_dir / "go.mod").is_file():
        (k8s_dir / "go.mod").write_text(_k8s_go_mod(version, _module_file(go, "k8s.io/kubernetes", version, work, log, env)))
    pkg = f"k8s.io/kubernetes/cmd/{command}"
    progress(f"building {command} {version} (log: {log})")
    _run([go, "get", f"{pkg}@{version}"], k8s_dir, log, env)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".tmp")
    _run([go, "build", "-trimpath", "-ldflags", _ldflags(version), "-o", str(tmp), pkg], k8s_dir, log, env)
    tmp.rename(dest)


def _go_install(go: str, dest: Path, log: Path, pkgs: list[str], ldflags: str, tags: str = "") -> None:
    """`go install pkg@version...` into a temporary GOBIN, then rename each binary into `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    env = _go_env(dest)
    env.pop("GOFLAGS", None)  # `go install pkg@version` builds the module's own go.mod, no -mod flag
    with tempfile.TemporaryDirectory(prefix=".gobin-", dir=dest) as tmp:
        env["GOBIN"] = tmp
        cmd = [go, "install", "-trimpath", "-ldflags", ldflags]
        if tags:
            cmd += ["-tags", tags]
        _run([*cmd, *pkgs], dest, log, env)
        for built in Path(tmp).iterdir():
            built.rename(dest / built.name)
