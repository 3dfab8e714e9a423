"""The `dra` command: one entry point, one sub-command group per concern.

Each group lives next to the code it drives (`dra.cluster.cli`, `dra.daemon`, `hookcore.cli`);
this module only assembles them and turns `UserError` into a one-paragraph message and exit 2.
"""

from __future__ import annotations

import importlib
import sys
from importlib.metadata import entry_points

import typer
from rich.console import Console
from rich.table import Table

from dra.errors import UserError

app = typer.Typer(
    name="dra",
    help="DRA drivers that share GPUs and NPUs with enforced memory and compute quotas.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

# (module, attribute, name): sub-command groups, imported so a broken optional part never hides the rest.
_GROUPS = (
    ("dra.cluster.cli", "app", "cluster"),
    ("hookcore.cli", "app", "hook"),
)
# (module, attribute): single commands registered on the top-level app by their module.
_COMMANDS = (("dra.daemon", "register"), ("dra.demo", "register"))

for _module, _attr, _name in _GROUPS:
    try:
        app.add_typer(getattr(importlib.import_module(_module), _attr), name=_name)
    except ImportError:
        pass
for _module, _attr in _COMMANDS:
    try:
        getattr(importlib.import_module(_module), _attr)(app)
    except ImportError:
        pass


@app.command("drivers")
def list_drivers() -> None:
    """List the vendor drivers installed through the `dra.drivers` entry-point group."""
    table = Table("entry point", "driver name", "class")
    for ep in sorted(entry_points(group="dra.drivers"), key=lambda e: e.name):
        try:
            cls = ep.load()
            table.add_row(ep.name, getattr(cls, "name", "?"), ep.value)
        except Exception as exc:  # a broken third-party driver must not hide the others
            table.add_row(ep.name, f"[red]failed to load: {exc}[/red]", ep.value)
    Console().print(table)


def main() -> None:
    try:
        app()
    except UserError as exc:
        Console(stderr=True).print(f"[bold red]error:[/bold red] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
