"""Each truth of the framework has one home: a rule written twice drifts (two stem rules already
disagreed about ``libvgpu.so.1``), so these scans fail when a second copy appears."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra._runtime import registry

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("dra", "drivers", "dev", "hookcore")
"""The shipped and rig code (not tests, not docs)."""


def _python(*tops: str) -> Iterator[Path]:
    for top in tops:
        for p in sorted((ROOT / top).rglob("*.py")):
            if "_proto" not in p.parts and ".venv" not in p.parts and "build" not in p.parts:
                yield p


def _rel(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


def _code_strings(path: Path) -> Iterator[str]:
    """The string literals of a module that are code (docstrings left out: they may name things)."""
    tree = ast.parse(path.read_text(), str(path))
    docs: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node.value


def _holding(pattern: str, *tops: str) -> list[str]:
    return sorted(_rel(p) for p in _python(*tops) if re.search(pattern, p.read_text()))


@pytest.mark.parametrize(("what", "pattern", "home"), [
    ("flock", r"fcntl\.flock\(", "dra/_runtime/fsutil.py"),
    ("quantity parsing", r"\bparse_quantity\(", "dra/_runtime/client.py"),
    ("raw JSON GET with release_conn", r"release_conn", "dra/_runtime/client.py"),
    ("the client's generic call", r"\.param_serialize\(", "dra/_runtime/client.py"),
    ("the main-request rule", r"""request[\w.]*\.split\(["']/["'], 1\)\[0\]""", "dra/driver.py"),
    ("an allocated device's key", r"\bDeviceKey\(", "dra/driver.py"),
    ("a share's name", r"-\{[\w.]*share_id\}", "dra/driver.py"),
])
def test_each_framework_helper_has_one_implementation(what: str, pattern: str, home: str) -> None:
    found = _holding(pattern, "dra")
    assert found == [home], f"{what} is implemented in {found}, want only {home}"


@pytest.mark.parametrize(("what", "pattern"), [
    ("the library_stem function", r"(?m)^\s*def library_stem\("),
    ("the stem rule's regex", r"\{1,32\}\)\\\.so"),
])
def test_the_hook_library_stem_rule_lives_in_hookcore_alone(what: str, pattern: str) -> None:
    """hookcore's Python side must stand alone, so the rule lives there and the framework calls it."""
    found = _holding(pattern, *PRODUCT)
    assert found == ["hookcore/__init__.py"], f"{what} is written in {found}, want only hookcore/__init__.py"


def test_only_the_stub_module_writes_the_stub_device_variables() -> None:
    """The stub-device grammar has one writer and reader in Python (dra/fakes/stub.py); the C
    stubs under hookcore/stub read it. A driver that spells the variable writes a second copy."""
    names = ("HOOKCORE_STUB_DEVICES", "HOOKCORE_STUB_NPUS")
    found = sorted(_rel(p) for p in _python(*PRODUCT) if any(n in s for s in _code_strings(p) for n in names))
    assert found == ["dra/fakes/stub.py"], f"{' / '.join(names)} spelled in code of {found}"
    c_readers = sorted(_rel(p) for p in (ROOT / "hookcore" / "stub").glob("*.[ch]")
                       if any(n in p.read_text() for n in names))
    assert c_readers, "the C stubs no longer read the stub-device variables: the scan above proves nothing"


def test_a_driver_loads_and_polls_its_vendor_library_through_the_framework() -> None:
    """Three drivers once each had their own ctypes loader and health poll loop; they are
    `dra.VendorLibrary` and `dra.PolledHealth` now. NVML is the exception: nvidia-ml-py loads it,
    and the driver only puts the stub first."""
    loaders = _holding(r"ctypes\.CDLL\(", "drivers")
    assert loaders == ["drivers/hami_core_gpu/nvml.py"], f"a vendor library loaded by hand in {loaders}: use dra.VendorLibrary"
    polls = _holding(r"while not self\._stop\.wait\(self\._interval\)", "drivers")
    assert polls == [], f"a health poll loop written again in {polls}: subclass dra.PolledHealth"
    assert _holding(r"while not self\._stop\.wait\(self\._interval\)", "dra") == ["dra/health.py"], "the scan matches nothing"


def test_the_entry_point_group_names_are_spelled_only_in_the_registry() -> None:
    groups = (registry.DRIVERS, registry.COMMANDS)
    found = sorted(_rel(p) for p in _python(*PRODUCT, "tests") if any(s in groups for s in _code_strings(p)))
    assert found == ["dra/_runtime/registry.py"], f"an entry-point group spelled in {found}; use dra._runtime.registry"
    declared = {_rel(p) for p in (ROOT / "pyproject.toml", ROOT / "dev" / "pyproject.toml")
                if any(f'entry-points."{g}"' in p.read_text() for g in groups)}
    assert declared == {"pyproject.toml", "dev/pyproject.toml"}, "each distribution declares its entry points"


_CLOCKS = {("time", "monotonic"), ("time", "time"), ("time", "perf_counter"), ("time", "monotonic_ns"),
           (None, "monotonic"), (None, "perf_counter"), (None, "clock")}


def _reads_a_clock(node: ast.AST, readings: set[str]) -> bool:
    """`node` calls a clock (``time.monotonic()``, ``monotonic()``, a ``clock()`` parameter) or
    names one of `readings` (variables the loop assigned from a clock)."""
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id in readings:
            return True
        if isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and (f.value.id, f.attr) in _CLOCKS:
                return True
            if isinstance(f, ast.Name) and (None, f.id) in _CLOCKS:
                return True
    return False


def _clock_readings(loop: ast.AST) -> set[str]:
    """The names a loop assigns from a clock (``now = time.monotonic()``, ``left = deadline - clock()``)."""
    readings: set[str] = set()
    while True:
        more = {t.id for n in ast.walk(loop)
                if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.NamedExpr)) and n.value is not None
                and _reads_a_clock(n.value, readings)
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
        if more <= readings:
            return readings
        readings |= more


def _ends_the_loop(node: ast.If) -> bool:
    return any(isinstance(n, (ast.Break, ast.Return, ast.Raise)) for n in node.body)


def deadline_loops(source: str, filename: str = "<source>") -> list[int]:
    """The lines of the loops in `source` that end on a clock's reading: ``while time.monotonic() <
    deadline``, ``assert time.monotonic() < deadline`` or ``if clock() >= deadline: raise`` in a
    ``while True``, ``now = time.monotonic()`` then ``if now > deadline: break``. Each is a
    hand-written poll loop, but for the few `_EXEMPT` names (a workload that runs for a while waits
    for nothing). A comparison that ends nothing (a log line once a minute) is not one. Found in
    the syntax tree, not by its spelling."""
    found = []
    for loop in ast.walk(ast.parse(source, filename)):
        if not isinstance(loop, (ast.While, ast.For)):
            continue
        readings = _clock_readings(loop)
        tests = [loop.test] if isinstance(loop, ast.While) else []
        tests += [n.test for n in ast.walk(loop)
                  if isinstance(n, ast.Assert) or (isinstance(n, ast.If) and _ends_the_loop(n))]
        if any(isinstance(c, ast.Compare) and any(_reads_a_clock(o, readings) for o in (c.left, *c.comparators))
               for t in tests for c in ast.walk(t)):
            found.append(loop.lineno)
    return found


_EXEMPT = {"tests/hami_core_gpu/stub_workload.py": "launches kernels for --launch SECONDS: a workload, not a wait"}


@pytest.mark.parametrize(("source", "lines"), [
    ("import time\nd = time.monotonic() + 5\nwhile time.monotonic() < d:\n    time.sleep(0.1)\n", [3]),
    ("import time\nd = time.monotonic() + 5\nwhile True:\n    assert time.monotonic() < d\n", [3]),
    ("def f(clock):\n    d = clock() + 1\n    while True:\n        if clock() >= d:\n            raise TimeoutError\n", [3]),
    ("from time import monotonic\nt0 = monotonic()\nfor _ in range(3):\n    if monotonic() - t0 > 1:\n        break\n", [3]),
    ("import time\nt0 = time.monotonic()\nfor _ in range(3):\n    pass\nassert time.monotonic() - t0 < 1\n", []),
    ("import time\nwhile not done():\n    time.sleep(0.1)\n", []),
    ("import time\nfor x in xs:\n    now = time.monotonic()\n    if now - last >= 60:\n        log(x)\n", []),
    ("import time\nd = time.monotonic() + 5\nwhile True:\n    now = time.monotonic()\n    if now > d:\n        break\n", [3]),
    ("import time\nd = time.monotonic() + 5\nwhile (left := d - time.monotonic()) > 0:\n    pass\n", [3]),
])
def test_the_deadline_loop_scan_finds_what_it_should(source: str, lines: list[int]) -> None:
    assert deadline_loops(source) == lines


def test_every_poll_loop_is_wait_until() -> None:
    """`dra._runtime.wait.until` is the one poll loop (tests reach it through
    ``kube_helpers.wait_for``, which fails with an AssertionError); a hand-written deadline loop in
    the framework, the drivers, the rig or the tests is a second."""
    found = {_rel(p): lines for p in _python("dra", "drivers", "dev", "hookcore", "tests")
             if (lines := deadline_loops(p.read_text(), str(p))) and _rel(p) not in _EXEMPT}
    assert list(found) == ["dra/_runtime/wait.py"], f"hand-written poll loops (file: lines) in {found}; use until()"
    for exempt in _EXEMPT:
        assert deadline_loops((ROOT / exempt).read_text()), f"{exempt} has no clock loop any more: drop it from _EXEMPT"
