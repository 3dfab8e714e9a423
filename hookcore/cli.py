"""`dra hook`: look at hook configuration and ledgers from the command line.

- ``dra hook inspect PATH``: quota and usage per device and per process of a ledger file;
- ``dra hook config [NAME=VALUE ...]``: validate a hook environment with the library's parser;
  ``dra hook config --file PATH`` validates a claim's config file (``/run/hookcore/<stem>/config``).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

import hookcore

app = typer.Typer(
    name="hook",
    help="The quota hook (libvgpu.so): inspect ledgers, validate configurations.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def human_bytes(n: int | None) -> str:
    """1536 -> '1.50 KiB'; None -> 'unlimited'."""
    if n is None:
        return "unlimited"
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        value /= 1024.0
        if value < 1024.0 or unit == "EiB":
            return f"{value:.2f} {unit}"
    raise AssertionError("unreachable")


def _sm(percent: int) -> str:
    return "unlimited" if percent >= 100 else f"{percent}%"


@app.command("inspect")
def inspect(
    path: Annotated[Path, typer.Argument(help="Ledger file (HOOKCORE_LEDGER).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Show quota and usage per device and per process recorded in a ledger (read-only)."""
    try:
        with hookcore.Ledger(path, snapshot=True) as ledger:   # a private copy: the file is the tenant's
            devices = ledger.devices()
            limiters = {d.index: ledger.limiter(d.index) for d in devices}
            processes = ledger.processes()
            version = ledger.version
    except hookcore.LedgerError as exc:
        typer.echo(f"dra hook inspect: {exc}", err=True)
        raise typer.Exit(2) from exc
    if as_json:
        doc = {
            "path": str(path),
            "version": version,
            "devices": [{**asdict(d), "free": d.free, "limiter": asdict(limiters[d.index])} for d in devices],
            "processes": [asdict(p) for p in processes],
        }
        typer.echo(json.dumps(doc, indent=2))
        return
    console = Console()
    dt = Table("device", "uuid", "memory quota", "used", "free", "peak", "sm limit", "processes",
               title=f"{path} (ledger v{version})")
    for d in devices:
        dt.add_row(str(d.index), d.uuid or "-", human_bytes(d.memory_limit), human_bytes(d.used),
                   "-" if d.free is None else human_bytes(d.free), human_bytes(d.peak), _sm(d.sm_limit),
                   str(d.live_processes))
    console.print(dt)
    pt = Table("slot", "pid", "state", "start time", "memory by device", "total", title="processes")
    for p in processes:
        per_dev = ", ".join(f"{i}: {human_bytes(v)}" for i, v in sorted(p.used.items())) or "-"
        state = p.state if p.state == "live" else f"[yellow]{p.state}[/yellow]"
        pt.add_row(str(p.slot), str(p.pid), state, str(p.start_time), per_dev, human_bytes(p.total))
    if not processes:
        pt.add_row("-", "-", "-", "-", "no process slots in use", "-")
    console.print(pt)


@app.command("config")
def config(
    assignments: Annotated[
        list[str] | None,
        typer.Argument(help="NAME=VALUE pairs to check instead of the current environment."),
    ] = None,
    file: Annotated[
        Path | None, typer.Option("--file", help="A config file to check (the environment is then ignored).")
    ] = None,
) -> None:
    """Validate a configuration exactly as libvgpu.so will; exit 2 with its message if rejected."""
    env: dict[str, str] = dict(os.environ)
    text: str | None = None
    if file is not None:
        try:
            text = file.read_text(errors="surrogateescape")
        except OSError as exc:
            typer.echo(f"dra hook config: cannot read {file}: {exc.strerror}", err=True)
            raise typer.Exit(2) from exc
    if assignments:
        env = {}
        for item in assignments:
            name, sep, value = item.partition("=")
            if not sep:
                typer.echo(f"dra hook config: expected NAME=VALUE, got {item!r}", err=True)
                raise typer.Exit(2)
            env[name] = value
    try:
        cfg = hookcore.parse_config(env, file_text=text, file_path=None if file is None else str(file))
    except hookcore.HookConfigError as exc:
        typer.echo(f"dra hook config: {exc}", err=True)
        raise typer.Exit(2) from exc
    table = Table("device", "uuid", "memory quota", "sm limit",
                  title=f"from {cfg.origin}; ledger: {cfg.ledger_path or '(none: no limit set)'}"
                  + (" - keyed by UUID" if cfg.uuid_keyed else ""))
    for d in cfg.configured():
        table.add_row(str(d.index), d.uuid or "-", human_bytes(d.memory), _sm(d.cores))
    Console().print(table)
