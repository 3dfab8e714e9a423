"""dra.VendorLibrary and dra.LibraryError: the ctypes loader and checked caller the vendor drivers
share, against the C library (its ``abs`` and ``labs`` stand in for a vendor call's status)."""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path
from typing import Any

import pytest

import dra

LIBC = "libc.so.6"


class ToyError(dra.LibraryError):
    library = "TOY"
    codes = {7: ("TOY_ERROR_BUSY", "retry later"), 9: ("TOY_ERROR_GONE", "")}
    unknown = "unknown TOY status"


class Toy(dra.VendorLibrary):
    soname = "libtoy.so"
    error = ToyError
    prototypes = {"abs": (ctypes.c_int,), "labs": (ctypes.c_long,), "getenv": (ctypes.c_char_p,),
                  "no_such_toy_call": ()}
    restypes = {"getenv": ctypes.c_char_p}
    install_hint = "is the toy driver installed and /opt/toy mounted into the driver's pod?"
    setting = "toyLibrary"
    too_old = "the toy driver is older than this driver supports"


def test_the_first_candidate_that_loads_is_used(tmp_path: Path) -> None:
    toy = Toy([tmp_path / "libtoy.so", LIBC])
    assert toy.path == LIBC
    assert Toy(LIBC).path == LIBC  # one path, as a driver setting names it


def test_none_loading_is_an_error_naming_the_library_every_path_why_and_the_fix(tmp_path: Path) -> None:
    missing, broken = tmp_path / "libtoy.so", tmp_path / "broken" / "libtoy.so"
    broken.parent.mkdir()
    broken.write_bytes(b"not an ELF file, " * 64)
    with pytest.raises(ToyError) as err:
        Toy([missing, broken])
    text = str(err.value)
    assert text.startswith(f"TOY dlopen({missing}, {broken}) failed: unknown TOY status -1 (-1); libtoy.so not found: "
                           "is the toy driver installed and /opt/toy mounted into the driver's pod? "
                           "(--set toyLibrary= names another path) (")
    assert "No such file or directory" in text and "invalid ELF header" in text  # the loader's reason for each
    assert err.value.call == "dlopen" and err.value.code == -1


def test_a_call_returning_a_status_other_than_ok_is_the_librarys_error_with_its_hint() -> None:
    toy = Toy(LIBC)
    toy.call("abs", 0)
    with pytest.raises(ToyError, match=r"^TOY abs\(card 3\) failed: TOY_ERROR_BUSY \(7\); retry later$") as err:
        toy.call("abs", -7, target="card 3")
    assert (err.value.call, err.value.code) == ("abs", 7)
    with pytest.raises(ToyError, match=r"^TOY labs\(\) failed: TOY_ERROR_GONE \(9\)$"):
        toy.call("labs", 9)
    with pytest.raises(ToyError, match=r"^TOY abs\(\) failed: unknown TOY status 12 \(12\)$"):
        toy.call("abs", 12)


def test_a_function_keeps_its_prototype_and_restype_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRA_TOY_PROBE", "hello")
    toy = Toy(LIBC)
    assert toy.function("getenv")(b"DRA_TOY_PROBE") == b"hello"  # c_char_p, not the status type
    assert toy.function("abs") is toy.function("abs")  # looked up once
    with pytest.raises(ctypes.ArgumentError):
        toy.function("abs")("not an int")


def test_a_function_the_library_lacks_is_an_error_at_its_first_call_not_at_load() -> None:
    toy = Toy(LIBC)
    with pytest.raises(ToyError, match=r"^TOY no_such_toy_call\(\) failed: unknown TOY status -1 \(-1\); "
                                       r"libc\.so\.6 has no no_such_toy_call: the toy driver is older than this "
                                       r"driver supports$"):
        toy.call("no_such_toy_call")


def test_calls_are_serialised_and_a_query_may_hold_the_lock_across_calls() -> None:
    toy = Toy(LIBC)
    entered = threading.Event()
    main = threading.current_thread()

    class Watched:
        """The library's lock, telling when another thread reaches it."""

        def __init__(self, inner: Any) -> None:
            self.inner, self.reached = inner, threading.Event()

        def __enter__(self) -> None:
            if threading.current_thread() is not main:
                self.reached.set()
            self.inner.acquire()

        def __exit__(self, *exc: object) -> None:
            self.inner.release()

    toy.lock = watched = Watched(toy.lock)  # type: ignore[assignment]
    with watched:
        toy.call("abs", 0)  # re-entrant: a query holding the lock still calls
        t = threading.Thread(target=lambda: (toy.call("abs", 0), entered.set()))
        t.start()
        assert watched.reached.wait(5), "the other thread never reached the lock"
        assert not entered.is_set(), "another thread called while the lock was held"
    t.join(5)
    assert entered.is_set()
