"""`dra node build|up|status|down`: a real kubelet + containerd node for the embedded cluster."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from dra.errors import UserError
from dra_dev.cluster.binaries import DEFAULT_K8S_VERSION, parse_version
from dra_dev.node.binaries import build_node, find_runc
from dra_dev.node.config import MachineSettings
from dra_dev.node.node import RealNode
from dra_dev.node.state import DEFAULT_NODE_NAME, NodeStatus

app = typer.Typer(help="A real node (kubelet, containerd, runc) joined to the embedded control plane.",
                  no_args_is_help=True)
_err = Console(stderr=True)
_out = Console()

NameOpt = Annotated[str | None, typer.Option("--name", help=f"Node name (default: the node dir's, else {DEFAULT_NODE_NAME})")]
DirOpt = Annotated[Path | None, typer.Option("--dir", help="Node directory (default: $DRA_NODE_DIR or ~/.local/share/dra/nodes/NAME)")]
ClusterOpt = Annotated[Path | None, typer.Option("--cluster-dir", help="Directory of `dra cluster up` (default: its default)")]


def _say(msg: str) -> None:
    _err.print(f"[dim]{msg}[/dim]", highlight=False)


def _print_status(node: RealNode, st: NodeStatus) -> None:
    state = node.state
    table = Table("process", "pid", "running", "log")
    for name, ok in st.running.items():
        rec = state.processes.get(name) if state else None
        table.add_row(name, str(rec.pid) if rec else "-", "yes" if ok else "[red]no[/red]", rec.log if rec else "")
    _out.print(table)
    dirs = Table("directory", "path")
    for what, path in st.directories.items():
        dirs.add_row(what, str(path))
    _out.print(dirs)
    verdict = "[green]Ready[/green]" if st.healthy else "[red]not ready[/red]"
    _out.print(f"node {st.name} {verdict}: {st.ready_message}; taints: {', '.join(st.taints) or 'none'}", highlight=False)
    _out.print("serve it with a node daemon:\n  dra run DRIVER " + shlex.join(node.daemon_args()), highlight=False, soft_wrap=True)
    crictl = node.bins.crictl
    _out.print(f"containers: {crictl} --runtime-endpoint unix://{node.layout.containerd_socket} ps -a",
               highlight=False, soft_wrap=True)


@app.command("build")
def build_cmd(k8s_version: Annotated[str, typer.Option("--k8s-version")] = DEFAULT_K8S_VERSION) -> None:
    """Build (or reuse) kubelet, containerd, crictl and the CNI plugins in the binary cache."""
    parse_version(k8s_version)
    bins = build_node(k8s_version, progress=_say)
    runc = find_runc()
    typer.echo(f"node binaries for Kubernetes {k8s_version}: kubelet {bins.kubelet}, containerd {bins.containerd_dir}, "
               f"crictl {bins.crictl}, CNI plugins {bins.cni_dir}; runc {runc or 'NOT INSTALLED (make node-deps)'}")


@app.command("image")
def image_cmd(
    dist: Annotated[Path | None, typer.Option("--dist", help="Where the archive goes (default: the checkout's dist/)")] = None,
    base: Annotated[str | None, typer.Option(
        "--base", help="A registry base instead of the Debian one made here (e.g. python:3.11-slim)")] = None,
) -> None:
    """Build the Dockerfile with buildah into an OCI archive (`make image`); print name, digest, size."""
    from dra_dev.node.project_image import build_image

    info = build_image(dist=dist, base=base, progress=_say)
    typer.echo(f"image {info.reference}\ndigest {info.digest}\narchive {info.archive} ({info.archive_bytes / 1e6:.1f} MB; "
               f"{info.image_bytes / 1e6:.1f} MB unpacked)\nbuilt in {info.build_seconds:.0f} s on {info.base}")


@app.command("up")
def up_cmd(
    name: NameOpt = None,
    directory: DirOpt = None,
    cluster_dir: ClusterOpt = None,
    restrict_oom_score_adj: Annotated[bool | None, typer.Option(
        "--restrict-oom-score-adj/--no-restrict-oom-score-adj",
        help="Clamp containers' oom_score_adj (default: on where negative values are refused, no CAP_SYS_RESOURCE)")] = None,
    max_open_files: Annotated[int | None, typer.Option(
        help="kubelet's RLIMIT_NOFILE (default: the hard limit where it cannot be raised, else 1000000)")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the node to become Ready")] = 120.0,
) -> None:
    """Start containerd and kubelet, join the cluster, wait until the node is Ready (idempotent)."""
    detected = MachineSettings.detect()
    settings = MachineSettings(
        restrict_oom_score_adj=detected.restrict_oom_score_adj if restrict_oom_score_adj is None else restrict_oom_score_adj,
        kubelet_oom_score_adj=detected.kubelet_oom_score_adj if restrict_oom_score_adj is None or restrict_oom_score_adj else -999,
        max_open_files=max_open_files or detected.max_open_files,
    )
    node = RealNode(directory, name, cluster_dir, settings)
    st = node.up(timeout=timeout, progress=_say)
    _print_status(node, st)


@app.command("status")
def status_cmd(name: NameOpt = None, directory: DirOpt = None) -> None:
    """Processes, readiness, taints and the node's plugin, registry and CDI directories; exit 1 when not Ready."""
    node = RealNode(directory, name)
    if node.state is None:
        _out.print(f"no node in {node.directory} (run `dra node up`)")
        raise typer.Exit(1)
    st = node.status()
    _print_status(node, st)
    if not st.healthy:
        raise typer.Exit(1)


@app.command("values")
def values_cmd(
    chart: Annotated[str, typer.Argument(
        help="The chart: hami-core-gpu, ascend, hygon-dcu, cambricon-mlu or dra-webhook")] = "hami-core-gpu",
    name: NameOpt = None,
    directory: DirOpt = None,
) -> None:
    """Print a Helm values file for this node: `helm install NAME helm/NAME -f <(dra node values)`."""
    import yaml

    node = RealNode(directory, name)
    if node.state is None:
        raise UserError(f"no node in {node.directory} (run `dra node up` first)")
    typer.echo(yaml.safe_dump(node.helm_values(chart), sort_keys=False), nl=False)


@app.command("down")
def down_cmd(
    name: NameOpt = None,
    directory: DirOpt = None,
    purge: Annotated[bool, typer.Option(help="Also delete the node directory")] = False,
) -> None:
    """Stop kubelet, remove the node's pods, stop containerd; delete the Node object."""
    node = RealNode(directory, name)
    stopped = node.down(purge=purge)
    typer.echo(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")
