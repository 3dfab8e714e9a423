"""The demo's console: one place for how it prints and how it waits.

Every part of the demo prints through `say`, `show` and `step` and waits through `wait`, so the
output's width, the step marker and the timeout message are written once. They look `out` up
when called: a test captures the whole demo by replacing `out` (``monkeypatch.setattr``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

from rich.console import Console, RenderableType

from dra._runtime.wait import until
from dra.errors import UserError

T = TypeVar("T")

# Wide enough for CDI IDs and env lines when piped (rich assumes 80 columns off a terminal).
out = Console(width=None if os.isatty(1) else 160)


def say(text: str, style: str | None = None) -> None:
    """One line of prose, printed as written (no highlighting of numbers or paths)."""
    out.print(text, style=style, highlight=False)


def show(renderable: RenderableType) -> None:
    """A table or other rich renderable."""
    out.print(renderable)


def step(text: str) -> None:
    """The start of one part of the demo."""
    say(f"[bold cyan]==>[/bold cyan] {text}")


def progress(text: str) -> None:
    """A progress line of a long step (building, starting), dimmed."""
    say(f"    {text}", style="dim")


def wait(what: str, probe: Callable[[], T | None], timeout: float = 60.0, interval: float = 0.3,
         tolerate: tuple[type[Exception], ...] = ()) -> T:
    """The first truthy `probe()` within `timeout` seconds, else a UserError naming `what`.
    Exceptions of the `tolerate` types count as "not yet" (the API answering 404 while objects
    appear)."""

    def attempt() -> T | None:
        try:
            return probe()
        except tolerate:
            return None

    return until(attempt, timeout=timeout, interval=interval, what=what,
                 error=lambda message: UserError(f"the demo {message}."))
