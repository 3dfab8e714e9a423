"""Import contracts and lint hold for the whole tree (the rules in pyproject.toml), and each
contract does catch the violation it exists for."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    if not LINT_IMPORTS.exists():
        pytest.fail("import-linter is a dev dependency: pip install -e '.[dev]' (or make install)")
    env = {**os.environ, "COLUMNS": "250"}  # one line per contract
    return subprocess.run([str(LINT_IMPORTS)], cwd=root, capture_output=True, text=True, env=env)


def test_import_contracts_hold() -> None:
    proc = lint_imports(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def test_ruff_is_clean() -> None:
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(("path", "line", "contract"), [
    ("drivers/example/driver.py", "from dra._runtime.prepare import ClaimPreparer", "import only the public face"),
    ("drivers/example/driver.py", "import dra._runtime.hookdir", "import only the public face"),
    ("drivers/example/driver.py", "import grpc", "neither gRPC nor the Kubernetes API"),
    ("dra/_runtime/prepare.py", "import kubernetes", "imported in one runtime module"),
    ("dra/_runtime/cdi.py", "import dra._runtime.prepare", "Layers of the framework"),
    ("dra/driver.py", "import dra._runtime.kubelet", "Layers of the framework"),
    ("dra/_runtime/checkpoint.py", "import drivers.example.driver", "never names a vendor driver"),
])
def test_each_contract_catches_its_violation(tmp_path: Path, path: str, line: str, contract: str) -> None:
    for part in ("dra", "drivers", "hookcore"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("build", "*.so", "*.c", "*.o"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    target = tmp_path / path
    target.write_text(target.read_text() + f"\n{line}  # injected by the test\n")
    proc = lint_imports(tmp_path)
    assert proc.returncode != 0, proc.stdout
    broken = [ln for ln in proc.stdout.splitlines() if " BROKEN" in ln]
    assert any(contract in ln for ln in broken), proc.stdout
