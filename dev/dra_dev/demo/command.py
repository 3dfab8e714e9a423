"""The `dra demo` command (registered through the "dra.commands" entry-point group)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dra_dev.cluster.binaries import DEFAULT_K8S_VERSION
from dra_dev.cluster.controlplane import default_dir
from dra_dev.demo.helm import helm_demo
from dra_dev.demo.tour import run_demo


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo(
        k8s_version: Annotated[str, typer.Option("--k8s-version")] = DEFAULT_K8S_VERSION,
        directory: Annotated[Path | None, typer.Option("--dir", help="Cluster directory")] = None,
        driver: Annotated[str, typer.Option(
            help="Driver (entry point or examples/ directory name) whose scenario, examples/*/demo.yaml, runs")] = "hami-core-gpu",
        keep: Annotated[bool, typer.Option(help="Keep the demo's objects and files")] = False,
        workload: Annotated[
            Path | None, typer.Option(help="Program started per claim device (default: the scenario's, from hookcore)")
        ] = None,
        node: Annotated[str, typer.Option(
            help="auto: end on a real kubelet + containerd node where one starts here; real: fail "
                 "without one; harness: fake nodes only, kubelet played")] = "auto",
        helm: Annotated[bool, typer.Option(
            "--helm", help="Instead: the charts installed with Helm on a real node, from the image `make image` built")] = False,
    ) -> None:
        """Run the whole claim path on an embedded control plane with a fake-device driver."""
        if helm:
            raise typer.Exit(helm_demo(k8s_version, keep))
        raise typer.Exit(run_demo(directory or default_dir(), k8s_version, driver, keep, workload, node))
