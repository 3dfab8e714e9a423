"""`dra cluster build|up|status|down`: the embedded control plane from the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from dra_dev.cluster.binaries import DEFAULT_K8S_VERSION, build, build_helm, parse_version, served_versions
from dra_dev.cluster.controlplane import ControlPlane, Ports, default_dir
from dra_dev.cluster.prometheus import build_prometheus, release

app = typer.Typer(help="An embedded Kubernetes control plane (etcd, apiserver, scheduler, controller-manager).",
                  no_args_is_help=True)
_err = Console(stderr=True)
_out = Console()

VersionOpt = Annotated[str, typer.Option("--k8s-version", help="Kubernetes version, e.g. v1.34.4")]
DirOpt = Annotated[Path | None, typer.Option("--dir", help="Cluster directory (default: $DRA_CLUSTER_DIR or ~/.local/share/dra/cluster)")]


def _say(msg: str) -> None:
    _err.print(f"[dim]{msg}[/dim]", highlight=False)


@app.command("build")
def build_cmd(k8s_version: VersionOpt = DEFAULT_K8S_VERSION) -> None:
    """Build (or reuse) the pinned Kubernetes and etcd binaries, helm for the chart tests and Prometheus
    for the monitoring tests, in the cache."""
    parse_version(k8s_version)
    bins = build(k8s_version, progress=_say)
    typer.echo(f"binaries for Kubernetes {bins.k8s_version} (etcd {bins.etcd_version}) in {bins.directory}")
    typer.echo(f"helm in {build_helm(progress=_say)}")
    typer.echo(f"prometheus {release()} and promtool in {build_prometheus(progress=_say)}")


@app.command("versions")
def versions_cmd() -> None:
    """Print the newest patch of every Kubernetes minor from 1.34 the Go module proxy serves (the version matrix)."""
    typer.echo(" ".join(served_versions()))


@app.command("up")
def up_cmd(
    k8s_version: VersionOpt = DEFAULT_K8S_VERSION,
    directory: DirOpt = None,
    free_ports: Annotated[bool, typer.Option(help="Pick free ports instead of the fixed defaults")] = False,
    pod_access: Annotated[bool | None, typer.Option(
        "--pod-access/--no-pod-access",
        help="Serve pods as kubeadm does: ServiceAccount tokens, the API server in the kubernetes Service at this "
             "host's address (default: on, or as the running cluster was started)")] = None,
) -> None:
    """Start the control plane in the background (idempotent) and print the kubeconfig path."""
    parse_version(k8s_version)
    existing = ControlPlane(directory or default_dir()).state
    if pod_access is None:
        pod_access = existing.pod_access if existing and existing.processes else True
    cp = ControlPlane(directory or default_dir(), k8s_version, ports=Ports.free() if free_ports else None,
                      pod_access=pod_access)
    health = cp.up(progress=_say)
    typer.echo(f"control plane {health.version} ready at {cp.server}")
    typer.echo(f"export KUBECONFIG={cp.kubeconfig}")
    node_dir = "" if directory is None else f" --cluster-dir {cp.directory}"
    typer.echo(f"add a real node (kubelet + containerd, as root): dra node up --name NAME{node_dir}")


@app.command("status")
def status_cmd(directory: DirOpt = None) -> None:
    """Show each component, readiness and leader election; exit 1 when not healthy."""
    cp = ControlPlane(directory or default_dir())
    state = cp.state
    if state is None:
        _out.print(f"no cluster in {cp.directory} (run `dra cluster up`)")
        raise typer.Exit(1)
    health = cp.health()
    table = Table("component", "pid", "running", "leader", "log")
    for name, ok in health.running.items():
        rec = state.processes.get(name)
        table.add_row(name, str(rec.pid) if rec else "-", "yes" if ok else "[red]no[/red]",
                      health.leaders.get(name, ""), rec.log if rec else "")
    _out.print(table)
    verdict = "[green]healthy[/green]" if health.healthy else "[red]not healthy[/red]"
    _out.print(f"cluster {verdict}: Kubernetes {health.version or state.k8s_version}, "
               f"readyz {'ok' if health.ready else 'failing'}, server {cp.server}, kubeconfig {cp.kubeconfig}")
    if not health.healthy:
        raise typer.Exit(1)


@app.command("down")
def down_cmd(directory: DirOpt = None) -> None:
    """Stop the processes `up` started for this directory; files in it are kept."""
    cp = ControlPlane(directory or default_dir())
    stopped = cp.down()
    typer.echo(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")
