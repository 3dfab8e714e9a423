"""The entry-point groups the framework reads: installed drivers and extra `dra` sub-commands.

One home for both so the group names are spelled once. ``dra.drivers``: a name -> a
`dra.Driver` subclass (bundled drivers register exactly as third-party ones do).
``dra.commands``: a name -> a Typer app (a sub-command group), a ``register(app)`` function, or,
for a dotted name ``GROUP.NAME``, a function added as command NAME of the runtime group GROUP
(the dev rig adds ``dra webhook up`` this way).
"""

from __future__ import annotations

import logging
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from dra.errors import UserError

if TYPE_CHECKING:
    from dra.driver import Driver

DRIVERS = "dra.drivers"
COMMANDS = "dra.commands"

log = logging.getLogger(__name__)


def registered(group: str) -> dict[str, EntryPoint]:
    """The entry points of `group` by name (first one wins when two distributions clash)."""
    found: dict[str, EntryPoint] = {}
    for ep in sorted(entry_points(group=group), key=lambda e: (e.name, e.value)):
        found.setdefault(ep.name, ep)
    return found


def load_driver(name: str) -> Driver:
    """Instantiate the driver registered as `name`; a UserError lists the installed ones."""
    from dra.driver import Driver

    found = registered(DRIVERS)
    if name not in found:
        listed = ", ".join(sorted(found)) or "none"
        raise UserError(
            f"No driver named {name!r} is installed (entry-point group {DRIVERS!r}); installed: "
            f"{listed}. Install the package that provides it, or run `dra drivers` to list them."
        )
    try:
        driver = found[name].load()()
    except Exception as exc:
        raise UserError(f"Driver {name!r} ({found[name].value}) failed to load: {exc!r}") from exc
    if not isinstance(driver, Driver):
        raise UserError(f"Entry point {name!r} ({found[name].value}) did not produce a dra.Driver")
    return driver


def driver_classes() -> dict[str, type]:
    """Installed driver classes by DRA driver name (loaded, not instantiated); a broken
    third-party entry point is logged and left out, so it cannot hide the others."""
    out: dict[str, type] = {}
    for ep in registered(DRIVERS).values():
        try:
            cls = ep.load()
        except Exception as exc:
            log.warning("driver entry point failed to load", extra={"entry_point": ep.name, "error": str(exc)})
            continue
        name = getattr(cls, "name", None)
        if isinstance(name, str) and name:
            out[name] = cls
    return out


def load(ep: EntryPoint) -> Any:
    """`ep.load()`, as a UserError naming the entry point and the fix when it fails."""
    try:
        return ep.load()
    except Exception as exc:
        raise UserError(f"`{ep.name}` ({ep.value}, entry-point group {ep.group!r}) failed to load: {exc!r}; "
                        "reinstall the distribution that provides it (in a checkout: make install)") from exc
