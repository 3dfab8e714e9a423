"""The node's network on the host: a /24 no route overlaps, the pod bridge with the node's
address, loopback ports for kubelet and kube-proxy, and the one kube-proxy a machine may have."""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import socket
import subprocess
from pathlib import Path

from dra.errors import UserError

_SUBNET_BASE = ipaddress.IPv4Network("10.213.0.0/16")


def used_subnets() -> set[ipaddress.IPv4Network]:
    proc = subprocess.run(["ip", "-4", "route", "show"], capture_output=True, text=True)
    nets: set[ipaddress.IPv4Network] = set()
    for line in proc.stdout.splitlines():
        with contextlib.suppress(ValueError):
            first = line.split()[0]
            if first != "default":
                nets.add(ipaddress.IPv4Network(first, strict=False))
    return nets


def pick_subnet(directory: Path, used: set[ipaddress.IPv4Network] | None = None) -> str:
    """A /24 of 10.213.0.0/16 that no route on this host overlaps, starting at one derived from
    the node dir, so a node keeps its subnet and two nodes rarely probe the same one."""
    used = used_subnets() if used is None else used
    subnets: list[ipaddress.IPv4Network] = list(_SUBNET_BASE.subnets(new_prefix=24))
    start = int(hashlib.sha256(str(directory).encode()).hexdigest(), 16) % len(subnets)
    for i in range(len(subnets)):
        net = subnets[(start + i) % len(subnets)]
        if not any(net.overlaps(u) for u in used):
            return str(net)
    raise UserError(f"every /24 of {_SUBNET_BASE} overlaps a route on this host; delete unused bridges "
                    "(`ip -4 route` lists them).")


def ensure_bridge(bridge: str, address: str, subnet: str) -> None:
    """Create the pod bridge with its gateway address before kubelet starts (the CNI bridge plugin
    finds and keeps it), so the node's IP exists from the start."""
    prefix = ipaddress.IPv4Network(subnet).prefixlen
    if subprocess.run(["ip", "link", "show", bridge], capture_output=True).returncode != 0:
        _ip("link", "add", bridge, "type", "bridge")
    shown = subprocess.run(["ip", "-4", "addr", "show", "dev", bridge], capture_output=True, text=True).stdout
    if f"inet {address}/{prefix}" not in shown:
        _ip("addr", "add", f"{address}/{prefix}", "dev", bridge)
    _ip("link", "set", bridge, "up")


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise UserError(f"`ip {' '.join(args)}` failed: {proc.stderr.strip()} (the node needs root and iproute2)")


def delete_bridge(bridge: str) -> None:
    """Remove the pod bridge (gone already: nothing to do)."""
    subprocess.run(["ip", "link", "delete", bridge], capture_output=True)


def free_ports(count: int) -> list[int]:
    """Loopback ports the kernel says are free now (kubelet's API and healthz)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def check_service_network_free() -> None:
    """kube-proxy programs the host's own tables: one per machine. Refuse a second one by name."""
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            exe = os.readlink(pid_dir / "exe")
        except OSError:
            continue
        if Path(exe).name == "kube-proxy":
            raise UserError(f"a kube-proxy already runs on this machine (pid {pid_dir.name}, {exe}); the Service "
                            "network is the host's own iptables, so one node per machine can have it. Stop that "
                            f"node first (`dra node down --dir DIR`), or start this cluster with `--no-pod-access`.")
