"""The `dra` command: one entry point, one sub-command per concern.

Each sub-command lives next to the code it drives (`dra.cluster.cli`, `dra.node.cli`, `dra.daemon`,
`dra.demo`, `hookcore.cli`, `dra.hookdir_cli`); this module only assembles them and turns
`UserError` into a one-paragraph message and exit code 2. `main()` imports only the sub-command being run, so the long-lived
`dra run` daemon does not carry the control-plane, PKI and hook modules in its memory.
"""

from __future__ import annotations

import importlib
import sys
from importlib.metadata import entry_points
from typing import Any

import typer

from dra.errors import UserError

# name -> (module, attribute, kind): "group" is a Typer sub-app, "command" a register(app) function.
_PARTS: dict[str, tuple[str, str, str]] = {
    "cluster": ("dra.cluster.cli", "app", "group"),
    "node": ("dra.node.cli", "app", "group"),
    "hook": ("hookcore.cli", "app", "group"),
    "hookdir": ("dra.hookdir_cli", "app", "group"),
    "run": ("dra.daemon", "register", "command"),
    "demo": ("dra.demo", "register", "command"),
    "webhook": ("dra.webhook.cli", "app", "group"),
}


def list_drivers() -> None:
    """List the vendor drivers installed through the `dra.drivers` entry-point group."""
    from rich.console import Console
    from rich.table import Table

    table = Table("entry point", "driver name", "class")
    for ep in sorted(entry_points(group="dra.drivers"), key=lambda e: e.name):
        try:
            cls = ep.load()
            table.add_row(ep.name, getattr(cls, "name", "?"), ep.value)
        except Exception as exc:  # a broken third-party driver must not hide the others
            table.add_row(ep.name, f"[red]failed to load: {exc}[/red]", ep.value)
    Console().print(table)


def build_app(only: str | None = None) -> typer.Typer:
    """The CLI with every part, or with just `only` (plus `drivers`) when it names one."""
    app = typer.Typer(
        name="dra",
        help="DRA drivers that share GPUs and NPUs with enforced memory and compute quotas.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=False,
    )
    app.command("drivers")(list_drivers)
    for name, (module, attr, kind) in _PARTS.items():
        if only in _PARTS and name != only:
            continue
        try:
            part = getattr(importlib.import_module(module), attr)
        except ImportError as exc:  # an optional part that is not built must not hide the rest
            if only == name:
                raise UserError(f"`dra {name}` is not available: {exc}. Reinstall with pip install -e '.[dev]'.") from exc
            continue
        if kind == "group":
            app.add_typer(part, name=name)
        else:
            part(app)
    return app


def __getattr__(name: str) -> Any:
    if name == "app":  # the full CLI, for CliRunner-based tests and introspection
        return build_app()
    raise AttributeError(name)


def main() -> None:
    first = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    try:
        build_app(first)()
    except UserError as exc:
        from rich.console import Console

        Console(stderr=True).print(f"[bold red]error:[/bold red] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
