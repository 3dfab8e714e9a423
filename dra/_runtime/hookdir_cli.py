"""`dra hookdir install|show`: the node's hook dir from the command line.

The charts' init container runs ``dra hookdir install --hook-dir DIR vgpu`` before the node
daemon starts. It is the daemon's own installer (`dra._runtime.hookdir.HookDir`), not a script: the
library is copied once under its SHA-256, never over a file a running process maps, and
`current` is switched by an atomic rename, so the version the new image ships is in place
before the new daemon serves a claim, and claims prepared by the old daemon keep theirs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dra._runtime.hookdir import DEFAULT_HOOK_DIR, HookDir, HookDirError
from dra.errors import UserError

app = typer.Typer(
    name="hookdir",
    help="The node's hook dir: install hook libraries the way the daemon does, show what is installed.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

HookDirOpt = Annotated[
    Path, typer.Option("--hook-dir", help="The hook dir (`dra run --hook-dir`), shared by every driver on the node.")
]


def library_path(name: str) -> Path:
    """A library given as a stem (``vgpu``: the ``libvgpu.so`` built with this framework) or a path."""
    if "/" in name:
        return Path(name)
    from dra import hook_library

    try:
        return hook_library(name)
    except FileNotFoundError as exc:
        raise UserError(f"hook library {name!r}: {exc}") from exc


@app.command("install")
def install(
    libraries: Annotated[list[str], typer.Argument(help="Stems (vgpu for libvgpu.so) or paths of lib<stem>.so files.")],
    hook_dir: HookDirOpt = DEFAULT_HOOK_DIR,
) -> None:
    """Install LIBRARIES into the hook dir and make the set holding them `current` (idempotent)."""
    hooks = HookDir(hook_dir)
    try:
        for leftover in hooks.recover():
            typer.echo(f"removed leftover of an interrupted install: {leftover}")
        for name in libraries:
            installed = hooks.install(library_path(name))
        current = hooks.current()
    except HookDirError as exc:
        raise UserError(str(exc)) from exc
    except OSError as exc:
        raise UserError(f"cannot install into hook dir {hook_dir}: {exc.strerror or exc}; is it a writable host"
                        " directory (the chart mounts paths.hookDir)?") from exc
    assert current is not None and installed is not None
    members = ", ".join(f"{n} {d[:12]}" for n, d in sorted(current.members.items()))
    typer.echo(f"current set {current.id[:12]} in {hook_dir}: {members}")


@app.command("show")
def show(hook_dir: HookDirOpt = DEFAULT_HOOK_DIR) -> None:
    """Print the current set and every installed set of the hook dir."""
    hooks = HookDir(hook_dir)
    current = hooks.current()
    if current is None:
        typer.echo(f"{hook_dir}: nothing installed")
        raise typer.Exit(1)
    for sid in hooks.installed_sets():
        mark = "*" if sid == current.id else " "
        typer.echo(f"{mark} {sid}")
    for name, digest in sorted(current.members.items()):
        typer.echo(f"  {name} {digest}")
