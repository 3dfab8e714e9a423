"""Checks for a driver's settings (``dra run DRIVER --set key=value``, `DriverContext.settings`):
the value kinds every driver has (known keys, a choice, an absolute path, on/off, seconds), each
refused with a `SettingsError` that names the key and the fix, so a daemon stops at start.

A driver keeps its own `Settings` dataclass (attributes and defaults) and a table of its keys, each
with the attribute it sets and the parser of its value; `parse` reads `--set` through that table.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
Parser = Callable[[str, str], object]
"""(key, value) -> the attribute's value; raises `SettingsError` naming the key and the fix."""
Fields = Mapping[str, tuple[str, Parser]]
"""A driver's settings: key -> (attribute of its Settings class, parser of the value)."""


class SettingsError(ValueError):
    """A --set value this driver cannot use; the message names the key and the fix."""


def check_known(raw: Mapping[str, str], known: Iterable[str], driver: str) -> None:
    """Every key of `raw` is one of `known` (the first unknown one is named, with the known ones)."""
    names = sorted(set(known))
    unknown = sorted(set(raw) - set(names))
    if unknown:
        raise SettingsError(f"unknown setting {unknown[0]!r} for {driver}; known: {', '.join(names)}")


def one_of(key: str, value: str, choices: Collection[str]) -> str:
    if value not in choices:
        raise SettingsError(f"{key} must be one of {list(choices)}, not {value!r}")
    return value


def absolute_path(key: str, value: str) -> Path:
    if not value.startswith("/"):
        raise SettingsError(f"{key} must be an absolute path, not {value!r}")
    return Path(value)


def on_off(key: str, value: str) -> bool:
    if value not in ("on", "off"):
        raise SettingsError(f"{key} must be on or off, not {value!r}")
    return value == "on"


def seconds(key: str, value: str, lo: float = 0.01, hi: float = 300) -> float:
    """A duration in seconds in `lo`..`hi`."""
    try:
        interval = float(value)
    except ValueError:
        interval = -1.0
    if not lo <= interval <= hi:
        raise SettingsError(f"{key} must be seconds in {lo:g}..{hi:g}, not {value!r}")
    return interval


def choice(*choices: str) -> Parser:
    """A parser that takes one of `choices`."""
    return lambda key, value: one_of(key, value, choices)


def parse(settings: Callable[..., T], raw: Mapping[str, str], fields: Fields, driver: str) -> T:
    """`settings` built from the keys of `raw` (unknown keys refused), each through its parser; keys
    not given keep the class's defaults."""
    check_known(raw, fields, driver)
    return settings(**{attr: parser(key, raw[key]) for key, (attr, parser) in fields.items() if key in raw})
