"""The `dra` command: one entry point, one sub-command per concern.

The runtime's sub-commands (`run`, `hookdir`, `hook`, `webhook`, `drivers`) live next to the code
they drive; more come from the ``dra.commands`` entry-point group (`dra._runtime.registry`): the
dev rig (dra-hami-dev) adds `cluster`, `node`, `demo` and `webhook up|down` there, so an image
with only the runtime lists only runtime commands. This module assembles them and turns
`UserError` into a one-paragraph message and exit code 2. `main()` imports only the sub-command
being run, so the long-lived `dra run` daemon does not carry the others in its memory.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import typer

from dra._runtime import registry
from dra.errors import UserError

# name -> (module, attribute, kind): "group" is a Typer sub-app, "command" a register(app) function.
_PARTS: dict[str, tuple[str, str, str]] = {
    "hook": ("hookcore.cli", "app", "group"),
    "hookdir": ("dra._runtime.hookdir_cli", "app", "group"),
    "run": ("dra._runtime.daemon", "register", "command"),
    "top": ("dra._runtime.top.command", "register", "command"),
    "webhook": ("dra.webhook.cli", "app", "group"),
}


def list_drivers() -> None:
    """List the vendor drivers installed through the `dra.drivers` entry-point group."""
    from rich.console import Console
    from rich.table import Table

    table = Table("entry point", "driver name", "class")
    for name, ep in registry.registered(registry.DRIVERS).items():
        try:
            cls = ep.load()
            table.add_row(name, getattr(cls, "name", "?"), ep.value)
        except Exception as exc:  # a broken third-party driver must not hide the others
            table.add_row(name, f"[red]failed to load: {exc}[/red]", ep.value)
    Console().print(table)


def _add(app: typer.Typer, name: str, part: Any) -> None:
    if isinstance(part, typer.Typer):
        app.add_typer(part, name=name)
    else:
        part(app)


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
    plugins = registry.registered(registry.COMMANDS)
    known = set(_PARTS) | {n.split(".", 1)[0] for n in plugins}
    groups: dict[str, typer.Typer] = {}
    for name, (module, attr, kind) in _PARTS.items():
        if only in known and name != only:
            continue
        part = getattr(importlib.import_module(module), attr)
        if kind == "group":
            groups[name] = part
            app.add_typer(part, name=name)
        else:
            part(app)
    for name, ep in plugins.items():
        group, _, sub = name.partition(".")
        if only in known and group != only:
            continue
        if sub:  # a command added to a runtime group: `webhook.up` is `dra webhook up`
            if group not in groups:
                raise UserError(f"entry point {name!r} ({ep.value}) extends `dra {group}`, which this version lacks")
            if all(c.name != sub for c in groups[group].registered_commands):  # build_app may run twice
                groups[group].command(sub)(registry.load(ep))
        elif name not in _PARTS:
            _add(app, name, registry.load(ep))
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
        from rich.markup import escape

        # Escaped: a message naming a character class ([a-z0-9_-]) is not console markup.
        Console(stderr=True).print(f"[bold red]error:[/bold red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
