"""What the node's processes are told: containerd's config.toml, the CNI conflist, kubelet's
KubeletConfiguration and kubeconfig, and the machine settings they depend on.

Everything a node writes lives under its own directory (`NodeLayout`), so several nodes (two
test sessions on one machine) never share a socket, a state dir, a cgroup or a bridge. What
cannot be moved there is named: kubelet's `/var/log/containers` symlinks and libcni's cache in
`/var/lib/cni`.
"""

from __future__ import annotations

import hashlib
import json
import re
import resource
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w
import yaml

from dra_dev.cluster.controlplane import FEATURE_GATES
from dra_dev.node.images import PAUSE_IMAGE

_CAP_SYS_RESOURCE = 24
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def validate_node_name(name: str) -> str:
    if not _NAME_RE.match(name):
        from dra.errors import UserError

        raise UserError(f"node name {name!r} is not a valid Kubernetes node name: use lower-case letters, "
                        "digits and '-', at most 63 characters, starting and ending with a letter or digit.")
    return name


@dataclass(frozen=True)
class MachineSettings:
    """What this machine allows; each default is found by asking the kernel, each can be overridden.

    - `restrict_oom_score_adj`: containerd's CRI clamps a container's oom_score_adj to its own
      instead of asking for kubelet's negative values (-998 for the sandbox). Needed where the
      process lacks CAP_SYS_RESOURCE (this VM: every negative write fails with EACCES, seen as
      runc's "can't get final child's PID from pipe: EOF").
    - `kubelet_oom_score_adj`: kubelet's own value (upstream -999); 0 without CAP_SYS_RESOURCE.
    - `max_open_files`: kubelet raises RLIMIT_NOFILE to this (upstream 1000000); without
      CAP_SYS_RESOURCE nothing above the hard limit (20000 here) is allowed, so the hard limit.
    """

    restrict_oom_score_adj: bool
    kubelet_oom_score_adj: int
    max_open_files: int

    @classmethod
    def detect(cls) -> MachineSettings:
        privileged = has_sys_resource()
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        max_files = 1_000_000 if privileged else (hard if hard != resource.RLIM_INFINITY else 1_000_000)
        return cls(restrict_oom_score_adj=not privileged, kubelet_oom_score_adj=-999 if privileged else 0,
                   max_open_files=max_files)


def has_sys_resource() -> bool:
    """Whether this process holds CAP_SYS_RESOURCE (lower oom_score_adj, raise RLIMIT_NOFILE)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> _CAP_SYS_RESOURCE & 1)
    except (OSError, ValueError):
        pass
    return False


@dataclass(frozen=True)
class NodeLayout:
    """Every path of one node, under `directory`."""

    directory: Path

    def _p(self, *parts: str) -> Path:
        return self.directory.joinpath(*parts)

    @property
    def state_file(self) -> Path:
        return self._p("node.json")

    @property
    def logs(self) -> Path:
        return self._p("logs")

    def log(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    # containerd
    @property
    def containerd_config(self) -> Path:
        return self._p("containerd", "config.toml")

    @property
    def containerd_root(self) -> Path:
        return self._p("containerd", "root")

    @property
    def containerd_state(self) -> Path:
        return self._p("containerd", "state")

    @property
    def containerd_socket(self) -> Path:
        return self._p("containerd", "containerd.sock")

    @property
    def runc_root(self) -> Path:
        return self._p("containerd", "runc")

    @property
    def cdi_dir(self) -> Path:
        return self._p("cdi")

    # CNI
    @property
    def cni_conf_dir(self) -> Path:
        return self._p("cni", "net.d")

    @property
    def cni_ipam_dir(self) -> Path:
        return self._p("cni", "ipam")

    # kubelet
    @property
    def kubelet_root(self) -> Path:
        return self._p("kubelet")

    @property
    def kubelet_config(self) -> Path:
        return self._p("kubelet-config.yaml")

    @property
    def kubeconfig(self) -> Path:
        return self._p("kubelet.kubeconfig")

    @property
    def pki(self) -> Path:
        return self._p("pki")

    @property
    def pod_logs(self) -> Path:
        return self._p("pod-logs")

    @property
    def registry_dir(self) -> Path:
        """kubelet's plugin registration directory (the daemon's `--registrar-dir`)."""
        return self.kubelet_root / "plugins_registry"

    @property
    def plugin_dir(self) -> Path:
        """Root of the DRA plugins' socket dirs (the daemon's `--plugin-dir`)."""
        return self.kubelet_root / "plugins"

    @property
    def images(self) -> Path:
        return self._p("images")

    # the Service network and the charts
    @property
    def kube_proxy_config(self) -> Path:
        return self._p("kube-proxy-config.yaml")

    @property
    def kube_proxy_kubeconfig(self) -> Path:
        return self._p("kube-proxy.kubeconfig")

    @property
    def fake_stub_dir(self) -> Path:
        """Where a chart's daemon copies its fake's stub libraries (`$DRA_FAKE_STUB_DIR`, dra.fakes)."""
        return self._p("fake-stubs")

    @property
    def hook_dir(self) -> Path:
        """The charts' `paths.hookDir` on this node (hook library sets the claims mount)."""
        return self._p("hookcore")


def bridge_name(directory: Path) -> str:
    """A bridge name unique to this node dir (IFNAMSIZ allows 15 characters)."""
    return "dra" + hashlib.sha256(str(directory).encode()).hexdigest()[:8]


def cgroup_root(name: str, directory: Path) -> str:
    """The node's own cgroup parent: kubelet removes pod cgroups it does not know under its root,
    so two nodes on one machine must not share `/kubepods`."""
    return f"/dra-node-{name}-{hashlib.sha256(str(directory).encode()).hexdigest()[:6]}"


def containerd_config(layout: NodeLayout, runc: Path, cni_bin: Path, settings: MachineSettings) -> str:
    runtime = "io.containerd.cri.v1.runtime"
    config: dict[str, Any] = {
        "version": 3,
        "root": str(layout.containerd_root),
        "state": str(layout.containerd_state),
        "grpc": {"address": str(layout.containerd_socket)},
        "ttrpc": {"address": str(layout.containerd_socket) + ".ttrpc"},
        "plugins": {
            # /opt/containerd by default; NRI's socket is machine-wide (/var/run/nri), so off.
            "io.containerd.internal.v1.opt": {"path": str(layout.directory / "containerd" / "opt")},
            "io.containerd.nri.v1.nri": {"disable": True},
            runtime: {
                # containerd 2.x applies CDI always (no enable switch); these are the spec dirs.
                "cdi_spec_dirs": [str(layout.cdi_dir)],
                "restrict_oom_score_adj": settings.restrict_oom_score_adj,
                "netns_mounts_under_state_dir": True,
                "containerd": {
                    "default_runtime_name": "runc",
                    "runtimes": {"runc": {
                        "runtime_type": "io.containerd.runc.v2",
                        "options": {"BinaryName": str(runc), "Root": str(layout.runc_root), "SystemdCgroup": False},
                    }},
                },
                "cni": {"bin_dirs": [str(cni_bin)], "conf_dir": str(layout.cni_conf_dir), "max_conf_num": 1},
            },
            "io.containerd.cri.v1.images": {
                "snapshotter": "overlayfs",
                # No registry: the sandbox image is imported locally and pinned against image GC.
                "pinned_images": {"sandbox": PAUSE_IMAGE},
            },
        },
    }
    return tomli_w.dumps(config)


def cni_conflist(network: str, bridge: str, subnet: str, ipam_dir: Path) -> str:
    """A bridge with a gateway on a private /24 (host-local IPAM) plus loopback."""
    conf = {
        "cniVersion": "1.0.0",
        "name": network,
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": subnet}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(ipam_dir),
                },
            },
            {"type": "loopback"},
        ],
    }
    return json.dumps(conf, indent=2) + "\n"


def kubelet_config(layout: NodeLayout, *, ca_cert: Path, address: str, port: int, healthz_port: int, cgroup: str,
                   settings: MachineSettings) -> str:
    config: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": address,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        # The API server reaches kubelet (logs, exec) with a client certificate of the cluster CA;
        # kubelet asks the API server whether that user may (SubjectAccessReview).
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(ca_cert)}},
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "podLogsDir": str(layout.pod_logs),
        "volumePluginDir": str(layout.kubelet_root / "volume-plugins"),
        "oomScoreAdj": settings.kubelet_oom_score_adj,
        "maxOpenFiles": settings.max_open_files,
        "featureGates": {g: True for g in FEATURE_GATES},
        # The disk is shared with other work: evict only when it is really full, and never
        # garbage-collect the local images (they cannot be pulled again).
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "2%", "imagefs.available": "2%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "shutdownGracePeriod": "0s",
        "registerNode": True,
    }
    return str(yaml.safe_dump(config, sort_keys=False))


def kubeconfig(server: str, ca_cert: Path, cert: Path, key: Path, user: str) -> str:
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "dra", "cluster": {"server": server, "certificate-authority": str(ca_cert)}}],
        "users": [{"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": "dra", "context": {"cluster": "dra", "user": user}}],
        "current-context": "dra",
    }
    return str(yaml.safe_dump(cfg, sort_keys=False))


def kube_proxy_config(layout: NodeLayout, *, node_name: str, healthz_port: int, metrics_port: int,
                      settings: MachineSettings) -> str:
    """kube-proxy in iptables mode, told to leave the machine's own settings alone: no conntrack
    table sizes or timeouts (sysctls a VM may refuse), no `route_localnet` for localhost NodePorts,
    and the same oom_score_adj rule as kubelet."""
    config: dict[str, Any] = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(layout.kube_proxy_kubeconfig)},
        "hostnameOverride": node_name,
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "oomScoreAdj": settings.kubelet_oom_score_adj,
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "iptables": {"localhostNodePorts": False, "syncPeriod": "30s", "minSyncPeriod": "0s"},
    }
    return str(yaml.safe_dump(config, sort_keys=False))
