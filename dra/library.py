"""A vendor's C management library over ctypes, loaded and called one way by every driver.

A driver's bindings subclass `VendorLibrary` with the library's name, its prototypes and its
error type (a `LibraryError` subclass with the library's table of return codes), and add the
queries. What is the same for every vendor lives here:

- loading: the first of the candidate paths that loads (a bare name is the dynamic loader's
  search: ``LD_LIBRARY_PATH``, the cache, the default dirs; then the install dirs the vendor's
  packages use), or the one path the driver's setting names; none that loads is an error naming
  the library, every path tried and why it failed, the fix (what to install or mount into the
  daemon's pod) and the setting that names another path;
- a function the library lacks is an error naming it and saying the library is older than the
  driver supports, raised at its first call (not at load: a driver runs against an older library
  until it needs what it lacks);
- every call is serialised (vendor management libraries are not documented as thread safe, and
  discovery, the health monitor and prepare share one) and checked: a non-zero status is the
  library's error naming the call, the device and the status, never a silent default.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar


class LibraryError(RuntimeError):
    """A call into a vendor's library failed; the message names the call, the device and what to
    check. A subclass sets `library` (its name in messages), `codes` (status -> its name and what
    to check) and `unknown` (how a status outside the table is called)."""

    library: ClassVar[str] = "the vendor library"
    codes: ClassVar[Mapping[int, tuple[str, str]]] = {}
    unknown: ClassVar[str] = "unknown status"

    def __init__(self, call: str, target: str, code: int, hint: str = "") -> None:
        name, default_hint = self.codes.get(code, (f"{self.unknown} {code}", ""))
        hint = hint or default_hint
        where = f"{call}({target})" if target else f"{call}()"
        super().__init__(f"{self.library} {where} failed: {name} ({code}){'; ' + hint if hint else ''}")
        self.call = call
        self.code = code


class VendorLibrary:
    """One loaded vendor library; `call` serialises and checks every call. A subclass sets the
    class attributes below and initialises the library in its ``__init__`` after this one's."""

    soname: ClassVar[str] = ""
    """The library's file name (``libfoo.so``), named when it is not found."""
    error: ClassVar[type[LibraryError]] = LibraryError
    prototypes: ClassVar[Mapping[str, Sequence[Any]]] = {}
    """Every function's argument types (ctypes), by name."""
    restype: ClassVar[Any] = ctypes.c_int
    """What the functions return: the library's status type."""
    restypes: ClassVar[Mapping[str, Any]] = {}
    """Functions that return something else (a string), by name."""
    ok: ClassVar[int] = 0
    install_hint: ClassVar[str] = ""
    """What to check when it is not found: what installs it and what to mount into the daemon's pod."""
    setting: ClassVar[str] = ""
    """The driver setting (``--set KEY=path``) that names another path."""
    too_old: ClassVar[str] = "the library is older than this driver supports"
    """Why a function is missing."""

    def __init__(self, library: str | Path | Sequence[str | Path]) -> None:
        candidates = [library] if isinstance(library, str | Path) else list(library)
        errors = []
        lib: Any = None
        for candidate in candidates:
            try:
                lib = ctypes.CDLL(str(candidate))
                self.path = str(candidate)
                break
            except OSError as exc:
                errors.append(str(exc))
        if lib is None:
            override = f" (--set {self.setting}= names another path)" if self.setting else ""
            raise self.error("dlopen", ", ".join(str(c) for c in candidates), -1,
                             f"{self.soname} not found: {self.install_hint}{override} ({'; '.join(errors)})")
        self.lib = lib
        self.lock = threading.RLock()  # re-entrant: a query may hold it across several calls
        self._fns: dict[str, Any] = {}

    def function(self, name: str) -> Any:
        """The library's function `name` with its prototype; the library's error where it lacks it."""
        fn = self._fns.get(name)
        if fn is None:
            try:
                fn = getattr(self.lib, name)
            except AttributeError:
                raise self.error(name, "", -1, f"{self.path} has no {name}: {self.too_old}") from None
            fn.argtypes = self.prototypes[name]
            fn.restype = self.restypes.get(name, self.restype)
            self._fns[name] = fn
        return fn

    def call(self, name: str, *args: Any, target: str = "") -> None:
        """``name(*args)``; a status other than `ok` is the library's error naming `name` and `target`."""
        fn = self.function(name)
        with self.lock:
            rc = int(fn(*args))
        if rc != self.ok:
            raise self.error(name, target, rc)
