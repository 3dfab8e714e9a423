"""Command-line flags declared once, on the fields of a settings dataclass.

    @flags.settings
    class Settings:
        level: str = flags.flag(default="info", help="How much to log.", choices=("debug", "info"))

`flag` is a dataclass field carrying its flag (`Flag`: name, help, env var, choices, minimum, a
parser); `options` turns a command function's ``**values`` into one typer option per field;
`build` makes the settings from what typer parsed, and `check` (run by every instance of a
`settings` class) refuses a bad value with a `UserError` naming the flag and what it takes.
Charts and tests read the same fields (`of`, `names`), so a flag lives in one place.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable, Iterator, Mapping
from typing import Annotated, Any, TypeVar, overload

import typer

from dra.errors import UserError

T = TypeVar("T")
_KEY = "dra.flag"


@dataclasses.dataclass(frozen=True)
class Flag:
    """One command-line flag of a settings field."""

    name: str
    """``--field-name`` unless the field says otherwise (``--set``)."""
    help: str
    envvar: str | None = None
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    takes: Any = None
    """The command line's type where the field holds something else (`parse` converts)."""
    parse: Callable[[Any], Any] | None = None
    """The given value to the field's (ValueError/ArithmeticError: refused, naming the flag)."""
    example: str | None = None
    """A good value, shown in the error of a bad one."""
    given: str | None = None
    """With `takes`: the default as the command line would give it (`parse` makes the field's
    default of it; --help shows it)."""


@overload
def flag(*, help: str, envvar: str | None = None, name: str | None = None) -> Any: ...


@overload
def flag(*, default: T, help: str, envvar: str | None = None, choices: tuple[str, ...] = (), minimum: float | None = None,
         takes: Any = None, parse: Callable[[Any], Any] | None = None, example: str | None = None, given: str | None = None,
         name: str | None = None) -> T: ...


@overload
def flag(*, default_factory: Callable[[], T], help: str, envvar: str | None = None, takes: Any = None,
         parse: Callable[[Any], Any] | None = None, example: str | None = None, name: str | None = None) -> T: ...


def flag(*, default: Any = dataclasses.MISSING, default_factory: Any = dataclasses.MISSING, help: str,
         envvar: str | None = None, choices: tuple[str, ...] = (), minimum: float | None = None, takes: Any = None,
         parse: Callable[[Any], Any] | None = None, example: str | None = None, given: str | None = None,
         name: str | None = None) -> Any:
    """A settings field that is also a flag; with neither default: a required flag."""
    meta = {_KEY: dict(name=name, help=help, envvar=envvar, choices=choices, minimum=minimum, takes=takes, parse=parse,
                       example=example, given=given)}
    return dataclasses.field(default=default, default_factory=default_factory, metadata=meta)


@typing.dataclass_transform(field_specifiers=(flag, dataclasses.field))
def settings(cls: type[T]) -> type[T]:
    """A dataclass whose fields are flags (`flag`); its instances are checked (`check`) when made."""
    own = cls.__dict__.get("__post_init__")

    def post_init(self: Any) -> None:
        check(self)
        if own is not None:
            own(self)

    cls.__post_init__ = post_init  # type: ignore[attr-defined]  # before dataclass(): its __init__ calls it
    return dataclasses.dataclass(cls)


def fields(cls: type) -> Iterator[tuple[dataclasses.Field[Any], Flag]]:
    """Each flag field of `cls` with its flag."""
    for f in dataclasses.fields(cls):
        if _KEY in f.metadata:
            meta = dict(f.metadata[_KEY])
            meta["name"] = meta["name"] or "--" + f.name.replace("_", "-")
            yield f, Flag(**meta)


def of(cls: type, field: str) -> Flag:
    """The flag of one field."""
    return next(fl for f, fl in fields(cls) if f.name == field)


def names(cls: type) -> dict[str, str]:
    """Flag name -> field name."""
    return {fl.name: f.name for f, fl in fields(cls)}


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _option(f: dataclasses.Field[Any], fl: Flag, hint: Any) -> inspect.Parameter:
    help_text = fl.help + (f" At least {fl.minimum}." if fl.minimum is not None else "")
    option = typer.Option(fl.name, envvar=fl.envvar, help=help_text, metavar="|".join(fl.choices) or None)
    default: Any = inspect.Parameter.empty
    if fl.takes is not None:
        default = fl.given  # None: the field's own default
    elif f.default is not dataclasses.MISSING:
        default = f.default
    return inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=Annotated[fl.takes or hint, option])


def options(cls: type) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Decorate a typer command ``f(args..., **values)``: ``values`` become one option per flag of `cls`."""
    hints = typing.get_type_hints(cls)

    def decorate(func: Callable[..., T]) -> Callable[..., T]:
        sig = inspect.signature(func, eval_str=True)
        head = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        func.__signature__ = sig.replace(  # type: ignore[attr-defined]  # what typer reads
            parameters=[*head, *(_option(f, fl, hints[f.name]) for f, fl in fields(cls))])
        return func

    return decorate


def build(cls: type[T], values: Mapping[str, Any]) -> T:
    """The settings from the options typer parsed: each through its flag's `parse`, None: the default."""
    kwargs: dict[str, Any] = {}
    for f, fl in fields(cls):
        value = values.get(f.name)
        if value is None and not _required(f):
            continue
        if fl.parse is not None:
            try:
                value = fl.parse(value)
            except (ValueError, ArithmeticError) as exc:
                fix = f" (e.g. {fl.name} {fl.example})" if fl.example else ""
                raise UserError(f"{fl.name} {value!r}: {exc}{fix}") from exc
        kwargs[f.name] = value
    return cls(**kwargs)


def check(obj: Any) -> None:
    """UserError naming the flag of the first field whose value the flag does not allow."""
    for f, fl in fields(type(obj)):
        value = getattr(obj, f.name)
        if _required(f) and value in ("", None):
            env = f" (or {fl.envvar})" if fl.envvar else ""
            raise UserError(f"{fl.name}{env} is required. {fl.help}")
        if fl.choices and value not in fl.choices:
            raise UserError(f"{fl.name} must be one of {', '.join(fl.choices)}, not {value!r}")
        if fl.minimum is not None and value < fl.minimum:
            raise UserError(f"{fl.name} must be at least {fl.minimum}, not {value!r}")
