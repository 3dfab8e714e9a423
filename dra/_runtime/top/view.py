"""The snapshot drawn with rich: a table per node, a device row (its capacity, what its claims asked
for and use, the watchdog's process counts) followed by a row per claim on it."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from dra._runtime.top.model import Device, Node, Share, Snapshot

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def size(n: float | None) -> str:
    """Bytes as people read them: 80Gi, 3000Mi, 1.5Gi; "-" when unknown."""
    if n is None:
        return "-"
    for unit, scale in (("Gi", GiB), ("Mi", MiB), ("Ki", KiB)):
        if abs(n) >= scale:
            v = n / scale
            return f"{v:.0f}{unit}" if v == int(v) else f"{v:.1f}{unit}"
    return f"{n:.0f}"


def cores(n: float | None) -> str:
    return "-" if n is None else (f"{n:.0f}" if n == int(n) else f"{n:.1f}")


def of(part: str, whole: str) -> str:
    return part if whole == "-" else f"{part}/{whole}"


def _watchdog_device(d: Device) -> str:
    if d.processes is None:
        return "-"
    text = f"{d.processes} proc"
    if d.unheld:
        text += f", [bold red]{d.unheld} unheld[/bold red]"
    if d.unverified:
        text += f", [yellow]{d.unverified} unverified[/yellow]"
    return text


def _watchdog_share(s: Share, watching: bool) -> str:
    """The claim's excess, or "ok" where the node's watchdog runs (its verdict series are there)
    and the claim's ledger is read."""
    out = []
    if s.over_quota_bytes:
        out.append(f"[bold red]memory +{size(s.over_quota_bytes)} over quota[/bold red]")
    if s.over_share_percent:
        out.append(f"[bold red]compute +{cores(s.over_share_percent)} over share[/bold red]")
    return ", ".join(out) or ("ok" if watching and s.processes is not None else "")


def node_table(n: Node) -> Table:
    reach = "; ".join(escape(u) + (f" [red]unreachable: {escape(e)}[/red]" if e else "") for u, e in n.endpoints)
    verdicts = ", ".join(f"{k} {v}" for k, v in sorted(n.verdicts.items()))
    title = f"[bold]{escape(n.name)}[/bold]" + (f"  metrics: {reach}" if reach else "  [yellow]no metrics endpoint[/yellow]")
    if verdicts:
        title += f"  verdicts: {verdicts}"
    t = Table(title=title, title_justify="left", expand=False)
    for col, justify in (("device / claim", "left"), ("pods", "left"), ("memory req", "right"), ("memory used", "right"),
                         ("peak", "right"), ("cores req", "right"), ("cores used", "right"), ("processes", "right"),
                         ("watchdog", "left")):
        t.add_column(col, justify=justify)  # type: ignore[arg-type]
    for d in n.devices:
        product = d.attributes.get("productName") or d.attributes.get("type") or ""
        t.add_row(Text(f"{d.name}  {product}".rstrip(), style="bold"), "",
                  of(size(d.requested_memory), size(d.memory)), size(d.used_memory), "",
                  of(cores(d.requested_cores), cores(d.cores)), cores(d.used_cores), "", _watchdog_device(d))
        for s in d.shares:
            t.add_row(Text(f"  {s.namespace}/{s.name}"), escape(", ".join(p.split("/", 1)[-1] for p in s.pods) or "-"),
                      size(s.requested_memory), size(s.used_memory), size(s.peak_memory), cores(s.requested_cores),
                      cores(s.used_cores), "-" if s.processes is None else str(s.processes),
                      _watchdog_share(s, bool(n.verdicts)))
    return t


def render(snapshot: Snapshot) -> RenderableType:
    parts: list[RenderableType] = [node_table(n) for n in snapshot.nodes]
    if not snapshot.nodes:
        parts.append(Text("no node publishes devices (or none matches --node)", style="yellow"))
    if snapshot.pending:
        parts.append(Text(f"not allocated: {', '.join(c['namespace'] + '/' + c['name'] for c in snapshot.pending)}",
                          style="yellow"))
    if snapshot.interval is None:
        parts.append(Text("cores used: known from the second refresh (a rate between two scrapes)", style="dim"))
    return Group(*parts)
