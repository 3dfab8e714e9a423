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


def test_the_entry_point_group_names_are_spelled_only_in_the_registry() -> None:
    groups = (registry.DRIVERS, registry.COMMANDS)
    found = sorted(_rel(p) for p in _python(*PRODUCT, "tests") if any(s in groups for s in _code_strings(p)))
    assert found == ["dra/_runtime/registry.py"], f"an entry-point group spelled in {found}; use dra._runtime.registry"
    declared = {_rel(p) for p in (ROOT / "pyproject.toml", ROOT / "dev" / "pyproject.toml")
                if any(f'entry-points."{g}"' in p.read_text() for g in groups)}
    assert declared == {"pyproject.toml", "dev/pyproject.toml"}, "each distribution declares its entry points"


def test_every_poll_loop_is_wait_until() -> None:
    """`dra._runtime.wait.until` is the one poll loop; a hand-written deadline loop is a second."""
    found = _holding(r"deadline\s*=\s*time\.monotonic\(\)", "dra", "drivers", "dev")
    assert found == [], f"hand-written poll loops in {found}; use until()"
    assert re.search(r"deadline\s*=\s*clock\(\)", (ROOT / "dra" / "_runtime" / "wait.py").read_text()), \
        "wait.py's own loop moved: update this scan"
