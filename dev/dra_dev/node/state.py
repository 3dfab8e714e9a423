"""What `dra node` keeps of a node (`<dir>/node.json`: its ports, network, cgroup root, process
records and imported image) and reports of it (`NodeStatus`)."""

from __future__ import annotations

import ipaddress
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from dra_dev.cluster.processes import ProcessRecord, save_state

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
PROCESSES = ("containerd", "kubelet")
SERVICE_PROCESSES = ("containerd", "kube-proxy", "kubelet")
DEFAULT_NODE_NAME = "dra-node"


def default_node_dir(name: str = DEFAULT_NODE_NAME) -> Path:
    env = os.environ.get("DRA_NODE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".local" / "share" / "dra" / "nodes" / name


@dataclass
class NodeState:
    name: str
    cluster_dir: str
    k8s_version: str
    kubelet_port: int
    healthz_port: int
    subnet: str
    bridge: str
    cgroup_root: str
    processes: dict[str, ProcessRecord] = field(default_factory=dict)
    # kube-proxy runs (the control plane serves pods); its healthz and metrics ports.
    service_network: bool = False
    proxy_ports: list[int] = field(default_factory=list)
    # The project image (`make image`) imported into containerd, "" when none was.
    image: str = ""
    image_digest: str = ""

    @property
    def process_names(self) -> tuple[str, ...]:
        return SERVICE_PROCESSES if self.service_network else PROCESSES

    @property
    def node_ip(self) -> str:
        """The bridge's gateway address: kubelet listens there and reports it as InternalIP
        (kubelet refuses a loopback node IP; this one is reachable from this host only)."""
        return str(next(ipaddress.IPv4Network(self.subnet).hosts()))

    @classmethod
    def load(cls, path: Path) -> NodeState | None:
        try:
            raw = json.loads(path.read_text())
            raw["processes"] = {k: ProcessRecord(**v) for k, v in raw.get("processes", {}).items()}
            return cls(**raw)
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def save(self, path: Path) -> None:
        save_state(path, self)


@dataclass
class NodeStatus:
    """What `dra node status` reports."""

    name: str
    running: dict[str, bool]
    registered: bool
    ready: bool
    ready_message: str
    taints: list[str]
    directories: dict[str, Path]

    @property
    def healthy(self) -> bool:
        return all(self.running.values()) and self.ready and not any(t.startswith(NOT_READY_TAINT) for t in self.taints)
