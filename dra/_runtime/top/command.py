"""The `dra top` command."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from dra.errors import UserError

OUTPUTS = ("table", "json")
METRICS_VIAS = ("proxy", "direct", "none")


class Top:
    """Reads the cluster and the endpoints each refresh; remembers the last scrape per endpoint (the
    compute rates are between two)."""

    def __init__(self, api: Any, node: str | None, endpoints: Callable[[], Sequence[Any]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        from dra._runtime.top.model import Scrape

        self.api, self.node, self.endpoints, self.clock = api, node, endpoints, clock
        self.previous: dict[tuple[str, str], Scrape] = {}

    def scrape(self) -> None:
        """Only the endpoints: the first scrape of a `--once` pair."""
        from dra._runtime.top import sources

        self.previous = {(s.node, s.url): s for s in sources.scrape(self.endpoints(), self.clock)}

    def snapshot(self) -> Any:
        from dra._runtime.top import model, sources

        slices, claims = sources.cluster(self.api, self.node)
        scrapes = sources.scrape(self.endpoints(), self.clock)
        snap = model.build(slices, claims, scrapes, self.previous, self.node)
        self.previous = {(s.node, s.url): s for s in scrapes}
        return snap


def register(app: typer.Typer) -> None:
    @app.command("top")
    def top(
        kubeconfig: Annotated[Path | None, typer.Option(help="default: in-cluster, then $KUBECONFIG or ~/.kube/config")] = None,
        node: Annotated[str | None, typer.Option(help="only this node")] = None,
        once: Annotated[bool, typer.Option("--once", help="one snapshot, then exit (two scrapes --interval apart)")] = False,
        output: Annotated[str, typer.Option("--output", "-o", help="table or json (json: with --once)")] = "table",
        interval: Annotated[float, typer.Option(min=0, help="seconds between refreshes (--once: between its two scrapes;"
                                                             " 0: one scrape, no compute rates)")] = 2.0,
        metrics: Annotated[list[str] | None, typer.Option(
            "--metrics", help="a daemon's /metrics as NODE=URL (repeat it; a bare URL with --node): for daemons run as"
                              " local processes. Default: the chart's daemon pods")] = None,
        metrics_via: Annotated[str, typer.Option(
            help="how the chart's daemon pods are reached: proxy (the API server's pod proxy: pods/proxy get), direct"
                 " (the pod IP, from inside the cluster) or none")] = "proxy",
    ) -> None:
        """Each node's devices, the claims and pods on them, requested vs used memory and cores, and the
        watchdog's verdicts, refreshed like top."""
        if output not in OUTPUTS:
            raise UserError(f"-o {output!r}: expected {' or '.join(OUTPUTS)}")
        if output == "json" and not once:
            raise UserError("-o json prints one document: add --once")
        if metrics_via not in METRICS_VIAS:
            raise UserError(f"--metrics-via {metrics_via!r}: expected {', '.join(METRICS_VIAS)}")
        from dra._runtime.client import cli_client
        from dra._runtime.top import sources

        api = cli_client(kubeconfig)
        given = sources.named(metrics or [], node)

        def endpoints() -> Sequence[Any]:
            if given or metrics_via == "none":
                return given
            return sources.discovered(api, node, metrics_via)

        t = Top(api, node, endpoints)
        try:
            if once:
                _once(t, output, interval)
            else:
                _live(t, interval)
        finally:
            close = getattr(api, "close", None)
            if close is not None:
                close()



def _once(t: Top, output: str, interval: float) -> None:
    if interval > 0:
        t.scrape()
        time.sleep(interval)
    snap = t.snapshot()
    if output == "json":
        json.dump(snap.json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        from rich.console import Console

        from dra._runtime.top.view import render

        # piped (a file, a script): wide enough for claim names, not rich's 80 columns off a terminal
        Console(width=None if sys.stdout.isatty() else 200).print(render(snap))


def _live(t: Top, interval: float) -> None:
    from rich.console import Console, Group
    from rich.live import Live
    from rich.text import Text

    from dra._runtime.top.view import render

    console = Console()
    every = max(interval, 0.5)
    with Live(console=console, auto_refresh=False, screen=False) as live:
        try:
            while True:
                snap = t.snapshot()
                live.update(Group(render(snap), Text(f"every {every:g} s; Ctrl-C to quit", style="dim")), refresh=True)
                time.sleep(every)
        except KeyboardInterrupt:
            pass
